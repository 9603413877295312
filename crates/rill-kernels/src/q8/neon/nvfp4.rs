//! NVFP4 × 8-bit activations on NEON with the dot-product instructions: a
//! checkpoint's rows (E2M1 codes two a byte in value order, an E4M3 scale
//! per 16 values, a global scale) and GGUF's blocks (64 values: four
//! unsigned-E4M3 group scales, then per group of 16 its 8 code bytes, byte
//! `j` holding values `j` and `j + 8`).
//!
//! Per group of 16 the codes become the signed levels twice their E2M1
//! value (a table lookup, integers in −12..=12), one `sdot` pair takes them
//! against the activations, and the exact sum `i` (|i| ≤ 16·12·127) gives
//! the reference's term `(s · d_x) · f(i)` into `p[g mod 8]`, the tree, then
//! `global / 2` (GGUF: `1 / 2`): `reference::dot_nvfp4_ref` and
//! `dot_nvfp4_gguf_ref`, bit for bit.

use std::arch::aarch64::*;

use super::super::reference::sum_partials;
use super::sdot;
use crate::q8::ActRow;
use crate::quant::fp8::E4M3;
use crate::quant::mxfp4::E2M1_DOUBLED;
use crate::quant::nvfp4::ue4m3_to_f32;

/// The 16 signed levels of 8 code bytes of a checkpoint's group (byte `k`:
/// values `2k` and `2k + 1`), or of GGUF's (byte `j`: values `j`, `j + 8`).
#[inline(always)]
unsafe fn levels<const GGUF: bool>(codes: *const u8, lut: int8x16_t) -> int8x16_t {
    let b = vld1_u8(codes);
    let (lo, hi) = (vand_u8(b, vdup_n_u8(0x0F)), vshr_n_u8::<4>(b));
    let ordered = if GGUF {
        vcombine_u8(lo, hi)
    } else {
        vcombine_u8(vzip1_u8(lo, hi), vzip2_u8(lo, hi))
    };
    vqtbl1q_s8(lut, ordered)
}

/// Σ over the 16 values of a group: levels · activations, exactly.
#[inline(always)]
unsafe fn group_sum(lv: int8x16_t, x: *const i8) -> i32 {
    vaddvq_s32(sdot(vdupq_n_s32(0), lv, vld1q_s8(x)))
}

/// One row · one activation row. `GGUF`: `codes` is the row's blocks and
/// `scales` is unused; else `codes` the row's E2M1 bytes, `scales` its
/// E4M3 bytes. The caller checked that no scale is NaN (a checkpoint's
/// 0x7F / 0xFF).
///
/// # Safety
/// The CPU has NEON and the dot-product instructions; the row and `a`
/// hold `cols` values (whole groups of 16; GGUF: whole blocks of 64).
#[target_feature(enable = "neon,dotprod")]
pub(in crate::q8) unsafe fn dot<const GGUF: bool>(
    codes: &[u8],
    scales: &[u8],
    global: f32,
    a: ActRow<'_>,
    cols: usize,
) -> f32 {
    let lut = vld1q_s8(E2M1_DOUBLED.as_ptr());
    let mut p = [0f32; 8];
    for g in 0..cols / 16 {
        let (at, s) = if GGUF {
            let blk = codes.as_ptr().add(36 * (g / 4));
            (blk.add(4 + 8 * (g % 4)), ue4m3_to_f32(*blk.add(g % 4)))
        } else {
            (codes.as_ptr().add(8 * g), E4M3[scales[g] as usize])
        };
        let i = group_sum(levels::<GGUF>(at, lut), a.qs.as_ptr().add(16 * g));
        p[g % 8] += (s * a.d[g / 2]) * i as f32;
    }
    let half = if GGUF { 0.5 } else { global * 0.5 };
    sum_partials(&p) * half
}
