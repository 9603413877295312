//! GGUF's NVFP4 (llama.cpp's converter of NVFP4 checkpoints): blocks of 64
//! E2M1 values in four groups of 16, each group with an unsigned E4M3
//! scale. Block: `d: [u8; 4], qs: [u8; 32]` (36 bytes); byte `j` of group
//! `s`'s eight bytes (`qs[8s..8s + 8]`) holds value `j` of the group in its
//! low nibble and value `j + 8` in its high nibble. A tensor's global scale
//! is not in the blocks: llama.cpp's converter writes it as a separate
//! `.scale` tensor, multiplied into the product's outputs.
//!
//! As MXFP4, the E2M1 levels are stored doubled ([`E2M1_DOUBLED`]) and the
//! scale halved; every product is exact in f32, so this is ggml's
//! `dequantize_row_nvfp4` bit for bit.

use super::mxfp4::E2M1_DOUBLED;

/// An unsigned E4M3 scale byte as ggml reads it (`ggml_ue4m3_to_fp32`
/// without its final halving): bit 7 is ignored, except that 0x7F (the
/// E4M3 NaN code) reads as 0 — while 0xFF reads as 480, the pattern's
/// value were it not NaN. Exact in f32.
#[inline(always)]
pub fn ue4m3_to_f32(x: u8) -> f32 {
    if x == 0x7F {
        return 0.0;
    }
    let (exp, man) = ((x >> 3) & 0x0F, (x & 0x07) as u32);
    if exp == 0 {
        // man · 2^-9 (subnormal E4M3, a normal f32)
        return man as f32 * f32::from_bits((127 - 9) << 23);
    }
    // (1 + man/8) · 2^(exp − 7): the f32 with that exponent and mantissa.
    f32::from_bits(((exp as u32 + 120) << 23) | (man << 20))
}

pub fn decode_nvfp4(b: &[u8; 36], out: &mut [f32; 64]) {
    for (s, group) in out.chunks_exact_mut(16).enumerate() {
        let d = ue4m3_to_f32(b[s]) * 0.5;
        let (lo, hi) = group.split_at_mut(8);
        let qs = &b[4 + 8 * s..12 + 8 * s];
        for ((l, h), &q) in lo.iter_mut().zip(hi.iter_mut()).zip(qs) {
            *l = E2M1_DOUBLED[(q & 0x0F) as usize] as f32 * d;
            *h = E2M1_DOUBLED[(q >> 4) as usize] as f32 * d;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ggml's formula, literally.
    fn ggml_ue4m3(x: u8) -> f32 {
        if x == 0 || x == 0x7F {
            return 0.0;
        }
        let (exp, man) = ((x >> 3) & 0xF, (x & 7) as f32);
        if exp == 0 {
            man * 2f32.powi(-9)
        } else {
            (1.0 + man / 8.0) * 2f32.powi(exp as i32 - 7)
        }
    }

    #[test]
    fn every_scale_byte_reads_as_ggml_reads_it() {
        for x in 0..=255u8 {
            assert_eq!(
                ue4m3_to_f32(x).to_bits(),
                ggml_ue4m3(x).to_bits(),
                "{x:#04x}"
            );
        }
        assert_eq!(ue4m3_to_f32(0xFF), 480.0);
        assert_eq!(ue4m3_to_f32(0x7E), 448.0);
    }
}
