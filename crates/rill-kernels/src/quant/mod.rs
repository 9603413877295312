//! Decoding of quantized weight blocks: the portable scalar reference path.
//!
//! Every supported encoding is decoded exactly as ggml (and gguf-py's
//! `gguf/quants.py`) defines it, with the same f32 operation order, so the
//! results are bit-identical to gguf-py's `dequantize` (see `tests/quant.rs`).
//!
//! Layout: one file per family ([`float`], [`legacy`], [`k_quants`], [`iq4`],
//! [`iq_grid`], [`ternary`], [`mxfp4`], [`nvfp4`]); each provides `decode_*` functions
//! that turn one encoded block (`&[u8; BLOCK_BYTES]`) into its `[f32; BLOCK_LEN]` values. This module
//! drives them over rows: [`dequantize`] writes whole rows, [`dot`] decodes one
//! block at a time into a stack buffer and accumulates the dot product in f32.
//!
//! The code here is scalar but written over fixed-length arrays and
//! `chunks_exact` so the compiler can auto-vectorise it. It is the reference
//! path: hand-written SIMD kernels (`crate::simd`) are chosen at run time by
//! [`dot`] / [`dequantize`] and tested against it; [`dot_with`] /
//! [`dequantize_with`] run one path explicitly.
//!
//! # Contract
//! Callers pass validated sizes (the model loader checks tensor shapes when it
//! loads a file): element counts are whole blocks and byte slices have exactly
//! the encoded size. This is only checked with `debug_assert!`. Passing an
//! encoding for which [`is_supported`] is false panics.

use rill_dtype::DType;

use crate::simd::Isa;

pub mod encode;
mod encode_k;
pub mod float;
pub mod fp8;
pub mod iq4;
pub mod iq_grid;
pub(crate) mod iq_grids;
pub mod k_quants;
pub mod legacy;
pub mod mxfp4;
pub mod nvfp4;
pub mod ternary;

/// Elements per block of every super-block ("K") encoding.
pub const QK_K: usize = 256;

/// Whether the kernels can decode `dtype`.
pub fn is_supported(dtype: DType) -> bool {
    use DType::*;
    matches!(
        dtype,
        F32 | F16
            | BF16
            | Q4_0
            | Q4_1
            | Q5_0
            | Q5_1
            | Q8_0
            | Q2K
            | Q3K
            | Q4K
            | Q5K
            | Q6K
            | Q6KPlanar
            | IQ4NL
            | IQ4XS
            | IQ2XXS
            | IQ2XS
            | IQ2S
            | IQ3XXS
            | IQ3S
            | IQ1S
            | IQ1M
            | TQ1_0
            | TQ2_0
            | MXFP4
            | NVFP4
            | F8E4M3
            | E2M1
    )
}

/// The argument checks of [`dequantize_with`] and [`dot_with`]: `elements`
/// values, whole blocks of `dtype`, encoded in `bytes` (debug builds say
/// which is off), on a CPU that runs `isa`. Always inlined, as the checks
/// were written in both before.
#[inline(always)]
fn check_args(isa: Isa, dtype: DType, bytes: usize, elements: usize) {
    debug_assert!(
        elements.is_multiple_of(dtype.block_len()),
        "{dtype}: {elements} elements is not a whole number of blocks"
    );
    debug_assert_eq!(
        bytes,
        elements / dtype.block_len() * dtype.block_bytes(),
        "{dtype}: encoded size does not match element count"
    );
    isa.check();
    if bytes != elements / dtype.block_len().max(1) * dtype.block_bytes() {
        // Keeps the SIMD kernels (which use raw pointers) in bounds whatever
        // the caller passes; the contract makes this unreachable.
        size_mismatch(dtype);
    }
}

/// Decode `dst.len()` elements (a whole number of blocks) from `src` on
/// kernel class `isa` (every class gives the scalar path's bits).
///
/// `src.len()` must be exactly the encoded size of `dst.len()` elements.
/// Panics if `dtype` is not [`is_supported`], or if the CPU cannot run
/// `isa` (see [`Isa::is_available`]).
pub fn dequantize_with(isa: Isa, dtype: DType, src: &[u8], dst: &mut [f32]) {
    check_args(isa, dtype, src.len(), dst.len());
    #[cfg(target_arch = "x86_64")]
    if isa != Isa::Scalar {
        // SAFETY: `isa.check()` confirmed the CPU features; sizes are checked above.
        if unsafe { crate::simd::x86::dequantize(isa.wide(), dtype, src, dst) } {
            return;
        }
    }
    #[cfg(target_arch = "aarch64")]
    if isa == Isa::Neon {
        // SAFETY: `isa.check()` confirmed NEON; sizes are checked above.
        if unsafe { crate::simd::neon::dequantize(dtype, src, dst) } {
            return;
        }
    }
    dequantize_scalar(dtype, src, dst)
}

fn dequantize_scalar(dtype: DType, src: &[u8], dst: &mut [f32]) {
    use DType::*;
    match dtype {
        F32 => float::dequantize_f32(src, dst),
        F16 => float::dequantize_f16(src, dst),
        BF16 => float::dequantize_bf16(src, dst),
        Q4_0 => dequantize_blocks(src, dst, legacy::decode_q4_0),
        Q4_1 => dequantize_blocks(src, dst, legacy::decode_q4_1),
        Q5_0 => dequantize_blocks(src, dst, legacy::decode_q5_0),
        Q5_1 => dequantize_blocks(src, dst, legacy::decode_q5_1),
        Q8_0 => dequantize_blocks(src, dst, legacy::decode_q8_0),
        Q2K => dequantize_blocks(src, dst, k_quants::decode_q2_k),
        Q3K => dequantize_blocks(src, dst, k_quants::decode_q3_k),
        Q4K => dequantize_blocks(src, dst, k_quants::decode_q4_k),
        Q5K => dequantize_blocks(src, dst, k_quants::decode_q5_k),
        Q6K => dequantize_blocks(src, dst, k_quants::decode_q6_k),
        Q6KPlanar => dequantize_blocks(src, dst, crate::layout::decode_q6k_planar),
        IQ4NL => dequantize_blocks(src, dst, iq4::decode_iq4_nl),
        IQ4XS => dequantize_blocks(src, dst, iq4::decode_iq4_xs),
        IQ2XXS => dequantize_blocks(src, dst, iq_grid::decode_iq2_xxs),
        IQ2XS => dequantize_blocks(src, dst, iq_grid::decode_iq2_xs),
        IQ2S => dequantize_blocks(src, dst, iq_grid::decode_iq2_s),
        IQ3XXS => dequantize_blocks(src, dst, iq_grid::decode_iq3_xxs),
        IQ3S => dequantize_blocks(src, dst, iq_grid::decode_iq3_s),
        IQ1S => dequantize_blocks(src, dst, iq_grid::decode_iq1_s),
        IQ1M => dequantize_blocks(src, dst, iq_grid::decode_iq1_m),
        TQ1_0 => dequantize_blocks(src, dst, ternary::decode_tq1_0),
        TQ2_0 => dequantize_blocks(src, dst, ternary::decode_tq2_0),
        MXFP4 => dequantize_blocks(src, dst, mxfp4::decode_mxfp4),
        NVFP4 => dequantize_blocks(src, dst, nvfp4::decode_nvfp4),
        F8E4M3 => fp8::dequantize_f8e4m3(src, dst),
        E2M1 => fp8::dequantize_e2m1(src, dst),
        _ => unsupported(dtype),
    }
}

/// Dot product of one encoded row (`x.len()` elements) with f32 activations,
/// decoding block by block (no whole-row f32 copy), on kernel class `isa`.
///
/// `row.len()` must be exactly the encoded size of `x.len()` elements, and
/// `x.len()` a whole number of blocks. Accumulates in f32; allocates nothing.
/// Panics if `dtype` is not [`is_supported`], or if the CPU cannot run `isa`.
pub fn dot_with(isa: Isa, dtype: DType, row: &[u8], x: &[f32]) -> f32 {
    check_args(isa, dtype, row.len(), x.len());
    #[cfg(target_arch = "x86_64")]
    if isa != Isa::Scalar {
        // SAFETY: `isa.check()` confirmed the CPU features; sizes are checked above.
        if let Some(v) = unsafe { crate::simd::x86::dot(isa.wide(), dtype, row, x) } {
            return v;
        }
    }
    #[cfg(target_arch = "aarch64")]
    if isa == Isa::Neon {
        // No fused NEON dots yet: the NEON decoders into a stack buffer and
        // a NEON f32 dot, or the scalar dot for encodings they do not cover.
        // SAFETY: `isa.check()` confirmed NEON; sizes are checked above.
        if let Some(v) = unsafe { crate::simd::neon::dot(dtype, row, x) } {
            return v;
        }
    }
    dot_scalar(dtype, row, x)
}

fn dot_scalar(dtype: DType, row: &[u8], x: &[f32]) -> f32 {
    use DType::*;
    match dtype {
        F32 => float::dot_row_f32(row, x),
        F16 => float::dot_row_f16(row, x),
        BF16 => float::dot_row_bf16(row, x),
        Q4_0 => dot_blocks(row, x, legacy::decode_q4_0),
        Q4_1 => dot_blocks(row, x, legacy::decode_q4_1),
        Q5_0 => dot_blocks(row, x, legacy::decode_q5_0),
        Q5_1 => dot_blocks(row, x, legacy::decode_q5_1),
        Q8_0 => dot_blocks(row, x, legacy::decode_q8_0),
        Q2K => dot_blocks(row, x, k_quants::decode_q2_k),
        Q3K => dot_blocks(row, x, k_quants::decode_q3_k),
        Q4K => dot_blocks(row, x, k_quants::decode_q4_k),
        Q5K => dot_blocks(row, x, k_quants::decode_q5_k),
        Q6K => dot_blocks(row, x, k_quants::decode_q6_k),
        Q6KPlanar => dot_blocks(row, x, crate::layout::decode_q6k_planar),
        IQ4NL => dot_blocks(row, x, iq4::decode_iq4_nl),
        IQ4XS => dot_blocks(row, x, iq4::decode_iq4_xs),
        IQ2XXS => dot_blocks(row, x, iq_grid::decode_iq2_xxs),
        IQ2XS => dot_blocks(row, x, iq_grid::decode_iq2_xs),
        IQ2S => dot_blocks(row, x, iq_grid::decode_iq2_s),
        IQ3XXS => dot_blocks(row, x, iq_grid::decode_iq3_xxs),
        IQ3S => dot_blocks(row, x, iq_grid::decode_iq3_s),
        IQ1S => dot_blocks(row, x, iq_grid::decode_iq1_s),
        IQ1M => dot_blocks(row, x, iq_grid::decode_iq1_m),
        TQ1_0 => dot_blocks(row, x, ternary::decode_tq1_0),
        TQ2_0 => dot_blocks(row, x, ternary::decode_tq2_0),
        MXFP4 => dot_blocks(row, x, mxfp4::decode_mxfp4),
        NVFP4 => dot_blocks(row, x, nvfp4::decode_nvfp4),
        F8E4M3 => dot_blocks(row, x, |b: &[u8; 1], o: &mut [f32; 1]| {
            o[0] = fp8::E4M3[b[0] as usize]
        }),
        E2M1 => dot_blocks(row, x, |b: &[u8; 1], o: &mut [f32; 2]| {
            fp8::dequantize_e2m1(b, o)
        }),
        _ => unsupported(dtype),
    }
}

#[cold]
#[inline(never)]
fn size_mismatch(dtype: DType) -> ! {
    panic!("rill-kernels: {dtype}: encoded size does not match element count")
}

#[cold]
#[inline(never)]
fn unsupported(dtype: DType) -> ! {
    panic!("rill-kernels: no decoder for {dtype} (check quant::is_supported first)")
}

/// Apply a block decoder to every block of `src`, writing into `dst`.
#[inline(always)]
fn dequantize_blocks<const BB: usize, const L: usize>(
    src: &[u8],
    dst: &mut [f32],
    decode: impl Fn(&[u8; BB], &mut [f32; L]),
) {
    for (block, out) in src.chunks_exact(BB).zip(dst.chunks_exact_mut(L)) {
        // Both conversions are infallible: chunks_exact yields exactly BB / L items.
        decode(block.try_into().unwrap(), out.try_into().unwrap());
    }
}

/// Fused decode + dot: decode each block into a stack buffer, dot it with the
/// matching slice of `x`, and sum the per-block results.
#[inline(always)]
fn dot_blocks<const BB: usize, const L: usize>(
    row: &[u8],
    x: &[f32],
    decode: impl Fn(&[u8; BB], &mut [f32; L]),
) -> f32 {
    let mut buf = [0.0f32; L];
    let mut acc = 0.0f32;
    for (block, xs) in row.chunks_exact(BB).zip(x.chunks_exact(L)) {
        decode(block.try_into().unwrap(), &mut buf);
        acc += dot_f32(&buf, xs);
    }
    acc
}

/// Number of independent partial sums in [`dot_f32`]: one 256-bit vector of
/// f32, so the loop maps onto SIMD lanes (and, as a side effect, sums in a
/// slightly more balanced order than a single running total).
const LANES: usize = 8;

/// f32 dot product of two equally long slices.
#[inline(always)]
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let mut lanes = [0.0f32; LANES];
    let ca = a.chunks_exact(LANES);
    let cb = b.chunks_exact(LANES);
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(p, q)| p * q)
        .sum();
    for (pa, pb) in ca.zip(cb) {
        for i in 0..LANES {
            lanes[i] += pa[i] * pb[i];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// The little-endian f16 at `b[i..i + 2]`, widened (exactly) to f32.
#[inline(always)]
pub(crate) fn f16_at(b: &[u8], i: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[i], b[i + 1]])).to_f32()
}
