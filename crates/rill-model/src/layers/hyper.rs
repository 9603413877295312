//! Hyper-connections (qwen4exp, DESIGN.md §2.5): the residual is `S`
//! streams of `n_embd` (`[T × S·n_embd]`, the embedding repeated), and each
//! sub-block reads a gated low-rank mix of them instead of a pre-norm:
//!
//! - `xn = RMSNorm_per_stream(x) ⊙ w` (the file's `hc_*_norm`, 1 + w baked in);
//! - `m = σ(W_up · silu(W_down · xn / S))`, `S·n_embd` gates;
//! - the block's input `mixed = (1/S) Σ_s m_s ⊙ xn_s`;
//! - its output `out` goes back into every stream with the stream's own
//!   weight, `x_s += inject_s · out`, `inject = 2σ(W_inject · xn / S)`.
//!
//! The final mixer (no inject) feeds the LM head in place of the final norm.

use crate::error::ModelError;
use crate::scratch::{Buf, Exec};
use crate::weights::{Binder, Matrix};
use rill_kernels::ops::{rms_norm, sigmoid, silu};
use rill_kernels::threads::SharedMut;
use rill_kernels::{matmul_many_on, matmul_on, MatJob};

/// One mixer's weights (`{prefix}_norm`, `_down`, `_up`, and `_inject`
/// unless it is the final mixer).
pub(crate) struct HyperMix {
    streams: usize,
    n_embd: usize,
    eps: f32,
    /// `[S·n_embd]`: per stream its own norm weights.
    norm: Vec<f32>,
    /// `[rank × S·n_embd]`.
    down: Matrix,
    /// `[S·n_embd × rank]`.
    up: Matrix,
    /// `[S × S·n_embd]`.
    inject: Option<Matrix>,
}

/// A mix of a step's rows: the block's input and each stream's weight for
/// the block's output.
pub(crate) struct Mixed<'w> {
    /// `[T × n_embd]`.
    pub input: Buf<'w>,
    /// `[T × S]` (empty for the final mixer).
    pub inject: Buf<'w>,
}

impl HyperMix {
    /// `prefix` is e.g. `blk.3.hc_attn` or `output_hc`; `with_inject`
    /// false for the final mixer.
    #[allow(clippy::too_many_arguments)]
    pub fn bind(
        b: &Binder,
        prefix: &str,
        streams: usize,
        rank: usize,
        n_embd: usize,
        eps: f32,
        with_inject: bool,
    ) -> Result<HyperMix, ModelError> {
        let wide = streams * n_embd;
        Ok(HyperMix {
            streams,
            n_embd,
            eps,
            norm: b.vector(&format!("{prefix}_norm.weight"), wide)?,
            down: b.matrix(&format!("{prefix}_down.weight"), rank, wide)?,
            up: b.matrix(&format!("{prefix}_up.weight"), wide, rank)?,
            inject: match with_inject {
                true => Some(b.matrix(&format!("{prefix}_inject.weight"), streams, wide)?),
                false => None,
            },
        })
    }

    pub fn weight_bytes(&self) -> u64 {
        let m = self.down.byte_len()
            + self.up.byte_len()
            + self.inject.as_ref().map_or(0, Matrix::byte_len);
        (m + self.norm.len() * 4) as u64
    }

    /// The mix of the `n` rows of `x` (`[n × S·n_embd]`).
    pub fn mix<'w>(&self, ex: Exec<'w>, x: &[f32], n: usize) -> Mixed<'w> {
        let (s, h) = (self.streams, self.n_embd);
        let wide = s * h;
        let threads = ex.threads;
        let mut xn = Buf::for_output(ex.ws, n * wide);
        let xn_ptr = SharedMut::new(&mut xn);
        threads.for_ranges(n * s, 16, |a, b| {
            // SAFETY: stream rows a..b of xn are this task's alone.
            let xn = unsafe { std::slice::from_raw_parts_mut(xn_ptr.at(a * h), (b - a) * h) };
            for (i, out) in (a..b).zip(xn.chunks_exact_mut(h)) {
                let stream = i % s;
                let w = &self.norm[stream * h..(stream + 1) * h];
                rms_norm(&x[i * h..(i + 1) * h], w, self.eps, out);
            }
        });
        self.mix_normed(ex, xn, n)
    }

    fn mix_normed<'w>(&self, ex: Exec<'w>, xn: Buf<'w>, n: usize) -> Mixed<'w> {
        let (s, h) = (self.streams, self.n_embd);
        let threads = ex.threads;
        let rank = self.down.rows;
        let mut low = Buf::for_output(ex.ws, n * rank);
        let mut inject = Buf::for_output(ex.ws, if self.inject.is_some() { n * s } else { 0 });
        match &self.inject {
            Some(w_inject) => matmul_many_on(
                ex.isa,
                ex.precision,
                threads,
                &mut [
                    MatJob {
                        w: self.down.view(),
                        x: &xn,
                        n,
                        out: &mut low,
                        pick: None,
                    },
                    MatJob {
                        w: w_inject.view(),
                        x: &xn,
                        n,
                        out: &mut inject,
                        pick: None,
                    },
                ],
            ),
            None => matmul_on(
                ex.isa,
                ex.precision,
                threads,
                self.down.view(),
                &xn,
                n,
                &mut low,
            ),
        }
        let inv = 1.0 / s as f32;
        for v in low.iter_mut() {
            *v = silu(*v * inv);
        }
        for v in inject.iter_mut() {
            *v = 2.0 * sigmoid(*v * inv);
        }
        let mut gates = Buf::for_output(ex.ws, n * s * h);
        matmul_on(
            ex.isa,
            ex.precision,
            threads,
            self.up.view(),
            &low,
            n,
            &mut gates,
        );
        drop(low);
        let mut input = Buf::for_output(ex.ws, n * h);
        let in_ptr = SharedMut::new(&mut input);
        threads.for_ranges(n, 8, |t0, t1| {
            // SAFETY: rows t0..t1 of input are this task's alone.
            let input = unsafe { std::slice::from_raw_parts_mut(in_ptr.at(t0 * h), (t1 - t0) * h) };
            for (t, out) in (t0..t1).zip(input.chunks_exact_mut(h)) {
                out.fill(0.0);
                for st in 0..s {
                    let at = (t * s + st) * h;
                    let (g, v) = (&gates[at..at + h], &xn[at..at + h]);
                    for ((o, &gi), &vi) in out.iter_mut().zip(g).zip(v) {
                        *o += sigmoid(gi) * vi;
                    }
                }
                for o in out.iter_mut() {
                    *o *= inv;
                }
            }
        });
        Mixed { input, inject }
    }
}

/// `x_s += inject_s · out` for every row and stream (`x`: `[n × S·h]`,
/// `out`: `[n × h]`, `inject`: `[n × S]`).
pub(crate) fn inject(ex: Exec<'_>, x: &mut [f32], out: &[f32], inject: &[f32], s: usize, h: usize) {
    let n = out.len() / h;
    let x_ptr = SharedMut::new(x);
    ex.threads.for_ranges(n, 8, |t0, t1| {
        // SAFETY: rows t0..t1 of x are this task's alone.
        let x = unsafe { std::slice::from_raw_parts_mut(x_ptr.at(t0 * s * h), (t1 - t0) * s * h) };
        for (t, row) in (t0..t1).zip(x.chunks_exact_mut(s * h)) {
            let o = &out[t * h..(t + 1) * h];
            for (st, xs) in row.chunks_exact_mut(h).enumerate() {
                let w = inject[t * s + st];
                for (xi, &oi) in xs.iter_mut().zip(o) {
                    *xi += w * oi;
                }
            }
        }
    });
}
