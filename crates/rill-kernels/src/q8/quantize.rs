//! Quantizing one block of activations (see the module doc of `q8` for
//! the rule). Every step is an exact IEEE operation (max of absolute
//! values, one division, products, round-half-to-even, clamp), so the
//! AVX-512 version gives the scalar one's bits; it exists because a
//! prefill quantizes millions of values per layer.

/// Quantize one block on kernel class `isa` (which the CPU runs); returns
/// its scale (`amax / 127`, 0 for an all-zero block, NaN when the block
/// holds a non-finite value).
pub(super) fn block(isa: crate::simd::Isa, x: &[f32], q: &mut [i8]) -> f32 {
    debug_assert_eq!(x.len(), q.len());
    let _ = isa;
    #[cfg(target_arch = "x86_64")]
    if x.len().is_multiple_of(16) && isa.wide() {
        // SAFETY: the class has AVX-512F/BW; the lengths match (asserted
        // in debug, guaranteed by `Q8Acts::quantize`) and are whole vectors.
        return unsafe { block_avx512(x, q) };
    }
    #[cfg(target_arch = "x86_64")]
    if x.len().is_multiple_of(32) && isa != crate::simd::Isa::Scalar {
        // SAFETY: every x86 class but the scalar one has AVX2; the
        // lengths match and are whole vectors of 32.
        return unsafe { block_avx2(x, q) };
    }
    block_scalar(x, q)
}

fn block_scalar(x: &[f32], q: &mut [i8]) -> f32 {
    let (mut amax, mut finite) = (0f32, true);
    for v in x {
        finite &= v.is_finite();
        amax = amax.max(v.abs());
    }
    if !finite || amax == 0.0 {
        // Non-finite activations have no 8-bit form: a NaN scale makes the
        // products NaN, as exact ones would be.
        q.fill(0);
        return if finite { 0.0 } else { f32::NAN };
    }
    let id = 127.0 / amax;
    for (o, &v) in q.iter_mut().zip(x) {
        // |v·id| ≤ 127 up to rounding; the clamp keeps that exact.
        *o = (v * id).round_ties_even().clamp(-127.0, 127.0) as i8;
    }
    amax / 127.0
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn block_avx512(x: &[f32], q: &mut [i8]) -> f32 {
    use std::arch::x86_64::*;
    let n = x.len();
    let p = x.as_ptr();
    let sign = _mm512_set1_epi32(i32::MIN);
    let mut vmax = _mm512_setzero_ps();
    let mut bad: __mmask16 = 0;
    for i in (0..n).step_by(16) {
        let v = _mm512_loadu_ps(p.add(i));
        let a = _mm512_castsi512_ps(_mm512_andnot_si512(sign, _mm512_castps_si512(v)));
        // Non-finite: |v| not below infinity (NaN compares false).
        bad |= _mm512_cmp_ps_mask::<_CMP_NLT_UQ>(a, _mm512_set1_ps(f32::INFINITY));
        vmax = _mm512_max_ps(vmax, a);
    }
    let amax = _mm512_reduce_max_ps(vmax);
    if bad != 0 || amax == 0.0 {
        q.fill(0);
        return if bad == 0 { 0.0 } else { f32::NAN };
    }
    let id = 127.0 / amax;
    let vid = _mm512_set1_ps(id);
    let (lo, hi) = (_mm512_set1_epi32(-127), _mm512_set1_epi32(127));
    for i in (0..n).step_by(16) {
        let v = _mm512_mul_ps(_mm512_loadu_ps(p.add(i)), vid);
        // Round half to even (the default rounding mode), then clamp.
        let r = _mm512_cvt_roundps_epi32::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v);
        let r = _mm512_min_epi32(_mm512_max_epi32(r, lo), hi);
        _mm_storeu_si128(
            q.as_mut_ptr().add(i) as *mut __m128i,
            _mm512_cvtepi32_epi8(r),
        );
    }
    amax / 127.0
}

/// As [`block_avx512`], on 256-bit vectors (32 values a step).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn block_avx2(x: &[f32], q: &mut [i8]) -> f32 {
    use std::arch::x86_64::*;
    let n = x.len();
    let p = x.as_ptr();
    let abs = _mm256_castsi256_ps(_mm256_set1_epi32(i32::MAX));
    let inf = _mm256_set1_ps(f32::INFINITY);
    let mut vmax = _mm256_setzero_ps();
    let mut bad = _mm256_setzero_ps();
    for i in (0..n).step_by(8) {
        let a = _mm256_and_ps(_mm256_loadu_ps(p.add(i)), abs);
        // Non-finite: |v| not below infinity (NaN compares false).
        bad = _mm256_or_ps(bad, _mm256_cmp_ps::<_CMP_NLT_UQ>(a, inf));
        vmax = _mm256_max_ps(vmax, a);
    }
    let m = _mm_max_ps(
        _mm256_castps256_ps128(vmax),
        _mm256_extractf128_ps::<1>(vmax),
    );
    let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
    let id = 127.0 / amax;
    if _mm256_movemask_ps(bad) != 0 || amax == 0.0 || !id.is_finite() {
        // Non-finite or all-zero blocks, and those so small that 127/amax
        // overflows: the scalar rule, which has the answer for each.
        return block_scalar(x, q);
    }
    let vid = _mm256_set1_ps(id);
    let (lo, hi) = (_mm256_set1_epi32(-127), _mm256_set1_epi32(127));
    // packs interleaves 128-bit lanes: dwords [0 4 1 5 2 6 3 7] restore order.
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for i in (0..n).step_by(32) {
        let mut r = [_mm256_setzero_si256(); 4];
        for (k, rk) in r.iter_mut().enumerate() {
            let v = _mm256_mul_ps(_mm256_loadu_ps(p.add(i + 8 * k)), vid);
            // Round half to even (the default rounding mode), then clamp.
            *rk = _mm256_min_epi32(_mm256_max_epi32(_mm256_cvtps_epi32(v), lo), hi);
        }
        let w01 = _mm256_packs_epi32(r[0], r[1]);
        let w23 = _mm256_packs_epi32(r[2], r[3]);
        let b = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(w01, w23), order);
        _mm256_storeu_si256(q.as_mut_ptr().add(i) as *mut __m256i, b);
    }
    amax / 127.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_path_quantizes_alike() {
        let mut seed = 0x9e37_79b9u32;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            seed
        };
        for case in 0..200 {
            let n = [16, 32, 256][case % 3];
            let scale = [1e-30, 1e-3, 1.0, 7.5, 3e30][case % 5];
            let mut x: Vec<f32> = (0..n)
                .map(|_| (next() as i32 as f32 / i32::MAX as f32) * scale)
                .collect();
            // Exact ties (x·id = k + 1/2), zeros, and non-finite blocks.
            if case % 7 == 0 {
                x[3] = x[0] * 0.5;
            }
            if case % 11 == 0 {
                x.fill(0.0);
            }
            if case % 13 == 0 {
                x[n - 1] = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY][case % 3];
            }
            let (mut a, mut b) = (vec![0i8; n], vec![0i8; n]);
            let da = block_scalar(&x, &mut a);
            for isa in crate::simd::Isa::available() {
                let db = block(isa, &x, &mut b);
                assert_eq!(da.to_bits(), db.to_bits(), "{isa:?} case {case}");
                assert_eq!(a, b, "{isa:?} case {case}");
            }
        }
    }
}
