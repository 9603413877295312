//! x86-64 kernels: AVX2+FMA+F16C for every encoding, AVX-512 for the hottest.
//!
//! Every function here is `#[target_feature]` and `unsafe`: callers must have
//! checked (through [`Isa::check`](super::Isa)) that the CPU has the features.
//! The safe dispatchers at the bottom of this file are the only entry points;
//! they are reached only from `quant::*_with` / `ops::*_with` after that check.
//!
//! Decoders produce exactly the scalar decoder's f32 values (same widening,
//! same multiplies and subtracts, no fusing), so SIMD `dequantize` is
//! bit-identical to the scalar one. The fused dots may fuse the scale into an
//! FMA or factor a block scale out of the sum; they are tested against the
//! scalar path within a tolerance relative to `Σ|wᵢ·xᵢ|`.

use std::arch::x86_64::*;

use rill_dtype::DType;
/// `dot_NAME(row, x)`, `deq_NAME(src, dst)` and, per `canon_NAME: Acc`,
/// `canon_NAME::<R, T>` (the canonical order of the row accumulator `Acc`)
/// over whole blocks of one encoding, with the target features `$feat`, in
/// the module that invokes it (its `Dot`, `Store`, accumulators and block
/// decoders; `$zero` is its zero accumulator, `$sum4` its fold of the
/// four): the AVX2 and AVX-512 paths run these loops on their own vectors.
macro_rules! row_kernels {
    ($feat:literal, $zero:expr, $sum4:ident;
     $($block:path: $dot:ident, $deq:ident $(, $canon:ident: $acc:ident)*; $bb:expr, $bl:expr;)*) => {$(
        #[target_feature(enable = $feat)]
        pub(super) unsafe fn $dot(row: &[u8], x: &[f32]) -> f32 {
            let n = x.len() / $bl;
            debug_assert_eq!(row.len(), n * $bb);
            let rp = row.as_ptr();
            let mut e = Dot { x: x.as_ptr(), acc: [$zero; 4] };
            // Four blocks per step so that each gets a constant accumulator
            // slot (a computed one would keep the accumulators in memory).
            let mut i = 0;
            while i + 4 <= n {
                for k in 0..4 {
                    e.x = x.as_ptr().add((i + k) * $bl);
                    $block(rp.add((i + k) * $bb), &mut e, k);
                }
                i += 4;
            }
            while i < n {
                e.x = x.as_ptr().add(i * $bl);
                $block(rp.add(i * $bb), &mut e, 0);
                i += 1;
            }
            $sum4(&e.acc)
        }

        // (AVX-512: Q8_0's is not dispatched, measured slower than AVX2's.)
        #[allow(dead_code)]
        #[target_feature(enable = $feat)]
        pub(super) unsafe fn $deq(src: &[u8], dst: &mut [f32]) {
            let n = dst.len() / $bl;
            debug_assert_eq!(src.len(), n * $bb);
            let (sp, dp) = (src.as_ptr(), dst.as_mut_ptr());
            for i in 0..n {
                $block(sp.add(i * $bb), &mut Store { p: dp.add(i * $bl) }, 0);
            }
        }

        $(
        /// `R` rows × `T` tokens decoded in registers, in the canonical
        /// order `$acc` keeps (see `super::canon_rows`; the AVX2 path's
        /// `Canon16` ones serve only encodings AVX-512 has no decoder for).
        #[allow(dead_code)]
        #[target_feature(enable = $feat)]
        pub(super) unsafe fn $canon<const R: usize, const T: usize>(
            w: *const u8,
            x: *const f32,
            cols: usize,
        ) -> [[f32; T]; R] {
            super::canon_rows::<$acc<T>, R, T>(w, x, cols, ($bb, $bl), |b, e| $block(b, e, 0))
        }
        )*
    )*};
}

/// The path's plain emitters, on its vector `$v` (`$store`, `$load`,
/// `$fma` its intrinsics): `Store` writes the decoded block at `p`
/// (`dequantize`); `Dot` is the fused dot of one row with `x` (this block's
/// part at `x`): four accumulators, fused scale-and-min, factored block
/// scales — fast, not in the canonical order. `$dot_extra` are the path's
/// own further `Emit` methods of `Dot`. Also `scale_min`: `dl * q - ml`
/// exactly as the scalar decoder (mul, then sub) for exact emitters, fused
/// (one rounding, `$fmsub`) in the dot. `Emit` and `Acc` are the invoking
/// module's.
macro_rules! plain_emitters {
    ($feat:literal, $v:ty, $store:ident, $load:ident, $fma:ident, ($sub:ident, $mul:ident, $fmsub:ident);
     $($dot_extra:tt)*) => {
        pub(super) struct Store {
            pub(super) p: *mut f32,
        }

        impl Emit for Store {
            const EXACT: bool = true;
            #[inline(always)]
            unsafe fn put(&mut self, off: usize, v: $v, _slot: usize) {
                $store(self.p.add(off), v);
            }
        }

        pub(super) struct Dot {
            pub(super) x: *const f32,
            pub(super) acc: Acc,
        }

        impl Emit for Dot {
            const EXACT: bool = false;
            #[inline(always)]
            unsafe fn put(&mut self, off: usize, v: $v, slot: usize) {
                let a = &mut self.acc[slot & 3];
                *a = $fma(v, $load(self.x.add(off)), *a);
            }
            $($dot_extra)*
        }

        #[inline]
        #[target_feature(enable = $feat)]
        unsafe fn scale_min<E: Emit>(dl: $v, q: $v, ml: $v) -> $v {
            if E::EXACT {
                $sub($mul(dl, q), ml)
            } else {
                $fmsub(dl, q, ml)
            }
        }
    };
}

/// The path's canonical row accumulator `Canon<T>`: one row against `T`
/// tokens in the canonical order of `crate::gemm`: the exact decoded
/// values, one accumulator per token, `acc = fma(w, x, acc)` over the
/// row's chunks of one vector in order. `x` is this block's part of token
/// 0; token `t` is `t · stride` values further. The AVX2 and AVX-512 paths
/// differ only in the vector `$v` (its `$zero`, `$load`, `$fma`) and the
/// horizontal sum `$sum`; `Emit` is the invoking module's.
macro_rules! canon_acc {
    ($v:ty, $zero:ident, $load:ident, $fma:ident, $sum:path) => {
        pub(super) struct Canon<const T: usize> {
            pub(super) x: *const f32,
            pub(super) stride: usize,
            pub(super) acc: [$v; T],
        }

        impl<const T: usize> super::RowAcc<T> for Canon<T> {
            #[inline(always)]
            unsafe fn start(x: *const f32, stride: usize) -> Self {
                Canon {
                    x,
                    stride,
                    acc: [$zero(); T],
                }
            }
            #[inline(always)]
            fn at_block(&mut self, x: *const f32) {
                self.x = x;
            }
            #[inline(always)]
            unsafe fn sums(&self) -> [f32; T] {
                self.acc.map(|a| $sum(a))
            }
        }

        impl<const T: usize> Emit for Canon<T> {
            const EXACT: bool = true;
            #[inline(always)]
            unsafe fn put(&mut self, off: usize, v: $v, _slot: usize) {
                for t in 0..T {
                    let xv = $load(self.x.add(t * self.stride + off));
                    self.acc[t] = $fma(v, xv, self.acc[t]);
                }
            }
        }
    };
}

mod avx2_blocks;
mod avx512;
mod float;
mod float_canon;
pub(crate) mod gemm;
mod scaled;

pub(crate) use scaled::{canon_tile as canon_scaled_tile, dequantize_row as dequantize_scaled_row};

/// Sum of the 8 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// Sum of four accumulators' lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn hsum4(a: &[__m256; 4]) -> f32 {
    hsum(_mm256_add_ps(
        _mm256_add_ps(a[0], a[1]),
        _mm256_add_ps(a[2], a[3]),
    ))
}

/// The little-endian f16 at `p`, widened (exactly) to f32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn h2f(p: *const u8) -> f32 {
    let bits = u16::from_le_bytes([*p, *p.add(1)]);
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
}

/// 8 unsigned bytes at `p` zero-extended to 8 × i32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn ld8u(p: *const u8) -> __m256i {
    _mm256_cvtepu8_epi32(_mm_loadl_epi64(p as *const __m128i))
}

/// The 32 bytes at `p` as four vectors of [`ld8u`] (bytes `8k..8k + 8` in
/// vector `k`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn ld8u4(p: *const u8) -> [__m256i; 4] {
    [ld8u(p), ld8u(p.add(8)), ld8u(p.add(16)), ld8u(p.add(24))]
}

/// 8 signed bytes at `p` sign-extended to 8 × i32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn ld8s(p: *const u8) -> __m256i {
    _mm256_cvtepi8_epi32(_mm_loadl_epi64(p as *const __m128i))
}

/// Fused decode + dot of one encoded row with `x`. `None`: no SIMD kernel.
///
/// # Safety
/// The CPU must support `isa` (AVX2+FMA+F16C, and AVX-512F/BW/VL for
/// [`Isa::Avx512`](super::Isa)); sizes must satisfy the `quant::dot` contract.
pub(crate) unsafe fn dot(avx512: bool, dtype: DType, row: &[u8], x: &[f32]) -> Option<f32> {
    use avx2_blocks as b;
    use DType::*;
    if avx512 {
        if let Some(v) = avx512::dot(dtype, row, x) {
            return Some(v);
        }
    }
    Some(match dtype {
        F32 => float::dot_f32_bytes(row, x),
        F16 => float::dot_f16(row, x),
        BF16 => float::dot_bf16(row, x),
        Q4_0 => b::dot_q4_0(row, x),
        Q4_1 => b::dot_q4_1(row, x),
        Q5_0 => b::dot_q5_0(row, x),
        Q5_1 => b::dot_q5_1(row, x),
        Q8_0 => b::dot_q8_0(row, x),
        Q2K => b::dot_q2_k(row, x),
        Q3K => b::dot_q3_k(row, x),
        Q4K => b::dot_q4_k(row, x),
        Q5K => b::dot_q5_k(row, x),
        Q6K => b::dot_q6_k(row, x),
        IQ4NL => b::dot_iq4_nl(row, x),
        IQ4XS => b::dot_iq4_xs(row, x),
        MXFP4 => b::dot_mxfp4(row, x),
        _ => return None,
    })
}

/// Decode whole blocks of `src` into `dst`. `false`: no SIMD kernel.
///
/// # Safety
/// As [`dot`], with the `quant::dequantize` contract.
pub(crate) unsafe fn dequantize(avx512: bool, dtype: DType, src: &[u8], dst: &mut [f32]) -> bool {
    use avx2_blocks as b;
    use DType::*;
    if avx512 && avx512::dequantize(dtype, src, dst) {
        return true;
    }
    match dtype {
        F32 => float::widen_f32(src, dst),
        F16 => float::widen_f16(src, dst),
        BF16 => float::widen_bf16(src, dst),
        Q4_0 => b::deq_q4_0(src, dst),
        Q4_1 => b::deq_q4_1(src, dst),
        Q5_0 => b::deq_q5_0(src, dst),
        Q5_1 => b::deq_q5_1(src, dst),
        Q8_0 => b::deq_q8_0(src, dst),
        Q2K => b::deq_q2_k(src, dst),
        Q3K => b::deq_q3_k(src, dst),
        Q4K => b::deq_q4_k(src, dst),
        Q5K => b::deq_q5_k(src, dst),
        Q6K => b::deq_q6_k(src, dst),
        IQ4NL => b::deq_iq4_nl(src, dst),
        IQ4XS => b::deq_iq4_xs(src, dst),
        MXFP4 => b::deq_mxfp4(src, dst),
        _ => return false,
    }
    true
}

/// `dst[c·ld + r]` = element `c` of row `r` of `src` (`rows` rows of
/// `stride` bytes, `cols` elements of `dtype` each): F32, F16 and BF16
/// rows widened and transposed together. `false`: no kernel for `dtype`.
///
/// # Safety
/// The CPU must have AVX2+FMA+F16C.
pub(crate) unsafe fn widen_transposed(
    dtype: DType,
    src: &[u8],
    stride: usize,
    (rows, cols): (usize, usize),
    dst: &mut [f32],
    ld: usize,
) -> bool {
    let bytes = match dtype {
        DType::F32 => 4 * cols,
        DType::F16 | DType::BF16 => 2 * cols,
        _ => return false,
    };
    if rows == 0 || cols == 0 {
        return true;
    }
    assert!(src.len() >= (rows - 1) * stride + bytes && dst.len() >= (cols - 1) * ld + rows);
    assert!(ld >= rows);
    float::widen_transposed_as(
        dtype,
        src.as_ptr(),
        stride,
        (rows, cols),
        dst.as_mut_ptr(),
        ld,
    )
}

/// `small::product_nn_add` of `a` (`m × kk`, stride `lda`) and `kk` f16
/// rows of `p` values (`ldb` bytes apart) into `out` (stride `ldo`), the
/// rows converted as they are loaded: the same bits as widening them first.
/// `false` (nothing written) unless `p` is a multiple of 16.
///
/// # Safety
/// The CPU must have AVX2+FMA+F16C.
pub(crate) unsafe fn product_add_f16(
    (a, lda): (&[f32], usize),
    (b, ldb): (&[u8], usize),
    (m, kk, p): (usize, usize, usize),
    (out, ldo): (&mut [f32], usize),
) -> bool {
    if !p.is_multiple_of(16) {
        return false;
    }
    if m == 0 || p == 0 {
        return true;
    }
    assert!(lda >= kk && ldo >= p && ldb >= 2 * p);
    assert!(a.len() >= (m - 1) * lda + kk && out.len() >= (m - 1) * ldo + p);
    assert!(kk == 0 || b.len() >= (kk - 1) * ldb + 2 * p);
    float::product_add_f16(
        a.as_ptr(),
        lda,
        b.as_ptr(),
        ldb,
        (m, kk, p),
        out.as_mut_ptr(),
        ldo,
    );
    true
}

/// f32 dot product.
///
/// # Safety
/// The CPU must have AVX2+FMA+F16C; `a.len() == b.len()`.
pub(crate) unsafe fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    float::dot_f32(a, b)
}

/// `y += a · x`.
///
/// # Safety
/// The CPU must have AVX2+FMA+F16C; `x.len() == y.len()`.
pub(crate) unsafe fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    float::axpy(a, x, y)
}

pub(crate) use super::{CANON_ROWS, CANON_TOKENS};

/// Bytes ahead of the read position that [`prefetch_stream`] asks for
/// (measured on the q8 decode kernels: `q8/x86.rs` has the figures).
pub(crate) const STREAM_AHEAD: usize = 6144;

/// Prefetch (into L2) the bytes of `R` consecutive rows that lie
/// [`STREAM_AHEAD`] past the read position,
/// taking the rows as the one forward stream of bytes they are: a kernel
/// reading block `off..off + bytes` of each row is `R · off` into the run,
/// and the bytes ahead are mostly those of the next group of rows (the
/// kernels' calls are short). Prefetched rows one by one instead, the
/// pattern is scattered and the reads stall. Every x86 kernel that streams
/// rows uses it, the q8 ones and the exact in-register ones. (Prefetches
/// never fault, so the address may lie past the matrix.)
#[inline(always)]
pub(crate) unsafe fn prefetch_stream<const R: usize>(w: *const u8, off: usize, bytes: usize) {
    let at = w.wrapping_add(R * off + STREAM_AHEAD);
    let mut o = 0;
    while o < R * bytes {
        _mm_prefetch(at.wrapping_add(o) as *const i8, _MM_HINT_T2);
        o += 64;
    }
}

/// The accumulators of one row's in-register product with `T` tokens (the
/// canonical emitter of a path, which the block decoder feeds).
pub(super) trait RowAcc<const T: usize> {
    /// Zeroed accumulators; token `t`'s activations are `t · stride` after
    /// token 0's.
    unsafe fn start(x: *const f32, stride: usize) -> Self;
    /// The next block's activations start at `x` (token 0).
    fn at_block(&mut self, x: *const f32);
    /// Each token's sum, in the path's canonical horizontal order.
    unsafe fn sums(&self) -> [f32; T];
}

/// The body of every in-register kernel: `R` consecutive encoded rows at
/// `w` × `T` tokens at `x` (`cols` values each), decoded block by block with
/// the rows interleaved, prefetched as one stream ([`prefetch_stream`]).
/// `block` decodes one block (`bb` bytes, `bl` values) into an accumulator.
#[inline(always)]
pub(super) unsafe fn canon_rows<A: RowAcc<T>, const R: usize, const T: usize>(
    w: *const u8,
    x: *const f32,
    cols: usize,
    (bb, bl): (usize, usize),
    block: impl Fn(*const u8, &mut A),
) -> [[f32; T]; R] {
    let n = cols / bl;
    let row_bytes = n * bb;
    let mut e: [A; R] = [(); R].map(|_| A::start(x, cols));
    for i in 0..n {
        prefetch_stream::<R>(w, i * bb, bb);
        #[allow(clippy::needless_range_loop)]
        for r in 0..R {
            e[r].at_block(x.add(i * bl));
            block(w.add(r * row_bytes + i * bb), &mut e[r]);
        }
    }
    let mut out = [[0f32; T]; R];
    for r in 0..R {
        out[r] = e[r].sums();
    }
    out
}

/// `out[r·nt + t] = Σ_c w[r][c]·x[t][c]` for `nr` encoded rows at `w` and
/// `nt` tokens, decoded in registers and multiplied in the canonical order
/// of the AVX-512 (`avx512`) or AVX2 path — the same bits as decoding the
/// rows and running `gemm::tile`. `false`: no such kernel for `dtype`
/// (nothing written); the caller decodes and multiplies instead.
///
/// # Safety
/// The CPU must support the path (as [`dot`]); `w` holds `nr` whole
/// encoded rows of `cols` values, `x` holds `nt · cols` values, `1 ≤ nr ≤`
/// [`CANON_ROWS`], `1 ≤ nt ≤` [`CANON_TOKENS`], `out` at least `nr · nt`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn canon_tile(
    avx512: bool,
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
    // One table for both paths: `$k`'s kernels, but for the four encodings
    // named after it (Q5_0, Q5_1, Q2_K, Q3_K), taken from `avx2_blocks`.
    macro_rules! by_dtype {
        ($k:ident, {$q50:ident, $q51:ident, $q2k:ident, $q3k:ident}) => {
            match dtype {
                Q4_0 => shapes!($k::canon_q4_0),
                Q4_1 => shapes!($k::canon_q4_1),
                Q5_0 => shapes!(avx2_blocks::$q50),
                Q5_1 => shapes!(avx2_blocks::$q51),
                Q8_0 => shapes!($k::canon_q8_0),
                Q2K => shapes!(avx2_blocks::$q2k),
                Q3K => shapes!(avx2_blocks::$q3k),
                Q4K => shapes!($k::canon_q4_k),
                Q5K => shapes!($k::canon_q5_k),
                Q6K => shapes!($k::canon_q6_k),
                IQ4NL => shapes!($k::canon_iq4_nl),
                IQ4XS => shapes!($k::canon_iq4_xs),
                MXFP4 => shapes!($k::canon_mxfp4),
                _ => false,
            }
        };
    }
    use DType::*;
    // BF16 / F16 rows of whole blocks of 16 values, in either order (F32
    // rows are read in place by the blocked path, nothing to decode).
    if matches!(dtype, BF16 | F16) {
        if !cols.is_multiple_of(16) {
            return false;
        }
        return match (dtype, avx512) {
            (BF16, false) => shapes!(float_canon::canon_bf16),
            (BF16, true) => shapes!(float_canon::canon16_bf16),
            (_, false) => shapes!(float_canon::canon_f16),
            (_, true) => shapes!(float_canon::canon16_f16),
        };
    }
    if avx512 {
        // Encodings with only an AVX2 decoder keep the 16-lane order in
        // pairs of 8-lane halves (Q5_0, Q5_1, Q2_K, Q3_K).
        by_dtype!(avx512, {canon16_q5_0, canon16_q5_1, canon16_q2_k, canon16_q3_k})
    } else {
        by_dtype!(avx2_blocks, {canon_q5_0, canon_q5_1, canon_q2_k, canon_q3_k})
    }
}
