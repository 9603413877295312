//! Register-blocked microkernel of `matmul` on NEON: a tile of `R` weight
//! rows × `T` tokens of outputs, each output accumulated in the canonical
//! order of [`Isa::Avx2`](crate::simd::Isa) (see `crate::gemm`), so NEON and
//! AVX2 give the same bits:
//!
//! * one 8-lane accumulator per output, held as two `float32x4_t` (lanes
//!   0..4 and 4..8), starting at zero, `acc = fma(w[c..c+8], x[c..c+8], acc)`
//!   for every full chunk of 8 columns in order (`vfmaq_f32`: one rounding,
//!   as `_mm256_fmadd_ps`);
//! * the horizontal sum of the x86 `hsum` ([`hsum`]);
//! * the remaining `cols % 8` columns one by one, `s += w[c] * x[c]` (not fused).
//!
//! Every output of a tile is its own accumulator, so the tile shape never
//! changes a result: a token's outputs are the same alone (`T = 1`) as in
//! any tile of a batch.
//!
//! All functions are `unsafe` with `#[target_feature]`: callers must have
//! checked the CPU; `w` points at `R` rows and `x` at `T` tokens of `cols`
//! contiguous f32 each, and `out` holds at least `R · T` values.

// Index loops mirror the (row, token) tile they compute.
#![allow(clippy::needless_range_loop)]

use std::arch::aarch64::*;

use super::hsum;

/// Weight rows per tile ...
pub(crate) const MR: usize = 4;
/// ... and per one-token tile, whose outputs need more independent FMA chains.
pub(crate) const MR_1: usize = 8;
/// Tokens per tile: 4 × 3 outputs × 2 halves = 24 accumulators, plus 3 x
/// and 1 weight (one half of a chunk at a time) = 28 of the 32 registers.
pub(crate) const NR: usize = 3;

#[inline]
#[target_feature(enable = "neon")]
unsafe fn tile4<const R: usize, const T: usize>(
    w: *const f32,
    x: *const f32,
    cols: usize,
    out: &mut [f32],
) {
    let z = vdupq_n_f32(0.0);
    let mut acc = [[[z; 2]; T]; R];
    let full = cols - cols % 8;
    let mut c = 0;
    while c < full {
        // Lanes 0..4 of every output, then lanes 4..8: the halves never
        // mix before the horizontal sum, and half the x vectors are live.
        for h in 0..2 {
            let o = c + 4 * h;
            let mut xv = [z; T];
            for (t, v) in xv.iter_mut().enumerate() {
                *v = vld1q_f32(x.add(t * cols + o));
            }
            for r in 0..R {
                let wv = vld1q_f32(w.add(r * cols + o));
                for t in 0..T {
                    acc[r][t][h] = vfmaq_f32(acc[r][t][h], wv, xv[t]);
                }
            }
        }
        c += 8;
    }
    crate::simd::gemm_finish!(R, T, (w, x, cols, full, out), |r, t| {
        hsum(acc[r][t][0], acc[r][t][1])
    });
}

#[target_feature(enable = "neon")]
unsafe fn rows<const R: usize>(
    w: *const f32,
    x: *const f32,
    nt: usize,
    cols: usize,
    out: &mut [f32],
) {
    match nt {
        1 => tile4::<R, 1>(w, x, cols, out),
        2 => tile4::<R, 2>(w, x, cols, out),
        _ => tile4::<R, 3>(w, x, cols, out),
    }
}

/// `out[r·nt + t] = Σ_c w[r][c]·x[t][c]` for `r < nr`, `t < nt`, in the
/// canonical order of the AVX2 path.
///
/// # Safety
/// The CPU must have NEON; `1 ≤ nr ≤ MR` (or [`MR_1`] if `nt = 1`),
/// `1 ≤ nt ≤` [`NR`]; `w` holds `nr · cols` values, `x` holds `nt · cols`,
/// `out` at least `nr · nt`.
pub(crate) unsafe fn tile(
    w: &[f32],
    nr: usize,
    x: &[f32],
    nt: usize,
    cols: usize,
    out: &mut [f32],
) {
    debug_assert!(w.len() >= nr * cols && x.len() >= nt * cols && out.len() >= nr * nt);
    let (w, x) = (w.as_ptr(), x.as_ptr());
    if nt == 1 {
        debug_assert!((1..=MR_1).contains(&nr));
        return crate::simd::one_token_tile!(tile4, nr, (w, x, cols, out));
    }
    debug_assert!((1..=MR).contains(&nr) && (2..=NR).contains(&nt));
    crate::simd::by_rows!(rows, nr, (w, x, nt, cols, out))
}
