//! NEON kernels for plain floats: f32 dot / axpy in the AVX2 path's order,
//! and F32/F16/BF16 rows widened exactly (little-endian bytes, any
//! alignment, any length: tails go element-wise through the scalar
//! conversions).
//!
//! All functions are `unsafe` with `#[target_feature]`: the caller must have
//! checked that the CPU has NEON (and FP16 for [`widen_f16`]).

use std::arch::aarch64::*;

use super::hsum4;

/// `acc[k] += a[j..j + 8] · b[j..j + 8]` (fused) over the whole chunks of 8
/// of `a` and `b` (`n` values each), as the x86 `dot_row`: 32 values per
/// step over the four accumulators, then the remaining chunks of 8 into the
/// first. Returns how many values it consumed (`n - n % 8`).
#[inline]
#[target_feature(enable = "neon")]
pub(super) unsafe fn fma_run(
    acc: &mut [[float32x4_t; 2]; 4],
    a: *const f32,
    b: *const f32,
    n: usize,
) -> usize {
    let mut i = 0;
    while i + 32 <= n {
        for (k, q) in acc.iter_mut().enumerate() {
            let j = i + 8 * k;
            q[0] = vfmaq_f32(q[0], vld1q_f32(a.add(j)), vld1q_f32(b.add(j)));
            q[1] = vfmaq_f32(q[1], vld1q_f32(a.add(j + 4)), vld1q_f32(b.add(j + 4)));
        }
        i += 32;
    }
    while i + 8 <= n {
        let q = &mut acc[0];
        q[0] = vfmaq_f32(q[0], vld1q_f32(a.add(i)), vld1q_f32(b.add(i)));
        q[1] = vfmaq_f32(q[1], vld1q_f32(a.add(i + 4)), vld1q_f32(b.add(i + 4)));
        i += 8;
    }
    i
}

#[target_feature(enable = "neon")]
pub(super) unsafe fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let n = a.len().min(b.len());
    let mut acc = [[vdupq_n_f32(0.0); 2]; 4];
    let done = fma_run(&mut acc, a.as_ptr(), b.as_ptr(), n);
    let mut s = hsum4(&acc);
    for (p, q) in a[done..n].iter().zip(&b[done..n]) {
        s += p * q;
    }
    s
}

#[target_feature(enable = "neon")]
pub(super) unsafe fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    debug_assert_eq!(x.len(), y.len());
    let n = x.len().min(y.len());
    let (xp, yp) = (x.as_ptr(), y.as_mut_ptr());
    let av = vdupq_n_f32(a);
    let mut i = 0;
    // Chunks of 8 and an unfused tail, as the AVX2 `axpy`: the same bits.
    while i + 8 <= n {
        for j in [i, i + 4] {
            vst1q_f32(
                yp.add(j),
                vfmaq_f32(vld1q_f32(yp.add(j)), av, vld1q_f32(xp.add(j))),
            );
        }
        i += 8;
    }
    while i < n {
        *yp.add(i) += a * *xp.add(i);
        i += 1;
    }
}

/// F32 rows: on a little-endian target the encoded bytes are the values.
#[cfg(target_endian = "little")]
#[target_feature(enable = "neon")]
pub(super) unsafe fn widen_f32(src: &[u8], dst: &mut [f32]) {
    debug_assert_eq!(src.len(), 4 * dst.len());
    let n = dst.len().min(src.len() / 4);
    std::ptr::copy_nonoverlapping(src.as_ptr(), dst.as_mut_ptr() as *mut u8, 4 * n);
}

/// BF16 is the top half of an f32: each 16-bit lane widened and shifted up.
#[cfg(target_endian = "little")]
#[target_feature(enable = "neon")]
pub(super) unsafe fn widen_bf16(src: &[u8], dst: &mut [f32]) {
    debug_assert_eq!(src.len(), 2 * dst.len());
    let n = dst.len().min(src.len() / 2);
    let (sp, dp) = (src.as_ptr(), dst.as_mut_ptr());
    let mut i = 0;
    while i + 8 <= n {
        let v = vreinterpretq_u16_u8(vld1q_u8(sp.add(2 * i)));
        let lo = vshlq_n_u32::<16>(vmovl_u16(vget_low_u16(v)));
        let hi = vshlq_n_u32::<16>(vmovl_u16(vget_high_u16(v)));
        vst1q_f32(dp.add(i), vreinterpretq_f32_u32(lo));
        vst1q_f32(dp.add(i + 4), vreinterpretq_f32_u32(hi));
        i += 8;
    }
    while i < n {
        let bits = u16::from_le_bytes([*sp.add(2 * i), *sp.add(2 * i + 1)]);
        *dp.add(i) = f32::from_bits((bits as u32) << 16);
        i += 1;
    }
}

/// F16 rows through `fcvtl`. Widening f16 to f32 is exact, and a NaN is
/// quieted with its payload kept, as the scalar `half` conversion does.
/// Enabled with FP16 as well as NEON: the dispatcher checks `fp16` at run
/// time and leaves F16 to the scalar decoder on CPUs without it.
#[cfg(target_endian = "little")]
#[target_feature(enable = "neon,fp16")]
pub(super) unsafe fn widen_f16(src: &[u8], dst: &mut [f32]) {
    debug_assert_eq!(src.len(), 2 * dst.len());
    let n = dst.len().min(src.len() / 2);
    let (sp, dp) = (src.as_ptr(), dst.as_mut_ptr());
    let mut i = 0;
    while i + 8 <= n {
        let v = vreinterpretq_u16_u8(vld1q_u8(sp.add(2 * i)));
        let lo = vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(v)));
        let hi = vcvt_f32_f16(vreinterpret_f16_u16(vget_high_u16(v)));
        vst1q_f32(dp.add(i), lo);
        vst1q_f32(dp.add(i + 4), hi);
        i += 8;
    }
    while i < n {
        *dp.add(i) = super::h2f(sp.add(2 * i));
        i += 1;
    }
}
