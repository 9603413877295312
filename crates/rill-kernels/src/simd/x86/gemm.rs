//! Register-blocked microkernels of `matmul`: a tile of `R` weight rows ×
//! `T` tokens of outputs, each output accumulated in the canonical order of
//! its [`Isa`](crate::simd::Isa) (see `crate::gemm`):
//!
//! * one vector accumulator per output (8 lanes for AVX2, 16 for AVX-512),
//!   starting at zero, `acc = fma(w[c..c+L], x[c..c+L], acc)` for every full
//!   chunk of `L` columns in order;
//! * a fixed horizontal sum ([`hsum`]; AVX-512 first adds its upper 256 bits
//!   onto the lower ones);
//! * the remaining `cols % L` columns one by one, `s += w[c] * x[c]` (not fused).
//!
//! Every output of a tile is its own accumulator, so the tile shape (how many
//! rows and tokens share the loads) never changes a result: a token's outputs
//! are the same alone (`T = 1`) as in any tile of a batch.
//!
//! All functions are `unsafe` with `#[target_feature]`: callers must have
//! checked the CPU; `w` points at `R` rows and `x` at `T` tokens of `cols`
//! contiguous f32 each, and `out` holds at least `R · T` values.

// Index loops mirror the (row, token) tile they compute.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::hsum;

/// Weight rows per tile (both paths) ...
pub(crate) const MR: usize = 4;
/// ... and per one-token tile, whose outputs need more independent FMA chains.
pub(crate) const MR_1: usize = 8;
/// Tokens per AVX-512 tile: 4 × 6 accumulators + 4 weights + 1 x = 29 zmm.
pub(crate) const NR_512: usize = 6;
/// Tokens per AVX2 tile: 4 × 3 accumulators + 3 x + 1 weight = 16 ymm.
pub(crate) const NR_256: usize = 3;

/// The 16 lanes summed: upper 8 onto lower 8, then [`hsum`].
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
pub(super) unsafe fn hsum512(v: __m512) -> f32 {
    let lo = _mm512_castps512_ps256(v);
    let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    hsum(_mm256_add_ps(lo, hi))
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn tile512<const R: usize, const T: usize>(
    w: *const f32,
    x: *const f32,
    cols: usize,
    out: &mut [f32],
) {
    let mut acc = [[_mm512_setzero_ps(); T]; R];
    let full = cols - cols % 16;
    let mut c = 0;
    while c < full {
        let mut wv = [_mm512_setzero_ps(); R];
        for (r, v) in wv.iter_mut().enumerate() {
            *v = _mm512_loadu_ps(w.add(r * cols + c));
        }
        for t in 0..T {
            let xv = _mm512_loadu_ps(x.add(t * cols + c));
            for r in 0..R {
                acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
            }
        }
        c += 16;
    }
    crate::simd::gemm_finish!(R, T, (w, x, cols, full, out), |r, t| hsum512(acc[r][t]));
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile256<const R: usize, const T: usize>(
    w: *const f32,
    x: *const f32,
    cols: usize,
    out: &mut [f32],
) {
    let mut acc = [[_mm256_setzero_ps(); T]; R];
    let full = cols - cols % 8;
    let mut c = 0;
    while c < full {
        let mut xv = [_mm256_setzero_ps(); T];
        for (t, v) in xv.iter_mut().enumerate() {
            *v = _mm256_loadu_ps(x.add(t * cols + c));
        }
        for r in 0..R {
            let wv = _mm256_loadu_ps(w.add(r * cols + c));
            for t in 0..T {
                acc[r][t] = _mm256_fmadd_ps(wv, xv[t], acc[r][t]);
            }
        }
        c += 8;
    }
    crate::simd::gemm_finish!(R, T, (w, x, cols, full, out), |r, t| hsum(acc[r][t]));
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn rows512<const R: usize>(
    w: *const f32,
    x: *const f32,
    nt: usize,
    cols: usize,
    out: &mut [f32],
) {
    match nt {
        1 => tile512::<R, 1>(w, x, cols, out),
        2 => tile512::<R, 2>(w, x, cols, out),
        3 => tile512::<R, 3>(w, x, cols, out),
        4 => tile512::<R, 4>(w, x, cols, out),
        5 => tile512::<R, 5>(w, x, cols, out),
        _ => tile512::<R, 6>(w, x, cols, out),
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn rows256<const R: usize>(
    w: *const f32,
    x: *const f32,
    nt: usize,
    cols: usize,
    out: &mut [f32],
) {
    match nt {
        1 => tile256::<R, 1>(w, x, cols, out),
        2 => tile256::<R, 2>(w, x, cols, out),
        _ => tile256::<R, 3>(w, x, cols, out),
    }
}

/// `out[r·nt + t] = Σ_c w[r][c]·x[t][c]` for `r < nr`, `t < nt`, in the
/// canonical order of the AVX-512 path (`avx512`) or the AVX2 one.
///
/// # Safety
/// The CPU must have AVX2+FMA+F16C (and AVX-512F/BW/VL for `avx512`);
/// `1 ≤ nr ≤ MR` (or [`MR_1`] if `nt = 1`), `1 ≤ nt ≤` [`NR_512`] /
/// [`NR_256`]; `w` holds `nr · cols`
/// values, `x` holds `nt · cols`, `out` at least `nr · nt`.
pub(crate) unsafe fn tile(
    avx512: bool,
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
        return if avx512 {
            crate::simd::one_token_tile!(tile512, nr, (w, x, cols, out))
        } else {
            crate::simd::one_token_tile!(tile256, nr, (w, x, cols, out))
        };
    }
    debug_assert!((1..=MR).contains(&nr));
    if avx512 {
        debug_assert!((2..=NR_512).contains(&nt));
        crate::simd::by_rows!(rows512, nr, (w, x, nt, cols, out))
    } else {
        debug_assert!((2..=NR_256).contains(&nt));
        crate::simd::by_rows!(rows256, nr, (w, x, nt, cols, out))
    }
}
