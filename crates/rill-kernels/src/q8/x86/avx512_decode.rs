//! AVX-512 decode kernels (4 rows × 1 token) of the K encodings.
//!
//! With one token, the 16 lanes of the general kernels' f32 tail would
//! carry 4 (row, token) pairs and 12 zeros, and every block would pay a
//! whole horizontal reduction, a scale gather and the tail for them. Here
//! the lanes are (row, block) pairs of 4 consecutive blocks: the integer
//! work of each block is the same, but its 4 row accumulators are only
//! folded (chunk `r` = row `r`'s partials); every 4 blocks one transpose
//! finishes the sums, one gather loads the 16 f16 scales and one f32 tail
//! makes the 16 terms. The terms are the reference's, operation by
//! operation; the partials `p[b mod 8]` of a row are lanes `4r + b mod 4`
//! of `p[(b / 4) mod 2]`, and the final tree is the canonical one. Blocks
//! past the row's end (a last group of fewer than 4) have zero integers
//! and zero scales: their term is +0, which leaves a partial's bits as they
//! are (a partial that starts at +0 is never −0).

// Index loops mirror the lanes and rows they compute.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::avx512::{
    bc512, dot16, fold4, k4_scales_z, kmin_dots_z, kmin_term_z, q6k_chunk_z, q6k_scales_z, tsum4,
};
use super::{prefetch, sums32, Toks};

/// The f16 scale pairs of 4 rows × `nj` ≤ 4 blocks from `g` (block 0 of
/// the group in row 0): lane `4r + j` is the 32 bits at `r·rb + j·bb`
/// (Q4_K/Q5_K: `d`, `dmin`; Q6_K, from 2 bytes before `d`: `d` high), 0 for
/// `j ≥ nj`.
#[inline(always)]
unsafe fn gather_scales(g: *const u8, offs: __m512i, nj: usize) -> __m512i {
    let m: __mmask16 = [0x0000u16, 0x1111, 0x3333, 0x7777, 0xFFFF][nj];
    _mm512_mask_i32gather_epi32::<1>(_mm512_setzero_si512(), m, offs, g as *const i32)
}

/// Lane offsets `r·rb + j·bb` of [`gather_scales`].
#[inline(always)]
unsafe fn scale_offsets(rb: usize, bb: usize) -> __m512i {
    let r = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    let j = _mm512_setr_epi32(0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3);
    _mm512_add_epi32(
        _mm512_mullo_epi32(r, _mm512_set1_epi32(rb as i32)),
        _mm512_mullo_epi32(j, _mm512_set1_epi32(bb as i32)),
    )
}

/// The low (`HIGH` false) or high f16 of each 32-bit lane, as f32.
#[inline(always)]
unsafe fn f16_lanes<const HIGH: bool>(v: __m512i) -> __m512 {
    let v = if HIGH { _mm512_srli_epi32::<16>(v) } else { v };
    _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v))
}

/// The token's scales of blocks `b0..b0 + nj` in lanes `4r + j` (0 past `nj`).
#[inline(always)]
unsafe fn dx_lanes(x: &Toks, b0: usize, nj: usize) -> __m512 {
    let m: __mmask8 = (1u8 << nj) - 1;
    _mm512_broadcast_f32x4(_mm_maskz_loadu_ps(m, x.d[0].add(b0)))
}

/// Row `r`'s result in lane `4r`: the canonical tree of its partials
/// `p0[4r..4r + 4]` (`p[0..4]`) and `p1[..]` (`p[4..8]`).
#[inline(always)]
unsafe fn finish(p0: __m512, p1: __m512) -> [f32; 16] {
    // Lane 4r + k: p[k] + p[k + 4].
    let s = _mm512_add_ps(p0, p1);
    // Lane 4r: (p0+p4) + (p2+p6); lane 4r + 1: (p1+p5) + (p3+p7).
    let s = _mm512_add_ps(s, _mm512_permute_ps::<0b01_00_11_10>(s));
    let s = _mm512_add_ps(s, _mm512_permute_ps::<0b10_11_00_01>(s));
    std::mem::transmute::<__m512, [f32; 16]>(s)
}

/// Q4_K (`Q5` false) and Q5_K, 4 rows × 1 token (see the module doc; the
/// per-block integer work is `kmin_z`'s: [`k4_scales_z`], [`kmin_dots_z`]).
#[inline(always)]
pub(super) unsafe fn kmin_z1<const Q5: bool, const VNNI: bool>(
    w: *const u8,
    rb: usize,
    x: &Toks,
    nb: usize,
) -> [f32; 16] {
    let (bb, qs_at) = if Q5 { (176, 48) } else { (144, 16) };
    let z = _mm512_setzero_si512();
    let offs = scale_offsets(rb, bb);
    let mut p = [_mm512_setzero_ps(); 2];
    let mut b0 = 0;
    while b0 < nb {
        let nj = (nb - b0).min(4);
        // Per block j: chunk r = row r's integer partials (i, then m).
        let mut fi = [z; 4];
        let mut fm = [z; 4];
        for j in 0..4 {
            if j >= nj {
                break;
            }
            let b = b0 + j;
            let blk = |r: usize| w.add(r * rb + b * bb);
            prefetch::<4>(w, b * bb, bb);
            let (sc, mn) = k4_scales_z::<4>(blk);
            fm[j] = _mm512_madd_epi16(mn, bc512(sums32(x, 0, b)));
            let acc = kmin_dots_z::<4, 1, Q5, VNNI>(blk, qs_at, sc, x, b);
            fi[j] = fold4(arr!(4, |r| acc[r][0]));
        }
        // Lane 4r + j: block b0 + j of row r.
        let (i, m) = (tsum4(fi), tsum4(fm));
        let h = gather_scales(w.add(b0 * bb), offs, nj);
        let (d, dmin) = (f16_lanes::<false>(h), f16_lanes::<true>(h));
        let dx = dx_lanes(x, b0, nj);
        let g = (b0 / 4) % 2;
        p[g] = _mm512_add_ps(p[g], kmin_term_z(d, dmin, dx, i, m));
        b0 += 4;
    }
    finish(p[0], p[1])
}

/// Q6_K, 4 rows × 1 token (the per-block integer work is
/// `q6k_z_body`'s: [`q6k_scales_z`], [`q6k_chunk_z`]).
#[inline(always)]
pub(super) unsafe fn q6k_body_z1<const VNNI: bool>(
    w: *const u8,
    rb: usize,
    x: &Toks,
    nb: usize,
) -> [f32; 16] {
    let z = _mm512_setzero_si512();
    let offs = scale_offsets(rb, 210);
    let mut p = [_mm512_setzero_ps(); 2];
    let mut b0 = 0;
    while b0 < nb {
        let nj = (nb - b0).min(4);
        let mut fi = [z; 4];
        for j in 0..4 {
            if j >= nj {
                break;
            }
            let b = b0 + j;
            let blk = |r: usize| w.add(r * rb + b * 210);
            prefetch::<4>(w, b * 210, 210);
            let s16 =
                _mm512_zextsi256_si512(_mm256_loadu_si256(x.sums[0].add(16 * b) as *const __m256i));
            let mut acc = [z; 4];
            let mut sc = [z; 4];
            for r in 0..4 {
                let scn;
                (sc[r], scn) = q6k_scales_z(blk(r));
                acc[r] = dot16::<VNNI>(z, s16, scn);
            }
            for k in 0..4 {
                let xv = _mm512_loadu_si512(x.qs[0].add(256 * b + 64 * k) as *const _);
                for r in 0..4 {
                    let (wv, sv) = q6k_chunk_z(blk(r), k, sc[r]);
                    acc[r] = dot16::<VNNI>(acc[r], _mm512_maddubs_epi16(wv, xv), sv);
                }
            }
            fi[j] = fold4(acc);
        }
        let i = tsum4(fi);
        // `d` is the block's last 16 bits: read with the 16 before them
        // (reading past them would leave the matrix at its last block).
        let d = f16_lanes::<true>(gather_scales(w.add(b0 * 210 + 206), offs, nj));
        let dx = dx_lanes(x, b0, nj);
        let t = _mm512_mul_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(i));
        let g = (b0 / 4) % 2;
        p[g] = _mm512_add_ps(p[g], t);
        b0 += 4;
    }
    finish(p[0], p[1])
}
