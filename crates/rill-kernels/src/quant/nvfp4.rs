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

/// Whether a scale byte is an E4M3 NaN code (0x7F or 0xFF), which the
/// integer kernels leave to the reference (GGUF reads them as 0 and 480, a
/// checkpoint's decoder as NaN).
#[inline(always)]
pub(crate) fn is_nan_scale(b: u8) -> bool {
    b & 0x7F == 0x7F
}

const LOW7: u64 = 0x7F7F_7F7F_7F7F_7F7F;
const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// Whether some byte of `v` is a NaN scale: eight at a time, as the classic
/// zero-byte test (`(y − 0x01…) & !y & 0x80…` is non-zero exactly when a
/// byte of `y` is zero) on `y = (v & 0x7F…) ^ 0x7F…`, zero where a byte's
/// low seven bits are all set. The kernels ask this of every row they take,
/// so it must cost little beside the row's product.
#[inline(always)]
fn word_has_nan_scale(v: u64) -> bool {
    let y = (v & LOW7) ^ LOW7;
    y.wrapping_sub(ONES) & !y & HIGH != 0
}

/// Whether any of these E4M3 scale bytes (a checkpoint's scales) is NaN.
pub(crate) fn any_nan_scale(scales: &[u8]) -> bool {
    let words = scales.chunks_exact(8);
    let tail = words.remainder();
    let word = |w: &[u8]| word_has_nan_scale(u64::from_le_bytes(w.try_into().unwrap()));
    words.into_iter().any(word) || tail.iter().any(|&b| is_nan_scale(b))
}

/// Whether any scale of these GGUF NVFP4 blocks (the first four bytes of
/// each 36) is NaN.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) fn any_nan_scale_in_blocks(blocks: &[u8]) -> bool {
    blocks.chunks_exact(36).any(|b| {
        // zero-extended: the upper bytes read as 0, never NaN
        word_has_nan_scale(u32::from_le_bytes(b[..4].try_into().unwrap()) as u64)
    })
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

    #[test]
    fn nan_scale_scans_find_exactly_the_nan_bytes() {
        // Every byte value, at every place of a word and of the tail.
        for len in [1usize, 7, 8, 9, 16, 23] {
            for at in 0..len {
                for b in 0..=255u8 {
                    let mut scales = vec![0x38u8; len];
                    scales[at] = b;
                    assert_eq!(any_nan_scale(&scales), is_nan_scale(b), "{len} {at} {b:#x}");
                }
            }
        }
        // Bytes next to NaN ones (0x7E, 0xFE, 0x80 after 0x7F …) are not NaN.
        assert!(!any_nan_scale(&[
            0x7E, 0xFE, 0x80, 0x00, 0x01, 0x7E, 0xFE, 0x3F, 0x7E
        ]));
        let mut blocks = vec![0u8; 3 * 36];
        for blk in 0..3 {
            for j in 0..36 {
                for b in [0x7F, 0xFF, 0x7E, 0x00] {
                    blocks.fill(0x11);
                    blocks[blk * 36 + j] = b;
                    // only the four scale bytes of a block count
                    let want = j < 4 && is_nan_scale(b);
                    assert_eq!(any_nan_scale_in_blocks(&blocks), want, "{blk} {j} {b:#x}");
                }
            }
        }
    }

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
