//! The "K" super-block formats: 256 elements per block, split into sub-blocks
//! that each carry a small integer scale (and for Q2_K/Q4_K/Q5_K a min),
//! themselves multiplied by f16 super-block scales `d` / `dmin`.
//!
//! Byte layouts (offsets in bytes; all f16 little-endian):
//!
//! | type | bytes | layout                                                             |
//! |------|-------|--------------------------------------------------------------------|
//! | Q2_K | 84    | `scales[16] @0, qs[64] @16, d @80, dmin @82`                       |
//! | Q3_K | 110   | `hmask[32] @0, qs[64] @32, scales[12] @96, d @108`                 |
//! | Q4_K | 144   | `d @0, dmin @2, scales[12] @4, qs[128] @16`                        |
//! | Q5_K | 176   | `d @0, dmin @2, scales[12] @4, qh[32] @16, qs[128] @48`            |
//! | Q6_K | 210   | `ql[128] @0, qh[64] @128, scales[16] (i8) @192, d @208`            |
//!
//! The low bits are stored in 128-element halves (Q2_K, Q3_K, Q6_K) or 64-element
//! chunks (Q4_K, Q5_K): within one, byte `l` of a 32-byte run holds element `l`
//! of each successive 32-element slice in successively higher bit fields.
//! Products are formed in the same order as ggml (`(d * sc) * q - (dmin * m)`),
//! which makes the result bit-identical to it.

use super::{f16_at, QK_K};

/// Q2_K: 16 sub-blocks of 16; byte `scales[g]` is `min << 4 | scale` (4 bits
/// each); quants are 2 bits. `x = (d * scale) * q - (dmin * min)`.
pub fn decode_q2_k(b: &[u8; 84], out: &mut [f32; QK_K]) {
    let scales = &b[0..16];
    let d = f16_at(b, 80);
    let dmin = f16_at(b, 82);
    for h in 0..2 {
        // 32 bytes of quants serve 128 elements: bits 2j..2j+2 of byte l are
        // element h*128 + j*32 + l.
        let qs = &b[16 + h * 32..16 + h * 32 + 32];
        for j in 0..4 {
            let shift = 2 * j;
            let base = h * 128 + j * 32;
            for (s, (out16, qs16)) in out[base..base + 32]
                .chunks_exact_mut(16)
                .zip(qs.chunks_exact(16))
                .enumerate()
            {
                let sc = scales[base / 16 + s];
                let dl = d * (sc & 0x0F) as f32;
                let ml = dmin * (sc >> 4) as f32;
                for (o, &q) in out16.iter_mut().zip(qs16) {
                    *o = dl * ((q >> shift) & 3) as f32 - ml;
                }
            }
        }
    }
}

/// Q3_K's 16 signed 6-bit sub-block scales. The 12 bytes hold, for scale `k`,
/// its low 4 bits in a nibble of byte `k % 8` (low nibble for k < 8, high
/// nibble otherwise) and its high 2 bits in bits `2 * (k / 4)` of byte
/// `8 + k % 4`; the stored value is offset by 32.
#[inline(always)]
pub(crate) fn q3_k_scales(s: &[u8]) -> [i8; 16] {
    let mut out = [0i8; 16];
    for (k, o) in out.iter_mut().enumerate() {
        let low = (s[k % 8] >> (4 * (k / 8))) & 0x0F;
        let high = (s[8 + k % 4] >> (2 * (k / 4))) & 0x03;
        *o = (low | (high << 4)) as i8 - 32;
    }
    out
}

/// Q3_K: 16 sub-blocks of 16 with signed 6-bit scales; quants are 2 low bits
/// from `qs` (laid out like Q2_K) plus a high bit from `hmask` — bit
/// `e / 32` of `hmask[e % 32]` for element `e`. A *clear* high bit subtracts 4,
/// so `q` ranges over -4..=3. `x = (d * scale) * q`.
pub fn decode_q3_k(b: &[u8; 110], out: &mut [f32; QK_K]) {
    let hmask = &b[0..32];
    let scales = q3_k_scales(&b[96..108]);
    let d = f16_at(b, 108);
    for h in 0..2 {
        let qs = &b[32 + h * 32..32 + h * 32 + 32];
        for j in 0..4 {
            let shift = 2 * j;
            let hbit = h * 4 + j; // == (h * 128 + j * 32) / 32
            let base = h * 128 + j * 32;
            for (s, ((out16, qs16), hm16)) in out[base..base + 32]
                .chunks_exact_mut(16)
                .zip(qs.chunks_exact(16))
                .zip(hmask.chunks_exact(16))
                .enumerate()
            {
                let dl = d * scales[base / 16 + s] as f32;
                for ((o, &q), &hm) in out16.iter_mut().zip(qs16).zip(hm16) {
                    let low = ((q >> shift) & 3) as i8;
                    let sub = if (hm >> hbit) & 1 == 0 { 4 } else { 0 };
                    *o = dl * (low - sub) as f32;
                }
            }
        }
    }
}

/// The 8 unsigned 6-bit (scale, min) pairs of Q4_K/Q5_K, packed in 12 bytes:
/// for `j < 4`, scale `j` is the low 6 bits of byte `j` and min `j` the low 6
/// bits of byte `j + 4`; for `j >= 4`, scale `j` has its low 4 bits in the low
/// nibble of byte `j + 4` and its high 2 bits in the top 2 bits of byte
/// `j - 4`, and min `j` has its low 4 bits in the high nibble of byte `j + 4`
/// and its high 2 bits in the top 2 bits of byte `j`.
#[inline(always)]
pub fn scale_min_k4(s: &[u8], j: usize) -> (u8, u8) {
    if j < 4 {
        (s[j] & 0x3F, s[j + 4] & 0x3F)
    } else {
        (
            (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4),
            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
        )
    }
}

/// Q4_K: 8 sub-blocks of 32 with 6-bit scales and mins; quants are 4 bits,
/// byte `l` of 32-byte run `c` holding element `64c + l` (low nibble) and
/// `64c + 32 + l` (high nibble). `x = (d * scale) * q - (dmin * min)`.
pub fn decode_q4_k(b: &[u8; 144], out: &mut [f32; QK_K]) {
    decode_k4(b, 16, out, |_, _, q| q);
}

/// Q5_K: Q4_K plus a fifth quant bit: bit `e / 32` of `qh[e % 32]`.
pub fn decode_q5_k(b: &[u8; 176], out: &mut [f32; QK_K]) {
    let qh = &b[16..48];
    decode_k4(b, 48, out, |g, l, q| q | (((qh[l] >> g) & 1) << 4));
}

/// Q4_K and Q5_K (4-bit quants at `qs_at`): element `l` of sub-block `g`
/// is `(d * scale) * q - (dmin * min)` with `q = quant(g, l, low)` for its
/// low 4 bits `low`.
#[inline(always)]
fn decode_k4(
    b: &[u8],
    qs_at: usize,
    out: &mut [f32; QK_K],
    quant: impl Fn(usize, usize, u8) -> u8,
) {
    let d = f16_at(b, 0);
    let dmin = f16_at(b, 2);
    let scales = &b[4..16];
    let qs = &b[qs_at..qs_at + 128];
    for (g, out32) in out.chunks_exact_mut(32).enumerate() {
        let (sc, m) = scale_min_k4(scales, g);
        let dl = d * sc as f32;
        let ml = dmin * m as f32;
        let shift = 4 * (g % 2);
        let run = &qs[32 * (g / 2)..32 * (g / 2) + 32];
        for (l, (o, &q)) in out32.iter_mut().zip(run).enumerate() {
            *o = dl * quant(g, l, (q >> shift) & 0x0F) as f32 - ml;
        }
    }
}

/// Q6_K: 16 sub-blocks of 16 with signed 8-bit scales; quants are 6 bits,
/// offset by 32. Per 128-element half `h` and element `t` in it: the low 4
/// bits are nibble `t / 64` of `ql[64h + t % 64]`, the high 2 bits are bits
/// `2 * (t / 32)` of `qh[32h + t % 32]`. `x = (d * scale) * (q - 32)`.
pub fn decode_q6_k(b: &[u8; 210], out: &mut [f32; QK_K]) {
    let ql = &b[0..128];
    let qh = &b[128..192];
    let scales = &b[192..208];
    let d = f16_at(b, 208);
    for (h, out128) in out.chunks_exact_mut(128).enumerate() {
        let ql = &ql[64 * h..64 * h + 64];
        let qh = &qh[32 * h..32 * h + 32];
        for (j, out32) in out128.chunks_exact_mut(32).enumerate() {
            // Slice j (of 4) of this half: low nibbles for j < 2, high for j >= 2.
            let lo_shift = 4 * (j / 2);
            let lo = &ql[32 * (j % 2)..32 * (j % 2) + 32];
            let hi_shift = 2 * j;
            for (s, ((out16, lo16), hi16)) in out32
                .chunks_exact_mut(16)
                .zip(lo.chunks_exact(16))
                .zip(qh.chunks_exact(16))
                .enumerate()
            {
                let sc = scales[(128 * h + 32 * j) / 16 + s] as i8;
                let dl = d * sc as f32;
                for ((o, &l), &hb) in out16.iter_mut().zip(lo16).zip(hi16) {
                    let q = ((l >> lo_shift) & 0x0F) | (((hb >> hi_shift) & 3) << 4);
                    *o = dl * (q as i8 - 32) as f32;
                }
            }
        }
    }
}
