//! aarch64 NEON kernels: exact block decoders, the matmul microkernel in the
//! canonical order of [`Isa::Avx2`](super::Isa), the in-register canonical
//! kernels of few-token matmuls ([`canon_tile`]), f32 dot / axpy.
//!
//! Developed on x86-64 machines: compile-checked there, and run under
//! qemu-user (`qemu-aarch64-static` as the cargo runner of
//! `aarch64-unknown-linux-gnu`). The tests (`tests/simd.rs`,
//! `tests/matmul.rs`, `tests/quant.rs`, and `tests` here for the canonical
//! kernels of every encoding) run it against the scalar and blocked paths
//! through [`Isa::available`](super::Isa).
//!
//! Every function here is `unsafe` (and `#[target_feature]` or inlined into
//! one that is): callers must have checked (through
//! [`Isa::check`](super::Isa)) that the CPU has NEON. The dispatchers at the
//! bottom of this file are the only entry points; they are reached only
//! from `quant::*_with` / `ops::*_with` / `gemm` after that check.
//!
//! Decoders produce exactly the scalar decoder's f32 values (same widening,
//! same multiplies and subtracts, no fusing), so NEON `dequantize` is
//! bit-identical to the scalar one. An 8-lane AVX2 accumulator is held here
//! as two `float32x4_t` (lanes 0..4 and 4..8) and summed as [`hsum`] does, so
//! the microkernel, the canonical kernels (the same decoders feeding their
//! values straight into such accumulators, see `canon`) and [`dot_f32`]
//! give the AVX2 path's bits.

use std::arch::aarch64::*;

use rill_dtype::DType;

// First: its `row_kernels!` macro builds the kernels of `blocks` and
// `k_blocks`.
#[macro_use]
mod canon;
mod blocks;
mod float;
pub(crate) mod gemm;
mod k_blocks;
#[cfg(test)]
mod tests;

/// The 8 lanes of `[lo, hi]` summed in the order of the x86 `hsum`:
/// lane `i` onto lane `i + 4`, then the two 64-bit halves, then the two
/// remaining lanes — the association the canonical order fixes.
#[inline]
#[target_feature(enable = "neon")]
pub(super) unsafe fn hsum(lo: float32x4_t, hi: float32x4_t) -> f32 {
    let s = vaddq_f32(lo, hi);
    let t = vadd_f32(vget_low_f32(s), vget_high_f32(s));
    vget_lane_f32::<0>(t) + vget_lane_f32::<1>(t)
}

/// Four 8-lane accumulators summed as the x86 `hsum4`:
/// `hsum((a0 + a1) + (a2 + a3))`.
#[inline]
#[target_feature(enable = "neon")]
pub(super) unsafe fn hsum4(a: &[[float32x4_t; 2]; 4]) -> f32 {
    let half = |h: usize| vaddq_f32(vaddq_f32(a[0][h], a[1][h]), vaddq_f32(a[2][h], a[3][h]));
    hsum(half(0), half(1))
}

/// The little-endian f16 at `p`, widened (exactly) to f32.
///
/// `fcvt` from half precision is base Armv8 (FEAT_FP16 only adds half
/// arithmetic); it is the instruction the `half` crate itself uses when
/// the CPU has FP16, and its software fallback gives the same bits for all
/// 65536 inputs (NaNs quieted, payload kept: checked by a test), so the
/// scalar decoders' values are kept. Not `half`'s
/// `to_f32` here: that is an out-of-line call behind a feature check, and
/// a call per block makes the canonical kernels spill every accumulator
/// held in a caller-saved register.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) unsafe fn h2f(p: *const u8) -> f32 {
    let bits = u16::from_le_bytes([*p, *p.add(1)]);
    let r: f32;
    std::arch::asm!(
        "fcvt {r:s}, {h:h}",
        r = out(vreg) r,
        h = in(vreg) bits,
        options(pure, nomem, nostack, preserves_flags)
    );
    r
}

/// Decode whole blocks of `src` into `dst`. `false`: no NEON kernel.
///
/// # Safety
/// The CPU must have NEON; sizes must satisfy the `quant::dequantize` contract.
pub(crate) unsafe fn dequantize(dtype: DType, src: &[u8], dst: &mut [f32]) -> bool {
    use blocks as b;
    use k_blocks as k;
    use DType::*;
    match dtype {
        // The float widenings read little-endian bytes as vector lanes.
        #[cfg(target_endian = "little")]
        F32 => float::widen_f32(src, dst),
        #[cfg(target_endian = "little")]
        F16 if std::arch::is_aarch64_feature_detected!("fp16") => float::widen_f16(src, dst),
        #[cfg(target_endian = "little")]
        BF16 => float::widen_bf16(src, dst),
        Q4_0 => b::deq_q4_0(src, dst),
        Q4_1 => b::deq_q4_1(src, dst),
        Q5_0 => b::deq_q5_0(src, dst),
        Q5_1 => b::deq_q5_1(src, dst),
        Q8_0 => b::deq_q8_0(src, dst),
        Q2K => k::deq_q2_k(src, dst),
        Q3K => k::deq_q3_k(src, dst),
        Q4K => k::deq_q4_k(src, dst),
        Q5K => k::deq_q5_k(src, dst),
        Q6K => k::deq_q6_k(src, dst),
        IQ4NL => b::deq_iq4_nl(src, dst),
        IQ4XS => b::deq_iq4_xs(src, dst),
        MXFP4 => b::deq_mxfp4(src, dst),
        _ => return false,
    }
    true
}

/// Elements decoded at once by [`dot`]: a whole number of blocks of every
/// encoding (32 or 256 elements, or 1 for floats), small enough for L1.
const DOT_CHUNK: usize = 256;

/// Decode + dot of one encoded row with `x`, through [`dequantize`] and a
/// stack buffer of [`DOT_CHUNK`] values (not fused: there are no fused NEON
/// dots yet). Its own order (four 8-lane accumulators), not the canonical
/// one; `None`: no NEON decoder for `dtype`, the caller uses the scalar dot.
///
/// # Safety
/// The CPU must have NEON; sizes must satisfy the `quant::dot` contract.
pub(crate) unsafe fn dot(dtype: DType, row: &[u8], x: &[f32]) -> Option<f32> {
    let (bl, bb) = (dtype.block_len(), dtype.block_bytes());
    debug_assert!(DOT_CHUNK.is_multiple_of(bl));
    debug_assert_eq!(row.len(), x.len() / bl * bb);
    let mut buf = [0f32; DOT_CHUNK];
    let mut acc = [[vdupq_n_f32(0.0); 2]; 4];
    // Only the last chunk (of a float row) can end in a partial vector:
    // its tail is added after the horizontal sum, as in `dot_f32`.
    let mut tail = (0, 0);
    for (i, xs) in x.chunks(DOT_CHUNK).enumerate() {
        let n = xs.len();
        let from = i * DOT_CHUNK / bl * bb;
        if !dequantize(dtype, &row[from..from + n / bl * bb], &mut buf[..n]) {
            return None;
        }
        tail = (float::fma_run(&mut acc, buf.as_ptr(), xs.as_ptr(), n), n);
    }
    let mut s = hsum4(&acc);
    let (done, n) = tail;
    let xs = &x[x.len() - n..];
    for (w, v) in buf[done..n].iter().zip(&xs[done..]) {
        s += w * v;
    }
    Some(s)
}

/// f32 dot product, in the AVX2 path's order (same bits).
///
/// # Safety
/// The CPU must have NEON; `a.len() == b.len()`.
pub(crate) unsafe fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    float::dot_f32(a, b)
}

/// `y += a · x`.
///
/// # Safety
/// The CPU must have NEON; `x.len() == y.len()`.
pub(crate) unsafe fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    float::axpy(a, x, y)
}

pub(crate) use super::{CANON_ROWS, CANON_TOKENS};

/// `out[r·nt + t] = Σ_c w[r][c]·x[t][c]` for `nr` encoded rows at `w` and
/// `nt` tokens, decoded in registers and multiplied in the canonical order
/// (see `canon`) — the same bits as decoding the rows with [`dequantize`]
/// and running [`gemm::tile`]. `false`: no such kernel for `dtype` (float
/// encodings, encodings without a NEON decoder; nothing written): the
/// caller decodes and multiplies instead.
///
/// # Safety
/// The CPU must have NEON; `w` holds `nr` whole encoded rows of `cols`
/// values, `x` holds `nt · cols` values, `1 ≤ nr ≤` [`CANON_ROWS`],
/// `1 ≤ nt ≤` [`CANON_TOKENS`], `out` at least `nr · nt`.
pub(crate) unsafe fn canon_tile(
    dtype: DType,
    w: &[u8],
    nr: usize,
    x: &[f32],
    nt: usize,
    cols: usize,
    out: &mut [f32],
) -> bool {
    debug_assert!((1..=CANON_ROWS).contains(&nr) && (1..=CANON_TOKENS).contains(&nt));
    let row_bytes = cols / dtype.block_len() * dtype.block_bytes();
    debug_assert!(w.len() >= nr * row_bytes && x.len() >= nt * cols && out.len() >= nr * nt);
    let (wp, xp) = (w.as_ptr(), x.as_ptr());
    macro_rules! shapes {
        ($m:ident :: $f:ident) => {
            super::canon_shapes!($m::$f, wp, xp, cols, nr, nt, row_bytes, out)
        };
    }
    use blocks as b;
    use k_blocks as k;
    use DType::*;
    match dtype {
        Q4_0 => shapes!(b::canon_q4_0),
        Q4_1 => shapes!(b::canon_q4_1),
        Q5_0 => shapes!(b::canon_q5_0),
        Q5_1 => shapes!(b::canon_q5_1),
        Q8_0 => shapes!(b::canon_q8_0),
        Q2K => shapes!(k::canon_q2_k),
        Q3K => shapes!(k::canon_q3_k),
        Q4K => shapes!(k::canon_q4_k),
        Q5K => shapes!(k::canon_q5_k),
        Q6K => shapes!(k::canon_q6_k),
        IQ4NL => shapes!(b::canon_iq4_nl),
        IQ4XS => shapes!(b::canon_iq4_xs),
        MXFP4 => shapes!(b::canon_mxfp4),
        _ => false,
    }
}
