//! The codebook ("grid") encodings IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S,
//! IQ3_XXS and IQ3_S: each group of 8 (IQ1 / IQ2) or 4 (IQ3) values is an
//! index into a fixed codebook of small integer vectors ([`super::iq_grids`]),
//! with a sign per value (IQ2 / IQ3) or a shift of ±1/8 per group (IQ1), times
//! a per-32 or per-16 scale derived from one f16.
//!
//! | type    | bytes | layout (256 values)                                                  |
//! |---------|-------|----------------------------------------------------------------------|
//! | IQ2_XXS | 66    | `d: f16, qs: [u32; 16]` — per 32: 4 index bytes, then 4 × 7 sign bits + 4-bit scale |
//! | IQ2_XS  | 74    | `d: f16, qs: [u16; 32]` (9-bit index, 7 sign bits), `scales: [u8; 8]` (per 16) |
//! | IQ2_S   | 82    | `d: f16, qs: [u8; 32], signs: [u8; 32], qh: [u8; 8], scales: [u8; 8]` |
//! | IQ3_XXS | 98    | `d: f16, qs: [u8; 64], [u32; 8]` (4 × 7 sign bits + 4-bit scale per 32) |
//! | IQ3_S   | 110   | `d: f16, qs: [u8; 64], qh: [u8; 8], signs: [u8; 32], scales: [u8; 4]` |
//! | IQ1_S   | 50    | `d: f16, qs: [u8; 32], qh: [u16; 8]` (3 index bits ×4, 3-bit scale, delta sign) |
//! | IQ1_M   | 56    | `qs: [u8; 32], qh: [u8; 16], scales: [u16; 4]` (d's 16 bits in the scales' top nibbles) |
//!
//! The seven-bit sign fields of IQ2_XXS / IQ2_XS / IQ3_XXS name 8 signs with an
//! even number of minus signs: the eighth is the parity of the seven
//! ([`KSIGNS`]). Every product is written in ggml's order (`db · grid · sign`,
//! `dl · (grid + delta)`), so the values are gguf-py's bit for bit.

use super::iq_grids::{IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID};
use super::{f16_at, QK_K};
use rill_dtype::DType;

/// The group shift of IQ1_S / IQ1_M, in units of the grid's ±1.
const IQ1_DELTA: f32 = 0.125;

/// Seven sign bits completed with their parity as bit 7 (`ksigns_iq2xs`).
pub(crate) static KSIGNS: [u8; 128] = {
    let mut t = [0u8; 128];
    let mut i = 0;
    while i < 128 {
        t[i] = i as u8 | (((i as u8).count_ones() as u8 & 1) << 7);
        i += 1;
    }
    t
};

#[inline(always)]
fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[i], b[i + 1]])
}

#[inline(always)]
fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

/// `out[j] = db · v_j · (−1 if bit j of signs)` for the `N` unsigned
/// codebook values packed in the bytes of `entry`.
#[inline(always)]
fn signed_group<const N: usize>(db: f32, entry: u64, signs: u8, out: &mut [f32]) {
    for (j, o) in out[..N].iter_mut().enumerate() {
        let v = (entry >> (8 * j)) as u8 as f32;
        let s = if signs & (1 << j) != 0 { -1.0 } else { 1.0 };
        *o = db * v * s;
    }
}

/// `out[j] = dl · (v_j + delta)` for the 8 signed values of an IQ1 entry.
#[inline(always)]
fn shifted_group(dl: f32, entry: u64, delta: f32, out: &mut [f32]) {
    for (j, o) in out[..8].iter_mut().enumerate() {
        let v = (entry >> (8 * j)) as u8 as i8 as f32;
        *o = dl * (v + delta);
    }
}

/// IQ2_XXS: per 32 values two u32: four grid indices (a byte each), and
/// four 7-bit sign fields plus the 4-bit scale `s` in the top bits;
/// `db = d · (0.5 + s) · 0.25`.
pub fn decode_iq2_xxs(b: &[u8; 66], out: &mut [f32; QK_K]) {
    let d = f16_at(b, 0);
    for (ib, out32) in out.chunks_exact_mut(32).enumerate() {
        let at = 2 + 8 * ib;
        let aux = u32_at(b, at + 4);
        let db = d * (0.5 + (aux >> 28) as f32) * 0.25;
        for (l, o) in out32.chunks_exact_mut(8).enumerate() {
            let signs = KSIGNS[((aux >> (7 * l)) & 127) as usize];
            signed_group::<8>(db, IQ2XXS_GRID[b[at + l] as usize], signs, o);
        }
    }
}

/// IQ2_XS: per 8 values a u16 of a 9-bit grid index and a 7-bit sign field;
/// a 4-bit scale per 16 values, `db = d · (0.5 + s) · 0.25`.
pub fn decode_iq2_xs(b: &[u8; 74], out: &mut [f32; QK_K]) {
    let d = f16_at(b, 0);
    for (g, o) in out.chunks_exact_mut(8).enumerate() {
        let q = u16_at(b, 2 + 2 * g);
        let s = (b[66 + g / 4] >> (4 * (g / 2 % 2))) & 0x0F;
        let db = d * (0.5 + s as f32) * 0.25;
        let signs = KSIGNS[(q >> 9) as usize];
        signed_group::<8>(db, IQ2XS_GRID[(q & 511) as usize], signs, o);
    }
}

/// IQ2_S: per 8 values an index byte plus 2 high bits from `qh` (10 bits),
/// a whole sign byte; a 4-bit scale per 16 values as IQ2_XS.
pub fn decode_iq2_s(b: &[u8; 82], out: &mut [f32; QK_K]) {
    let d = f16_at(b, 0);
    let (qs, signs, qh, scales) = (&b[2..34], &b[34..66], &b[66..74], &b[74..82]);
    for (g, o) in out.chunks_exact_mut(8).enumerate() {
        let high = ((qh[g / 4] >> (2 * (g % 4))) & 3) as usize;
        let idx = qs[g] as usize | high << 8;
        let s = (scales[g / 4] >> (4 * (g / 2 % 2))) & 0x0F;
        let db = d * (0.5 + s as f32) * 0.25;
        signed_group::<8>(db, IQ2S_GRID[idx], signs[g], o);
    }
}

/// IQ3_XXS: per 4 values an index byte; per 32 values a u32 of four 7-bit
/// sign fields (one per 8 values) and the 4-bit scale, `db = d · (0.5 + s) · 0.5`.
pub fn decode_iq3_xxs(b: &[u8; 98], out: &mut [f32; QK_K]) {
    let d = f16_at(b, 0);
    let qs = &b[2..66];
    for (ib, out32) in out.chunks_exact_mut(32).enumerate() {
        let aux = u32_at(b, 66 + 4 * ib);
        let db = d * (0.5 + (aux >> 28) as f32) * 0.5;
        for (l, o8) in out32.chunks_exact_mut(8).enumerate() {
            let signs = KSIGNS[((aux >> (7 * l)) & 127) as usize];
            let (lo, hi) = o8.split_at_mut(4);
            let q = 8 * ib + 2 * l;
            signed_group::<4>(db, IQ3XXS_GRID[qs[q] as usize] as u64, signs, lo);
            signed_group::<4>(db, IQ3XXS_GRID[qs[q + 1] as usize] as u64, signs >> 4, hi);
        }
    }
}

/// IQ3_S: per 4 values an index byte plus a high bit from `qh` (9 bits), a
/// sign byte per 8 values; a 4-bit scale per 32 values, `db = d · (1 + 2s)`.
pub fn decode_iq3_s(b: &[u8; 110], out: &mut [f32; QK_K]) {
    let d = f16_at(b, 0);
    let (qs, qh, signs, scales) = (&b[2..66], &b[66..74], &b[74..106], &b[106..110]);
    for (ib, out32) in out.chunks_exact_mut(32).enumerate() {
        let s = (scales[ib / 2] >> (4 * (ib % 2))) & 0x0F;
        let db = d * (1 + 2 * s) as f32;
        for (g4, o4) in out32.chunks_exact_mut(4).enumerate() {
            let q = 8 * ib + g4;
            let idx = qs[q] as usize | (((qh[ib] >> g4) & 1) as usize) << 8;
            let sg = signs[4 * ib + g4 / 2] >> (4 * (g4 % 2));
            signed_group::<4>(db, IQ3S_GRID[idx] as u64, sg, o4);
        }
    }
}

/// IQ1_S: per 8 values an index byte plus 3 high bits from the sub-block's
/// u16 `qh`, which also holds the 3-bit scale (bits 12–14,
/// `dl = d · (2s + 1)`) and the sign of the delta (bit 15).
pub fn decode_iq1_s(b: &[u8; 50], out: &mut [f32; QK_K]) {
    let d = f16_at(b, 0);
    for (ib, out32) in out.chunks_exact_mut(32).enumerate() {
        let qh = u16_at(b, 34 + 2 * ib);
        let dl = d * (2 * ((qh >> 12) & 7) + 1) as f32;
        let delta = if qh & 0x8000 != 0 {
            -IQ1_DELTA
        } else {
            IQ1_DELTA
        };
        for (l, o) in out32.chunks_exact_mut(8).enumerate() {
            let idx = b[2 + 4 * ib + l] as usize | (((qh >> (3 * l)) & 7) as usize) << 8;
            shifted_group(dl, IQ1S_GRID[idx], delta, o);
        }
    }
}

/// IQ1_M: per 8 values an index byte plus a nibble of `qh` (3 high index
/// bits, the delta's sign in bit 3); a 3-bit scale per 16 values
/// (`dl = d · (2s + 1)`), the block's f16 `d` spread over the top nibbles
/// of the four u16 scale words.
pub fn decode_iq1_m(b: &[u8; 56], out: &mut [f32; QK_K]) {
    let sc = [u16_at(b, 48), u16_at(b, 50), u16_at(b, 52), u16_at(b, 54)];
    let d = half::f16::from_bits(iq1m_d_bits(b)).to_f32();
    for (g, o) in out.chunks_exact_mut(8).enumerate() {
        let nib = (b[32 + g / 2] >> (4 * (g % 2))) & 0x0F;
        let idx = b[g] as usize | ((nib & 7) as usize) << 8;
        let delta = if nib & 0x08 != 0 {
            -IQ1_DELTA
        } else {
            IQ1_DELTA
        };
        // Scale k = g / 2 of 16: word k / 4, bits 3 (k % 4).
        let k = g / 2;
        let s = (sc[k / 4] >> (3 * (k % 4))) & 7;
        let dl = d * (2 * s + 1) as f32;
        shifted_group(dl, IQ1S_GRID[idx], delta, o);
    }
}

/// A codebook block as integers, the view of the 8-bit-activation kernels:
/// value `k` is `(d · unit) · scale[k / 16] · level[k]`, with small signed
/// integer levels (|level| ≤ 62) and odd sub-block scales (≤ 31). `unit`
/// is a power of two, so `d · unit` is exact.
pub(crate) struct IntBlock {
    pub d: f32,
    pub unit: f32,
    pub scales: [i16; 16],
    pub levels: [i8; QK_K],
}

/// The powers of two of [`IntBlock::unit`]: `d·(0.5 + s)·0.25 = d·(2s + 1)/8`
/// (IQ2), `d·(0.5 + s)·0.5 = d·(2s + 1)/4` (IQ3_XXS), `d·(1 + 2s)` (IQ3_S),
/// and IQ1's `dl·(g ± 1/8) = d·(2s + 1)·(8g ± 1)/8`.
pub(crate) fn unit(dtype: DType) -> f32 {
    match dtype {
        DType::IQ3XXS => 0.25,
        DType::IQ3S => 1.0,
        _ => 0.125,
    }
}

/// `entry`'s `N` codebook bytes with the signs of `signs` (bit j: value j).
fn signed_levels<const N: usize>(entry: u64, signs: u8, out: &mut [i8]) {
    for (j, o) in out[..N].iter_mut().enumerate() {
        let v = (entry >> (8 * j)) as u8 as i8;
        *o = if signs & (1 << j) != 0 { -v } else { v };
    }
}

/// IQ1's levels `8g ± 1` of one group of 8.
fn iq1_levels(entry: u64, negative_delta: bool, out: &mut [i8]) {
    for (j, o) in out[..8].iter_mut().enumerate() {
        let g = (entry >> (8 * j)) as u8 as i8;
        *o = 8 * g + if negative_delta { -1 } else { 1 };
    }
}

/// The integer view of one block of a codebook encoding (IQ1_S, IQ1_M,
/// IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S); `None` for any other.
pub(crate) fn int_block(dtype: DType, b: &[u8]) -> Option<IntBlock> {
    let mut v = IntBlock {
        d: f16_at(b, 0),
        unit: unit(dtype),
        scales: [0; 16],
        levels: [0; QK_K],
    };
    let odd = |s: u32| (2 * s + 1) as i16;
    match dtype {
        DType::IQ2XXS | DType::IQ3XXS => {
            let three = dtype == DType::IQ3XXS;
            for ib in 0..8 {
                let aux = u32_at(b, if three { 66 + 4 * ib } else { 2 + 8 * ib + 4 });
                v.scales[2 * ib] = odd(aux >> 28);
                v.scales[2 * ib + 1] = odd(aux >> 28);
                for l in 0..4 {
                    let signs = KSIGNS[((aux >> (7 * l)) & 127) as usize];
                    let o = &mut v.levels[32 * ib + 8 * l..];
                    if three {
                        let q = 2 + 8 * ib + 2 * l;
                        signed_levels::<4>(IQ3XXS_GRID[b[q] as usize] as u64, signs, o);
                        signed_levels::<4>(
                            IQ3XXS_GRID[b[q + 1] as usize] as u64,
                            signs >> 4,
                            &mut o[4..],
                        );
                    } else {
                        signed_levels::<8>(IQ2XXS_GRID[b[2 + 8 * ib + l] as usize], signs, o);
                    }
                }
            }
        }
        DType::IQ2XS | DType::IQ2S => {
            let s_at = if dtype == DType::IQ2XS { 66 } else { 74 };
            for k in 0..16 {
                v.scales[k] = odd(((b[s_at + k / 2] >> (4 * (k % 2))) & 0x0F) as u32);
            }
            for g in 0..32 {
                let o = &mut v.levels[8 * g..];
                if dtype == DType::IQ2XS {
                    let q = u16_at(b, 2 + 2 * g);
                    signed_levels::<8>(
                        IQ2XS_GRID[(q & 511) as usize],
                        KSIGNS[(q >> 9) as usize],
                        o,
                    );
                } else {
                    let high = ((b[66 + g / 4] >> (2 * (g % 4))) & 3) as usize;
                    signed_levels::<8>(IQ2S_GRID[b[2 + g] as usize | high << 8], b[34 + g], o);
                }
            }
        }
        DType::IQ3S => {
            for k in 0..16 {
                let ib = k / 2;
                v.scales[k] = odd(((b[106 + ib / 2] >> (4 * (ib % 2))) & 0x0F) as u32);
            }
            for q in 0..64 {
                let ib = q / 8;
                let idx = b[2 + q] as usize | (((b[66 + ib] >> (q % 8)) & 1) as usize) << 8;
                let signs = b[74 + q / 2] >> (4 * (q % 2));
                signed_levels::<4>(IQ3S_GRID[idx] as u64, signs, &mut v.levels[4 * q..]);
            }
        }
        DType::IQ1S => {
            for ib in 0..8 {
                let qh = u16_at(b, 34 + 2 * ib);
                v.scales[2 * ib] = odd(((qh >> 12) & 7) as u32);
                v.scales[2 * ib + 1] = v.scales[2 * ib];
                for l in 0..4 {
                    let idx = b[2 + 4 * ib + l] as usize | (((qh >> (3 * l)) & 7) as usize) << 8;
                    iq1_levels(
                        IQ1S_GRID[idx],
                        qh & 0x8000 != 0,
                        &mut v.levels[32 * ib + 8 * l..],
                    );
                }
            }
        }
        DType::IQ1M => {
            v.d = half::f16::from_bits(iq1m_d_bits(b)).to_f32();
            for k in 0..16 {
                v.scales[k] = odd(((u16_at(b, 48 + 2 * (k / 4)) >> (3 * (k % 4))) & 7) as u32);
            }
            for g in 0..32 {
                let nib = (b[32 + g / 2] >> (4 * (g % 2))) & 0x0F;
                let idx = b[g] as usize | ((nib & 7) as usize) << 8;
                iq1_levels(IQ1S_GRID[idx], nib & 8 != 0, &mut v.levels[8 * g..]);
            }
        }
        _ => return None,
    }
    Some(v)
}

/// IQ1_M's f16 `d`: the top nibbles of its four u16 scale words (byte 48 on).
pub(crate) fn iq1m_d_bits(b: &[u8]) -> u16 {
    let sc = |k: usize| u16_at(b, 48 + 2 * k);
    (sc(0) >> 12) | ((sc(1) >> 8) & 0x00F0) | ((sc(2) >> 4) & 0x0F00) | (sc(3) & 0xF000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ksigns_have_even_parity_and_keep_the_seven_bits() {
        for (i, &s) in KSIGNS.iter().enumerate() {
            assert_eq!(s & 0x7F, i as u8);
            assert_eq!(s.count_ones() % 2, 0, "{i}");
        }
        assert_eq!(KSIGNS[1], 0x81);
        assert_eq!(KSIGNS[3], 0x03);
    }

    /// The integer view gives the decoders' values (which are gguf-py's,
    /// tests/quant.rs) up to f32 rounding: levels, scales and units agree.
    #[test]
    fn integer_view_matches_the_decoders() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut byte = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        };
        type Decode = fn(&[u8], &mut [f32; QK_K]);
        let cases: [(DType, Decode); 7] = [
            (DType::IQ2XXS, |b, o| {
                decode_iq2_xxs(b.try_into().unwrap(), o)
            }),
            (DType::IQ2XS, |b, o| decode_iq2_xs(b.try_into().unwrap(), o)),
            (DType::IQ2S, |b, o| decode_iq2_s(b.try_into().unwrap(), o)),
            (DType::IQ3XXS, |b, o| {
                decode_iq3_xxs(b.try_into().unwrap(), o)
            }),
            (DType::IQ3S, |b, o| decode_iq3_s(b.try_into().unwrap(), o)),
            (DType::IQ1S, |b, o| decode_iq1_s(b.try_into().unwrap(), o)),
            (DType::IQ1M, |b, o| decode_iq1_m(b.try_into().unwrap(), o)),
        ];
        for (dtype, decode) in cases {
            for _ in 0..64 {
                let mut b: Vec<u8> = (0..dtype.block_bytes()).map(|_| byte()).collect();
                // A finite d (f16 1.5 or −0.75; IQ1_M keeps it in the scale words' top nibbles).
                let d: u16 = if b[1] & 1 == 0 { 0x3E00 } else { 0xBA00 };
                if dtype == DType::IQ1M {
                    for k in 0..4 {
                        b[49 + 2 * k] =
                            (b[49 + 2 * k] & 0x0F) | ((((d >> (4 * k)) & 0xF) as u8) << 4);
                    }
                } else {
                    b[..2].copy_from_slice(&d.to_le_bytes());
                }
                let mut want = [0f32; QK_K];
                decode(&b, &mut want);
                let v = int_block(dtype, &b).unwrap();
                for (k, &want) in want.iter().enumerate() {
                    let got = (v.d * v.unit) * v.scales[k / 16] as f32 * v.levels[k] as f32;
                    assert!(
                        (got - want).abs() <= 1e-6 * want.abs(),
                        "{dtype} value {k}: {got} vs {want}"
                    );
                }
            }
        }
        assert!(int_block(DType::IQ4XS, &[0; 136]).is_none());
    }
}
