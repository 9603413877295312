//! AVX2 row panels of NVFP4 (8 rows), GGUF's blocks and a checkpoint's codes
//! with their E4M3 scales apart alike: the codebook panels' plan
//! (`super::codebook`) with a float scale per 16 values. The 4-row kernels
//! of NVFP4 (`x86::nvfp4`) fold every 128 values of every token with three
//! `vphaddw`, which made its prefill about half as fast as the Q4_K panel's.
//!
//! Per block of 64: per 4-value group `k` the 8 rows' signed levels (twice
//! the E2M1 value) and their magnitudes (16 vectors of each), then per
//! group of 16 the rows' scales as f32 (`quant::nvfp4::ue4m3_to_f32`, exact,
//! 0x7F and 0xFF included). A token costs per 4-value group one `vpsignb`
//! and one `vpmaddubsw`, added in i16 over the 16 values (4 · 2 · 12 · 127
//! = 12192 < 2¹⁵), then one `vpmaddwd` by ones: each lane holds its row's
//! `i_g` of the reference (`q8::reference::dot_nvfp4_gguf_ref`), and the
//! tail is its term `(s_g · d_x) · f(i_g)` into `p[g mod 8]`, lane by lane:
//! the reference's bits. A checkpoint's rows (`reference::dot_nvfp4_ref`:
//! codes two a byte in value order, signed E4M3 scales, a global scale)
//! pack into the same panel, 64 values a block; their tree is multiplied by
//! `global / 2` by the caller, as the reference does.

#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::ymm::{bcast, finish, transpose8, Partials};
use super::{Res, Toks8};
use crate::q8::x86::{nvfp4_decode32, nvfp4_decode32_checkpoint};
use crate::quant::fp8::E4M3;
use crate::quant::nvfp4::ue4m3_to_f32;

/// Rows of a panel.
const ROWS: usize = 8;
/// Source block bytes.
const BLOCK: usize = 36;
/// Panel bytes per block: 16 groups × (levels, magnitudes), 4 f32 scale
/// vectors.
pub(super) const BYTES: usize = 16 * 64 + 4 * 32;
const SCALES: usize = 16 * 64;

/// Rewrite 8 rows (`rb` bytes apart, `nb` blocks each) as a panel at `dst`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn pack(w: *const u8, rb: usize, nb: usize, dst: *mut u8) {
    let blk = |r: usize, b: usize| w.add(r * rb + BLOCK * b);
    write_blocks(
        nb,
        dst,
        |r, b, u| nvfp4_decode32(blk(r, b).add(4 + 16 * u)).0,
        |r, b, g| ue4m3_to_f32(*blk(r, b).add(g)),
    );
}

/// Rewrite 8 rows of a checkpoint's NVFP4 as a panel at `dst`: `codes` the
/// first row's codes (`rb` bytes apart), `scales` its E4M3 scales (`sb`
/// bytes apart), `nb` blocks of 64 values. Its scale bytes must not be NaN
/// (the caller checks).
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn pack_checkpoint(
    codes: *const u8,
    rb: usize,
    scales: *const u8,
    sb: usize,
    nb: usize,
    dst: *mut u8,
) {
    write_blocks(
        nb,
        dst,
        |r, b, u| nvfp4_decode32_checkpoint(codes.add(r * rb + 32 * b + 16 * u)).0,
        |r, b, g| E4M3[*scales.add(r * sb + 4 * b + g) as usize],
    );
}

/// The panel's blocks at `dst`: per block `b`, the 8 rows' signed levels
/// of its halves `u` of 32 values (`levels(r, b, u)`, value order) as
/// 4-value groups with their magnitudes, then the rows' 4 group scales
/// (`scale(r, b, g)`) as f32 vectors.
#[inline(always)]
unsafe fn write_blocks(
    nb: usize,
    dst: *mut u8,
    levels: impl Fn(usize, usize, usize) -> __m256i,
    scale: impl Fn(usize, usize, usize) -> f32,
) {
    for b in 0..nb {
        let pb = dst.add(b * BYTES);
        for u in 0..2 {
            let v: [__m256i; ROWS] = std::array::from_fn(|r| levels(r, b, u));
            let t = transpose8(v);
            for k in 0..8 {
                let at = pb.add(64 * (8 * u + k));
                _mm256_storeu_si256(at as *mut __m256i, t[k]);
                _mm256_storeu_si256(at.add(32) as *mut __m256i, _mm256_abs_epi8(t[k]));
            }
        }
        for g in 0..4 {
            let s: [f32; ROWS] = std::array::from_fn(|r| scale(r, b, g));
            _mm256_storeu_ps(
                pb.add(SCALES + 32 * g) as *mut f32,
                _mm256_loadu_ps(s.as_ptr()),
            );
        }
    }
}

/// The panel at `panel` (`nb` blocks) × `T` tokens: lanes 0..8 of result
/// `t` are the 8 rows' outputs for token `t` (GGUF's: its tree halved).
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn panel<const T: usize>(panel: *const u8, nb: usize, x: &Toks8, out: &mut Res) {
    // The scales' halving (the levels are doubled), after the tree.
    tree::<T>(panel, nb, x, out);
    for row in out.iter_mut().take(T) {
        row[..ROWS].iter_mut().for_each(|v| *v *= 0.5);
    }
}

/// The checkpoint's panel: the tree alone (the caller multiplies it by
/// `global / 2`).
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn panel_checkpoint<const T: usize>(
    panel: *const u8,
    nb: usize,
    x: &Toks8,
    out: &mut Res,
) {
    tree::<T>(panel, nb, x, out)
}

/// The canonical tree of every row and token, before the final scale.
#[inline(always)]
unsafe fn tree<const T: usize>(panel: *const u8, nb: usize, x: &Toks8, out: &mut Res) {
    let (z, ones) = (_mm256_setzero_si256(), _mm256_set1_epi16(1));
    let mut p = Partials::<T>::new();
    for b in 0..nb {
        let pb = panel.add(b * BYTES);
        for g in 0..4 {
            let mut s16 = [z; T];
            for kk in 0..4 {
                let k = 4 * g + kk;
                let wv = _mm256_loadu_si256(pb.add(64 * k) as *const __m256i);
                let wa = _mm256_loadu_si256(pb.add(64 * k + 32) as *const __m256i);
                for t in 0..T {
                    let xs = _mm256_sign_epi8(bcast(x.qs[t].add(64 * b + 4 * k)), wv);
                    s16[t] = _mm256_add_epi16(s16[t], _mm256_maddubs_epi16(wa, xs));
                }
            }
            let s = _mm256_loadu_ps(pb.add(SCALES + 32 * g) as *const f32);
            let gi = 4 * b + g;
            for t in 0..T {
                let i = _mm256_madd_epi16(s16[t], ones);
                let dx = _mm256_set1_ps(*x.d[t].add(gi / 2));
                let term = _mm256_mul_ps(_mm256_mul_ps(s, dx), _mm256_cvtepi32_ps(i));
                p.add(t, gi, term);
            }
        }
    }
    finish(p.done(4 * nb), out)
}
