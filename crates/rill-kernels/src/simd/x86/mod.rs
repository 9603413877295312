//! x86-64 kernels: AVX2+FMA+F16C for every encoding, AVX-512 for the hottest.
//!
//! Every function here is `#[target_feature]` and `unsafe`: callers must have
//! checked (through [`Isa::check`](super::Isa)) that the CPU has the features.
//! The safe dispatchers at the bottom of this file are the only entry points;
//! they are reached only from `quant::*_with` / `ops::*_with` after that check.
//!
//! Decoders produce exactly the scalar decoder's f32 values (same widening,
//! same multiplies and subtracts, no fusing), so SIMD `dequantize` is
//! bit-identical to the scalar one. The fused dots may fuse the scale into an
//! FMA or factor a block scale out of the sum; they are tested against the
//! scalar path within a tolerance relative to `Σ|wᵢ·xᵢ|`.

use std::arch::x86_64::*;

use rill_dtype::DType;

mod avx2_blocks;
mod avx512;
mod float;
pub(crate) mod gemm;

/// Sum of the 8 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// Sum of four accumulators' lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn hsum4(a: &[__m256; 4]) -> f32 {
    hsum(_mm256_add_ps(
        _mm256_add_ps(a[0], a[1]),
        _mm256_add_ps(a[2], a[3]),
    ))
}

/// The little-endian f16 at `p`, widened (exactly) to f32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn h2f(p: *const u8) -> f32 {
    let bits = u16::from_le_bytes([*p, *p.add(1)]);
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
}

/// 8 unsigned bytes at `p` zero-extended to 8 × i32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn ld8u(p: *const u8) -> __m256i {
    _mm256_cvtepu8_epi32(_mm_loadl_epi64(p as *const __m128i))
}

/// 8 signed bytes at `p` sign-extended to 8 × i32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn ld8s(p: *const u8) -> __m256i {
    _mm256_cvtepi8_epi32(_mm_loadl_epi64(p as *const __m128i))
}

/// Fused decode + dot of one encoded row with `x`. `None`: no SIMD kernel.
///
/// # Safety
/// The CPU must support `isa` (AVX2+FMA+F16C, and AVX-512F/BW/VL for
/// [`Isa::Avx512`](super::Isa)); sizes must satisfy the `quant::dot` contract.
pub(crate) unsafe fn dot(avx512: bool, dtype: DType, row: &[u8], x: &[f32]) -> Option<f32> {
    use avx2_blocks as b;
    use DType::*;
    if avx512 {
        if let Some(v) = avx512::dot(dtype, row, x) {
            return Some(v);
        }
    }
    Some(match dtype {
        F32 => float::dot_f32_bytes(row, x),
        F16 => float::dot_f16(row, x),
        BF16 => float::dot_bf16(row, x),
        Q4_0 => b::dot_q4_0(row, x),
        Q4_1 => b::dot_q4_1(row, x),
        Q5_0 => b::dot_q5_0(row, x),
        Q5_1 => b::dot_q5_1(row, x),
        Q8_0 => b::dot_q8_0(row, x),
        Q2K => b::dot_q2_k(row, x),
        Q3K => b::dot_q3_k(row, x),
        Q4K => b::dot_q4_k(row, x),
        Q5K => b::dot_q5_k(row, x),
        Q6K => b::dot_q6_k(row, x),
        IQ4NL => b::dot_iq4_nl(row, x),
        IQ4XS => b::dot_iq4_xs(row, x),
        MXFP4 => b::dot_mxfp4(row, x),
        _ => return None,
    })
}

/// Decode whole blocks of `src` into `dst`. `false`: no SIMD kernel.
///
/// # Safety
/// As [`dot`], with the `quant::dequantize` contract.
pub(crate) unsafe fn dequantize(avx512: bool, dtype: DType, src: &[u8], dst: &mut [f32]) -> bool {
    use avx2_blocks as b;
    use DType::*;
    if avx512 && avx512::dequantize(dtype, src, dst) {
        return true;
    }
    match dtype {
        F32 => float::widen_f32(src, dst),
        F16 => float::widen_f16(src, dst),
        BF16 => float::widen_bf16(src, dst),
        Q4_0 => b::deq_q4_0(src, dst),
        Q4_1 => b::deq_q4_1(src, dst),
        Q5_0 => b::deq_q5_0(src, dst),
        Q5_1 => b::deq_q5_1(src, dst),
        Q8_0 => b::deq_q8_0(src, dst),
        Q2K => b::deq_q2_k(src, dst),
        Q3K => b::deq_q3_k(src, dst),
        Q4K => b::deq_q4_k(src, dst),
        Q5K => b::deq_q5_k(src, dst),
        Q6K => b::deq_q6_k(src, dst),
        IQ4NL => b::deq_iq4_nl(src, dst),
        IQ4XS => b::deq_iq4_xs(src, dst),
        MXFP4 => b::deq_mxfp4(src, dst),
        _ => return false,
    }
    true
}

/// f32 dot product.
///
/// # Safety
/// The CPU must have AVX2+FMA+F16C; `a.len() == b.len()`.
pub(crate) unsafe fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    float::dot_f32(a, b)
}

/// `y += a · x`.
///
/// # Safety
/// The CPU must have AVX2+FMA+F16C; `x.len() == y.len()`.
pub(crate) unsafe fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    float::axpy(a, x, y)
}
