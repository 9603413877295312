//! The gated delta rule of Gated DeltaNet, for one value head.
//!
//! State `S ∈ ℝ^{d_k×d_v}` (row-major), per token t:
//! ```text
//! S ← exp(g_t)·S ;  u_t = β_t (v_t − Sᵀk_t) ;  S ← S + k_t u_tᵀ ;  o_t = Sᵀq_t
//! ```
//! Two forms compute it: token by token ([`delta_rule_recurrent`], for
//! decode) and chunkwise ([`delta_rule_chunked`], for prefill), which folds
//! the recurrence over a chunk of C tokens into small matrix products
//! (Yang et al., arXiv 2412.06464 / 2406.06484). Within a chunk, with
//! G_t = Σ_{s≤t} g_s and S₀ the state at the chunk start:
//! ```text
//! u_t = β_t (v_t − e^{G_t} S₀ᵀk_t − Σ_{s<t} e^{G_t−G_s} (k_t·k_s) u_s)   (forward substitution)
//! o_t = e^{G_t} S₀ᵀq_t + Σ_{s≤t} e^{G_t−G_s} (q_t·k_s) u_s
//! S_C = e^{G_C} S₀ + Σ_s e^{G_C−G_s} k_s u_sᵀ
//! ```
//! Every exponent is of a non-positive number (G decreases), computed only
//! where it is used (masked before `exp`), so nothing overflows.

use crate::simd::{on_widest_vectors, Isa};
use crate::small::{product_nn, room_len, split, transpose};

/// Tokens per chunk of the chunkwise form.
pub const CHUNK: usize = 64;

/// Inputs of one head over `n` tokens, contiguous per token.
pub struct HeadInputs<'a> {
    /// `[n × d_k]`, already L2-normalised and scaled.
    pub q: &'a [f32],
    /// `[n × d_k]`, already L2-normalised.
    pub k: &'a [f32],
    /// `[n × d_v]`
    pub v: &'a [f32],
    /// Log decay per token (`≤ 0`).
    pub g: &'a [f32],
    /// Write strength per token.
    pub beta: &'a [f32],
    pub d_k: usize,
    pub d_v: usize,
}

impl HeadInputs<'_> {
    fn n(&self) -> usize {
        self.g.len()
    }
}

/// Token-by-token form on kernel class `isa`. `state` is `[d_k × d_v]`,
/// `out` is `[n × d_v]`. Every class runs the same loops compiled for its
/// vectors, with the same bits: the operations are element-wise over
/// `d_v`, in the same order over `d_k`, and never fused.
pub fn delta_rule_recurrent_with(isa: Isa, x: &HeadInputs, state: &mut [f32], out: &mut [f32]) {
    isa.check();
    assert!(state.len() >= x.d_k * x.d_v && out.len() >= x.n() * x.d_v);
    on_widest_vectors!(isa, (x: &HeadInputs = x, state: &mut [f32] = state,
        out: &mut [f32] = out) => recurrent_body(x, state, out));
    recurrent_body(x, state, out)
}

#[inline(always)]
fn recurrent_body(x: &HeadInputs, state: &mut [f32], out: &mut [f32]) {
    let (dk, dv) = (x.d_k, x.d_v);
    // u on the stack for the usual head sizes: decode runs this once per
    // head per token and should not allocate.
    let mut on_stack = [0f32; 256];
    let mut on_heap = Vec::new();
    let u: &mut [f32] = if dv <= on_stack.len() {
        &mut on_stack[..dv]
    } else {
        on_heap.resize(dv, 0.0);
        &mut on_heap
    };
    for t in 0..x.n() {
        let q = &x.q[t * dk..(t + 1) * dk];
        let k = &x.k[t * dk..(t + 1) * dk];
        let decay = x.g[t].exp();
        u.copy_from_slice(&x.v[t * dv..(t + 1) * dv]);
        // u = v − (exp(g)·S)ᵀk: a read-only pass (decode is bound by moving
        // the state; the decayed entries are recomputed below, same bits).
        for (i, row) in state.chunks_exact(dv).enumerate().take(dk) {
            let ki = k[i];
            for (&s, uj) in row.iter().zip(u.iter_mut()) {
                *uj -= (s * decay) * ki;
            }
        }
        u.iter_mut().for_each(|v| *v *= x.beta[t]);
        // S ← exp(g)·S + k uᵀ, then o = Sᵀq (read after write).
        let o = &mut out[t * dv..(t + 1) * dv];
        o.fill(0.0);
        for (i, row) in state.chunks_exact_mut(dv).enumerate().take(dk) {
            let (ki, qi) = (k[i], q[i]);
            for ((s, &uj), oj) in row.iter_mut().zip(u.iter()).zip(o.iter_mut()) {
                *s = *s * decay + ki * uj;
                *oj += *s * qi;
            }
        }
    }
}

/// Chunkwise form; same contract as [`delta_rule_recurrent_with`].
pub fn delta_rule_chunked(isa: Isa, x: &HeadInputs, state: &mut [f32], out: &mut [f32]) {
    let mut scratch = vec![0f32; chunked_scratch_len(x.d_k, x.d_v)];
    delta_rule_chunked_in(isa, x, state, out, &mut scratch);
}

/// Floats of scratch [`delta_rule_chunked_in`] needs for heads of these sizes.
pub fn chunked_scratch_len(d_k: usize, d_v: usize) -> usize {
    room_len(&ChunkScratch::lens(d_k, d_v))
}

/// [`delta_rule_chunked`] with the caller's scratch (at least
/// [`chunked_scratch_len`]), which a prefill keeps from head to head: a
/// buffer this large allocated per call is mapped and unmapped each time.
pub fn delta_rule_chunked_in(
    isa: Isa,
    x: &HeadInputs,
    state: &mut [f32],
    out: &mut [f32],
    scratch: &mut [f32],
) {
    isa.check();
    let (dk, dv) = (x.d_k, x.d_v);
    let n = x.n();
    let lens = ChunkScratch::lens(dk, dv);
    assert!(
        scratch.len() >= room_len(&lens),
        "chunked scratch too small"
    );
    let [big_g, decay, gram, proj, rhs, tm, u, kw, upd] = split(scratch, lens);
    let mut sc = ChunkScratch {
        big_g,
        decay,
        gram,
        proj,
        rhs,
        tm,
        u,
        kw,
        upd,
    };
    let mut start = 0;
    while start < n {
        let c = CHUNK.min(n - start);
        let view = HeadInputs {
            q: &x.q[start * dk..(start + c) * dk],
            k: &x.k[start * dk..(start + c) * dk],
            v: &x.v[start * dv..(start + c) * dv],
            g: &x.g[start..start + c],
            beta: &x.beta[start..start + c],
            d_k: dk,
            d_v: dv,
        };
        chunk(
            isa,
            &view,
            state,
            &mut out[start * dv..(start + c) * dv],
            &mut sc,
        );
        start += c;
    }
}

struct ChunkScratch<'a> {
    /// Cumulative log decay within the chunk.
    big_g: &'a mut [f32],
    /// `[C × C]`: e^{G_t−G_s} for s ≤ t.
    decay: &'a mut [f32],
    /// `[C × C]`: k_t·k_s, then q_t·k_s (weighted by the decay, masked).
    gram: &'a mut [f32],
    /// `[C × d_v]`: S₀ᵀk_t, then S₀ᵀq_t.
    proj: &'a mut [f32],
    /// `[C × d_v]`: B of the u_t's system, row by row.
    rhs: &'a mut [f32],
    /// `[C × C]`: T = (I + A)⁻¹.
    tm: &'a mut [f32],
    /// `[C × d_v]`: the u_t.
    u: &'a mut [f32],
    /// `[d_k × C]`: Kᵀ, then e^{G_C−G_s} k_s[i], the state update's left factor.
    kw: &'a mut [f32],
    /// `[d_k × d_v]`: the state update.
    upd: &'a mut [f32],
}

impl ChunkScratch<'_> {
    /// Lengths of the parts, in field order.
    fn lens(dk: usize, dv: usize) -> [usize; 9] {
        let c = CHUNK;
        [
            c,
            c * c,
            c * c,
            c * dv,
            c * dv,
            c * c,
            c * dv,
            dk * c,
            dk * dv,
        ]
    }
}

/// One chunk. Every product is a [`product_nn`] (rows of the right factor
/// added into register tiles): the Gram matrices take Kᵀ, transposed once
/// and then scaled into the state update's left factor.
///
/// The element-wise loops are compiled for the CPU's widest vectors (the
/// same IEEE operations, so the same bits on every path).
fn chunk(isa: Isa, x: &HeadInputs, state: &mut [f32], out: &mut [f32], sc: &mut ChunkScratch) {
    on_widest_vectors!(isa, (isa: Isa = isa, x: &HeadInputs = x, state: &mut [f32] = state,
        out: &mut [f32] = out, sc: &mut ChunkScratch = sc) => chunk_body(isa, x, state, out, sc));
    chunk_body(isa, x, state, out, sc)
}

#[inline(always)]
fn chunk_body(isa: Isa, x: &HeadInputs, state: &mut [f32], out: &mut [f32], sc: &mut ChunkScratch) {
    let (dk, dv) = (x.d_k, x.d_v);
    let c = x.n();
    let big_g = &mut sc.big_g[..c];
    let mut acc = 0.0;
    for (gt, &g) in big_g.iter_mut().zip(x.g) {
        acc += g;
        *gt = acc;
    }
    // e^{G_t−G_s} for s ≤ t, once for all uses below.
    let decay = &mut sc.decay[..c * c];
    for t in 0..c {
        for s in 0..=t {
            decay[t * c + s] = (big_g[t] - big_g[s]).exp();
        }
    }
    let proj = &mut sc.proj[..c * dv];
    let rhs = &mut sc.rhs[..c * dv];
    let gram = &mut sc.gram[..c * c];
    let u = &mut sc.u[..c * dv];

    // u_t = β_t (v_t − e^{G_t} S₀ᵀk_t − Σ_{s<t} e^{G_t−G_s} (k_t·k_s) u_s),
    // i.e. (I + A) U = B with A_ts = β_t e^{G_t−G_s} (k_t·k_s) for s < t and
    // B_t = β_t (v_t − e^{G_t} S₀ᵀk_t). Solved as U = T·B with T = (I + A)⁻¹
    // (the "UT transform" of the papers above): the forward substitution
    // runs over the C × C matrix, not over rows of d_v, and U is one product.
    // Kᵀ, for the Gram matrices (as right factors of `product_nn`: no
    // horizontal sums) and, scaled, the state update's left factor.
    let kt = &mut sc.kw[..dk * c];
    transpose(x.k, dk, (c, dk), kt, c);
    product_nn(isa, (x.k, dk), (state, dv), (c, dk, dv), (proj, dv));
    product_nn(isa, (x.k, dk), (kt, c), (c, dk, c), (gram, c));
    let tm = &mut sc.tm[..c * c];
    for t in 0..c {
        let (done, rest) = tm.split_at_mut(t * c);
        let row = &mut rest[..c];
        row.fill(0.0);
        row[t] = 1.0;
        // T_t = e_t − Σ_{s<t} A_ts T_s, where T_s is 0 past column s.
        for s in 0..t {
            let a = x.beta[t] * decay[t * c + s] * gram[t * c + s];
            for (r, &d) in row[..=s].iter_mut().zip(&done[s * c..s * c + s + 1]) {
                *r -= a * d;
            }
        }
    }
    for t in 0..c {
        let (et, b) = (big_g[t].exp(), x.beta[t]);
        for ((o, &v), &p) in rhs[t * dv..(t + 1) * dv]
            .iter_mut()
            .zip(&x.v[t * dv..(t + 1) * dv])
            .zip(&proj[t * dv..(t + 1) * dv])
        {
            *o = b * (v - et * p);
        }
    }
    product_nn(isa, (tm, c), (rhs, dv), (c, c, dv), (u, dv));

    // o_t = e^{G_t} S₀ᵀq_t + Σ_{s≤t} e^{G_t−G_s} (q_t·k_s) u_s, the sum as
    // one product of the masked, decayed scores [C × C] by u.
    product_nn(isa, (x.q, dk), (state, dv), (c, dk, dv), (proj, dv));
    product_nn(isa, (x.q, dk), (kt, c), (c, dk, c), (gram, c));
    for t in 0..c {
        for s in 0..c {
            gram[t * c + s] = if s <= t {
                decay[t * c + s] * gram[t * c + s]
            } else {
                0.0
            };
        }
    }
    product_nn(isa, (gram, c), (u, dv), (c, c, dv), (out, dv));
    for t in 0..c {
        let et = big_g[t].exp();
        for (o, &p) in out[t * dv..(t + 1) * dv]
            .iter_mut()
            .zip(&proj[t * dv..(t + 1) * dv])
        {
            *o += et * p;
        }
    }

    // S_C = e^{G_C} S₀ + Σ_s e^{G_C−G_s} k_s u_sᵀ, the sum as one product of
    // kw [d_k × C] (kw[i][s] = e^{G_C−G_s} k_s[i]) by u [C × d_v].
    let ec = big_g[c - 1].exp();
    let kw = kt;
    let to_end = &decay[(c - 1) * c..];
    for row in kw.chunks_exact_mut(c) {
        row.iter_mut().zip(to_end).for_each(|(k, &w)| *k *= w);
    }
    let upd = &mut sc.upd[..dk * dv];
    product_nn(isa, (kw, c), (u, dv), (dk, c, dv), (upd, dv));
    for (sv, &d) in state.iter_mut().zip(upd.iter()) {
        *sv = ec * *sv + d;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_util::noise;

    fn l2(rows: &mut [f32], d: usize) {
        for r in rows.chunks_exact_mut(d) {
            let n = r.iter().map(|v| v * v).sum::<f32>().sqrt();
            r.iter_mut().for_each(|v| *v /= n);
        }
    }

    /// q, k, v, g, beta of `n` tokens.
    type Owned = (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>);

    fn inputs(n: usize, dk: usize, dv: usize, seed: u64) -> Owned {
        let mut q = noise(seed, n * dk);
        let mut k = noise(seed + 1, n * dk);
        l2(&mut q, dk);
        l2(&mut k, dk);
        let v = noise(seed + 2, n * dv);
        // decays from ~0.2 to ~1 per token, as the real models have
        let g: Vec<f32> = noise(seed + 3, n)
            .iter()
            .map(|r| -0.8 * (r + 1.0))
            .collect();
        let beta: Vec<f32> = noise(seed + 4, n).iter().map(|r| 0.5 + 0.5 * r).collect();
        (q, k, v, g, beta)
    }

    #[test]
    fn chunked_equals_recurrent_across_chunks_and_calls() {
        let (dk, dv) = (32, 24);
        for n in [1usize, 5, 63, 64, 65, 150] {
            let (q, k, v, g, beta) = inputs(n, dk, dv, n as u64);
            let x = HeadInputs {
                q: &q,
                k: &k,
                v: &v,
                g: &g,
                beta: &beta,
                d_k: dk,
                d_v: dv,
            };
            let s0 = noise(99, dk * dv);
            let (mut s_rec, mut s_chk) = (s0.clone(), s0.clone());
            let (mut o_rec, mut o_chk) = (vec![0f32; n * dv], vec![0f32; n * dv]);
            delta_rule_recurrent_with(Isa::best(), &x, &mut s_rec, &mut o_rec);
            delta_rule_chunked(Isa::best(), &x, &mut s_chk, &mut o_chk);
            let scale = o_rec.iter().fold(0f32, |m, v| m.max(v.abs())).max(1.0);
            let od = o_rec
                .iter()
                .zip(&o_chk)
                .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
            let sd = s_rec
                .iter()
                .zip(&s_chk)
                .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
            assert!(od <= 2e-5 * scale, "n={n}: outputs differ by {od}");
            assert!(sd <= 2e-5 * scale, "n={n}: states differ by {sd}");
        }
    }

    #[test]
    fn recurrent_matches_the_definition() {
        // One token from a zero state: S = β k vᵀ, o = β (q·k) v.
        let (q, k, v) = ([0.6f32, 0.8], [1.0f32, 0.0], [2.0f32, -1.0, 0.5]);
        let x = HeadInputs {
            q: &q,
            k: &k,
            v: &v,
            g: &[-0.5],
            beta: &[0.5],
            d_k: 2,
            d_v: 3,
        };
        let mut s = vec![0f32; 6];
        let mut o = vec![0f32; 3];
        delta_rule_recurrent_with(Isa::Scalar, &x, &mut s, &mut o);
        assert_eq!(s, vec![1.0, -0.5, 0.25, 0.0, 0.0, 0.0]);
        for (got, want) in o.iter().zip([0.6f32, -0.3, 0.15]) {
            assert!((got - want).abs() < 1e-6);
        }
    }
}
