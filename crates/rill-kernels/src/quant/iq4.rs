//! IQ4_NL and IQ4_XS: 4-bit indices into a fixed non-linear table of int8
//! levels (denser near zero), times a scale.
//!
//! | type   | elems | bytes | layout                                                         |
//! |--------|-------|-------|----------------------------------------------------------------|
//! | IQ4_NL | 32    | 18    | `d: f16, qs: [u8; 16]` (nibbles as in Q4_0)                    |
//! | IQ4_XS | 256   | 136   | `d: f16, scales_h: u16, scales_l: [u8; 4], qs: [u8; 128]`      |

use super::{f16_at, QK_K};

/// The 16 IQ4_NL levels (`kvalues_iq4nl` in ggml).
pub const IQ4_NL_VALUES: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// 32 elements from 16 bytes: byte `j` holds element `j` in its low nibble and
/// element `j + 16` in its high nibble. `x = dl * level`.
#[inline(always)]
fn decode_32(dl: f32, qs: &[u8], out: &mut [f32]) {
    let (lo, hi) = out.split_at_mut(16);
    for ((l, h), &q) in lo.iter_mut().zip(hi.iter_mut()).zip(&qs[..16]) {
        *l = dl * IQ4_NL_VALUES[(q & 0x0F) as usize] as f32;
        *h = dl * IQ4_NL_VALUES[(q >> 4) as usize] as f32;
    }
}

pub fn decode_iq4_nl(b: &[u8; 18], out: &mut [f32; 32]) {
    decode_32(f16_at(b, 0), &b[2..], out);
}

/// IQ4_XS: 8 sub-blocks of 32, each with a signed 6-bit scale offset by 32:
/// low 4 bits in nibble `ib % 2` of `scales_l[ib / 2]`, high 2 bits in bits
/// `2 * ib` of the little-endian `scales_h`. Sub-block `ib` uses
/// `qs[16ib..16ib + 16]` like an IQ4_NL block. `x = (d * (ls - 32)) * level`.
pub fn decode_iq4_xs(b: &[u8; 136], out: &mut [f32; QK_K]) {
    let d = f16_at(b, 0);
    let scales_h = u16::from_le_bytes([b[2], b[3]]);
    let scales_l = &b[4..8];
    let qs = &b[8..136];
    for (ib, (out32, qs16)) in out
        .chunks_exact_mut(32)
        .zip(qs.chunks_exact(16))
        .enumerate()
    {
        let low = (scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0F;
        let high = ((scales_h >> (2 * ib)) & 3) as u8;
        let ls = (low | (high << 4)) as i32 - 32;
        decode_32(d * ls as f32, qs16, out32);
    }
}
