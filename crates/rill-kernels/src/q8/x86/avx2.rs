//! The AVX2 kernels: the plans of the AVX-512 ones on 256-bit vectors,
//! `vpmaddubsw` + `vpmaddwd`; the (row, token) pair lanes in two vectors
//! (rows 0-1, rows 2-3), each 128-bit chunk a row.

// Index loops mirror the lanes and rows they compute.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::{
    block_bytes, block_scales, dx4, halves, nib_levels, prefetch, q80_finish, q80_quants, q80_rest,
    sums32, to_partials, Toks, IN_ORDER,
};

#[inline(always)]
pub(super) unsafe fn bc256(v: __m128i) -> __m256i {
    _mm256_broadcastsi128_si256(v)
}

/// `[a's 8 lanes folded to 4 | b's]`.
#[inline(always)]
pub(super) unsafe fn fold2(a: __m256i, b: __m256i) -> __m256i {
    _mm256_add_epi32(
        _mm256_permute2x128_si256::<0x21>(a, b),
        _mm256_blend_epi32::<0xF0>(a, b),
    )
}

/// As [`tsum4`], on 256 bits.
#[inline(always)]
pub(super) unsafe fn tsum4_y(f: [__m256i; 4]) -> __m256i {
    let pair = |x, y| _mm256_add_epi32(_mm256_unpacklo_epi32(x, y), _mm256_unpackhi_epi32(x, y));
    let (s01, s23) = (pair(f[0], f[1]), pair(f[2], f[3]));
    _mm256_add_epi32(
        _mm256_unpacklo_epi64(s01, s23),
        _mm256_unpackhi_epi64(s01, s23),
    )
}

/// As [`reduce_pairs`]: `[rows 0-1, rows 2-3]`, lane `4(r%2) + t`.
#[inline(always)]
pub(super) unsafe fn reduce_pairs_y<const R: usize, const T: usize>(
    acc: &[[__m256i; T]; R],
) -> [__m256i; 2] {
    let z = _mm256_setzero_si256();
    let a = |r: usize, t: usize| if r < R && t < T { acc[r][t] } else { z };
    arr!(2, |h| tsum4_y(arr!(4, |t| fold2(
        a(2 * h, t),
        a(2 * h + 1, t)
    ))))
}

/// Pair lanes of the f16 values `h` (row r's at word `2r + odd`).
#[inline(always)]
pub(super) unsafe fn row_lanes_y(h: __m128i, odd: i32) -> [__m256; 2] {
    let f = _mm256_cvtph_ps(h);
    let o = _mm256_set1_epi32(odd);
    [
        _mm256_permutevar8x32_ps(
            f,
            _mm256_add_epi32(o, _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2)),
        ),
        _mm256_permutevar8x32_ps(
            f,
            _mm256_add_epi32(o, _mm256_setr_epi32(4, 4, 4, 4, 6, 6, 6, 6)),
        ),
    ]
}

#[inline(always)]
pub(super) unsafe fn tree_y(p: &[[__m256; 2]; 8]) -> [f32; 16] {
    let half = |h: usize| {
        let a = |i: usize, j: usize| _mm256_add_ps(p[i][h], p[j][h]);
        _mm256_add_ps(
            _mm256_add_ps(a(0, 4), a(2, 6)),
            _mm256_add_ps(a(1, 5), a(3, 7)),
        )
    };
    std::mem::transmute::<[__m256; 2], [f32; 16]>([half(0), half(1)])
}

/// `v` (i16 lanes) with bits shifted left by `n` (right by `−n`).
#[inline(always)]
pub(super) unsafe fn shift16_y(v: __m256i, n: i32) -> __m256i {
    if n >= 0 {
        _mm256_sll_epi16(v, _mm_cvtsi32_si128(n))
    } else {
        _mm256_srl_epi16(v, _mm_cvtsi32_si128(-n))
    }
}

/// Lane `i` of each 128-bit half of `v` in all four lanes of that half.
#[inline(always)]
pub(super) unsafe fn lane_bcast(v: __m256i, i: usize) -> __m256i {
    match i {
        0 => _mm256_shuffle_epi32::<0x00>(v),
        1 => _mm256_shuffle_epi32::<0x55>(v),
        2 => _mm256_shuffle_epi32::<0xAA>(v),
        _ => _mm256_shuffle_epi32::<0xFF>(v),
    }
}

/// The scales and mins of Q4_K/Q5_K block `blk` of rows 0..R (0 past
/// `R`) as bytes `[sc0..sc7, m0..m7]`, per 128-bit chunk: `[rows 0-1, rows
/// 2-3]` (shared with `kmin_y1`).
#[inline(always)]
pub(super) unsafe fn k4_scales_y<const R: usize>(blk: impl Fn(usize) -> *const u8) -> [__m256i; 2] {
    let ld = |r: usize| {
        if r < R {
            _mm_loadu_si128(blk(r).add(4) as *const __m128i)
        } else {
            _mm_setzero_si128()
        }
    };
    arr!(2, |h| {
        let raw = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(ld(2 * h)), ld(2 * h + 1));
        k4_unpack!(
            raw,
            bc256,
            _mm256_shuffle_epi8,
            _mm256_and_si256,
            _mm256_or_si256,
            _mm256_srli_epi16
        )
    })
}

/// Row `r`'s 8 sub-block scales of [`k4_scales_y`] as i16, in both halves
/// (shared with `kmin_y1`).
#[inline(always)]
pub(super) unsafe fn k4_row_scales_y(sm: &[__m256i; 2], r: usize) -> __m256i {
    let sc = _mm256_unpacklo_epi8(sm[r / 2], _mm256_setzero_si256());
    if r.is_multiple_of(2) {
        _mm256_permute4x64_epi64::<0x44>(sc)
    } else {
        _mm256_permute4x64_epi64::<0xEE>(sc)
    }
}

/// Q4_K / Q5_K on AVX2: one vector per pair of 32-value sub-blocks.
#[inline(always)]
pub(super) unsafe fn kmin_y<const R: usize, const T: usize, const Q5: bool>(
    w: *const u8,
    rb: usize,
    x: &Toks,
    nb: usize,
) -> [f32; 16] {
    let (bb, qs_at) = if Q5 { (176, 48) } else { (144, 16) };
    let z = _mm256_setzero_si256();
    let (nib, b16) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(16));
    let mut p = [[_mm256_setzero_ps(); 2]; 8];
    for b in 0..nb {
        let blk = |r: usize| w.add(r * rb + b * bb);
        prefetch::<R>(w, b * bb, bb);
        let sm = k4_scales_y::<R>(blk);
        let m: [__m256i; 2] = arr!(2, |h| {
            let mn = _mm256_unpackhi_epi8(sm[h], z);
            tsum4_y(arr!(4, |t| if t < T {
                _mm256_madd_epi16(mn, bc256(sums32(x, t, b)))
            } else {
                z
            }))
        });
        let mut acc = [[z; T]; R];
        for r in 0..R {
            let sc = k4_row_scales_y(&sm, r);
            let q = blk(r).add(qs_at);
            let qh = _mm256_loadu_si256(blk(r).add(16) as *const __m256i);
            for k in 0..4 {
                let v = _mm256_loadu_si256(q.add(32 * k) as *const __m256i);
                let mut wv = [
                    _mm256_and_si256(v, nib),
                    _mm256_and_si256(_mm256_srli_epi16::<4>(v), nib),
                ];
                if Q5 {
                    // Bit j of qh to bit 4.
                    for (i, w) in wv.iter_mut().enumerate() {
                        let j = (2 * k + i) as i32;
                        *w = _mm256_or_si256(*w, _mm256_and_si256(shift16_y(qh, 4 - j), b16));
                    }
                }
                // Sub-blocks 2k (low nibbles) and 2k + 1 (high), each with
                // its i16 scale (bytes j, j + 1 of `sc`) in every word.
                for (i, quants) in wv.into_iter().enumerate() {
                    let j = (2 * (2 * k + i)) as i16;
                    let sv = _mm256_shuffle_epi8(sc, _mm256_set1_epi16(j | ((j + 1) << 8)));
                    for t in 0..T {
                        let xq = x.qs[t].add(256 * b + 64 * k + 32 * i);
                        let xv = _mm256_loadu_si256(xq as *const __m256i);
                        let s = _mm256_madd_epi16(_mm256_maddubs_epi16(quants, xv), sv);
                        acc[r][t] = _mm256_add_epi32(acc[r][t], s);
                    }
                }
            }
        }
        let i = reduce_pairs_y(&acc);
        let h = halves::<R>(blk, true);
        let dx = _mm256_broadcast_ps(&dx4::<T>(x, b));
        let (d, dmin) = (row_lanes_y(h, 0), row_lanes_y(h, 1));
        for k in 0..2 {
            let ti = _mm256_mul_ps(_mm256_mul_ps(d[k], dx), _mm256_cvtepi32_ps(i[k]));
            let tm = _mm256_mul_ps(_mm256_mul_ps(dmin[k], dx), _mm256_cvtepi32_ps(m[k]));
            p[b % 8][k] = _mm256_add_ps(p[b % 8][k], _mm256_sub_ps(ti, tm));
        }
    }
    tree_y(&p)
}

/// Q6_K block `base`'s unsigned quants of half `h`: the four 32-value
/// vectors `u = 4h + s` (nibble `s/2` of `ql[64h + 32(s%2)..]`, bits `2s..2s+1` of
/// `qh[32h..]`). The high bits of quarters 0
/// and 1 are looked up (`vpshufb` of `qh`'s low nibble) instead of shifted:
/// on AMD Zen 1 one pipe does all vector shifts, two do shuffles.
/// `PLANAR`: the block is [`rill_dtype::DType::Q6KPlanar`]'s (`q6k_planes_y`).
#[inline(always)]
pub(super) unsafe fn q6k_half_y<const PLANAR: bool>(
    base: *const u8,
    h: usize,
    nib: __m256i,
    hib: __m256i,
) -> [__m256i; 4] {
    if PLANAR {
        let at = base.add(96 * h);
        return q6k_planes_y(std::array::from_fn(|k| {
            _mm256_loadu_si256(at.add(32 * k) as *const __m256i)
        }));
    }
    // Nibble n = bits 0..3 of a qh byte → quarter 0's bits (n & 3) and
    // quarter 1's (n >> 2), at bits 4..5.
    let lut0 = bc256(_mm_setr_epi8(
        0, 16, 32, 48, 0, 16, 32, 48, 0, 16, 32, 48, 0, 16, 32, 48,
    ));
    let lut1 = bc256(_mm_setr_epi8(
        0, 0, 0, 0, 16, 16, 16, 16, 32, 32, 32, 32, 48, 48, 48, 48,
    ));
    let ql0 = _mm256_loadu_si256(base.add(64 * h) as *const __m256i);
    let ql1 = _mm256_loadu_si256(base.add(64 * h + 32) as *const __m256i);
    let qh = _mm256_loadu_si256(base.add(128 + 32 * h) as *const __m256i);
    let q4 = _mm256_and_si256(qh, nib);
    [
        _mm256_or_si256(_mm256_and_si256(ql0, nib), _mm256_shuffle_epi8(lut0, q4)),
        _mm256_or_si256(_mm256_and_si256(ql1, nib), _mm256_shuffle_epi8(lut1, q4)),
        _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16::<4>(ql0), nib),
            _mm256_and_si256(qh, hib),
        ),
        _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), nib),
            _mm256_and_si256(_mm256_srli_epi16::<2>(qh), hib),
        ),
    ]
}

/// The four 32-code vectors of a planar Q6_K half (`crate::layout`) from
/// its three planes `v`: quarters 0-2 are the planes' low 6 bits, quarter 3
/// the three planes' top 2 bits put together. Byte by byte: each 16-bit
/// shift acts on bits masked to one byte's top two, which stay in that byte.
#[inline(always)]
pub(super) unsafe fn q6k_planes_y(v: [__m256i; 3]) -> [__m256i; 4] {
    let (low, top) = (_mm256_set1_epi8(0x3F), _mm256_set1_epi8(-64));
    let t0 = _mm256_srli_epi16::<6>(_mm256_and_si256(v[0], top));
    let t1 = _mm256_srli_epi16::<4>(_mm256_and_si256(v[1], top));
    let t2 = _mm256_srli_epi16::<2>(_mm256_and_si256(v[2], top));
    [
        _mm256_and_si256(v[0], low),
        _mm256_and_si256(v[1], low),
        _mm256_and_si256(v[2], low),
        _mm256_or_si256(_mm256_or_si256(t0, t1), t2),
    ]
}

/// Q6_K on AVX2: 32-value vector `u` = half `u/4`, quarter `s = u%4`:
/// nibble `s/2` of `ql[64h + 32(s%2)..]`, bits `2s..2s+1` of `qh[32h..]`
/// (`PLANAR`: [`q6k_planes_y`]).
#[inline(always)]
pub(super) unsafe fn q6k_y_body<const R: usize, const T: usize, const PLANAR: bool>(
    w: *const u8,
    rb: usize,
    x: &Toks,
    nb: usize,
) -> [f32; 16] {
    let z = _mm256_setzero_si256();
    let (nib, hib) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x30));
    let even_odd = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    let mut p = [[_mm256_setzero_ps(); 2]; 8];
    for b in 0..nb {
        let blk = |r: usize| w.add(r * rb + b * 210);
        prefetch::<R>(w, b * 210, 210);
        let mut acc = [[z; T]; R];
        for r in 0..R {
            let base = blk(r);
            let raw = _mm_loadu_si128(base.add(192) as *const __m128i);
            let sc16 = _mm256_cvtepi8_epi16(raw);
            let scn = _mm256_sub_epi16(z, _mm256_slli_epi16::<5>(sc16));
            // Vector u's scales (sub-block 2u in the low half, 2u + 1 in the
            // high), one `vpshufd` each from these (see `q6k_body_y1`).
            let eo = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(raw, even_odd));
            let ef = std::hint::black_box([
                _mm256_unpacklo_epi16(eo, eo),
                _mm256_unpackhi_epi16(eo, eo),
            ]);
            let mut quarters = [z; 4];
            for u in 0..8 {
                if u % 4 == 0 {
                    quarters = q6k_half_y::<PLANAR>(base, u / 4, nib, hib);
                }
                let (wv, sv) = (quarters[u % 4], lane_bcast(ef[u / 4], u % 4));
                for t in 0..T {
                    let xq = x.qs[t].add(256 * b + 32 * u);
                    let xv = _mm256_loadu_si256(xq as *const __m256i);
                    let s = _mm256_madd_epi16(_mm256_maddubs_epi16(wv, xv), sv);
                    acc[r][t] = _mm256_add_epi32(acc[r][t], s);
                }
            }
            for t in 0..T {
                let s16 = _mm256_loadu_si256(x.sums[t].add(16 * b) as *const __m256i);
                acc[r][t] = _mm256_add_epi32(acc[r][t], _mm256_madd_epi16(s16, scn));
            }
        }
        let i = reduce_pairs_y(&acc);
        let d = row_lanes_y(halves::<R>(|r| blk(r).add(208), false), 0);
        let dx = _mm256_broadcast_ps(&dx4::<T>(x, b));
        for k in 0..2 {
            let t = _mm256_mul_ps(_mm256_mul_ps(d[k], dx), _mm256_cvtepi32_ps(i[k]));
            p[b % 8][k] = _mm256_add_ps(p[b % 8][k], t);
        }
    }
    tree_y(&p)
}

/// Eight vectors of 8 lanes → lane `k` = the sum of `a[k]`.
#[inline(always)]
pub(super) unsafe fn reduce_blocks_y(a: [__m256i; 8]) -> __m256i {
    let pair = |x, y| _mm256_add_epi32(_mm256_unpacklo_epi32(x, y), _mm256_unpackhi_epi32(x, y));
    let quad = |s: __m256i, u: __m256i| {
        _mm256_add_epi32(_mm256_unpacklo_epi64(s, u), _mm256_unpackhi_epi64(s, u))
    };
    let v0 = quad(pair(a[0], a[1]), pair(a[2], a[3]));
    let v1 = quad(pair(a[4], a[5]), pair(a[6], a[7]));
    _mm256_add_epi32(
        _mm256_permute2x128_si256::<0x20>(v0, v1),
        _mm256_permute2x128_si256::<0x31>(v0, v1),
    )
}

/// Q8_0 on AVX2, 8 blocks at a time: `|w|` times `q` with `w`'s sign.
#[inline(always)]
pub(super) unsafe fn q80_y_body<const R: usize, const T: usize, const NIB: usize>(
    w: *const u8,
    rb: usize,
    x: &Toks,
    nb: usize,
) -> [f32; 16] {
    let ones = _mm256_set1_epi16(1);
    let (bb, levels) = (block_bytes(NIB), nib_levels::<NIB>());
    let mut p = [[_mm256_setzero_ps(); T]; R];
    let ng = nb / 8;
    for g in 0..ng {
        prefetch::<R>(w, 8 * bb * g, 8 * bb);
        for r in 0..R {
            let base = w.add(r * rb + 8 * bb * g);
            let d = block_scales::<NIB>(base, bb, IN_ORDER);
            let wv: [__m256i; 8] = arr!(8, |k| q80_quants::<NIB>(base.add(bb * k), levels));
            let wa: [__m256i; 8] = arr!(8, |k| _mm256_abs_epi8(wv[k]));
            for t in 0..T {
                let a: [__m256i; 8] = arr!(8, |k| {
                    let xv = _mm256_loadu_si256(x.qs[t].add(256 * g + 32 * k) as *const __m256i);
                    _mm256_madd_epi16(
                        _mm256_maddubs_epi16(wa[k], _mm256_sign_epi8(xv, wv[k])),
                        ones,
                    )
                });
                let dx = _mm256_loadu_ps(x.d[t].add(8 * g));
                let term =
                    _mm256_mul_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(reduce_blocks_y(a)));
                p[r][t] = _mm256_add_ps(p[r][t], term);
            }
        }
    }
    let mut pa = to_partials(&p);
    q80_rest::<R, T, NIB>(w, rb, x, 8 * ng, nb, &mut pa);
    q80_finish(pa)
}
