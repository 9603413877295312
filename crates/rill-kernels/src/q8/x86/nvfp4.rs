//! NVFP4 rows (E2M1 codes two a byte, low nibble first; one E4M3 scale
//! per 16 values; a global scale) · 8-bit activations (B32), AVX2, in the
//! canonical order of `q8` (`reference::dot_nvfp4_ref`).
//!
//! Twice an E2M1 level is a small integer (−12..=12), so `pshufb` of a
//! table gives the weights as signed bytes; their magnitudes go through
//! `vpmaddubsw` with the sign moved onto the activations: eight i16 pair
//! sums per 16-value group. Every 128 values the eight groups' pairs are
//! folded by three `vphaddw` and one `vpmaddwd` by ones into one vector of
//! i32, lanes `[g0 g2 g4 g6 | g1 g3 g5 g7]` — exactly the partial sums
//! `p[g mod 8]` of the canonical order, so one multiply-add per 128 values
//! and token.
//! The group scales are decoded through their f16 bit pattern (E4M3/256,
//! the 256 folded into the activations' scale, exactly).
//!
//! With more than 4 tokens a row's levels are decoded once into a buffer,
//! and the activations come offset by 128 (unsigned, made once per call):
//! `vpmaddubsw` then takes them as they are, with no `vpsignb` per token,
//! and each group's `128 · ΣL`, computed with the levels, is taken off.
//! The same integers, so the same bits.
//!
//! GGUF's NVFP4 blocks (`GGUF = true`) run the same body: their values,
//! scales and order are the checkpoints', only where the bytes lie
//! differs — each 64 values a block of four scale bytes (unsigned: bit 7
//! masked off, as ggml ignores it) then 32 code bytes, a group's byte `j`
//! holding its values `j` and `j + 8` (`reference::dot_nvfp4_gguf_ref`).

use std::arch::x86_64::*;

use crate::q8::Q8Rows;
use crate::quant::mxfp4::E2M1_DOUBLED;
use crate::quant::nvfp4::{any_nan_scale, any_nan_scale_in_blocks};

/// Bytes ahead that each row prefetches into L2 (the other integer
/// kernels' distance).
const AHEAD: usize = 6144;

/// `put(t, row · token t)` for every token of `acts`, one NVFP4 row of
/// `codes` with group `scales` and `global` (GGUF: `codes` the row's
/// blocks, `scales` empty, `global` 1). `false`: the row is not whole
/// blocks of 128 values, or a scale is NaN (GGUF: 0x7F or 0xFF, which
/// ggml reads as 0 and 480; the reference computes those); nothing was
/// put.
///
/// `offset`: every row of `acts` plus 128 as bytes, token-major (see
/// [`offset_acts`]), for calls with more than 4 tokens.
///
/// # Safety
/// The CPU must have AVX2+FMA+F16C; `codes` and `scales` are one row of
/// `acts.cols()` values, `acts` in the B32 format.
pub(crate) unsafe fn row<const GGUF: bool>(
    codes: &[u8],
    scales: &[u8],
    global: f32,
    acts: Q8Rows<'_>,
    offset: Option<&[u8]>,
    mut put: impl FnMut(usize, f32),
) -> bool {
    let cols = acts.cols();
    let bad_scale = if GGUF {
        any_nan_scale_in_blocks(codes)
    } else {
        any_nan_scale(scales)
    };
    if !cols.is_multiple_of(128) || bad_scale {
        return false;
    }
    debug_assert!(if GGUF {
        codes.len() == cols / 64 * 36
    } else {
        codes.len() == cols / 2 && scales.len() == cols / 16
    });
    let h = global * 0.5;
    // Several token groups: the row's levels and each group's 128 · ΣL
    // decoded once, into a buffer on the stack, and read by every group.
    // (Not zeroed: `levels` writes every byte that is read.)
    let mut pre = std::mem::MaybeUninit::<[u8; MAX_PRE + MAX_PRE / 4]>::uninit();
    let offset = offset.filter(|o| acts.n() > 4 && cols <= MAX_PRE && o.len() >= acts.n() * cols);
    let pre = if offset.is_some() {
        let at = pre.as_mut_ptr() as *mut u8;
        levels::<GGUF>(codes.as_ptr(), cols, at);
        at as *const u8
    } else {
        std::ptr::null()
    };
    let mut t = 0;
    while t < acts.n() {
        let left = acts.n() - t;
        macro_rules! tokens {
            ($T:literal) => {{
                let xs: [_; $T] = std::array::from_fn(|k| acts.row(t + k));
                let qs: [*const i8; $T] = match offset {
                    Some(o) => std::array::from_fn(|k| o[(t + k) * cols..].as_ptr() as *const i8),
                    None => xs.map(|a| a.qs.as_ptr()),
                };
                let ds = xs.map(|a| a.d.as_ptr());
                let sums = if pre.is_null() {
                    body::<$T, false, GGUF>(codes.as_ptr(), scales.as_ptr(), cols, qs, ds, pre)
                } else {
                    body::<$T, true, GGUF>(codes.as_ptr(), scales.as_ptr(), cols, qs, ds, pre)
                };
                for (k, s) in sums.into_iter().enumerate() {
                    put(t + k, s * h);
                }
                $T
            }};
        }
        t += match left {
            1 => tokens!(1),
            2 => tokens!(2),
            3 => tokens!(3),
            _ => tokens!(4),
        };
    }
    true
}

/// Longest row whose levels [`row`] decodes once for all token groups.
const MAX_PRE: usize = 16384;

/// Where the codes of values `c + 32u .. c + 32u + 32` lie (`c` a
/// multiple of 128, `u < 4`).
#[inline(always)]
unsafe fn codes_at<const GGUF: bool>(codes: *const u8, c: usize, u: usize) -> *const u8 {
    if GGUF {
        codes.add((c / 64 + u / 2) * 36 + 4 + 16 * (u % 2))
    } else {
        codes.add(c / 2 + 16 * u)
    }
}

/// The eight group scale bytes of values `c .. c + 128` in group order, in
/// the low 8 bytes (GGUF: bit 7 cleared).
#[inline(always)]
unsafe fn scales_at<const GGUF: bool>(codes: *const u8, scales: *const u8, c: usize) -> __m128i {
    if GGUF {
        let b = codes.add(c / 64 * 36);
        let first = (b as *const i32).read_unaligned();
        let second = (b.add(36) as *const i32).read_unaligned();
        _mm_and_si128(_mm_set_epi32(0, 0, second, first), _mm_set1_epi8(0x7F))
    } else {
        _mm_loadl_epi64(scales.add(c / 16) as *const __m128i)
    }
}

/// [`decode32`] of a checkpoint's byte order, for the row panels.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::q8::x86) unsafe fn decode32_checkpoint(w: *const u8) -> (__m256i, __m256i) {
    decode32::<false>(w)
}

/// [`decode32`] of GGUF's byte order, for the row panels.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::q8::x86) unsafe fn decode32_gguf(w: *const u8) -> (__m256i, __m256i) {
    decode32::<true>(w)
}

/// The signed levels (twice the E2M1 value) and their magnitudes of the
/// 32 codes at `w`, in value order.
#[inline(always)]
unsafe fn decode32<const GGUF: bool>(w: *const u8) -> (__m256i, __m256i) {
    let lut = _mm256_broadcastsi128_si256(_mm_loadu_si128(E2M1_DOUBLED.as_ptr() as *const __m128i));
    let nib = _mm_set1_epi8(0x0F);
    let b = _mm_loadu_si128(w as *const __m128i);
    let (lo, hi) = (
        _mm_and_si128(b, nib),
        _mm_and_si128(_mm_srli_epi16::<4>(b), nib),
    );
    let ordered = if GGUF {
        // Two groups: each one's 8 low nibbles, then its 8 high ones.
        _mm256_set_m128i(_mm_unpackhi_epi64(lo, hi), _mm_unpacklo_epi64(lo, hi))
    } else {
        _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi))
    };
    let lv = _mm256_shuffle_epi8(lut, ordered);
    (lv, _mm256_abs_epi8(lv))
}

/// A row's levels into `out[..cols]`, and after them, per 128 values, the
/// eight groups' `128 · ΣL` as i32 in the lanes' order of [`body`].
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn levels<const GGUF: bool>(codes: *const u8, cols: usize, out: *mut u8) {
    let (one, ones) = (_mm256_set1_epi8(1), _mm256_set1_epi16(1));
    for c in (0..cols).step_by(128) {
        let mut pairs = [_mm256_setzero_si256(); 4];
        for (u, pair) in pairs.iter_mut().enumerate() {
            let (lv, _) = decode32::<GGUF>(codes_at::<GGUF>(codes, c, u));
            _mm256_storeu_si256(out.add(c + 32 * u) as *mut __m256i, lv);
            *pair = _mm256_maddubs_epi16(one, lv);
        }
        let sums = fold(pairs, ones);
        _mm256_storeu_si256(
            out.add(cols + c / 4) as *mut __m256i,
            _mm256_slli_epi32::<7>(sums),
        );
    }
}

/// The i32 sums of the eight 16-value groups of four vectors of i16 pair
/// sums (vector `u`: group `2u` in the low half, `2u + 1` in the high),
/// lanes `[g0 g2 g4 g6 | g1 g3 g5 g7]`. The i16 stay exact below 32768 / 4
/// per pair.
#[inline(always)]
unsafe fn fold(v: [__m256i; 4], ones: __m256i) -> __m256i {
    _mm256_madd_epi16(
        _mm256_hadd_epi16(_mm256_hadd_epi16(v[0], v[1]), _mm256_hadd_epi16(v[2], v[3])),
        ones,
    )
}

/// The tree of the partials of one row × `T` tokens (before the global);
/// with `PRE`, the levels are read from `pre` (see [`levels`]) and `qs`
/// are the activations plus 128.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn body<const T: usize, const PRE: bool, const GGUF: bool>(
    codes: *const u8,
    scales: *const u8,
    cols: usize,
    qs: [*const i8; T],
    ds: [*const f32; T],
    pre: *const u8,
) -> [f32; T] {
    let ones = _mm256_set1_epi16(1);
    let even_odd = _mm_setr_epi8(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15);
    let keep = _mm_set1_epi16(0xBFFFu16 as i16);
    let k256 = _mm256_set1_ps(256.0);
    let mut p = [_mm256_setzero_ps(); T];
    let mut c = 0;
    while c < cols {
        if !PRE {
            let w = codes_at::<GGUF>(codes, c, 0);
            _mm_prefetch(w.wrapping_add(AHEAD) as *const i8, _MM_HINT_T2);
        }
        let mut v = [[_mm256_setzero_si256(); 4]; T];
        for u in 0..4 {
            if PRE {
                let lv = _mm256_loadu_si256(pre.add(c + 32 * u) as *const __m256i);
                for k in 0..T {
                    let x = _mm256_loadu_si256(qs[k].add(c + 32 * u) as *const __m256i);
                    // x + 128 ≤ 255 times |L| ≤ 12: a pair at most 6120.
                    v[k][u] = _mm256_maddubs_epi16(x, lv);
                }
            } else {
                let (lv, mag) = decode32::<GGUF>(codes_at::<GGUF>(codes, c, u));
                for k in 0..T {
                    let x = _mm256_loadu_si256(qs[k].add(c + 32 * u) as *const __m256i);
                    // At most 2·12·127 = 3048 a pair.
                    v[k][u] = _mm256_maddubs_epi16(mag, _mm256_sign_epi8(x, lv));
                }
            }
        }
        // The 8 group scales in the lanes' order, as E4M3 / 256.
        let sb = _mm_shuffle_epi8(scales_at::<GGUF>(codes, scales, c), even_odd);
        let half = _mm_and_si128(
            _mm_srai_epi16::<1>(_mm_unpacklo_epi8(_mm_setzero_si128(), sb)),
            keep,
        );
        let s = _mm256_cvtph_ps(half);
        for k in 0..T {
            let mut g = fold(v[k], ones);
            if PRE {
                let corr = pre.add(cols + c / 4) as *const __m256i;
                g = _mm256_sub_epi32(g, _mm256_loadu_si256(corr));
            }
            // d_x of blocks c/32 .. c/32 + 4 in both halves, times 256.
            let dx = _mm256_broadcast_ps(&*(ds[k].add(c / 32) as *const __m128));
            let sd = _mm256_mul_ps(s, _mm256_mul_ps(dx, k256));
            p[k] = _mm256_add_ps(p[k], _mm256_mul_ps(sd, _mm256_cvtepi32_ps(g)));
        }
        c += 128;
    }
    p.map(|v| {
        let l: [f32; 8] = std::mem::transmute(v);
        // Lanes hold p0 p2 p4 p6 | p1 p3 p5 p7: the canonical tree.
        ((l[0] + l[2]) + (l[1] + l[3])) + ((l[4] + l[6]) + (l[5] + l[7]))
    })
}

/// Every row of `acts` plus 128, as bytes, token-major, into `buf`: the
/// activations [`row`] takes for more than 4 tokens.
pub(crate) fn offset_acts(acts: Q8Rows<'_>, buf: &mut Vec<u8>) {
    buf.clear();
    for t in 0..acts.n() {
        buf.extend(acts.row(t).qs.iter().map(|&q| q as u8 ^ 0x80));
    }
}
