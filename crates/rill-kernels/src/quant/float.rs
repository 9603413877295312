//! Plain float encodings: F32, F16 and BF16 (all little-endian, one element
//! per "block"). Widening F16/BF16 to f32 is exact.

use super::dot_f32;

/// How many elements the float `dot`s widen into their stack buffer at once.
const CHUNK: usize = 64;

#[inline(always)]
fn f32_le(b: &[u8; 4]) -> f32 {
    f32::from_le_bytes(*b)
}

#[inline(always)]
fn f16_le(b: &[u8; 2]) -> f32 {
    half::f16::from_bits(u16::from_le_bytes(*b)).to_f32()
}

/// BF16 is the top half of an f32: put the 16 bits back in the high half.
#[inline(always)]
fn bf16_le(b: &[u8; 2]) -> f32 {
    f32::from_bits((u16::from_le_bytes(*b) as u32) << 16)
}

#[inline(always)]
fn widen<const B: usize>(src: &[u8], dst: &mut [f32], conv: impl Fn(&[u8; B]) -> f32) {
    for (b, o) in src.chunks_exact(B).zip(dst.iter_mut()) {
        *o = conv(b.try_into().unwrap());
    }
}

/// Widen `CHUNK` elements at a time into a stack buffer and dot them with `x`.
#[inline(always)]
fn dot_widened<const B: usize>(row: &[u8], x: &[f32], conv: impl Fn(&[u8; B]) -> f32) -> f32 {
    let mut buf = [0.0f32; CHUNK];
    let mut acc = 0.0f32;
    let rows = row.chunks_exact(CHUNK * B);
    let xs = x.chunks_exact(CHUNK);
    let (row_tail, x_tail) = (rows.remainder(), xs.remainder());
    for (r, xc) in rows.zip(xs) {
        widen(r, &mut buf, &conv);
        acc += dot_f32(&buf, xc);
    }
    // Rows need not be a multiple of CHUNK elements.
    let n = x_tail.len();
    widen(row_tail, &mut buf[..n], &conv);
    acc + dot_f32(&buf[..n], x_tail)
}

pub fn dequantize_f32(src: &[u8], dst: &mut [f32]) {
    widen(src, dst, f32_le);
}

pub fn dequantize_f16(src: &[u8], dst: &mut [f32]) {
    widen(src, dst, f16_le);
}

pub fn dequantize_bf16(src: &[u8], dst: &mut [f32]) {
    widen(src, dst, bf16_le);
}

pub fn dot_row_f32(row: &[u8], x: &[f32]) -> f32 {
    dot_widened(row, x, f32_le)
}

pub fn dot_row_f16(row: &[u8], x: &[f32]) -> f32 {
    dot_widened(row, x, f16_le)
}

pub fn dot_row_bf16(row: &[u8], x: &[f32]) -> f32 {
    dot_widened(row, x, bf16_le)
}
