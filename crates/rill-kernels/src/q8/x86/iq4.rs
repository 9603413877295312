//! IQ4_XS × 8-bit activations (K256 format, llama.cpp's Q8_K), AVX2 and
//! AVX-512 (VNNI's `vpdpwssd` when `VNNI`).
//!
//! A block's 256 weights are 4-bit indices into the 16 signed IQ4_NL levels
//! `L` (one `vpshufb` turns a vector of indices into levels), in 8
//! sub-blocks of 32 with signed 6-bit scales `ls`. The integers are
//! `i = Σ_j ls_j·Σ_{k∈j} L_k·q_k`, exact: `vpmaddubsw` takes `|L|` (≤ 127,
//! unsigned) and `q` with `L`'s sign (|q| ≤ 127), so each pair sum is at
//! most 2·127·127 < 2¹⁵; `vpmaddwd` with `ls` (|ls| ≤ 32) then adds pairs of
//! those into i32, and `|i| ≤ 256·127·127·32 < 2³¹`. The term is
//! `(d·d_x)·f(i)`, the reference's, in its 8 partials.
//!
//! Sub-block `j` stores element `e < 16` in the low nibble of byte `e` of
//! its 16 and element `16 + e` in the high nibble.

#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::avx2::{reduce_pairs_y, row_lanes_y, tree_y};
use super::avx512::{dot16, reduce_pairs, row_lanes_z, tree_z};
use super::{dx4, halves, prefetch, Toks};
use crate::quant::iq4::IQ4_NL_VALUES;

const BLOCK: usize = 136;

/// The 8 signed sub-block scales of the block at `blk`, as i16.
#[inline(always)]
unsafe fn scales(blk: *const u8) -> [i16; 8] {
    let high = (blk.add(2) as *const u16).read_unaligned();
    let low = |j: usize| (*blk.add(4 + j / 2) >> (4 * (j % 2))) & 0x0F;
    let mut ls = [0i16; 8];
    for j in 0..8 {
        ls[j] = (low(j) | ((((high >> (2 * j)) & 3) as u8) << 4)) as i16 - 32;
    }
    ls
}

#[inline(always)]
unsafe fn level_table() -> __m128i {
    _mm_loadu_si128(IQ4_NL_VALUES.as_ptr() as *const __m128i)
}

/// The magnitudes of the levels (indices 0..=7 are the negative ones).
static ABS_LEVELS: [u8; 16] = {
    let mut a = [0u8; 16];
    let mut i = 0;
    while i < 16 {
        a[i] = IQ4_NL_VALUES[i].unsigned_abs();
        i += 1;
    }
    a
};

/// AVX-512: per 64-value chunk `c` (sub-blocks 2c, 2c+1), the 32 index bytes
/// go to 128-bit lanes `[low, high]` nibbles of sub-block 2c's 16, then of
/// 2c+1's: the activations' own order. A level's magnitude comes from its
/// own table and its sign from its index (below 8: negative).
#[inline(always)]
pub(super) unsafe fn iq4xs_z<const R: usize, const T: usize, const VNNI: bool>(
    w: *const u8,
    rb: usize,
    x: &Toks,
    nb: usize,
) -> [f32; 16] {
    let z = _mm512_setzero_si512();
    let nib = _mm512_set1_epi8(0x0F);
    let eight = _mm512_set1_epi8(8);
    let mags = _mm512_broadcast_i32x4(_mm_loadu_si128(ABS_LEVELS.as_ptr() as *const __m128i));
    // lanes 1 and 3 take the high nibbles
    let shift = _mm512_mask_blend_epi64(0xCC, z, _mm512_set1_epi16(4));
    let mut p = [_mm512_setzero_ps(); 8];
    for b in 0..nb {
        let blk = |r: usize| w.add(r * rb + b * BLOCK);
        prefetch::<R>(w, b * BLOCK, BLOCK);
        let ls: [[i16; 8]; R] = arr!(R, |r| scales(blk(r)));
        let mut acc = [[z; T]; R];
        // Chunk by chunk, all rows: the live vectors are the accumulators,
        // one chunk of each token and one row's weights (as `kmin_dots_z`).
        for c in 0..4 {
            let xv: [__m512i; T] = arr!(T, |t| _mm512_loadu_si512(
                x.qs[t].add(256 * b + 64 * c) as *const _
            ));
            for r in 0..R {
                let q = _mm512_castsi256_si512(_mm256_loadu_si256(
                    blk(r).add(8 + 32 * c) as *const __m256i
                ));
                let idx = _mm512_and_si512(
                    _mm512_srlv_epi16(_mm512_shuffle_i64x2::<0x50>(q, q), shift),
                    nib,
                );
                let la = _mm512_shuffle_epi8(mags, idx);
                let neg = _mm512_testn_epi8_mask(idx, eight);
                let sv = _mm512_mask_blend_epi64(
                    0xF0,
                    _mm512_set1_epi16(ls[r][2 * c]),
                    _mm512_set1_epi16(ls[r][2 * c + 1]),
                );
                for t in 0..T {
                    let xs = _mm512_mask_sub_epi8(xv[t], neg, z, xv[t]);
                    acc[r][t] = dot16::<VNNI>(acc[r][t], _mm512_maddubs_epi16(la, xs), sv);
                }
            }
        }
        let i = reduce_pairs(&acc);
        let d = row_lanes_z(halves::<R>(blk, false), 0);
        let dx = _mm512_broadcast_f32x4(dx4::<T>(x, b));
        let term = _mm512_mul_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(i));
        p[b % 8] = _mm512_add_ps(p[b % 8], term);
    }
    tree_z(&p)
}

/// AVX2: one sub-block per 32-value vector, its low nibbles in the low
/// 128-bit lane and its high nibbles in the high one.
#[inline(always)]
pub(super) unsafe fn iq4xs_y<const R: usize, const T: usize>(
    w: *const u8,
    rb: usize,
    x: &Toks,
    nb: usize,
) -> [f32; 16] {
    let z = _mm256_setzero_si256();
    let nib = _mm256_set1_epi8(0x0F);
    let levels = _mm256_broadcastsi128_si256(level_table());
    let mut p = [[_mm256_setzero_ps(); 2]; 8];
    for b in 0..nb {
        let blk = |r: usize| w.add(r * rb + b * BLOCK);
        prefetch::<R>(w, b * BLOCK, BLOCK);
        let mut acc = [[z; T]; R];
        for r in 0..R {
            let ls = scales(blk(r));
            for j in 0..8 {
                let q = _mm_loadu_si128(blk(r).add(8 + 16 * j) as *const __m128i);
                let idx = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16::<4>(q), q), nib);
                let lv = _mm256_shuffle_epi8(levels, idx);
                let la = _mm256_abs_epi8(lv);
                let sv = _mm256_set1_epi16(ls[j]);
                for t in 0..T {
                    let xv = _mm256_loadu_si256(x.qs[t].add(256 * b + 32 * j) as *const __m256i);
                    let u = _mm256_maddubs_epi16(la, _mm256_sign_epi8(xv, lv));
                    acc[r][t] = _mm256_add_epi32(acc[r][t], _mm256_madd_epi16(u, sv));
                }
            }
        }
        let i = reduce_pairs_y(&acc);
        let d = row_lanes_y(halves::<R>(blk, false), 0);
        let dx = _mm256_broadcast_ps(&dx4::<T>(x, b));
        for k in 0..2 {
            let term = _mm256_mul_ps(_mm256_mul_ps(d[k], dx), _mm256_cvtepi32_ps(i[k]));
            p[b % 8][k] = _mm256_add_ps(p[b % 8][k], term);
        }
    }
    tree_y(&p)
}
