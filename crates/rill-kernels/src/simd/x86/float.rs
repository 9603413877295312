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

/// `dst[c·ld + r]` = element `c` of row `r` (rows `stride` bytes apart),
/// for `r < rows`, `c < cols`: widened and transposed in 8 × 8 blocks in
/// registers, so no f32 copy of the rows is written and read back (the
/// attention's key tiles: a 64 KiB detour through L2 per tile before).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn widen_transposed<E: Elem>(
    src: *const u8,
    stride: usize,
    (rows, cols): (usize, usize),
    dst: *mut f32,
    ld: usize,
) {
    let (r8, c8) = (rows / 8 * 8, cols / 8 * 8);
    for r0 in (0..r8).step_by(8) {
        for c0 in (0..c8).step_by(8) {
            let at = |i: usize| src.add((r0 + i) * stride + c0 * E::BYTES);
            let v: [__m256; 8] = std::array::from_fn(|i| E::load8(at(i)));
            // Rows (a0..a7), ... → columns: pairs, quads, then halves.
            let t0 = _mm256_unpacklo_ps(v[0], v[1]);
            let t1 = _mm256_unpackhi_ps(v[0], v[1]);
            let t2 = _mm256_unpacklo_ps(v[2], v[3]);
            let t3 = _mm256_unpackhi_ps(v[2], v[3]);
            let t4 = _mm256_unpacklo_ps(v[4], v[5]);
            let t5 = _mm256_unpackhi_ps(v[4], v[5]);
            let t6 = _mm256_unpacklo_ps(v[6], v[7]);
            let t7 = _mm256_unpackhi_ps(v[6], v[7]);
            let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
            let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
            let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
            let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
            let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
            let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
            let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
            let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
            let out = [
                _mm256_permute2f128_ps::<0x20>(u0, u4),
                _mm256_permute2f128_ps::<0x20>(u1, u5),
                _mm256_permute2f128_ps::<0x20>(u2, u6),
                _mm256_permute2f128_ps::<0x20>(u3, u7),
                _mm256_permute2f128_ps::<0x31>(u0, u4),
                _mm256_permute2f128_ps::<0x31>(u1, u5),
                _mm256_permute2f128_ps::<0x31>(u2, u6),
                _mm256_permute2f128_ps::<0x31>(u3, u7),
            ];
            for (i, o) in out.into_iter().enumerate() {
                _mm256_storeu_ps(dst.add((c0 + i) * ld + r0), o);
            }
        }
    }
    // The edges (fewer than 8 rows or columns left) element by element.
    for r in 0..rows {
        let cs = if r < r8 { c8 } else { 0 };
        for c in cs..cols {
            *dst.add(c * ld + r) = E::load1(src.add(r * stride + c * E::BYTES));
        }
    }
}

/// [`widen_transposed`] of rows of `dtype` (F32, F16 or BF16); `false`
/// for any other encoding. The caller guarantees that every row lies
/// inside the allocation of `src` and every output inside `dst`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn widen_transposed_as(
    dtype: rill_dtype::DType,
    src: *const u8,
    stride: usize,
    shape: (usize, usize),
    dst: *mut f32,
    ld: usize,
) -> bool {
    use rill_dtype::DType;
    match dtype {
        DType::F32 => widen_transposed::<F32>(src, stride, shape, dst, ld),
        DType::F16 => widen_transposed::<F16>(src, stride, shape, dst, ld),
        DType::BF16 => widen_transposed::<Bf16>(src, stride, shape, dst, ld),
        _ => return false,
    }
    true
}

/// `out[t·ldo + j] = (out[t·ldo + j] + Σ_c a[t·lda + c] · b[c][j]) + 0`
/// for `t < m`, `c < kk`, `j < p` (a multiple of 16), where row `c` of `b`
/// is `p` f16 values at `b + c·ldb` bytes: `small::product_nn_add` with
/// the f16 rows converted as they are loaded (exactly), the same FMA chain
/// per output (from `out`, `c` in order), so the same bits as widening
/// `b` first. 6 × 16 and 4 × 16 register tiles, single rows for the rest.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn product_add_f16(
    a: *const f32,
    lda: usize,
    b: *const u8,
    ldb: usize,
    (m, kk, p): (usize, usize, usize),
    out: *mut f32,
    ldo: usize,
) {
    #[inline(always)]
    unsafe fn tile<const R: usize>(
        a: *const f32,
        lda: usize,
        b: *const u8,
        ldb: usize,
        kk: usize,
        out: *mut f32,
        ldo: usize,
    ) {
        let mut acc = [[_mm256_setzero_ps(); 2]; R];
        for (r, acc) in acc.iter_mut().enumerate() {
            acc[0] = _mm256_loadu_ps(out.add(r * ldo));
            acc[1] = _mm256_loadu_ps(out.add(r * ldo + 8));
        }
        for c in 0..kk {
            let bp = b.add(c * ldb);
            let b0 = F16::load8(bp);
            let b1 = F16::load8(bp.add(16));
            for (r, acc) in acc.iter_mut().enumerate() {
                let av = _mm256_broadcast_ss(&*a.add(r * lda + c));
                acc[0] = _mm256_fmadd_ps(av, b0, acc[0]);
                acc[1] = _mm256_fmadd_ps(av, b1, acc[1]);
            }
        }
        let z = _mm256_setzero_ps();
        for (r, acc) in acc.iter().enumerate() {
            _mm256_storeu_ps(out.add(r * ldo), _mm256_add_ps(acc[0], z));
            _mm256_storeu_ps(out.add(r * ldo + 8), _mm256_add_ps(acc[1], z));
        }
    }
    debug_assert!(p.is_multiple_of(16));
    for j0 in (0..p).step_by(16) {
        let (bj, oj) = (b.add(2 * j0), out.add(j0));
        let mut t0 = 0;
        // Tiles of 6 rows, but 4 where a 6 would leave 2 or 3 single rows
        // (each output one FMA chain at the FMA's latency): a decode
        // step's 8 rows run as 4 + 4.
        while t0 + 6 <= m && !(2..4).contains(&(m - t0 - 6)) {
            tile::<6>(a.add(t0 * lda), lda, bj, ldb, kk, oj.add(t0 * ldo), ldo);
            t0 += 6;
        }
        while t0 + 4 <= m {
            tile::<4>(a.add(t0 * lda), lda, bj, ldb, kk, oj.add(t0 * ldo), ldo);
            t0 += 4;
        }
        while t0 < m {
            tile::<1>(a.add(t0 * lda), lda, bj, ldb, kk, oj.add(t0 * ldo), ldo);
            t0 += 1;
        }
    }
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
