//! The original ggml block formats, 32 elements per block:
//!
//! | type | bytes | layout                                  | value            |
//! |------|-------|-----------------------------------------|------------------|
//! | Q4_0 | 18    | `d: f16, qs: [u8; 16]`                  | `d * (q - 8)`    |
//! | Q4_1 | 20    | `d: f16, m: f16, qs: [u8; 16]`          | `d * q + m`      |
//! | Q5_0 | 22    | `d: f16, qh: u32, qs: [u8; 16]`         | `d * (q - 16)`   |
//! | Q5_1 | 24    | `d: f16, m: f16, qh: u32, qs: [u8; 16]` | `d * q + m`      |
//! | Q8_0 | 34    | `d: f16, qs: [i8; 32]`                  | `d * q`          |
//!
//! 4-bit quants: byte `qs[j]` holds element `j` in its low nibble and element
//! `j + 16` in its high nibble. 5-bit quants add bit `i` of the little-endian
//! `qh` as bit 4 of element `i`.

use super::f16_at;

/// Half the block: the 4-bit formats pack elements `j` and `j + 16` together.
const HALF: usize = 16;

/// Unpack the 16 nibble bytes into 32 unsigned 4-bit quants.
#[inline(always)]
fn nibbles(qs: &[u8], q: &mut [u8; 32]) {
    let (lo, hi) = q.split_at_mut(HALF);
    for ((l, h), &b) in lo.iter_mut().zip(hi.iter_mut()).zip(&qs[..HALF]) {
        *l = b & 0x0F;
        *h = b >> 4;
    }
}

/// Unpack 4-bit quants plus the 32 high bits of `qh` into 5-bit quants.
#[inline(always)]
fn five_bit(qh: u32, qs: &[u8], q: &mut [u8; 32]) {
    nibbles(qs, q);
    for (i, v) in q.iter_mut().enumerate() {
        *v |= (((qh >> i) & 1) as u8) << 4;
    }
}

#[inline(always)]
fn qh_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

/// `d · (q − off)` for every quant (Q4_0: `off` 8, Q5_0: 16).
#[inline(always)]
fn offset_values(d: f32, off: i32, q: &[u8; 32], out: &mut [f32; 32]) {
    for (o, &v) in out.iter_mut().zip(q) {
        *o = d * (v as i32 - off) as f32;
    }
}

/// `d · q + m` for every quant (Q4_1, Q5_1).
#[inline(always)]
fn affine_values(d: f32, m: f32, q: &[u8; 32], out: &mut [f32; 32]) {
    for (o, &v) in out.iter_mut().zip(q) {
        *o = d * v as f32 + m;
    }
}

pub fn decode_q4_0(b: &[u8; 18], out: &mut [f32; 32]) {
    let d = f16_at(b, 0);
    let mut q = [0u8; 32];
    nibbles(&b[2..], &mut q);
    offset_values(d, 8, &q, out);
}

pub fn decode_q4_1(b: &[u8; 20], out: &mut [f32; 32]) {
    let (d, m) = (f16_at(b, 0), f16_at(b, 2));
    let mut q = [0u8; 32];
    nibbles(&b[4..], &mut q);
    affine_values(d, m, &q, out);
}

pub fn decode_q5_0(b: &[u8; 22], out: &mut [f32; 32]) {
    let d = f16_at(b, 0);
    let mut q = [0u8; 32];
    five_bit(qh_at(b, 2), &b[6..], &mut q);
    offset_values(d, 16, &q, out);
}

pub fn decode_q5_1(b: &[u8; 24], out: &mut [f32; 32]) {
    let (d, m) = (f16_at(b, 0), f16_at(b, 2));
    let mut q = [0u8; 32];
    five_bit(qh_at(b, 4), &b[8..], &mut q);
    affine_values(d, m, &q, out);
}

pub fn decode_q8_0(b: &[u8; 34], out: &mut [f32; 32]) {
    let d = f16_at(b, 0);
    for (o, &v) in out.iter_mut().zip(&b[2..]) {
        *o = d * (v as i8) as f32;
    }
}
