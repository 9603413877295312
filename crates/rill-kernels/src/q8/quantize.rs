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
            let db = block(crate::simd::Isa::best(), &x, &mut b);
            assert_eq!(da.to_bits(), db.to_bits(), "case {case}");
            assert_eq!(a, b, "case {case}");
        }
    }
}
