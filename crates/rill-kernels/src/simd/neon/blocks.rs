//! NEON block decoders, bit-identical to the scalar decoders in
//! `crate::quant`: quants are widened exactly (u8/i8 → 16 → 32 bits →
//! f32), sub-block scales are the scalar decoder's own f32 products
//! (`d * sc as f32`, computed the same way), and each value is the same
//! `d * q`, `d * q + m` or `dl * q - ml` as separate multiply and add /
//! subtract (NEON `fmul` then `fadd` / `fsub`, never fused), in the same
//! element order.
//!
//! Every function is `unsafe` with `#[target_feature(enable = "neon")]`:
//! callers must have checked the CPU, and pass whole blocks (`src` exactly
//! the encoded size of `dst`), as the `quant` contract says.

use std::arch::aarch64::*;

use super::h2f;
use crate::quant::iq4::IQ4_NL_VALUES;
use crate::quant::k_quants::scale_min_k4;
use crate::quant::mxfp4::{e8m0_to_f32_half, E2M1_DOUBLED};
use crate::quant::QK_K;

/// 16 unsigned bytes → 4 × 4 f32 (elements 0..4, 4..8, 8..12, 12..16), exact.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn u8x16_f32(v: uint8x16_t) -> [float32x4_t; 4] {
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
unsafe fn i8x16_f32(v: int8x16_t) -> [float32x4_t; 4] {
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
unsafe fn nibbles16(p: *const u8) -> (uint8x16_t, uint8x16_t) {
    let v = vld1q_u8(p);
    (vandq_u8(v, vdupq_n_u8(0x0F)), vshrq_n_u8::<4>(v))
}

/// Elements `out[0..16] = d * q` (the scalar `d * q as f32`).
#[inline]
#[target_feature(enable = "neon")]
unsafe fn scaled16(out: *mut f32, d: float32x4_t, q: [float32x4_t; 4]) {
    for (k, v) in q.into_iter().enumerate() {
        vst1q_f32(out.add(4 * k), vmulq_f32(d, v));
    }
}

/// Elements `out[0..16] = d * q + m`: multiply, then add (two roundings).
#[inline]
#[target_feature(enable = "neon")]
unsafe fn affine16(out: *mut f32, d: float32x4_t, m: float32x4_t, q: [float32x4_t; 4]) {
    for (k, v) in q.into_iter().enumerate() {
        vst1q_f32(out.add(4 * k), vaddq_f32(vmulq_f32(d, v), m));
    }
}

/// Elements `out[0..16] = dl * q - ml`: multiply, then subtract.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn scale_min16(out: *mut f32, dl: float32x4_t, ml: float32x4_t, q: [float32x4_t; 4]) {
    for (k, v) in q.into_iter().enumerate() {
        vst1q_f32(out.add(4 * k), vsubq_f32(vmulq_f32(dl, v), ml));
    }
}

#[inline]
#[target_feature(enable = "neon")]
unsafe fn q4_0(b: *const u8, out: *mut f32) {
    let d = vdupq_n_f32(h2f(b));
    let (lo, hi) = nibbles16(b.add(2));
    // q - 8 in i8 (-8..=7) is the scalar `q as i32 - 8`, exactly.
    let eight = vdupq_n_s8(8);
    let lo = vsubq_s8(vreinterpretq_s8_u8(lo), eight);
    let hi = vsubq_s8(vreinterpretq_s8_u8(hi), eight);
    scaled16(out, d, i8x16_f32(lo));
    scaled16(out.add(16), d, i8x16_f32(hi));
}

#[inline]
#[target_feature(enable = "neon")]
unsafe fn q4_1(b: *const u8, out: *mut f32) {
    let (d, m) = (vdupq_n_f32(h2f(b)), vdupq_n_f32(h2f(b.add(2))));
    let (lo, hi) = nibbles16(b.add(4));
    affine16(out, d, m, u8x16_f32(lo));
    affine16(out.add(16), d, m, u8x16_f32(hi));
}

#[inline]
#[target_feature(enable = "neon")]
unsafe fn q8_0(b: *const u8, out: *mut f32) {
    let d = vdupq_n_f32(h2f(b));
    let qs = b.add(2) as *const i8;
    scaled16(out, d, i8x16_f32(vld1q_s8(qs)));
    scaled16(out.add(16), d, i8x16_f32(vld1q_s8(qs.add(16))));
}

/// 32 table-coded elements (nibbles as Q4_0) at `qs`: `out = d * level`.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn table32(out: *mut f32, d: f32, table: int8x16_t, qs: *const u8) {
    let d = vdupq_n_f32(d);
    let (lo, hi) = nibbles16(qs);
    // Indices are < 16, so `tbl` never takes its out-of-range (zero) lane.
    scaled16(out, d, i8x16_f32(vqtbl1q_s8(table, lo)));
    scaled16(out.add(16), d, i8x16_f32(vqtbl1q_s8(table, hi)));
}

#[inline]
#[target_feature(enable = "neon")]
unsafe fn iq4_nl(b: *const u8, out: *mut f32) {
    table32(out, h2f(b), vld1q_s8(IQ4_NL_VALUES.as_ptr()), b.add(2));
}

#[inline]
#[target_feature(enable = "neon")]
unsafe fn mxfp4(b: *const u8, out: *mut f32) {
    table32(
        out,
        e8m0_to_f32_half(*b),
        vld1q_s8(E2M1_DOUBLED.as_ptr()),
        b.add(1),
    );
}

#[inline]
#[target_feature(enable = "neon")]
unsafe fn iq4_xs(b: *const u8, out: *mut f32) {
    let d = h2f(b);
    let scales_h = u16::from_le_bytes([*b.add(2), *b.add(3)]);
    let table = vld1q_s8(IQ4_NL_VALUES.as_ptr());
    for ib in 0..8 {
        let low = (*b.add(4 + ib / 2) >> (4 * (ib % 2))) & 0x0F;
        let high = ((scales_h >> (2 * ib)) & 3) as u8;
        let ls = (low | (high << 4)) as i32 - 32;
        table32(out.add(32 * ib), d * ls as f32, table, b.add(8 + 16 * ib));
    }
}

/// The `d · scale` and `dmin · min` of sub-block `g` of a Q4_K/Q5_K block
/// whose 12 scale bytes are at `s`, as the scalar decoder forms them.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn k4_scale(d: f32, dmin: f32, s: &[u8; 12], g: usize) -> (float32x4_t, float32x4_t) {
    let (sc, m) = scale_min_k4(s, g);
    (vdupq_n_f32(d * sc as f32), vdupq_n_f32(dmin * m as f32))
}

#[inline]
#[target_feature(enable = "neon")]
unsafe fn q4_k(b: *const u8, out: *mut f32) {
    let (d, dmin) = (h2f(b), h2f(b.add(2)));
    let scales = &*(b.add(4) as *const [u8; 12]);
    let qs = b.add(16);
    // 32-byte run c: low nibbles are sub-block 2c (elements 64c..64c+32),
    // high nibbles sub-block 2c+1 (the next 32).
    for c in 0..4 {
        let (dl0, ml0) = k4_scale(d, dmin, scales, 2 * c);
        let (dl1, ml1) = k4_scale(d, dmin, scales, 2 * c + 1);
        for h in 0..2 {
            let (lo, hi) = nibbles16(qs.add(32 * c + 16 * h));
            scale_min16(out.add(64 * c + 16 * h), dl0, ml0, u8x16_f32(lo));
            scale_min16(out.add(64 * c + 32 + 16 * h), dl1, ml1, u8x16_f32(hi));
        }
    }
}

#[inline]
#[target_feature(enable = "neon")]
unsafe fn q5_k(b: *const u8, out: *mut f32) {
    let (d, dmin) = (h2f(b), h2f(b.add(2)));
    let scales = &*(b.add(4) as *const [u8; 12]);
    // qh[l] holds the fifth bit of element 32g + l in bit g.
    let qh = [vld1q_u8(b.add(16)), vld1q_u8(b.add(32))];
    let qs = b.add(48);
    let k16 = vdupq_n_u8(0x10);
    // 0x10 in the lanes whose byte has bit g set.
    let fifth = |h: usize, g: usize| vandq_u8(vtstq_u8(qh[h], vdupq_n_u8(1 << g)), k16);
    for c in 0..4 {
        let (g0, g1) = (2 * c, 2 * c + 1);
        let (dl0, ml0) = k4_scale(d, dmin, scales, g0);
        let (dl1, ml1) = k4_scale(d, dmin, scales, g1);
        for h in 0..2 {
            let (lo, hi) = nibbles16(qs.add(32 * c + 16 * h));
            let lo = vorrq_u8(lo, fifth(h, g0));
            let hi = vorrq_u8(hi, fifth(h, g1));
            scale_min16(out.add(64 * c + 16 * h), dl0, ml0, u8x16_f32(lo));
            scale_min16(out.add(64 * c + 32 + 16 * h), dl1, ml1, u8x16_f32(hi));
        }
    }
}

#[inline]
#[target_feature(enable = "neon")]
unsafe fn q6_k(b: *const u8, out: *mut f32) {
    let d = h2f(b.add(208));
    let scales = b.add(192) as *const i8;
    let (m15, three, k32) = (vdupq_n_u8(0x0F), vdupq_n_u8(3), vdupq_n_s8(32));
    for h in 0..2 {
        let ql = b.add(64 * h);
        let qh = b.add(128 + 32 * h);
        // Slice j (32 elements) of this half: low nibbles of ql[0..32]
        // (j = 0) or ql[32..64] (j = 1), then their high nibbles; bits
        // 2j..2j+2 of qh[0..32] on top. Sub-block s is its 16-element half.
        for j in 0..4 {
            // A negative count makes `ushl` shift right.
            let down = vdupq_n_s8(-(2 * j as i8));
            for s in 0..2 {
                let l = vld1q_u8(ql.add(32 * (j % 2) + 16 * s));
                let lo = if j < 2 {
                    vandq_u8(l, m15)
                } else {
                    vshrq_n_u8::<4>(l)
                };
                let hb = vandq_u8(vshlq_u8(vld1q_u8(qh.add(16 * s)), down), three);
                // 6-bit q (0..64) minus 32 fits i8: the scalar `q as i8 - 32`.
                let q = vorrq_u8(lo, vshlq_n_u8::<4>(hb));
                let q = vsubq_s8(vreinterpretq_s8_u8(q), k32);
                let sc = *scales.add(8 * h + 2 * j + s);
                let dl = vdupq_n_f32(d * sc as f32);
                scaled16(out.add(128 * h + 32 * j + 16 * s), dl, i8x16_f32(q));
            }
        }
    }
}

/// `deq_NAME(src, dst)` over whole blocks of one encoding.
macro_rules! row_decoders {
    ($($block:ident: $deq:ident, $bb:expr, $bl:expr;)*) => {$(
        #[target_feature(enable = "neon")]
        pub(super) unsafe fn $deq(src: &[u8], dst: &mut [f32]) {
            let n = dst.len() / $bl;
            debug_assert_eq!(src.len(), n * $bb);
            let (sp, dp) = (src.as_ptr(), dst.as_mut_ptr());
            for i in 0..n {
                $block(sp.add(i * $bb), dp.add(i * $bl));
            }
        }
    )*};
}

row_decoders! {
    q4_0: deq_q4_0, 18, 32;
    q4_1: deq_q4_1, 20, 32;
    q8_0: deq_q8_0, 34, 32;
    q4_k: deq_q4_k, 144, QK_K;
    q5_k: deq_q5_k, 176, QK_K;
    q6_k: deq_q6_k, 210, QK_K;
    iq4_nl: deq_iq4_nl, 18, 32;
    iq4_xs: deq_iq4_xs, 136, QK_K;
    mxfp4: deq_mxfp4, 17, 32;
}
