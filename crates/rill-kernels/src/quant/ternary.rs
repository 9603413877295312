//! TQ1_0 and TQ2_0: ternary weights (−1, 0, +1) times one f16 scale per 256
//! values (BitNet-style models).
//!
//! | type  | bytes | layout                                                           |
//! |-------|-------|------------------------------------------------------------------|
//! | TQ1_0 | 54    | `qs: [u8; 48], qh: [u8; 4], d: f16` — 5 (qs) or 4 (qh) trits a byte |
//! | TQ2_0 | 66    | `qs: [u8; 64], d: f16` — 4 two-bit codes a byte                     |
//!
//! TQ1_0 stores a byte's trits as a fixed-point fraction of 3^5: multiplying
//! the byte by 3^n (mod 256) brings trit n to the top, and `(q · 3) >> 8`
//! reads it. Values are `(t − 1) · d`, as ggml writes them.

use super::{f16_at, QK_K};

const POW3: [u8; 5] = [1, 3, 9, 27, 81];

#[inline(always)]
fn trit(byte: u8, n: usize) -> f32 {
    let q = byte.wrapping_mul(POW3[n]);
    (((q as u16 * 3) >> 8) as i32 - 1) as f32
}

/// TQ1_0: the first 32 bytes give values `32n + m` (n < 5), the next 16
/// bytes values `160 + 16n + m`, the 4 `qh` bytes values `240 + 4n + m` (n < 4).
pub fn decode_tq1_0(b: &[u8; 54], out: &mut [f32; QK_K]) {
    let d = f16_at(b, 52);
    let mut at = 0;
    for (bytes, trits) in [(&b[0..32], 5), (&b[32..48], 5), (&b[48..52], 4)] {
        for n in 0..trits {
            for (m, &byte) in bytes.iter().enumerate() {
                out[at + bytes.len() * n + m] = trit(byte, n) * d;
            }
        }
        at += bytes.len() * trits;
    }
}

/// TQ2_0: value `128j + 32l + m` is bits `2l..2l + 2` of byte `32j + m`, minus 1.
pub fn decode_tq2_0(b: &[u8; 66], out: &mut [f32; QK_K]) {
    let d = f16_at(b, 64);
    for (j, out128) in out.chunks_exact_mut(128).enumerate() {
        for (l, out32) in out128.chunks_exact_mut(32).enumerate() {
            for (m, o) in out32.iter_mut().enumerate() {
                let q = (b[32 * j + m] >> (2 * l)) & 3;
                *o = d * (q as i32 - 1) as f32;
            }
        }
    }
}
