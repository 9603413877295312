//! Feed-forward blocks: the routed mixture of experts with a gated shared
//! expert (DESIGN.md §2.3), and the dense SwiGLU of `qwen35`.

use crate::config::ModelConfig;
use crate::error::ModelError;
use crate::weights::{Binder, Experts, Matrix};
use rill_kernels::ops::{axpy, dot_f32, sigmoid, silu, softmax_inplace};
use rill_kernels::{matmul, matmul_many, MatJob, MatRef, Threads};

pub(crate) enum Ffn {
    Moe(Box<MoeWeights>),
    Dense(DenseWeights),
}

/// Gate and up projections of the experts: two tensors, or one fused
/// `ffn_gate_up_exps` holding the gate rows first.
enum GateUp {
    Split { gate: Experts, up: Experts },
    Fused(Experts),
}

struct SharedExpert {
    /// Router of the shared expert's sigmoid gate, `[n_embd]`.
    gate_inp: Vec<f32>,
    mlp: DenseWeights,
}

pub(crate) struct MoeWeights {
    router: Matrix,
    gate_up: GateUp,
    down: Experts,
    n_ff: usize,
    shared: Option<SharedExpert>,
}

pub(crate) struct DenseWeights {
    gate: Matrix,
    up: Matrix,
    down: Matrix,
}

fn dim(b: &Binder, name: &str, axis: usize) -> Result<usize, ModelError> {
    let shape = b
        .shape(name)
        .ok_or_else(|| ModelError::MissingTensor(name.to_string()))?;
    shape
        .get(axis)
        .map(|&d| d as usize)
        .ok_or_else(|| ModelError::BadShape {
            name: name.to_string(),
            got: shape.clone(),
            want: vec![],
        })
}

impl DenseWeights {
    /// Binds `{p}.ffn_{gate,up,down}{suffix}.weight`; the hidden size comes
    /// from the tensor shapes.
    fn bind_named(b: &Binder, c: &ModelConfig, p: &str, suffix: &str) -> Result<Self, ModelError> {
        let h = c.n_embd;
        let gate_name = format!("{p}.ffn_gate{suffix}.weight");
        let ff = dim(b, &gate_name, 1)?;
        Ok(DenseWeights {
            gate: b.matrix(&gate_name, ff, h)?,
            up: b.matrix(&format!("{p}.ffn_up{suffix}.weight"), ff, h)?,
            down: b.matrix(&format!("{p}.ffn_down{suffix}.weight"), h, ff)?,
        })
    }

    pub fn bind(b: &Binder, c: &ModelConfig, p: &str) -> Result<Self, ModelError> {
        Self::bind_named(b, c, p, "")
    }

    /// SwiGLU for `n` tokens: `down(silu(gate x) ⊙ up x)`.
    fn forward(&self, threads: &Threads, x: &[f32], n: usize) -> Vec<f32> {
        swiglu(
            threads,
            self.gate.view(),
            self.up.view(),
            self.down.view(),
            x,
            n,
        )
    }
}

fn swiglu(
    threads: &Threads,
    gate: MatRef,
    up: MatRef,
    down: MatRef,
    x: &[f32],
    n: usize,
) -> Vec<f32> {
    let ff = gate.rows;
    let mut g = vec![0f32; n * ff];
    let mut u = vec![0f32; n * ff];
    matmul_many(
        threads,
        &mut [
            MatJob {
                w: gate,
                x,
                n,
                out: &mut g,
            },
            MatJob {
                w: up,
                x,
                n,
                out: &mut u,
            },
        ],
    );
    for (gi, &ui) in g.iter_mut().zip(&u) {
        *gi = silu(*gi) * ui;
    }
    let mut out = vec![0f32; n * down.rows];
    matmul(threads, down, &g, n, &mut out);
    out
}

impl MoeWeights {
    pub fn bind(b: &Binder, c: &ModelConfig, p: &str) -> Result<Self, ModelError> {
        let (h, e) = (c.n_embd, c.n_expert);
        let router = b.matrix(&format!("{p}.ffn_gate_inp.weight"), e, h)?;
        let down_name = format!("{p}.ffn_down_exps.weight");
        let n_ff = dim(b, &down_name, 0)?;
        let down = b.experts(&down_name, e, h, n_ff)?;
        let fused = format!("{p}.ffn_gate_up_exps.weight");
        let gate_up = if b.has(&fused) {
            GateUp::Fused(b.experts(&fused, e, 2 * n_ff, h)?)
        } else {
            GateUp::Split {
                gate: b.experts(&format!("{p}.ffn_gate_exps.weight"), e, n_ff, h)?,
                up: b.experts(&format!("{p}.ffn_up_exps.weight"), e, n_ff, h)?,
            }
        };
        let shared = if b.has(&format!("{p}.ffn_gate_shexp.weight")) {
            Some(SharedExpert {
                gate_inp: b.vector(&format!("{p}.ffn_gate_inp_shexp.weight"), h)?,
                mlp: DenseWeights::bind_named(b, c, p, "_shexp")?,
            })
        } else {
            None
        };
        Ok(MoeWeights {
            router,
            gate_up,
            down,
            n_ff,
            shared,
        })
    }

    fn gate_up(&self, e: usize) -> (MatRef<'_>, MatRef<'_>) {
        match &self.gate_up {
            GateUp::Split { gate, up } => (gate.expert(e), up.expert(e)),
            GateUp::Fused(gu) => (
                gu.expert_rows(e, 0, self.n_ff),
                gu.expert_rows(e, self.n_ff, 2 * self.n_ff),
            ),
        }
    }

    /// Routed experts plus the gated shared expert, for `n` tokens. Tokens
    /// are grouped by expert so each expert's weights are read once per
    /// batch; all gate/up products run in one parallel region, all down
    /// products in a second.
    fn forward(&self, c: &ModelConfig, threads: &Threads, x: &[f32], n: usize) -> Vec<f32> {
        let h = c.n_embd;
        let ff = self.n_ff;
        let routes = route(self, c, threads, x, n);
        let active: Vec<usize> = (0..routes.len())
            .filter(|&e| !routes[e].is_empty())
            .collect();
        // Gathered inputs per active expert.
        let xs: Vec<Vec<f32>> = active
            .iter()
            .map(|&e| {
                routes[e]
                    .iter()
                    .flat_map(|&(t, _)| &x[t * h..(t + 1) * h])
                    .copied()
                    .collect()
            })
            .collect();
        let sh_ff = self.shared.as_ref().map_or(0, |s| s.mlp.gate.rows);

        // gate and up of every active expert (and the shared expert).
        let mut gates: Vec<Vec<f32>> = active
            .iter()
            .map(|&e| vec![0f32; routes[e].len() * ff])
            .collect();
        let mut ups: Vec<Vec<f32>> = active
            .iter()
            .map(|&e| vec![0f32; routes[e].len() * ff])
            .collect();
        let (mut sh_g, mut sh_u) = (vec![0f32; n * sh_ff], vec![0f32; n * sh_ff]);
        {
            let mut jobs = Vec::with_capacity(2 * active.len() + 2);
            for (((&e, xe), g), u) in active
                .iter()
                .zip(&xs)
                .zip(gates.iter_mut())
                .zip(ups.iter_mut())
            {
                let (wg, wu) = self.gate_up(e);
                let m = routes[e].len();
                jobs.push(MatJob {
                    w: wg,
                    x: xe,
                    n: m,
                    out: g,
                });
                jobs.push(MatJob {
                    w: wu,
                    x: xe,
                    n: m,
                    out: u,
                });
            }
            if let Some(sh) = &self.shared {
                jobs.push(MatJob {
                    w: sh.mlp.gate.view(),
                    x,
                    n,
                    out: &mut sh_g,
                });
                jobs.push(MatJob {
                    w: sh.mlp.up.view(),
                    x,
                    n,
                    out: &mut sh_u,
                });
            }
            matmul_many(threads, &mut jobs);
        }
        for (g, u) in gates
            .iter_mut()
            .zip(&ups)
            .chain(std::iter::once((&mut sh_g, &sh_u)))
        {
            for (gi, &ui) in g.iter_mut().zip(u) {
                *gi = silu(*gi) * ui;
            }
        }
        // down of every active expert (and the shared expert).
        let mut downs: Vec<Vec<f32>> = active
            .iter()
            .map(|&e| vec![0f32; routes[e].len() * h])
            .collect();
        let mut sh_y = vec![0f32; n * h];
        {
            let mut jobs = Vec::with_capacity(active.len() + 1);
            for ((&e, g), y) in active.iter().zip(&gates).zip(downs.iter_mut()) {
                jobs.push(MatJob {
                    w: self.down.expert(e),
                    x: g,
                    n: routes[e].len(),
                    out: y,
                });
            }
            if let Some(sh) = &self.shared {
                jobs.push(MatJob {
                    w: sh.mlp.down.view(),
                    x: &sh_g,
                    n,
                    out: &mut sh_y,
                });
            }
            matmul_many(threads, &mut jobs);
        }

        // Weighted sum, in expert order for every token (batch invariant).
        let mut out = vec![0f32; n * h];
        for (&e, y) in active.iter().zip(&downs) {
            for (i, &(t, wgt)) in routes[e].iter().enumerate() {
                axpy(wgt, &y[i * h..(i + 1) * h], &mut out[t * h..(t + 1) * h]);
            }
        }
        if let Some(sh) = &self.shared {
            for t in 0..n {
                let gate = sigmoid(dot_f32(&sh.gate_inp, &x[t * h..(t + 1) * h]));
                axpy(
                    gate,
                    &sh_y[t * h..(t + 1) * h],
                    &mut out[t * h..(t + 1) * h],
                );
            }
        }
        out
    }
}

/// Softmax over all experts, top-k (ties to the lower id), renormalised.
/// Returns, per expert, the `(token, weight)` pairs routed to it.
fn route(
    w: &MoeWeights,
    c: &ModelConfig,
    threads: &Threads,
    x: &[f32],
    n: usize,
) -> Vec<Vec<(usize, f32)>> {
    let e = c.n_expert;
    let mut logits = vec![0f32; n * e];
    matmul(threads, w.router.view(), x, n, &mut logits);
    let mut routes = vec![Vec::new(); e];
    let mut order: Vec<usize> = Vec::with_capacity(e);
    for t in 0..n {
        let p = &mut logits[t * e..(t + 1) * e];
        softmax_inplace(p);
        order.clear();
        order.extend(0..e);
        // Stable sort by descending probability keeps lower ids first on ties.
        order.sort_by(|&a, &b| p[b].total_cmp(&p[a]));
        let top = &order[..c.n_expert_used];
        let sum: f32 = top.iter().map(|&i| p[i]).sum();
        for &i in top {
            routes[i].push((t, p[i] / sum));
        }
    }
    routes
}

impl Ffn {
    pub fn forward(&self, c: &ModelConfig, threads: &Threads, x: &[f32], n: usize) -> Vec<f32> {
        match self {
            Ffn::Moe(m) => m.forward(c, threads, x, n),
            Ffn::Dense(d) => d.forward(threads, x, n),
        }
    }
}
