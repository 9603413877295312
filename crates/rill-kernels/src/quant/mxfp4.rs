//! MXFP4 (OCP Microscaling): 32 FP4 (e2m1) elements sharing one E8M0 scale.
//! Block: `e: u8, qs: [u8; 16]` (17 bytes); byte `j` of `qs` holds element `j`
//! in its low nibble and element `j + 16` in its high nibble.
//!
//! As in ggml, the e2m1 values are stored doubled (so they are integers) and
//! the scale halved to compensate: `x = 2^(e - 128) * (2 * e2m1(q))`. Both
//! factors are exact in f32 and so is their product (barring overflow for
//! `e > 252`), so this matches ggml bit for bit.

/// e2m1 code → twice its value: bit 3 is the sign, bits 0..3 index
/// 0, 0.5, 1, 1.5, 2, 3, 4, 6.
pub const E2M1_DOUBLED: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// Half of the E8M0 scale `2^(e - 127)`, i.e. `2^(e - 128)`, built directly
/// from its bits: for `e >= 2` a normal f32 with biased exponent `e - 1`; for
/// `e` 0 and 1 the subnormals 2^-128 and 2^-127 (mantissa bit 21 or 22).
/// E8M0's NaN code (0xFF) is not special-cased, as in ggml: it yields 2^127.
#[inline(always)]
pub fn e8m0_to_f32_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        ((e as u32) - 1) << 23
    };
    f32::from_bits(bits)
}

pub fn decode_mxfp4(b: &[u8; 17], out: &mut [f32; 32]) {
    let d = e8m0_to_f32_half(b[0]);
    let (lo, hi) = out.split_at_mut(16);
    for ((l, h), &q) in lo.iter_mut().zip(hi.iter_mut()).zip(&b[1..]) {
        *l = d * E2M1_DOUBLED[(q & 0x0F) as usize] as f32;
        *h = d * E2M1_DOUBLED[(q >> 4) as usize] as f32;
    }
}
