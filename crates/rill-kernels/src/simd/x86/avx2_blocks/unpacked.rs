//! The exact (canonical-order) AVX2 kernels of the 256-value K blocks —
//! Q4_K, Q5_K, Q6_K, most of a Q4_K_M model's bytes — for 1 to 4 rows × 1
//! to 4 tokens (decode).
//!
//! Each row's block is first unpacked into 256 quant bytes (Q4_K / Q5_K:
//! the unsigned quant; Q6_K: `q − 32`) and its scales (and mins) in an
//! L1-resident scratch: a few 32-byte operations per 64 values. The product
//! then walks the block 8 columns at a time and, for each, every row: the
//! 8 bytes sign- or zero-extended straight from the scratch (`vpmovsxbd` /
//! `vpmovzxbd` with a memory operand), converted, scaled, and FMA'd into the
//! row's accumulator.
//!
//! Why: each output's canonical sum is one chain of FMAs (one accumulator,
//! chunks of 8 in column order). Decoded row after row, a row's chain (8
//! dependent FMAs per 64 values) had to fill the out-of-order window before
//! the next row's could start, and the decoding work of 6-bit fields from
//! registers (extracts, shifts) was paid per 8 values; here the R rows'
//! chains advance side by side, one FMA each per 8 columns, and the
//! per-value work is four µops. Every output gets the same FMAs in the same
//! order on the same decoded values, so the same bits as the scalar
//! decoder followed by `gemm::tile`.

use std::arch::x86_64::*;
use std::mem::MaybeUninit;
use std::ptr::{addr_of, addr_of_mut};

use super::super::prefetch_stream;
use super::{cvt, k4_scales_vec};
use crate::quant::QK_K;

/// `$body` for `$r` = 0, 1, 2, 3 below `$n` (at most 4), each with a
/// constant `$r`: a loop over the rows stays a loop, which keeps the
/// accumulators in memory (a store and a load in every FMA chain).
macro_rules! each_row {
    ($n:expr, |$r:ident| $body:expr) => {{
        const _: () = assert!(crate::simd::CANON_ROWS <= 4);
        if 0 < $n {
            let $r = 0;
            $body;
        }
        if 1 < $n {
            let $r = 1;
            $body;
        }
        if 2 < $n {
            let $r = 2;
            $body;
        }
        if 3 < $n {
            let $r = 3;
            $body;
        }
    }};
}

/// One row's block unpacked: the quants in element order and the scales
/// (`d·sc`) and mins (`dmin·m`) of its sub-blocks, each as the scalar
/// decoder computes it.
#[repr(C, align(32))]
struct Unpacked {
    q: [u8; QK_K],
    dl: [f32; 16],
    ml: [f32; 16],
}

/// A K block that unpacks into [`Unpacked`].
trait KBlock {
    /// Encoded bytes of a block.
    const BYTES: usize;
    /// Values per scale: 32 (Q4_K, Q5_K) or 16 (Q6_K).
    const SUB: usize;
    /// Signed quants times the scale (Q6_K), else unsigned quants times
    /// the scale minus the min.
    const SIGNED: bool;
    unsafe fn unpack(b: *const u8, u: *mut Unpacked);
}

/// Q4_K / Q5_K scales and mins into `u`.
#[inline(always)]
unsafe fn k4_into(b: *const u8, u: *mut Unpacked) {
    let (d, m) = k4_scales_vec(b);
    _mm256_store_ps(addr_of_mut!((*u).dl).cast(), d);
    _mm256_store_ps(addr_of_mut!((*u).ml).cast(), m);
}

struct Q4K;
impl KBlock for Q4K {
    const BYTES: usize = 144;
    const SUB: usize = 32;
    const SIGNED: bool = false;
    /// Chunk `c` of 64 values: the low nibbles of `qs[32c..32c + 32]`,
    /// then the high ones.
    #[inline(always)]
    unsafe fn unpack(b: *const u8, u: *mut Unpacked) {
        k4_into(b, u);
        let m0f = _mm256_set1_epi8(0x0F);
        let q = addr_of_mut!((*u).q).cast::<__m256i>();
        for c in 0..4 {
            let v = _mm256_loadu_si256(b.add(16 + 32 * c) as *const __m256i);
            _mm256_store_si256(q.add(2 * c), _mm256_and_si256(v, m0f));
            let hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m0f);
            _mm256_store_si256(q.add(2 * c + 1), hi);
        }
    }
}

struct Q5K;
impl KBlock for Q5K {
    const BYTES: usize = 176;
    const SUB: usize = 32;
    const SIGNED: bool = false;
    /// Q4_K's nibbles at `qs = b + 48` with bit `2c` (low nibbles) or
    /// `2c + 1` (high) of each `qh` byte on top as bit 4. The 16-bit shifts
    /// move bits across bytes; the masks keep each byte's own.
    #[inline(always)]
    unsafe fn unpack(b: *const u8, u: *mut Unpacked) {
        k4_into(b, u);
        let (m0f, m10) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x10));
        let qh = _mm256_loadu_si256(b.add(16) as *const __m256i);
        let q = addr_of_mut!((*u).q).cast::<__m256i>();
        for c in 0..4 {
            let v = _mm256_loadu_si256(b.add(48 + 32 * c) as *const __m256i);
            // Bit 2c (2c + 1) of each byte to bit 4.
            let (h0, h1) = match c {
                0 => (_mm256_slli_epi16(qh, 4), _mm256_slli_epi16(qh, 3)),
                1 => (_mm256_slli_epi16(qh, 2), _mm256_slli_epi16(qh, 1)),
                2 => (qh, _mm256_srli_epi16(qh, 1)),
                _ => (_mm256_srli_epi16(qh, 2), _mm256_srli_epi16(qh, 3)),
            };
            let lo = _mm256_or_si256(_mm256_and_si256(v, m0f), _mm256_and_si256(h0, m10));
            let hi = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(v, 4), m0f),
                _mm256_and_si256(h1, m10),
            );
            _mm256_store_si256(q.add(2 * c), lo);
            _mm256_store_si256(q.add(2 * c + 1), hi);
        }
    }
}

struct Q6K;
impl KBlock for Q6K {
    const BYTES: usize = 210;
    const SUB: usize = 16;
    const SIGNED: bool = true;
    /// Half `h` (128 values): the low nibbles of `ql[64h..64h + 32]`, of
    /// `ql[64h + 32..64h + 64]`, then their high nibbles, with bits
    /// 0-1, 2-3, 4-5, 6-7 of `qh[32h..32h + 32]` as bits 4-5, minus 32.
    /// Scales `d · sc` as the scalar decoder (16 of them).
    #[inline(always)]
    unsafe fn unpack(b: *const u8, u: *mut Unpacked) {
        let vd = _mm256_set1_ps(super::h2f(b.add(208)));
        for half in 0..2 {
            let sc = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
                b.add(192 + 8 * half) as *const __m128i,
            )));
            _mm256_store_ps(
                addr_of_mut!((*u).dl).cast::<f32>().add(8 * half),
                _mm256_mul_ps(vd, sc),
            );
        }
        let (m0f, m30, k32) = (
            _mm256_set1_epi8(0x0F),
            _mm256_set1_epi8(0x30),
            _mm256_set1_epi8(32),
        );
        let q = addr_of_mut!((*u).q).cast::<__m256i>();
        for h in 0..2 {
            let l0 = _mm256_loadu_si256(b.add(64 * h) as *const __m256i);
            let l1 = _mm256_loadu_si256(b.add(64 * h + 32) as *const __m256i);
            let qh = _mm256_loadu_si256(b.add(128 + 32 * h) as *const __m256i);
            let tops = [
                _mm256_slli_epi16(qh, 4),
                _mm256_slli_epi16(qh, 2),
                qh,
                _mm256_srli_epi16(qh, 2),
            ];
            let nibbles = [
                _mm256_and_si256(l0, m0f),
                _mm256_and_si256(l1, m0f),
                _mm256_and_si256(_mm256_srli_epi16(l0, 4), m0f),
                _mm256_and_si256(_mm256_srli_epi16(l1, 4), m0f),
            ];
            for j in 0..4 {
                let v = _mm256_or_si256(nibbles[j], _mm256_and_si256(tops[j], m30));
                _mm256_store_si256(q.add(4 * h + j), _mm256_sub_epi8(v, k32));
            }
        }
    }
}

/// Block `i` of the `R` rows at `w` into `u`, the rows prefetched as one
/// stream (`prefetch_stream`). (A function, not a closure: closures do not inherit
/// the target features, and their intrinsics would not inline.)
#[inline(always)]
unsafe fn unpack_rows<B: KBlock, const R: usize>(
    w: *const u8,
    i: usize,
    row_bytes: usize,
    u: *mut Unpacked,
) {
    prefetch_stream::<R>(w, i * B::BYTES, B::BYTES);
    each_row!(R, |r| {
        B::unpack(w.add(r * row_bytes + i * B::BYTES), u.add(r));
    });
}

/// `R` rows at `w` × `T` tokens at `x`: the canonical AVX2 order (one
/// accumulator per output, chunks of 8 in column order, then `hsum`), the
/// rows prefetched as `canon_rows` does.
#[inline(always)]
unsafe fn canon_rows_unpacked<B: KBlock, const R: usize, const T: usize>(
    w: *const u8,
    x: *const f32,
    cols: usize,
) -> [[f32; T]; R] {
    let n = cols / QK_K;
    let row_bytes = n * B::BYTES;
    let mut acc = [[_mm256_setzero_ps(); T]; R];
    // The scratch is written whole before it is read (`unpack` fills
    // every field the product reads); uninitialised, not zeroed: a kernel
    // call covers only 4 rows, and zeroing 5 KiB per call cost 5% of a
    // decode step.
    let mut scratch = MaybeUninit::<[Unpacked; R]>::uninit();
    let u = scratch.as_mut_ptr() as *mut Unpacked;
    for i in 0..n {
        unpack_rows::<B, R>(w, i, row_bytes, u);
        let xb = x.add(i * QK_K);
        // Sub-block by sub-block: each row's scale (and min) broadcast
        // once, held in registers across the sub-block's vectors.
        for s in 0..QK_K / B::SUB {
            let mut d = [_mm256_setzero_ps(); R];
            let mut m = [_mm256_setzero_ps(); R];
            each_row!(R, |r| {
                let ur = u.add(r);
                d[r] = _mm256_broadcast_ss(&*addr_of!((*ur).dl).cast::<f32>().add(s));
                if !B::SIGNED {
                    m[r] = _mm256_broadcast_ss(&*addr_of!((*ur).ml).cast::<f32>().add(s));
                }
            });
            for kk in 0..B::SUB / 8 {
                let k = s * B::SUB / 8 + kk;
                let mut xv = [_mm256_setzero_ps(); T];
                for (t, v) in xv.iter_mut().enumerate() {
                    *v = _mm256_loadu_ps(xb.add(t * cols + 8 * k));
                }
                each_row!(R, |r| {
                    let raw =
                        _mm_loadl_epi64(addr_of!((*u.add(r)).q).cast::<u8>().add(8 * k).cast());
                    // Exact: `dl · q` (Q6_K: the scalar decoder's one
                    // product). Q4_K / Q5_K: `dl · q − ml` in one rounding
                    // is the scalar decoder's `dl · q` then `− ml`, because
                    // `dl · q` is exact in f32 (an f16 times a 6-bit scale
                    // is ≤ 17 significant bits, times a 5-bit quant ≤ 22).
                    let wv = if B::SIGNED {
                        _mm256_mul_ps(d[r], cvt(_mm256_cvtepi8_epi32(raw)))
                    } else {
                        _mm256_fmsub_ps(d[r], cvt(_mm256_cvtepu8_epi32(raw)), m[r])
                    };
                    for t in 0..T {
                        acc[r][t] = _mm256_fmadd_ps(wv, xv[t], acc[r][t]);
                    }
                });
            }
        }
    }
    let mut out = [[0f32; T]; R];
    for r in 0..R {
        for t in 0..T {
            out[r][t] = super::super::hsum(acc[r][t]);
        }
    }
    out
}

macro_rules! unpacked_kernels {
    ($($canon:ident = $block:ident;)*) => {$(
        /// `R` rows × `T` tokens in the AVX2 canonical order, each row's
        /// block unpacked to bytes first (see the module doc).
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(in super::super) unsafe fn $canon<const R: usize, const T: usize>(
            w: *const u8,
            x: *const f32,
            cols: usize,
        ) -> [[f32; T]; R] {
            canon_rows_unpacked::<$block, R, T>(w, x, cols)
        }
    )*};
}

unpacked_kernels! {
    canon_q4_k = Q4K;
    canon_q5_k = Q5K;
    canon_q6_k = Q6K;
}
