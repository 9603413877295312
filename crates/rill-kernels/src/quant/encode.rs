//! Encoding f32 rows into GGUF types: what `rill convert` writes.
//!
//! Written from the block definitions (the decoders in [`super::legacy`] and
//! [`super::float`] are their inverse):
//! - F16 / BF16: round to nearest, ties to even (BF16 keeps NaN a quiet NaN);
//! - Q8_0: `d = max|x| / 127`, `q = round(x / d)`;
//! - Q4_0 / Q5_0: `d = m / -8` (`-16`) where `m` is the value of largest
//!   magnitude (with its sign), `q = clamp(trunc(x / d + 8.5), 0, 15)`
//!   (`+16.5`, 31), so the extreme value maps exactly to code 0;
//! - Q4_1 / Q5_1: `d = (max − min) / 15` (31), `m = min`,
//!   `q = clamp(trunc((x − min) / d + 0.5), 0, 15)` (31).
//!
//! The scales are stored as f16, and the codes are computed with the f32
//! scale before rounding, as ggml's reference quantizers do. The K types
//! (Q4_K, Q5_K, Q6_K) and IQ4_NL / IQ4_XS search their scales: [`super::encode_k`].

use super::encode_k;
use half::{bf16, f16};
use rill_dtype::DType;

/// Whether [`encode_row`] writes `dtype`.
pub fn can_encode(dtype: DType) -> bool {
    matches!(
        dtype,
        DType::F32
            | DType::F16
            | DType::BF16
            | DType::Q8_0
            | DType::Q4_0
            | DType::Q4_1
            | DType::Q5_0
            | DType::Q5_1
            | DType::Q4K
            | DType::Q5K
            | DType::Q6K
            | DType::IQ4NL
            | DType::IQ4XS
    )
}

/// Append the encoding of `x` as `dtype` to `out`. `x.len()` must be a
/// whole number of `dtype`'s blocks; panics for a type [`can_encode`]
/// refuses.
pub fn encode_row(dtype: DType, x: &[f32], out: &mut Vec<u8>) {
    let blocks = |n: usize| x.chunks_exact(n);
    match dtype {
        DType::F32 => x
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
        DType::F16 => x
            .iter()
            .for_each(|v| out.extend_from_slice(&f16::from_f32(*v).to_le_bytes())),
        DType::BF16 => x
            .iter()
            .for_each(|v| out.extend_from_slice(&bf16::from_f32(*v).to_le_bytes())),
        DType::Q8_0 => blocks(32).for_each(|b| q8_0(b, out)),
        DType::Q4_0 => blocks(32).for_each(|b| symmetric(b, 4, out)),
        DType::Q5_0 => blocks(32).for_each(|b| symmetric(b, 5, out)),
        DType::Q4_1 => blocks(32).for_each(|b| with_min(b, 4, out)),
        DType::Q5_1 => blocks(32).for_each(|b| with_min(b, 5, out)),
        DType::Q4K => blocks(256).for_each(|b| encode_k::q45_k(b, 4, out)),
        DType::Q5K => blocks(256).for_each(|b| encode_k::q45_k(b, 5, out)),
        DType::Q6K => blocks(256).for_each(|b| encode_k::q6_k(b, out)),
        DType::IQ4NL => blocks(32).for_each(|b| encode_k::iq4_nl(b, out)),
        DType::IQ4XS => blocks(256).for_each(|b| encode_k::iq4_xs(b, out)),
        other => panic!("rill cannot encode {}", other.name()),
    }
}

fn push_f16(out: &mut Vec<u8>, v: f32) {
    out.extend_from_slice(&f16::from_f32(v).to_le_bytes());
}

fn q8_0(x: &[f32], out: &mut Vec<u8>) {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    push_f16(out, d);
    out.extend(x.iter().map(|v| (v * id).round() as i8 as u8));
}

/// Pack 32 codes of `bits` (4 or 5) as the legacy blocks do: low nibbles of
/// element j and j + 16 share byte j; the fifth bits form a u32 before them.
fn pack(q: &[u8; 32], bits: u32, out: &mut Vec<u8>) {
    if bits == 5 {
        let qh = q
            .iter()
            .enumerate()
            .fold(0u32, |h, (i, &v)| h | (u32::from(v >> 4) << i));
        out.extend_from_slice(&qh.to_le_bytes());
    }
    out.extend((0..16).map(|j| (q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4)));
}

fn symmetric(x: &[f32], bits: u32, out: &mut Vec<u8>) {
    let half = (1u32 << (bits - 1)) as f32;
    let top = ((1u32 << bits) - 1) as f32;
    let m = x
        .iter()
        .fold(0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
    let d = m / -half;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut q = [0u8; 32];
    for (c, v) in q.iter_mut().zip(x) {
        *c = (v * id + half + 0.5).clamp(0.0, top) as u8;
    }
    push_f16(out, d);
    pack(&q, bits, out);
}

fn with_min(x: &[f32], bits: u32, out: &mut Vec<u8>) {
    let top = ((1u32 << bits) - 1) as f32;
    let (lo, hi) = x
        .iter()
        .fold((f32::MAX, f32::MIN), |(l, h), &v| (l.min(v), h.max(v)));
    let d = (hi - lo) / top;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut q = [0u8; 32];
    for (c, v) in q.iter_mut().zip(x) {
        *c = ((v - lo) * id + 0.5).clamp(0.0, top) as u8;
    }
    push_f16(out, d);
    push_f16(out, lo);
    pack(&q, bits, out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::dequantize_with;
    use crate::Isa;

    fn round_trip(dtype: DType, x: &[f32]) -> Vec<f32> {
        let mut bytes = Vec::new();
        encode_row(dtype, x, &mut bytes);
        assert_eq!(Some(bytes.len() as u64), dtype.bytes_for(x.len() as u64));
        let mut y = vec![0f32; x.len()];
        dequantize_with(Isa::Scalar, dtype, &bytes, &mut y);
        y
    }

    #[test]
    fn each_type_decodes_back_within_half_a_step() {
        let x: Vec<f32> = (0..64)
            .map(|i| ((i * 37 % 64) as f32 - 30.0) / 7.0)
            .collect();
        let (lo, hi) = (-30.0f32 / 7.0, 33.0f32 / 7.0);
        let range = hi - lo;
        let amax = lo.abs().max(hi);
        for (dtype, step) in [
            (DType::F32, 0.0),
            (DType::F16, amax / 1024.0),
            (DType::BF16, amax / 128.0),
            (DType::Q8_0, amax / 127.0),
            (DType::Q4_0, amax / 8.0),
            (DType::Q5_0, amax / 16.0),
            (DType::Q4_1, range / 15.0),
            (DType::Q5_1, range / 31.0),
        ] {
            let y = round_trip(dtype, &x);
            for (a, b) in x.iter().zip(&y) {
                // half a step, plus the f16 rounding of the scale (a relative
                // 2^-11 of the scale, times a code up to the block's largest:
                // at most 2^-11 of amax; 2^-10 allows for the min's too)
                assert!(
                    (a - b).abs() <= step * 0.5 * 1.01 + amax / 1024.0,
                    "{}: {a} -> {b}",
                    dtype.name()
                );
            }
        }
    }

    #[test]
    fn zero_blocks_and_extremes_are_exact() {
        let zeros = [0f32; 32];
        for d in [
            DType::Q8_0,
            DType::Q4_0,
            DType::Q4_1,
            DType::Q5_0,
            DType::Q5_1,
        ] {
            assert_eq!(round_trip(d, &zeros), zeros.to_vec(), "{}", d.name());
        }
        // The value of largest magnitude is code 0 of the symmetric types.
        let mut x = [0.5f32; 32];
        x[3] = -4.0;
        assert_eq!(round_trip(DType::Q4_0, &x)[3], -4.0);
        assert_eq!(round_trip(DType::Q5_0, &x)[3], -4.0);
    }

    /// The K and IQ4 types on Gaussian rows (with a few outliers, as weights have):
    /// zeros stay zeros, a lone value comes back, and the relative RMS error
    /// is what these bit widths give (0.072, 0.036, 0.019 of the RMS when
    /// written, each extra bit halving it; IQ4_XS / IQ4_NL 0.080 / 0.079). The comparison with
    /// llama-quantize itself is `rill-cli/tests/quantize.rs`.
    #[test]
    fn k_types_round_trip() {
        let n = 256 * 64;
        // sums of 4 uniforms: close enough to Gaussian
        let u = crate::test_util::noise(7, 4 * n);
        let mut x: Vec<f32> = u.chunks_exact(4).map(|c| c.iter().sum()).collect();
        for i in (0..n).step_by(997) {
            x[i] *= 8.0;
        }
        let rms = (x.iter().map(|v| v * v).sum::<f32>() / n as f32).sqrt();
        let mut errs = Vec::new();
        for (dtype, bound) in [
            (DType::Q4K, 0.08),
            (DType::Q5K, 0.04),
            (DType::Q6K, 0.021),
            (DType::IQ4XS, 0.09),
            (DType::IQ4NL, 0.09),
        ] {
            let y = round_trip(dtype, &x);
            let e = (x
                .iter()
                .zip(&y)
                .map(|(a, b)| (a - b) * (a - b))
                .sum::<f32>()
                / n as f32)
                .sqrt()
                / rms;
            assert!(e < bound, "{}: relative RMS error {e}", dtype.name());
            errs.push(e);
            let z = round_trip(dtype, &[0f32; 256]);
            assert!(z.iter().all(|&v| v == 0.0), "{}", dtype.name());
            // a block of one value and zeros: the value comes back close
            let mut one = [0f32; 256];
            one[77] = -3.5;
            let y = round_trip(dtype, &one);
            assert!((y[77] + 3.5).abs() < 0.02, "{}: {}", dtype.name(), y[77]);
        }
        assert!(errs[0] > errs[1] && errs[1] > errs[2], "{errs:?}");
        assert!(errs[3] > errs[1] && errs[4] > errs[1], "{errs:?}");
    }
}
