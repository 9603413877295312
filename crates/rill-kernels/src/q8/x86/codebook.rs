//! The codebook encodings (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S,
//! IQ1_M) × 8-bit activations (K256 format, llama.cpp's Q8_K), in AVX2
//! instructions (every x86 class runs these).
//!
//! Per sub-block of 32 values the kernel assembles, from scalar table
//! reads, two vectors: the magnitudes of the 32 levels (unsigned, ≤ 62) and
//! a vector whose byte signs are the levels' signs (IQ2 / IQ3: ±1 from the
//! sign bits; IQ1: the levels `8g ± 1` themselves, never 0). `vpsignb` moves
//! the signs onto the activations, `vpmaddubsw` multiplies (pair sums ≤
//! 2·62·127 < 2¹⁵, exact) and `vpmaddwd` applies the odd sub-block scales
//! (per 16: ≤ 31; a block's |i| ≤ 256·62·127·31 < 2³¹). The term is the
//! reference's `((d·u)·d_x)·f(i)` (`q8::reference`, `quant::iq_grid`'s
//! integer view), in its 8 partials.
//!
//! The codebook rows are read one by one with general-register loads: the
//! tables (256–2048 entries) are far too large for `vpshufb`, and
//! `vpgatherqq` is microcoded on AMD Zen 1 / 2.

#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::avx2::{reduce_pairs_y, row_lanes_y, tree_y};
use super::{dx4, prefetch, Toks};
use crate::quant::iq_grid::{iq1m_d_bits, KSIGNS};
use crate::quant::iq_grids::{
    IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID,
};

/// The encodings by kernel parameter `K` (the kernel tables name them by
/// these numbers: `x86::TABLE_DTYPES`).
pub(super) const IQ2XXS: usize = 0;
pub(super) const IQ2XS: usize = 1;
pub(super) const IQ2S: usize = 2;
pub(super) const IQ3XXS: usize = 3;
pub(super) const IQ3S: usize = 4;
pub(super) const IQ1S: usize = 5;
pub(super) const IQ1M: usize = 6;

/// Block bytes, by `K`.
pub(in crate::q8::x86) const BLOCK: [usize; 7] = [66, 74, 82, 98, 110, 50, 56];
/// The power of two `u` of each encoding's integer view, by `K`.
pub(in crate::q8::x86) const UNIT: [f32; 7] = [0.125, 0.125, 0.125, 0.25, 1.0, 0.125, 0.125];

/// Eight sign bits as bytes: +1 where the bit is clear, −1 where set.
static SIGN_BYTES: [u64; 256] = {
    let mut t = [0u64; 256];
    let mut i = 0;
    while i < 256 {
        let mut v = 0u64;
        let mut j = 0;
        while j < 8 {
            let byte: u64 = if i & (1 << j) != 0 { 0xFF } else { 0x01 };
            v |= byte << (8 * j);
            j += 1;
        }
        t[i] = v;
        i += 1;
    }
    t
};

/// [`SIGN_BYTES`] of the seven-bit sign fields completed with their parity
/// ([`KSIGNS`]): one table read per 8 values instead of two dependent ones.
static PARITY_SIGN_BYTES: [u64; 128] = {
    let mut t = [0u64; 128];
    let mut i = 0;
    while i < 128 {
        t[i] = SIGN_BYTES[KSIGNS[i] as usize];
        i += 1;
    }
    t
};

/// IQ1's codebook as the levels `8g + 1` (the positive delta); a negative
/// delta takes 2 off each.
static IQ1_LEVELS: [u64; 2048] = {
    let mut t = [0u64; 2048];
    let mut i = 0;
    while i < 2048 {
        let mut v = 0u64;
        let mut j = 0;
        while j < 8 {
            let g = (IQ1S_GRID[i] >> (8 * j)) as u8 as i8;
            v |= ((8 * g + 1) as u8 as u64) << (8 * j);
            j += 1;
        }
        t[i] = v;
        i += 1;
    }
    t
};

#[inline(always)]
unsafe fn u16_at(p: *const u8) -> u16 {
    (p as *const u16).read_unaligned()
}

#[inline(always)]
unsafe fn u32_at(p: *const u8) -> u32 {
    (p as *const u32).read_unaligned()
}

#[inline(always)]
unsafe fn four(e: [u64; 4]) -> __m256i {
    _mm256_set_epi64x(e[3] as i64, e[2] as i64, e[1] as i64, e[0] as i64)
}

/// The i16 scale vector of a sub-block of 32: `lo` for its first 16
/// values (the low 128-bit lane after `vpmaddubsw`), `hi` for the rest.
#[inline(always)]
unsafe fn scale_pair((lo, hi): (u32, u32)) -> __m256i {
    _mm256_set_m128i(_mm_set1_epi16(hi as i16), _mm_set1_epi16(lo as i16))
}

/// Sub-block `j` (32 values) of the block at `blk`: the magnitudes of its
/// levels, a vector with their signs (`vpsignb(magnitudes, signs)` gives
/// the signed levels), and the scales of its two halves of 16.
#[inline(always)]
pub(in crate::q8::x86) unsafe fn sub32<const K: usize>(
    blk: *const u8,
    j: usize,
) -> (__m256i, __m256i, (u32, u32)) {
    let odd = |s: u32| 2 * s + 1;
    match K {
        IQ2XXS => {
            let at = blk.add(2 + 8 * j);
            let aux = u32_at(at.add(4));
            let g = |l: usize| IQ2XXS_GRID[*at.add(l) as usize];
            let s = |l: usize| PARITY_SIGN_BYTES[((aux >> (7 * l)) & 127) as usize];
            let sc = odd(aux >> 28);
            (
                four([g(0), g(1), g(2), g(3)]),
                four([s(0), s(1), s(2), s(3)]),
                (sc, sc),
            )
        }
        IQ2XS => {
            let q = |l: usize| u16_at(blk.add(2 + 8 * j + 2 * l));
            let g = |l: usize| IQ2XS_GRID[(q(l) & 511) as usize];
            let s = |l: usize| PARITY_SIGN_BYTES[(q(l) >> 9) as usize];
            let sc = *blk.add(66 + j) as u32;
            (
                four([g(0), g(1), g(2), g(3)]),
                four([s(0), s(1), s(2), s(3)]),
                (odd(sc & 15), odd(sc >> 4)),
            )
        }
        IQ2S => {
            let qh = *blk.add(66 + j) as usize;
            let g =
                |l: usize| IQ2S_GRID[*blk.add(2 + 4 * j + l) as usize | ((qh >> (2 * l)) & 3) << 8];
            let s = |l: usize| SIGN_BYTES[*blk.add(34 + 4 * j + l) as usize];
            let sc = *blk.add(74 + j) as u32;
            (
                four([g(0), g(1), g(2), g(3)]),
                four([s(0), s(1), s(2), s(3)]),
                (odd(sc & 15), odd(sc >> 4)),
            )
        }
        IQ3XXS => {
            let qs = blk.add(2 + 8 * j);
            let aux = u32_at(blk.add(66 + 4 * j));
            let g = |l: usize| {
                IQ3XXS_GRID[*qs.add(2 * l) as usize] as u64
                    | (IQ3XXS_GRID[*qs.add(2 * l + 1) as usize] as u64) << 32
            };
            let s = |l: usize| PARITY_SIGN_BYTES[((aux >> (7 * l)) & 127) as usize];
            let sc = odd(aux >> 28);
            (
                four([g(0), g(1), g(2), g(3)]),
                four([s(0), s(1), s(2), s(3)]),
                (sc, sc),
            )
        }
        IQ3S => {
            let qs = blk.add(2 + 8 * j);
            let qh = *blk.add(66 + j) as usize;
            let e = |q: usize| IQ3S_GRID[*qs.add(q) as usize | ((qh >> q) & 1) << 8] as u64;
            let g = |l: usize| e(2 * l) | e(2 * l + 1) << 32;
            let s = |l: usize| SIGN_BYTES[*blk.add(74 + 4 * j + l) as usize];
            let sc = odd(((*blk.add(106 + j / 2) >> (4 * (j % 2))) & 15) as u32);
            (
                four([g(0), g(1), g(2), g(3)]),
                four([s(0), s(1), s(2), s(3)]),
                (sc, sc),
            )
        }
        IQ1S => {
            let qh = u16_at(blk.add(34 + 2 * j)) as usize;
            let g = |l: usize| {
                IQ1_LEVELS[*blk.add(2 + 4 * j + l) as usize | ((qh >> (3 * l)) & 7) << 8]
            };
            let mut lv = four([g(0), g(1), g(2), g(3)]);
            if qh & 0x8000 != 0 {
                lv = _mm256_sub_epi8(lv, _mm256_set1_epi8(2));
            }
            let sc = odd(((qh >> 12) & 7) as u32);
            (_mm256_abs_epi8(lv), lv, (sc, sc))
        }
        _ => {
            // IQ1_M: a nibble of qh per 8 values (3 index bits, the delta's
            // sign in bit 3); 3-bit scales per 16 in the scale words.
            let nib = |l: usize| (*blk.add(32 + 2 * j + l / 2) >> (4 * (l % 2))) as usize & 15;
            let g = |l: usize| IQ1_LEVELS[*blk.add(4 * j + l) as usize | (nib(l) & 7) << 8];
            let neg = |l: usize| {
                if nib(l) & 8 != 0 {
                    0x0202_0202_0202_0202
                } else {
                    0
                }
            };
            let lv = _mm256_sub_epi8(
                four([g(0), g(1), g(2), g(3)]),
                four([neg(0), neg(1), neg(2), neg(3)]),
            );
            let word = u16_at(blk.add(48 + 2 * (j / 2))) as u32;
            let sc = |h: usize| odd((word >> (6 * (j % 2) + 3 * h)) & 7);
            (_mm256_abs_epi8(lv), lv, (sc(0), sc(1)))
        }
    }
}

/// The bits of the f16 `d` of the block at `blk`.
#[inline(always)]
pub(in crate::q8::x86) unsafe fn d_bits<const K: usize>(blk: *const u8) -> u16 {
    if K == IQ1M {
        iq1m_d_bits(std::slice::from_raw_parts(blk, 56))
    } else {
        u16_at(blk)
    }
}

/// The f16 `d` of `R` rows' blocks, row `r`'s in 32-bit lane `r` (as
/// `x86::halves`).
#[inline(always)]
unsafe fn d_halves<const R: usize, const K: usize>(blk: impl Fn(usize) -> *const u8) -> __m128i {
    let v = |r: usize| -> i32 {
        if r >= R {
            0
        } else {
            d_bits::<K>(blk(r)) as i32
        }
    };
    _mm_setr_epi32(v(0), v(1), v(2), v(3))
}

/// `R` rows × `T` tokens of encoding `K`.
#[inline(always)]
pub(super) unsafe fn codebook_y<const R: usize, const T: usize, const K: usize>(
    w: *const u8,
    rb: usize,
    x: &Toks,
    nb: usize,
) -> [f32; 16] {
    let z = _mm256_setzero_si256();
    let bb = BLOCK[K];
    let unit = _mm256_set1_ps(UNIT[K]);
    let mut p = [[_mm256_setzero_ps(); 2]; 8];
    for b in 0..nb {
        let blk = |r: usize| w.add(r * rb + b * bb);
        prefetch::<R>(w, b * bb, bb);
        let mut acc = [[z; T]; R];
        for r in 0..R {
            for j in 0..8 {
                let (mag, sgn, scales) = sub32::<K>(blk(r), j);
                let sv = scale_pair(scales);
                for t in 0..T {
                    let xv = _mm256_loadu_si256(x.qs[t].add(256 * b + 32 * j) as *const __m256i);
                    let u = _mm256_maddubs_epi16(mag, _mm256_sign_epi8(xv, sgn));
                    acc[r][t] = _mm256_add_epi32(acc[r][t], _mm256_madd_epi16(u, sv));
                }
            }
        }
        let i = reduce_pairs_y(&acc);
        let d = row_lanes_y(d_halves::<R, K>(blk), 0);
        let dx = _mm256_broadcast_ps(&dx4::<T>(x, b));
        for k in 0..2 {
            let du = _mm256_mul_ps(d[k], unit);
            let term = _mm256_mul_ps(_mm256_mul_ps(du, dx), _mm256_cvtepi32_ps(i[k]));
            p[b % 8][k] = _mm256_add_ps(p[b % 8][k], term);
        }
    }
    tree_y(&p)
}
