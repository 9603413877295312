//! AVX2 row panels of the codebook encodings (IQ2_XXS, IQ2_XS, IQ2_S,
//! IQ3_XXS, IQ3_S, IQ1_S, IQ1_M), 8 rows: the IQ4_XS panel's plan with a
//! scale per 16 values. Packing reads each row's codebook entries once
//! (`x86::codebook::sub32`) for every token of the batch; the 4-row
//! kernels read them again for each group of 4 tokens, which made prefill
//! slower than the exact path's decode-once f32 products.
//!
//! Per block: per 4-value group `k` the 8 rows' signed levels and their
//! magnitudes (64 vectors of each), per 16 values the rows' `(s, s)` i16
//! scale pairs, then `d·u` as f32 (exact: `u` is a power of two). A token
//! costs per group one `vpsignb` and one `vpmaddubsw` (pair sums ≤
//! 2·62·127), added in i16 over 2 or 4 groups ([`body`]), then one
//! `vpmaddwd` with the scales: the integers are the reference's
//! `Σ_j s_j·Σ L·q`, and the tail `(d·u·d_x)·f(i)` its term.

#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::ymm::{bcast, finish, pair_of, transpose8, Partials};
use super::{Res, Toks8};
use crate::q8::x86::codebook::{d_bits, sub32, BLOCK, UNIT};

/// Rows of a panel.
const ROWS: usize = 8;

/// Panel bytes per block: 64 groups × (levels, magnitudes), 16 scale
/// vectors, 8 f32 `d·u`.
pub(super) const BYTES: usize = 64 * 64 + 16 * 32 + 32;
const SCALES: usize = 64 * 64;
const D: usize = SCALES + 16 * 32;

/// Rewrite 8 rows (`rb` bytes apart, `nb` blocks of encoding `K` each) as a
/// panel at `dst`.
#[inline(always)]
unsafe fn pack<const K: usize>(w: *const u8, rb: usize, nb: usize, dst: *mut u8) {
    for b in 0..nb {
        let pb = dst.add(b * BYTES);
        let blk = |r: usize| w.add(r * rb + BLOCK[K] * b);
        let mut sc = [[0i32; 16]; ROWS];
        for u in 0..8 {
            let mut v = [_mm256_setzero_si256(); ROWS];
            for r in 0..ROWS {
                let (mag, sgn, (lo, hi)) = sub32::<K>(blk(r), u);
                v[r] = _mm256_sign_epi8(mag, sgn);
                sc[r][2 * u] = lo as i32;
                sc[r][2 * u + 1] = hi as i32;
            }
            let t = transpose8(v);
            for k in 0..8 {
                let at = pb.add(64 * (8 * u + k));
                _mm256_storeu_si256(at as *mut __m256i, t[k]);
                _mm256_storeu_si256(at.add(32) as *mut __m256i, _mm256_abs_epi8(t[k]));
            }
        }
        for h in 0..2 {
            let a: [__m256i; ROWS] = std::array::from_fn(|r| {
                _mm256_loadu_si256(sc[r][8 * h..].as_ptr() as *const __m256i)
            });
            let o = transpose8(a);
            for j in 0..8 {
                let at = pb.add(SCALES + 32 * (8 * h + j));
                _mm256_storeu_si256(at as *mut __m256i, pair_of(o[j]));
            }
        }
        let bits: [u16; ROWS] = std::array::from_fn(|r| d_bits::<K>(blk(r)));
        let d = _mm256_cvtph_ps(_mm_loadu_si128(bits.as_ptr() as *const __m128i));
        let du = _mm256_mul_ps(d, _mm256_set1_ps(UNIT[K]));
        _mm256_storeu_ps(pb.add(D) as *mut f32, du);
    }
}

/// The panel at `panel` (`nb` blocks) × `T` tokens. The `vpmaddubsw` pair
/// sums of `CHAIN` consecutive groups of a 16-value sub-block (one scale)
/// are added in i16 before the one `vpmaddwd`: exact while `CHAIN · 2 ·
/// max|L| · 127` stays below 2¹⁵ — 2 groups for levels up to 62 (IQ2,
/// IQ3_XXS: 31496), 4 for levels up to 15 (IQ3_S, IQ1: 15240).
#[inline(always)]
unsafe fn body<const T: usize, const CHAIN: usize>(
    panel: *const u8,
    nb: usize,
    x: &Toks8,
    out: &mut Res,
) {
    let z = _mm256_setzero_si256();
    let mut p = Partials::<T>::new();
    for b in 0..nb {
        let pb = panel.add(b * BYTES);
        let mut acc = [z; T];
        for j in 0..16 {
            let sc = _mm256_loadu_si256(pb.add(SCALES + 32 * j) as *const __m256i);
            for c in 0..4 / CHAIN {
                let mut s16 = [z; T];
                for kk in 0..CHAIN {
                    let k = 4 * j + CHAIN * c + kk;
                    let wv = _mm256_loadu_si256(pb.add(64 * k) as *const __m256i);
                    let wa = _mm256_loadu_si256(pb.add(64 * k + 32) as *const __m256i);
                    for t in 0..T {
                        let xs = _mm256_sign_epi8(bcast(x.qs[t].add(256 * b + 4 * k)), wv);
                        s16[t] = _mm256_add_epi16(s16[t], _mm256_maddubs_epi16(wa, xs));
                    }
                }
                for t in 0..T {
                    acc[t] = _mm256_add_epi32(acc[t], _mm256_madd_epi16(s16[t], sc));
                }
            }
        }
        p.add_scaled(b, _mm256_loadu_ps(pb.add(D) as *const f32), x, &acc);
    }
    finish(p.done(nb), out)
}

/// The panel kernels: levels up to 62 (IQ2, IQ3_XXS), up to 15 (IQ3_S, IQ1).
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn panel_wide<const T: usize>(
    panel: *const u8,
    nb: usize,
    x: &Toks8,
    out: &mut Res,
) {
    body::<T, 2>(panel, nb, x, out)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn panel_narrow<const T: usize>(
    panel: *const u8,
    nb: usize,
    x: &Toks8,
    out: &mut Res,
) {
    body::<T, 4>(panel, nb, x, out)
}

/// The packer of encoding `K` (the kernel numbers of `x86::codebook`).
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn packer<const K: usize>(w: *const u8, rb: usize, nb: usize, dst: *mut u8) {
    pack::<K>(w, rb, nb, dst)
}
