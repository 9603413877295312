//! The element codes of Hugging Face FP8 and NVFP4 checkpoints: FP8 E4M3
//! (one byte a value) and FP4 E2M1 (two codes a byte, low nibble first).
//! Their scales are stored apart and multiplied in by [`crate::scaled`].

/// The value of an E4M3 byte (OCP E4M3FN: sign, 4 exponent bits biased by
/// 7, 3 mantissa bits; exponent 0 is subnormal; `S.1111.111` is NaN, there
/// are no infinities; the largest finite value is 448).
pub const fn e4m3_to_f32(b: u8) -> f32 {
    let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let e = ((b >> 3) & 0x0F) as i32;
    let m = (b & 0x07) as f32;
    if e == 0x0F && (b & 0x07) == 0x07 {
        return f32::NAN;
    }
    // Exact: every E4M3 value is a small binary fraction f32 holds.
    let mag = if e == 0 {
        m / 8.0 / 64.0 // 2^-6 · m/8
    } else {
        let mut p = 1.0f32;
        let mut k = e - 7;
        while k > 0 {
            p *= 2.0;
            k -= 1;
        }
        while k < 0 {
            p /= 2.0;
            k += 1;
        }
        (1.0 + m / 8.0) * p
    };
    sign * mag
}

const fn e4m3_table() -> [f32; 256] {
    let mut t = [0f32; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = e4m3_to_f32(i as u8);
        i += 1;
    }
    t
}

/// Every E4M3 byte's value.
pub static E4M3: [f32; 256] = e4m3_table();

/// The E2M1 magnitudes (sign in bit 3).
pub const E2M1: [f32; 16] = [
    0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0,
];

/// 2^120: moves an E4M3 exponent (bias 7) placed in f32's exponent field
/// (bias 127) to its value.
const REBIAS: f32 = f32::from_bits((127 + 120) << 23);

/// The same values as [`E4M3`], computed without a table so the loop
/// vectorises: the 7 magnitude bits put at f32's exponent/mantissa boundary
/// read as `2^(e−127)·(1 + m/8)` (or, for `e = 0`, the f32 subnormal
/// `m·2^−129`), and one exact multiply by 2^120 gives `2^(e−7)·(1 + m/8)`
/// (or `m/8·2^−6`).
#[inline(always)]
fn e4m3_bits(b: u8) -> f32 {
    let mag = (b & 0x7F) as u32;
    let v = f32::from_bits(mag << 20) * REBIAS;
    let v = if mag == 0x7F { f32::NAN } else { v };
    f32::from_bits(v.to_bits() | ((b as u32 & 0x80) << 24))
}

pub fn dequantize_f8e4m3(src: &[u8], dst: &mut [f32]) {
    for (b, o) in src.iter().zip(dst.iter_mut()) {
        *o = e4m3_bits(*b);
    }
}

/// Byte `j` holds elements `2j` (low nibble) and `2j + 1` (high nibble).
pub fn dequantize_e2m1(src: &[u8], dst: &mut [f32]) {
    for (b, o) in src.iter().zip(dst.chunks_exact_mut(2)) {
        o[0] = E2M1[(b & 0x0F) as usize];
        o[1] = E2M1[(b >> 4) as usize];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e4m3_values_follow_the_ocp_format() {
        assert_eq!(E4M3[0x00], 0.0);
        assert_eq!(E4M3[0x38], 1.0); // exponent 7 = bias
        assert_eq!(E4M3[0x7E], 448.0); // the largest finite value
        assert_eq!(E4M3[0xFE], -448.0);
        assert_eq!(E4M3[0x01], 2f32.powi(-9)); // the smallest subnormal
        assert_eq!(E4M3[0x08], 2f32.powi(-6)); // the smallest normal
        assert_eq!(E4M3[0x3C], 1.5);
        assert!(E4M3[0x7F].is_nan() && E4M3[0xFF].is_nan());
    }

    #[test]
    fn the_vectorisable_decoder_gives_the_table_values() {
        for b in 0..=255u8 {
            let (got, want) = (e4m3_bits(b), E4M3[b as usize]);
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "{b:#04x}: {got} != {want}"
            );
        }
    }

    #[test]
    fn e2m1_pairs_are_low_nibble_first() {
        let mut out = [0f32; 4];
        dequantize_e2m1(&[0x72, 0x9F], &mut out);
        assert_eq!(out, [1.0, 6.0, -6.0, -0.5]);
    }
}
