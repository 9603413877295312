//! NEON block decoders of the 32-element formats (and IQ4_XS, made of
//! them), plus the widening and scaling helpers that the K-quant decoders
//! (`k_blocks`) share.
//!
//! The values are bit-identical to the scalar decoders in `crate::quant`:
//! quants are widened exactly (u8/i8 → 16 → 32 bits → f32), sub-block
//! scales are the scalar decoder's own f32 products (`d * sc as f32`,
//! computed the same way), and each value is the same `d * q`, `d * q + m`
//! or `dl * q - ml` as separate multiply and add / subtract (NEON `fmul`
//! then `fadd` / `fsub`, never fused). Each decoder hands them to an
//! [`Emit`]ter 8 at a time in increasing element order (see `canon`).
//!
//! Every function is `unsafe`: callers must have checked the CPU, and pass
//! whole blocks (`src` exactly the encoded size of `dst`), as the `quant`
//! contract says. The helpers are `#[target_feature(enable = "neon")]`; the
//! block decoders are `#[inline(always)]` instead (the two cannot be
//! combined on stable Rust), because the canonical kernels call a decoder
//! once per interleaved row and LLVM would otherwise keep a big one (Q4_K)
//! out of line, with every accumulator passed through memory. Without the
//! attribute they still compile to NEON: it is part of every aarch64
//! target's baseline, so they only ever run inlined into NEON callers.

use std::arch::aarch64::*;

use super::canon::Emit;
use super::h2f;
use crate::quant::iq4::IQ4_NL_VALUES;
use crate::quant::mxfp4::{e8m0_to_f32_half, E2M1_DOUBLED};
use crate::quant::QK_K;

/// 16 unsigned bytes → 4 × 4 f32 (elements 0..4, 4..8, 8..12, 12..16), exact.
#[inline]
#[target_feature(enable = "neon")]
pub(super) unsafe fn u8x16_f32(v: uint8x16_t) -> [float32x4_t; 4] {
    let (lo, hi) = (vmovl_u8(vget_low_u8(v)), vmovl_u8(vget_high_u8(v)));
    [
        vcvtq_f32_u32(vmovl_u16(vget_low_u16(lo))),
        vcvtq_f32_u32(vmovl_u16(vget_high_u16(lo))),
        vcvtq_f32_u32(vmovl_u16(vget_low_u16(hi))),
        vcvtq_f32_u32(vmovl_u16(vget_high_u16(hi))),
    ]
}

/// 16 signed bytes → 4 × 4 f32, as [`u8x16_f32`].
#[inline]
#[target_feature(enable = "neon")]
pub(super) unsafe fn i8x16_f32(v: int8x16_t) -> [float32x4_t; 4] {
    let (lo, hi) = (vmovl_s8(vget_low_s8(v)), vmovl_s8(vget_high_s8(v)));
    [
        vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))),
        vcvtq_f32_s32(vmovl_s16(vget_high_s16(lo))),
        vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))),
        vcvtq_f32_s32(vmovl_s16(vget_high_s16(hi))),
    ]
}

/// The 16 bytes at `p` split into low nibbles (byte `j` → lane `j`) and
/// high nibbles: elements `j` and `j + 16` of the 32-element 4-bit formats.
#[inline]
#[target_feature(enable = "neon")]
pub(super) unsafe fn nibbles16(p: *const u8) -> (uint8x16_t, uint8x16_t) {
    let v = vld1q_u8(p);
    (vandq_u8(v, vdupq_n_u8(0x0F)), vshrq_n_u8::<4>(v))
}

/// Elements `off..off + 16` are the 4 vectors `v`, in order.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn emit16<E: Emit>(e: &mut E, off: usize, v: [float32x4_t; 4]) {
    e.put(off, [v[0], v[1]]);
    e.put(off + 8, [v[2], v[3]]);
}

/// Elements `off..off + 16` are `d * q` (the scalar `d * q as f32`).
#[inline]
#[target_feature(enable = "neon")]
pub(super) unsafe fn scaled16<E: Emit>(e: &mut E, off: usize, d: float32x4_t, q: [float32x4_t; 4]) {
    emit16(e, off, q.map(|v| vmulq_f32(d, v)));
}

/// Elements `off..off + 16` are `d * q + m`: multiply, then add (two roundings).
#[inline]
#[target_feature(enable = "neon")]
unsafe fn affine16<E: Emit>(
    e: &mut E,
    off: usize,
    d: float32x4_t,
    m: float32x4_t,
    q: [float32x4_t; 4],
) {
    emit16(e, off, q.map(|v| vaddq_f32(vmulq_f32(d, v), m)));
}

/// Elements `off..off + 16` are `dl * q - ml`: multiply, then subtract.
#[inline]
#[target_feature(enable = "neon")]
pub(super) unsafe fn scale_min16<E: Emit>(
    e: &mut E,
    off: usize,
    dl: float32x4_t,
    ml: float32x4_t,
    q: [float32x4_t; 4],
) {
    emit16(e, off, q.map(|v| vsubq_f32(vmulq_f32(dl, v), ml)));
}

/// The 32 fifth bits of a Q5_0 / Q5_1 block (bit `i` of the little-endian
/// `qh` is bit 4 of element `i`) as `0x10` / `0` bytes, for the low-nibble
/// (elements 0..16) and high-nibble (16..32) halves.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn fifth_bits(qh: *const u8) -> (uint8x16_t, uint8x16_t) {
    // Lane j tests bit j % 8 of the qh byte that holds element j's bit.
    const BIT: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
    let bit = vld1q_u8(BIT.as_ptr());
    let k16 = vdupq_n_u8(0x10);
    let spread = |i: usize| vcombine_u8(vdup_n_u8(*qh.add(i)), vdup_n_u8(*qh.add(i + 1)));
    (
        vandq_u8(vtstq_u8(spread(0), bit), k16),
        vandq_u8(vtstq_u8(spread(2), bit), k16),
    )
}

#[inline(always)]
unsafe fn q4_0<E: Emit>(b: *const u8, e: &mut E) {
    let d = vdupq_n_f32(h2f(b));
    let (lo, hi) = nibbles16(b.add(2));
    // q - 8 in i8 (-8..=7) is the scalar `q as i32 - 8`, exactly.
    let eight = vdupq_n_s8(8);
    let lo = vsubq_s8(vreinterpretq_s8_u8(lo), eight);
    let hi = vsubq_s8(vreinterpretq_s8_u8(hi), eight);
    scaled16(e, 0, d, i8x16_f32(lo));
    scaled16(e, 16, d, i8x16_f32(hi));
}

#[inline(always)]
unsafe fn q4_1<E: Emit>(b: *const u8, e: &mut E) {
    let (d, m) = (vdupq_n_f32(h2f(b)), vdupq_n_f32(h2f(b.add(2))));
    let (lo, hi) = nibbles16(b.add(4));
    affine16(e, 0, d, m, u8x16_f32(lo));
    affine16(e, 16, d, m, u8x16_f32(hi));
}

#[inline(always)]
unsafe fn q5_0<E: Emit>(b: *const u8, e: &mut E) {
    let d = vdupq_n_f32(h2f(b));
    let (lo, hi) = nibbles16(b.add(6));
    let (blo, bhi) = fifth_bits(b.add(2));
    // q - 16 in i8 (-16..=15) is the scalar `q as i32 - 16`, exactly.
    let k16 = vdupq_n_s8(16);
    let lo = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo, blo)), k16);
    let hi = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(hi, bhi)), k16);
    scaled16(e, 0, d, i8x16_f32(lo));
    scaled16(e, 16, d, i8x16_f32(hi));
}

#[inline(always)]
unsafe fn q5_1<E: Emit>(b: *const u8, e: &mut E) {
    let (d, m) = (vdupq_n_f32(h2f(b)), vdupq_n_f32(h2f(b.add(2))));
    let (lo, hi) = nibbles16(b.add(8));
    let (blo, bhi) = fifth_bits(b.add(4));
    affine16(e, 0, d, m, u8x16_f32(vorrq_u8(lo, blo)));
    affine16(e, 16, d, m, u8x16_f32(vorrq_u8(hi, bhi)));
}

#[inline(always)]
unsafe fn q8_0<E: Emit>(b: *const u8, e: &mut E) {
    let d = vdupq_n_f32(h2f(b));
    let qs = b.add(2) as *const i8;
    scaled16(e, 0, d, i8x16_f32(vld1q_s8(qs)));
    scaled16(e, 16, d, i8x16_f32(vld1q_s8(qs.add(16))));
}

/// Elements `off..off + 32` are table-coded (nibbles as Q4_0) at `qs`:
/// `d * level`.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn table32<E: Emit>(e: &mut E, off: usize, d: f32, table: int8x16_t, qs: *const u8) {
    let d = vdupq_n_f32(d);
    let (lo, hi) = nibbles16(qs);
    // Indices are < 16, so `tbl` never takes its out-of-range (zero) lane.
    scaled16(e, off, d, i8x16_f32(vqtbl1q_s8(table, lo)));
    scaled16(e, off + 16, d, i8x16_f32(vqtbl1q_s8(table, hi)));
}

#[inline(always)]
unsafe fn iq4_nl<E: Emit>(b: *const u8, e: &mut E) {
    table32(e, 0, h2f(b), vld1q_s8(IQ4_NL_VALUES.as_ptr()), b.add(2));
}

#[inline(always)]
unsafe fn mxfp4<E: Emit>(b: *const u8, e: &mut E) {
    let table = vld1q_s8(E2M1_DOUBLED.as_ptr());
    table32(e, 0, e8m0_to_f32_half(*b), table, b.add(1));
}

#[inline(always)]
unsafe fn iq4_xs<E: Emit>(b: *const u8, e: &mut E) {
    let d = h2f(b);
    let scales_h = u16::from_le_bytes([*b.add(2), *b.add(3)]);
    let table = vld1q_s8(IQ4_NL_VALUES.as_ptr());
    for ib in 0..8 {
        let low = (*b.add(4 + ib / 2) >> (4 * (ib % 2))) & 0x0F;
        let high = ((scales_h >> (2 * ib)) & 3) as u8;
        let ls = (low | (high << 4)) as i32 - 32;
        table32(e, 32 * ib, d * ls as f32, table, b.add(8 + 16 * ib));
    }
}

row_kernels! {
    q4_0: deq_q4_0, canon_q4_0, 18, 32;
    q4_1: deq_q4_1, canon_q4_1, 20, 32;
    q5_0: deq_q5_0, canon_q5_0, 22, 32;
    q5_1: deq_q5_1, canon_q5_1, 24, 32;
    q8_0: deq_q8_0, canon_q8_0, 34, 32;
    iq4_nl: deq_iq4_nl, canon_iq4_nl, 18, 32;
    iq4_xs: deq_iq4_xs, canon_iq4_xs, 136, QK_K;
    mxfp4: deq_mxfp4, canon_mxfp4, 17, 32;
}
