//! Gated DeltaNet (DESIGN.md §2.2): projections, causal depthwise conv with a
//! carried window, L2-normed q/k, the gated delta rule per value head, and
//! the gated RMSNorm on the way out.

use crate::config::{GateActivation, HeadOrder, ModelConfig};
use crate::error::ModelError;
use crate::scratch::{Buf, Exec, JobList};
use crate::state::{RingLayer, MAX_REWIND_ROWS};
use crate::weights::{Binder, Matrix};
use rill_kernels::conv::causal_conv_silu;
use rill_kernels::gdn::{
    chunked_scratch_len, delta_rule_chunked_in, delta_rule_recurrent_with, HeadInputs,
};
use rill_kernels::ops::{
    l2_norm_inplace, mul_sigmoid_inplace_with, mul_silu_inplace_with, rms_norm_inplace, sigmoid,
    softplus,
};
use rill_kernels::threads::SharedMut;
use rill_kernels::{matmul_many_on, matmul_on, MatJob};

/// How the input projections are stored.
enum Projections {
    /// `attn_qkv` (conv channels q, k, v) and `attn_gate` (z), as Qwen3.5 and
    /// current Qwen3-Next conversions write them.
    Split { qkv: Matrix, gate: Matrix },
    /// Qwen3-Next's fused `ssm_in`: per key head `[q, k, v·r, z·r]` (r = n_v/n_k).
    FusedQkvz(Matrix),
}

enum BetaAlpha {
    /// `ssm_beta`, `ssm_alpha`: one row per value head.
    Split { beta: Matrix, alpha: Matrix },
    /// Qwen3-Next's `ssm_ba`: per key head `[b·r, a·r]`.
    Fused(Matrix),
}

pub(crate) struct GdnWeights {
    proj: Projections,
    ba: BetaAlpha,
    /// `[K × conv_dim]` (the file's `[conv_dim × K]` transposed, so that a
    /// tap is a row over all channels), kernel taps oldest first.
    conv: Vec<f32>,
    dt_bias: Vec<f32>,
    /// `−exp(A_log)`, per value head.
    a: Vec<f32>,
    /// Gated RMSNorm weight over one value head.
    norm: Vec<f32>,
    out: Matrix,
    order: HeadOrder,
}

impl GdnWeights {
    /// Bytes of every weight of the layer.
    pub fn weight_bytes(&self) -> u64 {
        let proj = match &self.proj {
            Projections::Split { qkv, gate } => qkv.byte_len() + gate.byte_len(),
            Projections::FusedQkvz(m) => m.byte_len(),
        };
        let ba = match &self.ba {
            BetaAlpha::Split { beta, alpha } => beta.byte_len() + alpha.byte_len(),
            BetaAlpha::Fused(m) => m.byte_len(),
        };
        let vectors = self.conv.len() + self.dt_bias.len() + self.a.len() + self.norm.len();
        (proj + ba + self.out.byte_len() + vectors * 4) as u64
    }

    pub fn bind(b: &Binder, c: &ModelConfig, p: &str) -> Result<Self, ModelError> {
        let h = c.n_embd;
        let (nv, dv, kk) = (c.ssm_n_v_heads, c.ssm_head_dim, c.conv_kernel);
        let conv_dim = c.conv_dim();
        let proj = if b.has(&format!("{p}.attn_qkv.weight"))? {
            Projections::Split {
                qkv: b.matrix(&format!("{p}.attn_qkv.weight"), conv_dim, h)?,
                gate: b.matrix(&format!("{p}.attn_gate.weight"), nv * dv, h)?,
            }
        } else {
            Projections::FusedQkvz(b.matrix(
                &format!("{p}.ssm_in.weight"),
                conv_dim + nv * dv,
                h,
            )?)
        };
        let ba = if b.has(&format!("{p}.ssm_ba.weight"))? {
            BetaAlpha::Fused(b.matrix(&format!("{p}.ssm_ba.weight"), 2 * nv, h)?)
        } else {
            BetaAlpha::Split {
                beta: b.matrix(&format!("{p}.ssm_beta.weight"), nv, h)?,
                alpha: b.matrix(&format!("{p}.ssm_alpha.weight"), nv, h)?,
            }
        };
        Ok(GdnWeights {
            proj,
            ba,
            conv: transpose_taps(
                &b.small(
                    &format!("{p}.ssm_conv1d.weight"),
                    &[kk as u64, conv_dim as u64],
                )?,
                kk,
            ),
            dt_bias: b.vector(&format!("{p}.ssm_dt.bias"), nv)?,
            a: b.vector(&format!("{p}.ssm_a"), nv)?,
            norm: b.vector(&format!("{p}.ssm_norm.weight"), dv)?,
            out: b.matrix(&format!("{p}.ssm_out.weight"), h, nv * dv)?,
            order: c.value_head_order,
        })
    }
}

/// `[channels × K]` taps as `[K × channels]`.
fn transpose_taps(taps: &[f32], kk: usize) -> Vec<f32> {
    let ch = taps.len() / kk;
    (0..kk)
        .flat_map(|j| (0..ch).map(move |c| taps[c * kk + j]))
        .collect()
}

/// The four input projections of `x` `[n × n_embd]`, in one parallel region:
/// the conv input `[n × conv_dim]`, the output gate z `[n × n_v·d_v]`, and
/// per value head the decay `g` and the write strength `β` `[n × n_v]`.
/// With `late_gate` (split projections only) z is left empty, for
/// [`gate_projection`] after the recurrence.
fn project<'w>(
    w: &GdnWeights,
    c: &ModelConfig,
    ex: Exec<'w>,
    x: &[f32],
    n: usize,
    late_gate: bool,
) -> (Buf<'w>, Buf<'w>, Buf<'w>, Buf<'w>) {
    let threads = ex.threads;
    let (nk, nv, d) = (c.ssm_n_k_heads, c.ssm_n_v_heads, c.ssm_head_dim);
    let r = nv / nk;
    let conv_dim = c.conv_dim();
    let vdim = c.ssm_value_dim();
    let mut qkv = Buf::for_output(ex.ws, n * conv_dim);
    let mut z = Buf::for_output(ex.ws, if late_gate { 0 } else { n * vdim });
    let mut b = Buf::for_output(ex.ws, n * nv);
    let mut a = Buf::for_output(ex.ws, n * nv);
    let fused_qkvz = matches!(w.proj, Projections::FusedQkvz(_));
    let fused_ba = matches!(w.ba, BetaAlpha::Fused(_));
    let mut mixed = Buf::for_output(ex.ws, if fused_qkvz { n * (conv_dim + vdim) } else { 0 });
    let mut ba = Buf::for_output(ex.ws, if fused_ba { n * 2 * nv } else { 0 });
    {
        let mut jobs = JobList::take(ex.ws);
        match &w.proj {
            Projections::Split { qkv: wq, gate } => {
                jobs.push(MatJob {
                    w: wq.view(),
                    x,
                    n,
                    out: &mut qkv,
                    pick: None,
                });
                if !late_gate {
                    jobs.push(MatJob {
                        w: gate.view(),
                        x,
                        n,
                        out: &mut z,
                        pick: None,
                    });
                }
            }
            Projections::FusedQkvz(m) => jobs.push(MatJob {
                w: m.view(),
                x,
                n,
                out: &mut mixed,
                pick: None,
            }),
        }
        match &w.ba {
            BetaAlpha::Split { beta, alpha } => {
                jobs.push(MatJob {
                    w: beta.view(),
                    x,
                    n,
                    out: &mut b,
                    pick: None,
                });
                jobs.push(MatJob {
                    w: alpha.view(),
                    x,
                    n,
                    out: &mut a,
                    pick: None,
                });
            }
            BetaAlpha::Fused(m) => jobs.push(MatJob {
                w: m.view(),
                x,
                n,
                out: &mut ba,
                pick: None,
            }),
        }
        matmul_many_on(ex.isa, ex.precision, threads, &mut jobs);
    }
    if fused_qkvz {
        // Per key head [q, k, v·r, z·r] → [q_all, k_all, v_all] and z.
        let group = 2 * d + 2 * r * d;
        for t in 0..n {
            let src = &mixed[t * (conv_dim + vdim)..(t + 1) * (conv_dim + vdim)];
            let dst = &mut qkv[t * conv_dim..(t + 1) * conv_dim];
            let zt = &mut z[t * vdim..(t + 1) * vdim];
            for g in 0..nk {
                let s = &src[g * group..(g + 1) * group];
                dst[g * d..(g + 1) * d].copy_from_slice(&s[..d]);
                dst[nk * d + g * d..nk * d + (g + 1) * d].copy_from_slice(&s[d..2 * d]);
                let vs = 2 * nk * d + g * r * d;
                dst[vs..vs + r * d].copy_from_slice(&s[2 * d..2 * d + r * d]);
                zt[g * r * d..(g + 1) * r * d].copy_from_slice(&s[2 * d + r * d..]);
            }
        }
    }
    if fused_ba {
        // Per key head [b·r, a·r].
        for t in 0..n {
            for g in 0..nk {
                let s = &ba[t * 2 * nv + g * 2 * r..t * 2 * nv + (g + 1) * 2 * r];
                b[t * nv + g * r..t * nv + (g + 1) * r].copy_from_slice(&s[..r]);
                a[t * nv + g * r..t * nv + (g + 1) * r].copy_from_slice(&s[r..]);
            }
        }
    }
    for t in 0..n {
        for h in 0..nv {
            let i = t * nv + h;
            a[i] = w.a[h] * softplus(a[i] + w.dt_bias[h]);
            b[i] = sigmoid(b[i]);
        }
    }
    (qkv, z, a, b)
}

/// The gated delta rule for `n` tokens, value heads in parallel: token by
/// token for decode, chunkwise for prefill (the same result within f32
/// rounding). `qkv` holds the conv outputs; writes `out` `[n × n_v·d_v]`.
#[allow(clippy::too_many_arguments)]
fn delta_rule(
    w: &GdnWeights,
    c: &ModelConfig,
    ex: Exec<'_>,
    qkv: &[f32],
    g: &[f32],
    beta: &[f32],
    n: usize,
    ssm: &mut [f32],
    snapshots: Option<&mut [Vec<f32>]>,
    out: &mut [f32],
) {
    let threads = ex.threads;
    let (nk, nv, d) = (c.ssm_n_k_heads, c.ssm_n_v_heads, c.ssm_head_dim);
    let cd = c.conv_dim();
    // q and k are L2-normalised per key head as they are gathered, and
    // 1/√d_k folded into q.
    let q_scale = 1.0 / (d as f32).sqrt();
    // Per pool thread, room for one head's inputs gathered contiguously
    // (q, k, v, g, β), its output and the chunkwise form's scratch, in one
    // buffer of this thread.
    // A rewindable step runs token by token (the decode form, so a verified
    // token gets the bits plain decoding gives it) and copies each head's
    // state after every row but the last into that row's snapshot.
    let mut slots = [SharedMut::new(&mut [][..]); MAX_REWIND_ROWS];
    let rewindable = snapshots.is_some();
    if let Some(snaps) = snapshots {
        assert!(n <= MAX_REWIND_ROWS && snaps.len() + 1 >= n, "rewind slots");
        for (slot, snap) in slots.iter_mut().zip(snaps.iter_mut()).take(n - 1) {
            assert_eq!(snap.len(), ssm.len(), "rewind slot size");
            *slot = SharedMut::new(snap);
        }
    }
    let chunk_len = if n > 1 && !rewindable {
        chunked_scratch_len(d, d)
    } else {
        0
    };
    let part = 4 * n * d + 2 * n + chunk_len;
    let mut room = Buf::for_output(ex.ws, threads.count() * part);
    let room_ptr = SharedMut::new(&mut room);
    let out_ptr = SharedMut::new(out);
    let ssm_ptr = SharedMut::new(ssm);
    // Tasks take key heads: each gathers and normalises its q and k once
    // for the value heads that read them.
    threads.for_ranges_on(nk, 1, |slot, k0, k1| {
        // SAFETY: part `slot` of the room is used by one task at a time.
        let room = unsafe { std::slice::from_raw_parts_mut(room_ptr.at(slot * part), part) };
        let (q, room) = room.split_at_mut(n * d);
        let (k, room) = room.split_at_mut(n * d);
        let (v, room) = room.split_at_mut(n * d);
        let (o, room) = room.split_at_mut(n * d);
        let (gh, room) = room.split_at_mut(n);
        let (bh, chunk_scratch) = room.split_at_mut(n);
        for kh in k0..k1 {
            for t in 0..n {
                let row = &qkv[t * cd..(t + 1) * cd];
                let qt = &mut q[t * d..(t + 1) * d];
                qt.copy_from_slice(&row[kh * d..(kh + 1) * d]);
                l2_norm_inplace(qt, c.rms_eps);
                qt.iter_mut().for_each(|v| *v *= q_scale);
                let kt = &mut k[t * d..(t + 1) * d];
                kt.copy_from_slice(&row[(nk + kh) * d..(nk + kh + 1) * d]);
                l2_norm_inplace(kt, c.rms_eps);
            }
            for j in 0..nv / nk {
                let h = w.order.value_head(kh, j, nk, nv);
                for t in 0..n {
                    let vs = t * cd + 2 * nk * d + h * d;
                    v[t * d..(t + 1) * d].copy_from_slice(&qkv[vs..vs + d]);
                    gh[t] = g[t * nv + h];
                    bh[t] = beta[t * nv + h];
                }
                let inputs = HeadInputs {
                    q,
                    k,
                    v,
                    g: gh,
                    beta: bh,
                    d_k: d,
                    d_v: d,
                };
                // SAFETY: value head h's state belongs to this task only.
                let s = unsafe { std::slice::from_raw_parts_mut(ssm_ptr.at(h * d * d), d * d) };
                if n == 1 {
                    delta_rule_recurrent_with(ex.isa, &inputs, s, o);
                } else if rewindable {
                    for t in 0..n {
                        let (a, b) = (t * d, (t + 1) * d);
                        let row = HeadInputs {
                            q: &q[a..b],
                            k: &k[a..b],
                            v: &v[a..b],
                            g: &gh[t..t + 1],
                            beta: &bh[t..t + 1],
                            d_k: d,
                            d_v: d,
                        };
                        delta_rule_recurrent_with(ex.isa, &row, s, &mut o[a..b]);
                        if t + 1 < n {
                            // SAFETY: head h's part of every slot belongs
                            // to this task only; the slots outlive the region.
                            let snap = unsafe {
                                std::slice::from_raw_parts_mut(slots[t].at(h * d * d), d * d)
                            };
                            snap.copy_from_slice(s);
                        }
                    }
                } else {
                    delta_rule_chunked_in(ex.isa, &inputs, s, o, chunk_scratch);
                }
                for t in 0..n {
                    // SAFETY: the output columns of head h belong to this task only.
                    let dst =
                        unsafe { std::slice::from_raw_parts_mut(out_ptr.at((t * nv + h) * d), d) };
                    dst.copy_from_slice(&o[t * d..(t + 1) * d]);
                }
            }
        }
    });
}

/// One sequence's rows of a GDN step and its state.
pub(crate) struct GdnSeq<'a> {
    pub rows: std::ops::Range<usize>,
    pub conv: &'a mut [f32],
    pub ssm: &'a mut [f32],
    /// For a rewindable step: where the states after each row but the
    /// last go (room reserved for the step's rows).
    pub ring: Option<&'a mut RingLayer>,
}

/// The conv windows after each row `t < m − 1` of a step, into `slots`:
/// the last `K − 1` raw inputs up to row `t`, from the window before the
/// step and the step's raw rows (read before the conv overwrites them).
fn conv_snapshots(window: &[f32], raw: &[f32], cd: usize, m: usize, slots: &mut [Vec<f32>]) {
    let keep = window.len() / cd;
    for (t, slot) in slots.iter_mut().enumerate().take(m.saturating_sub(1)) {
        // Rows of [window ; raw[..=t]] from t + 1 on.
        for (j, dst) in slot.chunks_exact_mut(cd).enumerate().take(keep) {
            let i = t + 1 + j;
            let src = if i < keep {
                &window[i * cd..(i + 1) * cd]
            } else {
                &raw[(i - keep) * cd..(i - keep + 1) * cd]
            };
            dst.copy_from_slice(src);
        }
    }
}

/// Steps of at least this many rows (prompt chunks) project the output
/// gate z after the recurrence, once the conv rows are freed: the step
/// holds the conv rows and the recurrence's output, then that output and
/// z — never all three (a quarter less working memory per prompt row).
/// Smaller steps keep every projection in one parallel region.
const LATE_GATE_ROWS: usize = 64;

/// The output gate z `[n × n_v·d_v]` through `gate`.
fn gate_projection<'w>(gate: &Matrix, ex: Exec<'w>, x: &[f32], n: usize) -> Buf<'w> {
    let mut z = Buf::for_output(ex.ws, n * gate.rows);
    matmul_on(ex.isa, ex.precision, ex.threads, gate.view(), x, n, &mut z);
    z
}

/// GDN mixer for a step of `n` rows (`x` normed) spread over `seqs`: the
/// projections run once over all rows, the conv and the recurrence per
/// sequence on its own state.
pub(crate) fn forward<'s, 'w>(
    w: &GdnWeights,
    c: &ModelConfig,
    ex: Exec<'w>,
    x: &[f32],
    n: usize,
    seqs: impl IntoIterator<Item = GdnSeq<'s>>,
) -> Buf<'w> {
    let threads = ex.threads;
    let late_gate = match &w.proj {
        Projections::Split { gate, .. } if n >= LATE_GATE_ROWS => Some(gate),
        _ => None,
    };
    let (mut qkv, z, g, beta) = project(w, c, ex, x, n, late_gate.is_some());
    let (cd, nv, d) = (c.conv_dim(), c.ssm_n_v_heads, c.ssm_head_dim);
    let mut y = Buf::for_output(ex.ws, n * nv * d);
    for s in seqs {
        let (a, b) = (s.rows.start, s.rows.end);
        let m = b - a;
        let rows = &mut qkv[a * cd..b * cd];
        let mut ring = s.ring;
        if let Some(r) = ring.as_deref_mut() {
            conv_snapshots(s.conv, rows, cd, m, &mut r.conv);
        }
        causal_conv_silu(ex.isa, threads, &w.conv, c.conv_kernel, rows, m, s.conv);
        delta_rule(
            w,
            c,
            ex,
            rows,
            &g[a * nv..b * nv],
            &beta[a * nv..b * nv],
            m,
            s.ssm,
            ring.map(|r| &mut r.ssm[..]),
            &mut y[a * nv * d..b * nv * d],
        );
    }
    drop((qkv, g, beta));
    let z = match late_gate {
        Some(gate) => gate_projection(gate, ex, x, n),
        None => z,
    };
    // Gated RMSNorm per value head: norm(o) ⊙ act(z) (SiLU; qwen4exp's
    // sigmoid), heads in parallel.
    let y_ptr = SharedMut::new(&mut y);
    threads.for_ranges(n * nv, 64, |h0, h1| {
        // SAFETY: heads `h0..h1` of `y` are this task's alone.
        let y = unsafe { std::slice::from_raw_parts_mut(y_ptr.at(h0 * d), (h1 - h0) * d) };
        for (head, zh) in y.chunks_exact_mut(d).zip(z[h0 * d..h1 * d].chunks_exact(d)) {
            rms_norm_inplace(head, &w.norm, c.rms_eps);
            match c.gdn_gate {
                GateActivation::Silu => mul_silu_inplace_with(ex.isa, head, zh),
                GateActivation::Sigmoid => mul_sigmoid_inplace_with(ex.isa, head, zh),
            }
        }
    });
    let mut out = Buf::for_output(ex.ws, n * c.n_embd);
    matmul_on(ex.isa, ex.precision, threads, w.out.view(), &y, n, &mut out);
    out
}
