//! NEON block decoders of the K-quants (256 elements per block), exact as
//! those of `blocks` (whose helpers they use): the same widening, the
//! scalar decoder's own f32 sub-block scales, separate multiply and add /
//! subtract. Each emits its values 8 at a time in increasing element order,
//! which for Q4_K / Q5_K means the low nibbles of a 32-byte run (one
//! sub-block) before its high nibbles (the next one).
//!
//! Every function is `unsafe`: callers must have checked the CPU and pass
//! whole blocks. The block decoders are `#[inline(always)]` rather than
//! `#[target_feature]`, for the reason given in `blocks`.

use std::arch::aarch64::*;

use super::blocks::{i8x16_f32, nibbles16, scale_min16, scaled16, u8x16_f32};
use super::canon::Emit;
use super::h2f;
use crate::quant::k_quants::{q3_k_scales, scale_min_k4};
use crate::quant::QK_K;

/// Bits `2j..2j + 2` of each byte of `v` (the quant of slice `j` in the
/// Q2_K / Q3_K / Q6_K layouts). A negative count makes `ushl` shift right.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn crumb(v: uint8x16_t, j: usize) -> uint8x16_t {
    vandq_u8(vshlq_u8(v, vdupq_n_s8(-2 * j as i8)), vdupq_n_u8(3))
}

#[inline(always)]
unsafe fn q2_k<E: Emit>(b: *const u8, e: &mut E) {
    let (d, dmin) = (h2f(b.add(80)), h2f(b.add(82)));
    for h in 0..2 {
        let qs = b.add(16 + 32 * h);
        let raw = [vld1q_u8(qs), vld1q_u8(qs.add(16))];
        // Slice j: elements 128h + 32j .. + 32 are bits 2j..2j+2 of the 32
        // bytes; sub-block g is its 16-element half s.
        for j in 0..4 {
            for (s, &r) in raw.iter().enumerate() {
                let g = 8 * h + 2 * j + s;
                let sc = *b.add(g);
                let dl = vdupq_n_f32(d * (sc & 0x0F) as f32);
                let ml = vdupq_n_f32(dmin * (sc >> 4) as f32);
                scale_min16(e, 16 * g, dl, ml, u8x16_f32(crumb(r, j)));
            }
        }
    }
}

#[inline(always)]
unsafe fn q3_k<E: Emit>(b: *const u8, e: &mut E) {
    let scales = q3_k_scales(&*(b.add(96) as *const [u8; 12]));
    let d = h2f(b.add(108));
    let hm = [vld1q_u8(b), vld1q_u8(b.add(16))];
    let four = vdupq_n_u8(4);
    for h in 0..2 {
        let qs = b.add(32 + 32 * h);
        let raw = [vld1q_u8(qs), vld1q_u8(qs.add(16))];
        // As Q2_K, plus bit 4h + j of hmask as the high bit.
        for j in 0..4 {
            let hbit = vdupq_n_u8(1 << (4 * h + j));
            for s in 0..2 {
                let g = 8 * h + 2 * j + s;
                // A set high bit adds 4 to low - 4: q in -4..=3, in i8 the
                // scalar `low - sub` exactly.
                let high = vandq_u8(vtstq_u8(hm[s], hbit), four);
                let q = vorrq_u8(crumb(raw[s], j), high);
                let q = vsubq_s8(vreinterpretq_s8_u8(q), vreinterpretq_s8_u8(four));
                let dl = vdupq_n_f32(d * scales[g] as f32);
                scaled16(e, 16 * g, dl, i8x16_f32(q));
            }
        }
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

#[inline(always)]
unsafe fn q4_k<E: Emit>(b: *const u8, e: &mut E) {
    let (d, dmin) = (h2f(b), h2f(b.add(2)));
    let scales = &*(b.add(4) as *const [u8; 12]);
    let qs = b.add(16);
    // 32-byte run c: low nibbles are sub-block 2c (elements 64c..64c+32),
    // high nibbles sub-block 2c+1 (the next 32) — emitted in that order.
    for c in 0..4 {
        let (dl0, ml0) = k4_scale(d, dmin, scales, 2 * c);
        let (dl1, ml1) = k4_scale(d, dmin, scales, 2 * c + 1);
        let n = [nibbles16(qs.add(32 * c)), nibbles16(qs.add(32 * c + 16))];
        for (h, &(lo, _)) in n.iter().enumerate() {
            scale_min16(e, 64 * c + 16 * h, dl0, ml0, u8x16_f32(lo));
        }
        for (h, &(_, hi)) in n.iter().enumerate() {
            scale_min16(e, 64 * c + 32 + 16 * h, dl1, ml1, u8x16_f32(hi));
        }
    }
}

#[inline(always)]
unsafe fn q5_k<E: Emit>(b: *const u8, e: &mut E) {
    let (d, dmin) = (h2f(b), h2f(b.add(2)));
    let scales = &*(b.add(4) as *const [u8; 12]);
    // qh[l] holds the fifth bit of element 32g + l in bit g.
    let qh = [vld1q_u8(b.add(16)), vld1q_u8(b.add(32))];
    let qs = b.add(48);
    let k16 = vdupq_n_u8(0x10);
    // 0x10 in the lanes whose byte has bit g set.
    let fifth = |h: usize, g: usize| vandq_u8(vtstq_u8(qh[h], vdupq_n_u8(1 << g)), k16);
    // As Q4_K, low nibbles (sub-block 2c) before high ones (2c + 1).
    for c in 0..4 {
        let (g0, g1) = (2 * c, 2 * c + 1);
        let (dl0, ml0) = k4_scale(d, dmin, scales, g0);
        let (dl1, ml1) = k4_scale(d, dmin, scales, g1);
        let n = [nibbles16(qs.add(32 * c)), nibbles16(qs.add(32 * c + 16))];
        for (h, &(lo, _)) in n.iter().enumerate() {
            let lo = vorrq_u8(lo, fifth(h, g0));
            scale_min16(e, 64 * c + 16 * h, dl0, ml0, u8x16_f32(lo));
        }
        for (h, &(_, hi)) in n.iter().enumerate() {
            let hi = vorrq_u8(hi, fifth(h, g1));
            scale_min16(e, 64 * c + 32 + 16 * h, dl1, ml1, u8x16_f32(hi));
        }
    }
}

#[inline(always)]
unsafe fn q6_k<E: Emit>(b: *const u8, e: &mut E) {
    let d = h2f(b.add(208));
    let scales = b.add(192) as *const i8;
    let (m15, k32) = (vdupq_n_u8(0x0F), vdupq_n_s8(32));
    for h in 0..2 {
        let ql = b.add(64 * h);
        let qh = b.add(128 + 32 * h);
        // Slice j (32 elements) of this half: low nibbles of ql[0..32]
        // (j = 0) or ql[32..64] (j = 1), then their high nibbles; bits
        // 2j..2j+2 of qh[0..32] on top. Sub-block s is its 16-element half.
        for j in 0..4 {
            for s in 0..2 {
                let l = vld1q_u8(ql.add(32 * (j % 2) + 16 * s));
                let lo = if j < 2 {
                    vandq_u8(l, m15)
                } else {
                    vshrq_n_u8::<4>(l)
                };
                let hb = crumb(vld1q_u8(qh.add(16 * s)), j);
                // 6-bit q (0..64) minus 32 fits i8: the scalar `q as i8 - 32`.
                let q = vorrq_u8(lo, vshlq_n_u8::<4>(hb));
                let q = vsubq_s8(vreinterpretq_s8_u8(q), k32);
                let sc = *scales.add(8 * h + 2 * j + s);
                let dl = vdupq_n_f32(d * sc as f32);
                scaled16(e, 128 * h + 32 * j + 16 * s, dl, i8x16_f32(q));
            }
        }
    }
}

row_kernels! {
    q2_k: deq_q2_k, canon_q2_k, 84, QK_K;
    q3_k: deq_q3_k, canon_q3_k, 110, QK_K;
    q4_k: deq_q4_k, canon_q4_k, 144, QK_K;
    q5_k: deq_q5_k, canon_q5_k, 176, QK_K;
    q6_k: deq_q6_k, canon_q6_k, 210, QK_K;
}
