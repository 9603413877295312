//! Hugging Face FP8 and NVFP4 rows decoded in registers with their separate
//! scale tensors, multiplied in the canonical order: the same bits as
//! [`MatRef::dequantize_row`] followed by the blocked path, without storing
//! and reloading the decoded rows (decode: a few tokens).
//!
//! - FP8 (E4M3 codes, one scale per `tile_rows × tile_cols` tile): the code's
//!   byte moved into an f16 (sign to the sign bit, the 7 magnitude bits below
//!   f16's top exponent bit) reads as exactly `E4M3 / 256`, subnormals
//!   included, so `vcvtph2ps` decodes 8 codes at once; times `256 · scale`
//!   (exact whenever it is finite) it is one rounding of `E4M3 · scale`,
//!   the scalar decoder's product. The NaN codes (`S.1111.111`) are not
//!   decoded that way: a chunk holding one takes the scalar decoder.
//! - NVFP4 (E2M1 codes two a byte, one E4M3 scale per 16 values, one f32
//!   global): twice a code is a small integer (`pshufb` of a table),
//!   `2E · (s / 2) = E · s` exactly (a few significant bits each), then one
//!   rounding by the global: the scalar `(E · s) · global`.
//!
//! Rows are walked in chunks of 16 values, four rows interleaved and each
//! prefetched ahead, into the path's canonical accumulator (`Canon`, or
//! `Canon16` for the AVX-512 order).

use std::arch::x86_64::*;

use super::avx2_blocks::{Canon, Canon16, Emit};
use super::RowAcc;
use crate::quant::fp8::{dequantize_f8e4m3, E4M3};
use crate::quant::mxfp4::E2M1_DOUBLED;
use crate::scaled::scale_at;
use crate::{MatRef, Scales};
use rill_dtype::DType;

/// Bytes ahead of the current chunk that each row prefetches, into L2: the
/// integer kernels' distance (`q8::x86`), where it was measured.
const AHEAD: usize = 6144;

/// How the rows of a supported matrix decode.
#[derive(Clone, Copy)]
enum Layout<'a> {
    /// E4M3 codes, tile scales.
    Fp8(Tiles<'a>),
    /// E2M1 codes, E4M3 scales per 16, a global.
    Nvfp4 { scales: &'a [u8], global: f32 },
}

/// FP8 tile scales: one per `tile_rows × tile_cols`, row-major, each
/// `dtype`; row 0 of the matrix lies `row0` rows into its first tile.
#[derive(Clone, Copy)]
struct Tiles<'a> {
    scales: &'a [u8],
    dtype: DType,
    tile_rows: usize,
    tile_cols: usize,
    row0: usize,
}

impl Tiles<'_> {
    /// The scale of row `r`'s tile `k` in a matrix of `cols` columns.
    #[inline(always)]
    fn scale(&self, cols: usize, r: usize, k: usize) -> f32 {
        let t = (self.row0 + r) / self.tile_rows;
        let per_row = cols.div_ceil(self.tile_cols);
        scale_at(
            &self.scales[t * per_row * self.dtype.block_bytes()..],
            self.dtype,
            k,
        )
    }
}

impl<'a> Layout<'a> {
    /// The layouts these kernels decode: whole chunks of 16 values that
    /// never straddle two scales.
    fn of(w: &MatRef<'a>) -> Option<Layout<'a>> {
        if !w.cols.is_multiple_of(16) {
            return None;
        }
        match (w.dtype, w.scales) {
            (
                DType::F8E4M3,
                Scales::Tiles {
                    data,
                    dtype: dtype @ (DType::F32 | DType::BF16 | DType::F16),
                    tile_rows,
                    tile_cols,
                    row0,
                },
            ) if tile_rows > 0 && tile_cols.is_multiple_of(16) && tile_cols > 0 => {
                Some(Layout::Fp8(Tiles {
                    scales: data,
                    dtype,
                    tile_rows,
                    tile_cols,
                    row0,
                }))
            }
            (
                DType::E2M1,
                Scales::Groups {
                    data,
                    dtype: DType::F8E4M3,
                    group: 16,
                    global,
                },
            ) => Some(Layout::Nvfp4 {
                scales: data,
                global,
            }),
            _ => None,
        }
    }
}

/// `out[r·nt + t]` for rows `r0..r0 + nr` of `w` (a matrix with separate
/// scales) and `nt` tokens at `x`, in the canonical order of the AVX-512
/// (`avx512`) or AVX2 path. `false`: not a layout these kernels decode
/// (nothing written).
///
/// # Safety
/// The CPU must have AVX2+FMA+F16C; `1 ≤ nr ≤ CANON_ROWS` rows from `r0`
/// lie in `w`, `x` holds `nt · cols` values, `1 ≤ nt ≤ CANON_TOKENS`, `out`
/// at least `nr · nt`.
pub(crate) unsafe fn canon_tile(
    avx512: bool,
    w: &MatRef<'_>,
    r0: usize,
    nr: usize,
    x: &[f32],
    nt: usize,
    out: &mut [f32],
) -> bool {
    let Some(layout) = Layout::of(w) else {
        return false;
    };
    macro_rules! run {
        ($acc:ident) => {{
            macro_rules! tokens {
                ($R:literal, $r0:expr, $o:expr) => {
                    match nt {
                        1 => crate::simd::flat(&rows::<$acc<1>, $R, 1>(w, layout, $r0, x), $o),
                        2 => crate::simd::flat(&rows::<$acc<2>, $R, 2>(w, layout, $r0, x), $o),
                        3 => crate::simd::flat(&rows::<$acc<3>, $R, 3>(w, layout, $r0, x), $o),
                        _ => crate::simd::flat(&rows::<$acc<4>, $R, 4>(w, layout, $r0, x), $o),
                    }
                };
            }
            if nr == crate::simd::CANON_ROWS {
                tokens!(4, r0, out)
            } else {
                for r in 0..nr {
                    tokens!(1, r0 + r, &mut out[r * nt..])
                }
            }
        }};
    }
    if avx512 {
        run!(Canon16)
    } else {
        run!(Canon)
    }
    true
}

/// `R` rows from `r0` × `T` tokens.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn rows<A: RowAcc<T> + Emit, const R: usize, const T: usize>(
    w: &MatRef<'_>,
    layout: Layout<'_>,
    r0: usize,
    x: &[f32],
) -> [[f32; T]; R] {
    let cols = w.cols;
    let xp = x.as_ptr();
    let mut e: [A; R] = [(); R].map(|_| A::start(xp, cols));
    match layout {
        Layout::Fp8(tiles) => {
            let code = |r: usize| w.data.as_ptr().add((r0 + r) * cols);
            let mut c0 = 0;
            for k in 0..cols.div_ceil(tiles.tile_cols) {
                let c1 = (c0 + tiles.tile_cols).min(cols);
                let (mut s, mut s256) = ([0f32; R], [0f32; R]);
                for r in 0..R {
                    s[r] = tiles.scale(cols, r0 + r, k);
                    s256[r] = s[r] * 256.0;
                }
                let mut c = c0;
                while c < c1 {
                    for r in 0..R {
                        let p = code(r).add(c);
                        if c % 64 == 0 {
                            prefetch::<R>(code(r), c, cols);
                        }
                        let [v0, v1] = fp8_chunk(p, s[r], s256[r]);
                        e[r].at_block(xp.add(c));
                        e[r].put(0, v0, 0);
                        e[r].put(8, v1, 0);
                    }
                    c += 16;
                }
                c0 = c1;
            }
        }
        Layout::Nvfp4 { scales, global } => {
            let (rb, gb) = (cols / 2, cols / 16);
            let g = _mm256_set1_ps(global);
            let mut c = 0;
            while c < cols {
                for r in 0..R {
                    let row = w.data.as_ptr().add((r0 + r) * rb);
                    if c % 128 == 0 {
                        prefetch::<R>(row, c / 2, rb);
                    }
                    let s = E4M3[scales[(r0 + r) * gb + c / 16] as usize];
                    let [v0, v1] = nvfp4_chunk::<false>(row.add(c / 2), s, g);
                    e[r].at_block(xp.add(c));
                    e[r].put(0, v0, 0);
                    e[r].put(8, v1, 0);
                }
                c += 16;
            }
        }
    }
    let mut out = [[0f32; T]; R];
    for r in 0..R {
        out[r] = e[r].sums();
    }
    out
}

/// Row `r` of `w` decoded with its scales into `out` (`cols` values): the
/// blocked path's rows (prefill), the same values as the scalar decoder
/// followed by [`crate::scaled::apply`]. `false`: not a layout these
/// kernels decode (nothing written).
///
/// # Safety
/// The CPU must have AVX2+FMA+F16C; `r < w.rows`, `out.len() == w.cols`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dequantize_row(w: &MatRef<'_>, r: usize, out: &mut [f32]) -> bool {
    let Some(layout) = Layout::of(w) else {
        return false;
    };
    let (cols, o) = (w.cols, out.as_mut_ptr());
    let store = |c: usize, [v0, v1]: [__m256; 2]| {
        _mm256_storeu_ps(o.add(c), v0);
        _mm256_storeu_ps(o.add(c + 8), v1);
    };
    match layout {
        Layout::Fp8(tiles) => {
            let code = w.data.as_ptr().add(r * cols);
            let tc = tiles.tile_cols;
            for k in 0..cols.div_ceil(tc) {
                let s = tiles.scale(cols, r, k);
                for c in (k * tc..((k + 1) * tc).min(cols)).step_by(16) {
                    store(c, fp8_chunk(code.add(c), s, s * 256.0));
                }
            }
        }
        Layout::Nvfp4 { scales, global } => {
            let g = _mm256_set1_ps(global);
            let row = w.data.as_ptr().add(r * cols / 2);
            let gs = &scales[r * cols / 16..(r + 1) * cols / 16];
            for (k, &sb) in gs.iter().enumerate() {
                store(
                    16 * k,
                    nvfp4_chunk::<true>(row.add(8 * k), E4M3[sb as usize], g),
                );
            }
        }
    }
    true
}

/// Prefetch the line [`AHEAD`] bytes past `off` of a `len`-byte row of
/// a group of `R`; past the row's end, the same place of the row `R`
/// further on, which the next group reads (so a stream does not stall at
/// each group's start; prefetches never fault, so it may lie past the
/// matrix).
#[inline(always)]
unsafe fn prefetch<const R: usize>(row: *const u8, off: usize, len: usize) {
    let a = off + AHEAD;
    let at = row.wrapping_add(if a < len { a } else { a + (R - 1) * len });
    _mm_prefetch(at as *const i8, _MM_HINT_T2);
}

/// 16 E4M3 codes at `p` times `s` (`s256 = 256 · s`). (The values are
/// returned, not emitted here: an emitter handed to the scalar branch would
/// keep the accumulators in memory.)
#[inline(always)]
unsafe fn fp8_chunk(p: *const u8, s: f32, s256: f32) -> [__m256; 2] {
    let b = _mm_loadu_si128(p as *const __m128i);
    let nan = _mm_cmpeq_epi8(_mm_or_si128(b, _mm_set1_epi8(-128)), _mm_set1_epi8(-1));
    if _mm_movemask_epi8(nan) != 0 || !s256.is_finite() {
        // The scalar decoder's values (NaN bits included), then the scale.
        let mut v = [0f32; 16];
        dequantize_f8e4m3(std::slice::from_raw_parts(p, 16), &mut v);
        v.iter_mut().for_each(|o| *o *= s);
        return [
            _mm256_loadu_ps(v.as_ptr()),
            _mm256_loadu_ps(v.as_ptr().add(8)),
        ];
    }
    // Byte b in the high half of a u16, shifted right by one with its sign
    // kept, bit 14 cleared: sign | (b & 0x7F) << 7, the f16 of E4M3 / 256.
    let (z, keep) = (_mm_setzero_si128(), _mm_set1_epi16(0xBFFFu16 as i16));
    let lo = _mm_and_si128(_mm_srai_epi16::<1>(_mm_unpacklo_epi8(z, b)), keep);
    let hi = _mm_and_si128(_mm_srai_epi16::<1>(_mm_unpackhi_epi8(z, b)), keep);
    let sv = _mm256_set1_ps(s256);
    [
        _mm256_mul_ps(_mm256_cvtph_ps(lo), sv),
        _mm256_mul_ps(_mm256_cvtph_ps(hi), sv),
    ]
}

/// 16 E2M1 codes (8 bytes at `p`, low nibble first) times the group scale
/// `s`, then the global `g`. The table of twice the levels has no −0, the
/// value of code 8: with `NEG_ZERO` its sign is put back (the stored rows
/// are the scalar decoder's bit for bit); without, the `+0` it leaves adds
/// the same to an accumulator that starts at `+0`, which a product never
/// turns into `−0`.
#[inline(always)]
unsafe fn nvfp4_chunk<const NEG_ZERO: bool>(p: *const u8, s: f32, g: __m256) -> [__m256; 2] {
    let b = _mm_loadl_epi64(p as *const __m128i);
    let nib = _mm_set1_epi8(0x0F);
    let codes = _mm_unpacklo_epi8(
        _mm_and_si128(b, nib),
        _mm_and_si128(_mm_srli_epi16::<4>(b), nib),
    );
    let twice = _mm_shuffle_epi8(
        _mm_loadu_si128(E2M1_DOUBLED.as_ptr() as *const __m128i),
        codes,
    );
    // Each code's sign bit (bit 3) at the top of its byte.
    let signs = _mm_slli_epi16::<4>(codes);
    // s / 2 is exact (s is an E4M3 value), and so is 2E · s / 2.
    let half = _mm256_set1_ps(s * 0.5);
    let v = |q: __m128i, sg: __m128i| {
        let mut lv = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
        if NEG_ZERO {
            let bit = _mm256_slli_epi32::<24>(_mm256_cvtepi8_epi32(_mm_and_si128(
                sg,
                _mm_set1_epi8(-128),
            )));
            lv = _mm256_or_ps(lv, _mm256_castsi256_ps(bit));
        }
        _mm256_mul_ps(_mm256_mul_ps(lv, half), g)
    };
    [
        v(twice, signs),
        v(_mm_srli_si128::<8>(twice), _mm_srli_si128::<8>(signs)),
    ]
}
