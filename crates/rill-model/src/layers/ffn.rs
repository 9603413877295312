//! Feed-forward blocks: the routed mixture of experts with a gated shared
//! expert (DESIGN.md §2.3), and the dense SwiGLU of `qwen35`.

use crate::config::ModelConfig;
use crate::error::ModelError;
use crate::scratch::{Buf, Exec, JobList, Reused};
use crate::weights::{Binder, Experts, Matrix};
use rill_kernels::ops::{axpy_with, dot_f32_with, sigmoid, softmax_inplace, swiglu_inplace_with};
use rill_kernels::threads::SharedMut;
use rill_kernels::{matmul_many_on, matmul_on, matmul_with, Isa, MatJob, MatRef, Threads};

pub(crate) enum Ffn {
    Moe(Box<MoeWeights>),
    Dense(Box<DenseWeights>),
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
        .shape(name)?
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
    fn forward<'w>(&self, ex: Exec<'w>, x: &[f32], n: usize) -> Buf<'w> {
        swiglu(ex, self.gate.view(), self.up.view(), self.down.view(), x, n)
    }
}

fn swiglu<'w>(
    ex: Exec<'w>,
    gate: MatRef,
    up: MatRef,
    down: MatRef,
    x: &[f32],
    n: usize,
) -> Buf<'w> {
    let (threads, isa, precision) = (ex.threads, ex.isa, ex.precision);
    let ff = gate.rows;
    let mut g = Buf::for_output(ex.ws, n * ff);
    let mut u = Buf::for_output(ex.ws, n * ff);
    matmul_many_on(
        isa,
        precision,
        threads,
        &mut [
            MatJob {
                w: gate,
                x,
                n,
                out: &mut g,
                pick: None,
            },
            MatJob {
                w: up,
                x,
                n,
                out: &mut u,
                pick: None,
            },
        ],
    );
    swiglu_rows(isa, threads, &mut g, &u, ff);
    let mut out = Buf::for_output(ex.ws, n * down.rows);
    matmul_on(isa, precision, threads, down, &g, n, &mut out);
    out
}

/// `swiglu_inplace_with` over rows of `width` values, rows in parallel.
fn swiglu_rows(isa: Isa, threads: &Threads, g: &mut [f32], u: &[f32], width: usize) {
    let rows = g.len() / width.max(1);
    let g_ptr = SharedMut::new(g);
    threads.for_ranges(rows, 16, |r0, r1| {
        // SAFETY: rows `r0..r1` of `g` are this task's alone.
        let g = unsafe { std::slice::from_raw_parts_mut(g_ptr.at(r0 * width), (r1 - r0) * width) };
        swiglu_inplace_with(isa, g, &u[r0 * width..r1 * width]);
    });
}

impl MoeWeights {
    pub fn bind(b: &Binder, c: &ModelConfig, p: &str) -> Result<Self, ModelError> {
        let (h, e) = (c.n_embd, c.n_expert);
        let router = b.matrix(&format!("{p}.ffn_gate_inp.weight"), e, h)?;
        let down_name = format!("{p}.ffn_down_exps.weight");
        let n_ff = dim(b, &down_name, 0)?;
        let down = b.experts(&down_name, e, h, n_ff)?;
        let fused = format!("{p}.ffn_gate_up_exps.weight");
        let gate_up = if b.has(&fused)? {
            GateUp::Fused(b.expert_parts(&fused, e, 2 * n_ff, h, n_ff)?)
        } else {
            GateUp::Split {
                gate: b.experts(&format!("{p}.ffn_gate_exps.weight"), e, n_ff, h)?,
                up: b.experts(&format!("{p}.ffn_up_exps.weight"), e, n_ff, h)?,
            }
        };
        let shared = if b.has(&format!("{p}.ffn_gate_shexp.weight"))? {
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
    fn forward<'w>(&self, c: &ModelConfig, ex: Exec<'w>, x: &[f32], n: usize) -> Buf<'w> {
        let threads = ex.threads;
        let h = c.n_embd;
        let ff = self.n_ff;
        let routes = route(self, c, ex, x, n);
        // Every expert's tokens, expert after expert (as `routes.tokens`):
        // the gate and up products pick them out of `x` (so its 8-bit form
        // is made once, not once per expert), then the down outputs.
        let m_all = routes.tokens.len();
        let sh_ff = self.shared.as_ref().map_or(0, |s| s.mlp.gate.rows);

        // gate and up of every active expert (and the shared expert).
        let mut gates = Buf::for_output(ex.ws, m_all * ff);
        let mut ups = Buf::for_output(ex.ws, m_all * ff);
        let (mut sh_g, mut sh_u) = (
            Buf::for_output(ex.ws, n * sh_ff),
            Buf::for_output(ex.ws, n * sh_ff),
        );
        {
            let mut jobs = JobList::take(ex.ws);
            let (mut gr, mut ur) = (&mut gates[..], &mut ups[..]);
            for e in routes.active() {
                let pick = routes.tokens(e);
                let m = pick.len();
                let (g, rest) = std::mem::take(&mut gr).split_at_mut(m * ff);
                gr = rest;
                let (u, rest) = std::mem::take(&mut ur).split_at_mut(m * ff);
                ur = rest;
                let (wg, wu) = self.gate_up(e);
                jobs.push(MatJob {
                    w: wg,
                    x,
                    n: m,
                    out: g,
                    pick: Some(pick),
                });
                jobs.push(MatJob {
                    w: wu,
                    x,
                    n: m,
                    out: u,
                    pick: Some(pick),
                });
            }
            if let Some(sh) = &self.shared {
                jobs.push(MatJob {
                    w: sh.mlp.gate.view(),
                    x,
                    n,
                    out: &mut sh_g,
                    pick: None,
                });
                jobs.push(MatJob {
                    w: sh.mlp.up.view(),
                    x,
                    n,
                    out: &mut sh_u,
                    pick: None,
                });
            }
            matmul_many_on(ex.isa, ex.precision, threads, &mut jobs);
        }
        for (g, u, width) in [(&mut gates, &ups, ff), (&mut sh_g, &sh_u, sh_ff)] {
            swiglu_rows(ex.isa, threads, g, u, width);
        }
        // down of every active expert (and the shared expert).
        let mut downs = Buf::for_output(ex.ws, m_all * h);
        let mut sh_y = Buf::for_output(ex.ws, n * h);
        {
            let mut jobs = JobList::take(ex.ws);
            let (mut gr, mut yr) = (&gates[..], &mut downs[..]);
            for e in routes.active() {
                let m = routes.tokens(e).len();
                let (ge, rest) = gr.split_at(m * ff);
                gr = rest;
                let (y, rest) = std::mem::take(&mut yr).split_at_mut(m * h);
                yr = rest;
                jobs.push(MatJob {
                    w: self.down.expert(e),
                    x: ge,
                    n: m,
                    out: y,
                    pick: None,
                });
            }
            if let Some(sh) = &self.shared {
                jobs.push(MatJob {
                    w: sh.mlp.down.view(),
                    x: &sh_g,
                    n,
                    out: &mut sh_y,
                    pick: None,
                });
            }
            matmul_many_on(ex.isa, ex.precision, threads, &mut jobs);
        }

        // Weighted sum, in expert order for every token (batch invariant),
        // then the gated shared expert: tokens in parallel. `slots[t·k + i]`
        // is the entry of token t's i-th expert (entries are expert-major,
        // so each token's come in expert order).
        let k = c.n_expert_used;
        let mut slots = Reused::take(ex.ws);
        slots.resize(n * k, 0);
        let mut filled = Reused::take(ex.ws);
        filled.resize(n, 0);
        for (p, &t) in routes.tokens.iter().enumerate() {
            slots[t * k + filled[t]] = p;
            filled[t] += 1;
        }
        let mut out = Buf::for_output(ex.ws, n * h);
        let out_ptr = SharedMut::new(&mut out);
        let (downs, slots, filled) = (&downs, &slots, &filled);
        threads.for_ranges(n, 16, |t0, t1| {
            for t in t0..t1 {
                // SAFETY: token t's output row is this task's alone.
                let o = unsafe { std::slice::from_raw_parts_mut(out_ptr.at(t * h), h) };
                o.fill(0.0);
                for &p in &slots[t * k..t * k + filled[t]] {
                    axpy_with(ex.isa, routes.weights[p], &downs[p * h..(p + 1) * h], o);
                }
                if let Some(sh) = &self.shared {
                    let gate = sigmoid(dot_f32_with(ex.isa, &sh.gate_inp, &x[t * h..(t + 1) * h]));
                    axpy_with(ex.isa, gate, &sh_y[t * h..(t + 1) * h], o);
                }
            }
        });
        out
    }
}

/// Where a step's tokens go: for each expert the tokens routed to it, in
/// order, and their weights, experts one after another in one list.
struct Routes<'w> {
    /// Expert `e`'s entries are `start[e]..start[e + 1]`.
    start: Reused<'w, usize>,
    tokens: Reused<'w, usize>,
    weights: Reused<'w, f32>,
}

impl Routes<'_> {
    fn tokens(&self, e: usize) -> &[usize] {
        &self.tokens[self.start[e]..self.start[e + 1]]
    }

    /// The experts with at least one token, in id order.
    fn active(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.start.len() - 1).filter(|&e| self.start[e] < self.start[e + 1])
    }
}

/// Softmax over all experts, top-k (ties to the lower id), renormalised.
fn route<'w>(w: &MoeWeights, c: &ModelConfig, ex: Exec<'w>, x: &[f32], n: usize) -> Routes<'w> {
    let threads = ex.threads;
    let (e, k) = (c.n_expert, c.n_expert_used);
    let mut logits = Buf::for_output(ex.ws, n * e);
    // Exact whatever the precision: routing picks experts by these logits.
    matmul_with(ex.isa, threads, w.router.view(), x, n, &mut logits);
    // Each token's top k as (expert, weight), token after token.
    let mut picks = Reused::take(ex.ws);
    let mut start = Reused::take(ex.ws);
    start.resize(e + 1, 0);
    let mut order = Reused::take(ex.ws);
    for t in 0..n {
        let p = &mut logits[t * e..(t + 1) * e];
        softmax_inplace(p);
        order.clear();
        order.extend(0..e);
        // Descending probability, lower ids first on ties: a total order,
        // so the in-place (unstable) selection and sort give what a stable
        // sort of all experts would. Only the first k are put in order.
        let desc = |a: &usize, b: &usize| p[*b].total_cmp(&p[*a]).then(a.cmp(b));
        if k < e {
            order.select_nth_unstable_by(k, desc);
        }
        order[..k].sort_unstable_by(desc);
        let top = &order[..k];
        let sum: f32 = top.iter().map(|&i| p[i]).sum();
        for &i in top {
            picks.push((i, p[i] / sum));
            start[i + 1] += 1;
        }
    }
    // Group by expert (a counting sort, which keeps tokens in order).
    for i in 0..e {
        start[i + 1] += start[i];
    }
    let mut next = Reused::take(ex.ws);
    next.extend_from_slice(&start[..e]);
    let mut tokens = Reused::take(ex.ws);
    let mut weights = Reused::take(ex.ws);
    tokens.resize(picks.len(), 0);
    weights.resize(picks.len(), 0.0);
    for (j, &(i, wgt)) in picks.iter().enumerate() {
        tokens[next[i]] = j / k;
        weights[next[i]] = wgt;
        next[i] += 1;
    }
    Routes {
        start,
        tokens,
        weights,
    }
}

impl Ffn {
    /// Weight bytes a token reads: the dense MLP, or the router, the shared
    /// expert and `used` routed experts.
    pub fn decode_weight_bytes(&self, used: usize) -> u64 {
        let dense =
            |d: &DenseWeights| (d.gate.byte_len() + d.up.byte_len() + d.down.byte_len()) as u64;
        match self {
            Ffn::Dense(d) => dense(d),
            Ffn::Moe(m) => {
                let per_expert = match &m.gate_up {
                    GateUp::Split { gate, up } => gate.bytes_per_expert() + up.bytes_per_expert(),
                    GateUp::Fused(gu) => gu.bytes_per_expert(),
                } + m.down.bytes_per_expert();
                let shared = m
                    .shared
                    .as_ref()
                    .map_or(0, |s| dense(&s.mlp) + (s.gate_inp.len() * 4) as u64);
                m.router.byte_len() as u64 + shared + (per_expert * used) as u64
            }
        }
    }

    pub fn forward<'w>(&self, c: &ModelConfig, ex: Exec<'w>, x: &[f32], n: usize) -> Buf<'w> {
        match self {
            Ffn::Moe(m) => m.forward(c, ex, x, n),
            Ffn::Dense(d) => d.forward(ex, x, n),
        }
    }
}
