//! AVX2 kernels for plain floats: f32 dot / axpy, and F32/F16/BF16 rows
//! (little-endian bytes, any alignment, any length: tails go element-wise).
//!
//! All functions are `unsafe` with `#[target_feature]`: the caller must have
//! checked that the CPU has AVX2, FMA and F16C.

use std::arch::x86_64::*;

/// One row element type: how to load 8 elements as f32, and one element.
trait Elem {
    const BYTES: usize;
    unsafe fn load8(p: *const u8) -> __m256;
    unsafe fn load1(p: *const u8) -> f32;
}

struct F32;
struct F16;
struct Bf16;

impl Elem for F32 {
    const BYTES: usize = 4;
    #[inline(always)]
    unsafe fn load8(p: *const u8) -> __m256 {
        _mm256_loadu_ps(p as *const f32)
    }
    #[inline(always)]
    unsafe fn load1(p: *const u8) -> f32 {
        f32::from_le_bytes(*(p as *const [u8; 4]))
    }
}

impl Elem for F16 {
    const BYTES: usize = 2;
    #[inline(always)]
    unsafe fn load8(p: *const u8) -> __m256 {
        _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
    }
    #[inline(always)]
    unsafe fn load1(p: *const u8) -> f32 {
        super::h2f(p)
    }
}

impl Elem for Bf16 {
    const BYTES: usize = 2;
    #[inline(always)]
    unsafe fn load8(p: *const u8) -> __m256 {
        let w = _mm256_cvtepu16_epi32(_mm_loadu_si128(p as *const __m128i));
        _mm256_castsi256_ps(_mm256_slli_epi32(w, 16))
    }
    #[inline(always)]
    unsafe fn load1(p: *const u8) -> f32 {
        f32::from_bits((u16::from_le_bytes(*(p as *const [u8; 2])) as u32) << 16)
    }
}

/// `Σ row[i] · x[i]` over `x.len()` elements, 32 per iteration in four accumulators.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_row<E: Elem>(row: *const u8, x: &[f32]) -> f32 {
    let n = x.len();
    let xp = x.as_ptr();
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (k, a) in acc.iter_mut().enumerate() {
            let j = i + 8 * k;
            *a = _mm256_fmadd_ps(
                E::load8(row.add(j * E::BYTES)),
                _mm256_loadu_ps(xp.add(j)),
                *a,
            );
        }
        i += 32;
    }
    while i + 8 <= n {
        acc[0] = _mm256_fmadd_ps(
            E::load8(row.add(i * E::BYTES)),
            _mm256_loadu_ps(xp.add(i)),
            acc[0],
        );
        i += 8;
    }
    let mut s = super::hsum4(&acc);
    while i < n {
        s += E::load1(row.add(i * E::BYTES)) * x[i];
        i += 1;
    }
    s
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn widen<E: Elem>(src: *const u8, dst: &mut [f32]) {
    let n = dst.len();
    let dp = dst.as_mut_ptr();
    let mut i = 0;
    while i + 8 <= n {
        _mm256_storeu_ps(dp.add(i), E::load8(src.add(i * E::BYTES)));
        i += 8;
    }
    while i < n {
        *dp.add(i) = E::load1(src.add(i * E::BYTES));
        i += 1;
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot_f32_bytes(row: &[u8], x: &[f32]) -> f32 {
    debug_assert_eq!(row.len(), 4 * x.len());
    dot_row::<F32>(row.as_ptr(), x)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot_f16(row: &[u8], x: &[f32]) -> f32 {
    debug_assert_eq!(row.len(), 2 * x.len());
    dot_row::<F16>(row.as_ptr(), x)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot_bf16(row: &[u8], x: &[f32]) -> f32 {
    debug_assert_eq!(row.len(), 2 * x.len());
    dot_row::<Bf16>(row.as_ptr(), x)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn widen_f32(src: &[u8], dst: &mut [f32]) {
    debug_assert_eq!(src.len(), 4 * dst.len());
    widen::<F32>(src.as_ptr(), dst)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn widen_f16(src: &[u8], dst: &mut [f32]) {
    debug_assert_eq!(src.len(), 2 * dst.len());
    widen::<F16>(src.as_ptr(), dst)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn widen_bf16(src: &[u8], dst: &mut [f32]) {
    debug_assert_eq!(src.len(), 2 * dst.len());
    widen::<Bf16>(src.as_ptr(), dst)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    dot_row::<F32>(a.as_ptr() as *const u8, b)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    debug_assert_eq!(x.len(), y.len());
    let n = x.len().min(y.len());
    let (xp, yp) = (x.as_ptr(), y.as_mut_ptr());
    let av = _mm256_set1_ps(a);
    let mut i = 0;
    while i + 8 <= n {
        let v = _mm256_fmadd_ps(av, _mm256_loadu_ps(xp.add(i)), _mm256_loadu_ps(yp.add(i)));
        _mm256_storeu_ps(yp.add(i), v);
        i += 8;
    }
    while i < n {
        *yp.add(i) += a * *xp.add(i);
        i += 1;
    }
}
