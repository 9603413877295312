//! The NEON view of the 32-value encodings that the Q8_0-shaped kernel
//! runs (`super::q80_body`): each block widened in registers to its 32
//! quants as signed bytes and its scale as f32, by encoding `NIB` (see
//! `groups::NIB_DTYPES`); and IQ4_XS, whose 256-value blocks of 4-bit
//! level indices take signed 6-bit scales per 32.
//!
//! The integers are the reference's (`q8::reference`): signed levels for
//! Q4_0 (index − 8), IQ4_NL (its table), MXFP4 (twice the E2M1 level) and
//! Q5_0 (5-bit quant − 16); the unsigned quants of Q4_1 / Q5_1 (≤ 31, so
//! also non-negative i8), whose mins act on the activations' sums apart.

use std::arch::aarch64::*;

use super::super::groups::{quants_at, NIB_DTYPES};
use super::{dot32, dx4, prefetch, reduce4, term, tree_rows, Toks};
use crate::quant::iq4::IQ4_NL_VALUES;
use crate::simd::neon::h2f;

/// The 16 signed levels of encoding `NIB` for `tbl` (zero for the
/// encodings without a level table: Q8_0, Q5_0, Q4_1, Q5_1).
#[inline(always)]
pub(super) unsafe fn level_table<const NIB: usize>() -> int8x16_t {
    match crate::q8::reference::nibble_levels(NIB_DTYPES[NIB]) {
        Some(t) => vld1q_s8(t.as_ptr()),
        None => vdupq_n_s8(0),
    }
}

/// Where a block of encoding `NIB` keeps its 32 fifth bits (Q5_0, Q5_1).
const fn fifth_bits_at(nib: usize) -> usize {
    if nib == 6 {
        4
    } else {
        2
    }
}

/// Bit `i` of the little-endian u32 at `qh` as byte `i` of two masks
/// (all ones where it is set): elements 0..16 and 16..32.
#[inline(always)]
unsafe fn fifth_bits(qh: *const u8) -> [uint8x16_t; 2] {
    let bits = vcombine_u8(
        vcreate_u8((qh as *const u32).read_unaligned() as u64),
        vdup_n_u8(0),
    );
    let c = |b: [u8; 16]| vld1q_u8(b.as_ptr());
    let each = c([1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128]);
    let spread = |lo: u8| {
        let (a, b) = (lo, lo + 1);
        vqtbl1q_u8(bits, c([a, a, a, a, a, a, a, a, b, b, b, b, b, b, b, b]))
    };
    [vtstq_u8(spread(0), each), vtstq_u8(spread(2), each)]
}

/// The 32 quants of the block at `blk` of encoding `NIB` in element order
/// (`levels` from [`level_table`]): Q8_0's own; the levels of a 4-bit
/// index block (byte `j` holds element `j` in its low nibble and `j + 16`
/// in its high one); Q5_0's 5-bit quant − 16; Q4_1 / Q5_1's unsigned
/// quants.
#[inline(always)]
pub(super) unsafe fn quants<const NIB: usize>(blk: *const u8, levels: int8x16_t) -> [int8x16_t; 2] {
    if NIB == 0 {
        return [
            vld1q_s8(blk.add(2) as *const i8),
            vld1q_s8(blk.add(18) as *const i8),
        ];
    }
    let q = vld1q_u8(blk.add(quants_at(NIB)));
    let nib = [vandq_u8(q, vdupq_n_u8(0x0F)), vshrq_n_u8::<4>(q)];
    // (Plain arrays, not `map` closures: those would lose the target
    // features and call the intrinsics.)
    match NIB {
        // Q5_0: the nibble where bit 4 is set, else the nibble − 16.
        4 => {
            let set = fifth_bits(blk.add(fifth_bits_at(NIB)));
            let low = vdupq_n_u8(0xF0);
            [
                vreinterpretq_s8_u8(vorrq_u8(nib[0], vbicq_u8(low, set[0]))),
                vreinterpretq_s8_u8(vorrq_u8(nib[1], vbicq_u8(low, set[1]))),
            ]
        }
        5 => [vreinterpretq_s8_u8(nib[0]), vreinterpretq_s8_u8(nib[1])],
        6 => {
            let set = fifth_bits(blk.add(fifth_bits_at(NIB)));
            let b4 = vdupq_n_u8(0x10);
            [
                vreinterpretq_s8_u8(vorrq_u8(nib[0], vandq_u8(set[0], b4))),
                vreinterpretq_s8_u8(vorrq_u8(nib[1], vandq_u8(set[1], b4))),
            ]
        }
        _ => [vqtbl1q_s8(levels, nib[0]), vqtbl1q_s8(levels, nib[1])],
    }
}

/// The scale of the block at `blk` of encoding `NIB` as f32: its f16, or
/// (MXFP4) half its E8M0 byte, as the reference takes it.
#[inline(always)]
pub(super) unsafe fn block_scale<const NIB: usize>(blk: *const u8) -> f32 {
    if NIB == 3 {
        crate::quant::mxfp4::e8m0_to_f32_half(*blk)
    } else {
        h2f(blk)
    }
}

/// The min of a Q4_1 / Q5_1 block at `blk` as f32 (0 for the others).
#[inline(always)]
pub(super) unsafe fn block_min<const NIB: usize>(blk: *const u8) -> f32 {
    if NIB >= 5 {
        h2f(blk.add(2))
    } else {
        0.0
    }
}

/// IQ4_XS sub-block `j`'s signed 6-bit scale (−32..=31) of the block at
/// `blk`.
#[inline(always)]
pub(super) unsafe fn iq4xs_scale(blk: *const u8, j: usize) -> i32 {
    let high = (blk.add(2) as *const u16).read_unaligned();
    let low = (*blk.add(4 + j / 2) >> (4 * (j % 2))) & 0x0F;
    (low | ((((high >> (2 * j)) & 3) as u8) << 4)) as i32 - 32
}

/// IQ4_XS (136-byte blocks of 256): per 32-value sub-block `j`, the levels
/// of its 16 index bytes (low nibbles: elements 0..16, high: 16..32)
/// against the activations, times `ls_j`, summed exactly (|i| ≤
/// 256·127·127·32 < 2³¹); then `(d·d_x)·f(i)` per token lane, as Q4_K's
/// kernel (`super::kmin`) shapes it.
#[inline(always)]
pub(super) unsafe fn iq4xs_body<const R: usize, const T: usize>(
    w: *const u8,
    rb: usize,
    x: &Toks,
    nb: usize,
) -> [f32; 16] {
    const BLOCK: usize = 136;
    let levels = vld1q_s8(IQ4_NL_VALUES.as_ptr());
    let nib = vdupq_n_u8(0x0F);
    let mut p = [[vdupq_n_f32(0.0); R]; 8];
    for b in 0..nb {
        let blk = |r: usize| w.add(r * rb + b * BLOCK);
        prefetch::<R>(w, rb, b * BLOCK, BLOCK);
        let dx = dx4::<T>(x, b);
        for r in 0..R {
            let mut acc = [vdupq_n_s32(0); T];
            for j in 0..8 {
                let q = vld1q_u8(blk(r).add(8 + 16 * j));
                let wv = [
                    vqtbl1q_s8(levels, vandq_u8(q, nib)),
                    vqtbl1q_s8(levels, vshrq_n_u8::<4>(q)),
                ];
                let ls = iq4xs_scale(blk(r), j);
                for t in 0..T {
                    let d = dot32(wv, x.qs[t].add(256 * b + 32 * j));
                    acc[t] = vmlaq_n_s32(acc[t], d, ls);
                }
            }
            let i = reduce4(&acc);
            p[b % 8][r] = vaddq_f32(p[b % 8][r], term(h2f(blk(r)), dx, i));
        }
    }
    tree_rows(&p)
}
