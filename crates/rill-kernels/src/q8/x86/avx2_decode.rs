//! AVX2 decode kernels (4 rows × 1 token) of the K encodings: the plan of
//! `avx512_decode` on 256-bit vectors. The 16 (row, block) lanes of 4
//! consecutive blocks lie in two vectors, `h` = rows `2h, 2h + 1`, lane
//! `4(r mod 2) + j` for block `b0 + j`; the per-block integer work is the
//! general kernels' (`kmin_y`, `q6k_y_body`), folded per block and
//! transposed once per 4 blocks.

// Index loops mirror the lanes and rows they compute.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::avx2::{
    bc256, fold2, k4_row_scales_y, k4_scales_y, lane_bcast, q6k_half_y, shift16_y, tsum4_y,
};
use super::{prefetch, sums32, Toks};

/// Lane masks of the first `nj` blocks of a group, per 128-bit half.
static BLOCK_MASK: [[i32; 8]; 5] = {
    let mut a = [[0i32; 8]; 5];
    let mut n = 0;
    while n < 5 {
        let mut l = 0;
        while l < 8 {
            a[n][l] = if l % 4 < n { -1 } else { 0 };
            l += 1;
        }
        n += 1;
    }
    a
};

#[inline(always)]
unsafe fn block_mask(nj: usize) -> __m256i {
    _mm256_loadu_si256(BLOCK_MASK[nj].as_ptr() as *const __m256i)
}

/// The 32 bits at `g + r·rb + j·bb` for the rows of vector `h` (lane
/// `4(r mod 2) + j`, 0 where `j ≥ nj`). Loaded one by one and put
/// together in general registers: `vpgatherdd` is microcoded on AMD Zen 1
/// and 2 (about 20 µops), where these kernels are bound by vector µops.
#[inline(always)]
unsafe fn gather_scales(g: *const u8, rb: usize, bb: usize, nj: usize) -> [__m256i; 2] {
    let at = |r: usize, j: usize| -> u64 {
        if j < nj {
            (g.add(r * rb + j * bb) as *const u32).read_unaligned() as u64
        } else {
            0
        }
    };
    let two = |r: usize, j: usize| (at(r, j) | at(r, j + 1) << 32) as i64;
    let half = |r: usize| _mm_set_epi64x(two(r, 2), two(r, 0));
    [
        _mm256_set_m128i(half(1), half(0)),
        _mm256_set_m128i(half(3), half(2)),
    ]
}

/// The low and high f16 of each 32-bit lane of `v`, as f32.
#[inline(always)]
unsafe fn f16_pairs(v: __m256i) -> (__m256, __m256) {
    let lo = _mm256_and_si256(v, _mm256_set1_epi32(0xFFFF));
    let hi = _mm256_srli_epi32::<16>(v);
    // [lo 0-3, hi 0-3 | lo 4-7, hi 4-7] → [lo 0-7 | hi 0-7].
    let p = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packus_epi32(lo, hi));
    (
        _mm256_cvtph_ps(_mm256_castsi256_si128(p)),
        _mm256_cvtph_ps(_mm256_extracti128_si256::<1>(p)),
    )
}

/// The token's scales of blocks `b0..b0 + nj` in lanes `4k + j` (0 past `nj`).
#[inline(always)]
unsafe fn dx_lanes(x: &Toks, b0: usize, nj: usize) -> __m256 {
    let m = _mm256_castsi256_si128(block_mask(nj));
    let v = _mm_maskload_ps(x.d[0].add(b0), m);
    _mm256_set_m128(v, v)
}

/// Row `2h + k`'s result in lane `4k` of half `h`: the canonical tree of
/// its partials `p[0]` (`p0..p3`) and `p[1]` (`p4..p7`).
#[inline(always)]
unsafe fn finish(p: [[__m256; 2]; 2]) -> [f32; 16] {
    let half = |h: usize| {
        let s = _mm256_add_ps(p[0][h], p[1][h]);
        let s = _mm256_add_ps(s, _mm256_permute_ps::<0b01_00_11_10>(s));
        _mm256_add_ps(s, _mm256_permute_ps::<0b10_11_00_01>(s))
    };
    std::mem::transmute::<[__m256; 2], [f32; 16]>([half(0), half(1)])
}

/// Q4_K (`Q5` false) and Q5_K, 4 rows × 1 token.
#[inline(always)]
pub(super) unsafe fn kmin_y1<const Q5: bool>(
    w: *const u8,
    rb: usize,
    x: &Toks,
    nb: usize,
) -> [f32; 16] {
    let (bb, qs_at) = if Q5 { (176, 48) } else { (144, 16) };
    let z = _mm256_setzero_si256();
    let (nib, b16) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(16));
    let mut p = [[_mm256_setzero_ps(); 2]; 2];
    let mut b0 = 0;
    while b0 < nb {
        let nj = (nb - b0).min(4);
        let mut fi = [[z; 4]; 2];
        let mut fm = [[z; 4]; 2];
        for j in 0..4 {
            if j >= nj {
                break;
            }
            let b = b0 + j;
            let blk = |r: usize| w.add(r * rb + b * bb);
            prefetch::<4>(w, b * bb, bb);
            let sm = k4_scales_y::<4>(blk);
            let s32 = bc256(sums32(x, 0, b));
            for h in 0..2 {
                fm[h][j] = _mm256_madd_epi16(_mm256_unpackhi_epi8(sm[h], z), s32);
            }
            let mut acc = [z; 4];
            for r in 0..4 {
                let sc = k4_row_scales_y(&sm, r);
                let q = blk(r).add(qs_at);
                let qh = _mm256_loadu_si256(blk(r).add(16) as *const __m256i);
                for jj in 0..8 {
                    let v = _mm256_loadu_si256(q.add(32 * (jj / 2)) as *const __m256i);
                    let mut wv = _mm256_and_si256(
                        if jj % 2 == 0 {
                            v
                        } else {
                            _mm256_srli_epi16::<4>(v)
                        },
                        nib,
                    );
                    if Q5 {
                        wv = _mm256_or_si256(
                            wv,
                            _mm256_and_si256(shift16_y(qh, 4 - jj as i32), b16),
                        );
                    }
                    let sv = _mm256_shuffle_epi8(
                        sc,
                        _mm256_set1_epi16((2 * jj as i16) | ((2 * jj as i16 + 1) << 8)),
                    );
                    let xv = _mm256_loadu_si256(x.qs[0].add(256 * b + 32 * jj) as *const __m256i);
                    let s = _mm256_madd_epi16(_mm256_maddubs_epi16(wv, xv), sv);
                    acc[r] = _mm256_add_epi32(acc[r], s);
                }
            }
            for h in 0..2 {
                fi[h][j] = fold2(acc[2 * h], acc[2 * h + 1]);
            }
        }
        let g = gather_scales(w.add(b0 * bb), rb, bb, nj);
        let dx = dx_lanes(x, b0, nj);
        let pg = (b0 / 4) % 2;
        for h in 0..2 {
            let (i, m) = (tsum4_y(fi[h]), tsum4_y(fm[h]));
            let (d, dmin) = f16_pairs(g[h]);
            let ti = _mm256_mul_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(i));
            let tm = _mm256_mul_ps(_mm256_mul_ps(dmin, dx), _mm256_cvtepi32_ps(m));
            p[pg][h] = _mm256_add_ps(p[pg][h], _mm256_sub_ps(ti, tm));
        }
        b0 += 4;
    }
    finish(p)
}

/// Q6_K (`PLANAR`: its planar layout), 4 rows × 1 token.
#[inline(always)]
pub(super) unsafe fn q6k_body_y1<const PLANAR: bool>(
    w: *const u8,
    rb: usize,
    x: &Toks,
    nb: usize,
) -> [f32; 16] {
    let z = _mm256_setzero_si256();
    let (nib, hib) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x30));
    let even_odd = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    let mut p = [[_mm256_setzero_ps(); 2]; 2];
    let mut b0 = 0;
    while b0 < nb {
        let nj = (nb - b0).min(4);
        let mut fi = [[z; 4]; 2];
        for j in 0..4 {
            if j >= nj {
                break;
            }
            let b = b0 + j;
            let blk = |r: usize| w.add(r * rb + b * 210);
            prefetch::<4>(w, b * 210, 210);
            let s16 = _mm256_loadu_si256(x.sums[0].add(16 * b) as *const __m256i);
            let mut acc = [z; 4];
            for r in 0..4 {
                let base = blk(r);
                let raw = _mm_loadu_si128(base.add(192) as *const __m128i);
                let sc16 = _mm256_cvtepi8_epi16(raw);
                // Even scales in the low half, odd ones in the high, as
                // (s, s) pairs: [s0 s2 s4 s6 | s1 s3 s5 s7] and [s8 .. |
                // s9 ..]. Vector u needs s(2u) low and s(2u + 1) high, one
                // in-lane `vpshufd` away (a lane-crossing `vpermd` costs
                // several times more on Zen 1 and 2).
                let eo = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(raw, even_odd));
                // Hidden from LLVM (`black_box`): it would fold each unpack
                // into every `vpshufd` that reads it, as `vpshuflw` +
                // `vpshufd`: two shuffles per vector instead of one.
                let ef = std::hint::black_box([
                    _mm256_unpacklo_epi16(eo, eo),
                    _mm256_unpackhi_epi16(eo, eo),
                ]);
                let scn = _mm256_sub_epi16(z, _mm256_slli_epi16::<5>(sc16));
                acc[r] = _mm256_madd_epi16(s16, scn);
                let mut quarters = [z; 4];
                for u in 0..8 {
                    if u % 4 == 0 {
                        quarters = q6k_half_y::<PLANAR>(base, u / 4, nib, hib);
                    }
                    let wv = quarters[u % 4];
                    let sv = lane_bcast(ef[u / 4], u % 4);
                    let xv = _mm256_loadu_si256(x.qs[0].add(256 * b + 32 * u) as *const __m256i);
                    let d = _mm256_madd_epi16(_mm256_maddubs_epi16(wv, xv), sv);
                    acc[r] = _mm256_add_epi32(acc[r], d);
                }
            }
            for h in 0..2 {
                fi[h][j] = fold2(acc[2 * h], acc[2 * h + 1]);
            }
        }
        // `d` is the block's last 16 bits: read with the 16 before them.
        let g = gather_scales(w.add(b0 * 210 + 206), rb, 210, nj);
        let dx = dx_lanes(x, b0, nj);
        let pg = (b0 / 4) % 2;
        for h in 0..2 {
            let i = tsum4_y(fi[h]);
            let (_, d) = f16_pairs(g[h]);
            let t = _mm256_mul_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(i));
            p[pg][h] = _mm256_add_ps(p[pg][h], t);
        }
        b0 += 4;
    }
    finish(p)
}
