//! Q4_1 and Q5_1 (`d·q + m`, unsigned 4- / 5-bit quants, 32 values a
//! block) on AVX2 instructions, which the AVX-512 classes run too: the
//! quants straight into `vpmaddubsw` (unsigned × signed, pair sums ≤
//! 2·31·127), the mins against the activations' sums of 32. Term of a
//! block: `(d_w·d_x)·f(i) + (m_w·d_x)·f(S)` (the reference's order).

use std::arch::x86_64::*;

use super::avx2::reduce_blocks_y;
use super::{hsum_i32, prefetch, q5_parts, q80_finish, q80_scales, to_partials, Toks, IN_ORDER};

/// Bytes of a block: `d`, `m` (f16), Q5_1's 32 fifth bits, 16 of nibbles.
pub(super) const fn affine_bytes(five: bool) -> usize {
    if five {
        24
    } else {
        20
    }
}

/// The 32 unsigned quants of the block at `blk` (byte `i`: element `i`).
#[inline(always)]
pub(super) unsafe fn affine_quants<const FIVE: bool>(blk: *const u8) -> __m256i {
    if FIVE {
        // Q5_1 is Q5_0's layout two bytes on (after `m`).
        let (nibbles, set) = q5_parts(blk.add(2));
        return _mm256_or_si256(nibbles, _mm256_and_si256(set, _mm256_set1_epi8(16)));
    }
    let q = _mm_loadu_si128(blk.add(4) as *const __m128i);
    let nib = _mm_set1_epi8(0x0F);
    let hi = _mm_and_si128(_mm_srli_epi16::<4>(q), nib);
    _mm256_set_m128i(hi, _mm_and_si128(q, nib))
}

/// `R` rows × `T` tokens of Q4_1 (`FIVE` false) or Q5_1, 8 blocks at a
/// time (lane `k` of a pair's partials: block `8g + k`), then the blocks
/// past the last group of 8 one at a time.
#[inline(always)]
pub(super) unsafe fn affine_y_body<const R: usize, const T: usize, const FIVE: bool>(
    w: *const u8,
    rb: usize,
    x: &Toks,
    nb: usize,
) -> [f32; 16] {
    let ones = _mm256_set1_epi16(1);
    let bb = affine_bytes(FIVE);
    let mut p = [[_mm256_setzero_ps(); T]; R];
    let ng = nb / 8;
    for g in 0..ng {
        prefetch::<R>(w, 8 * bb * g, 8 * bb);
        // Each token's sums of 32 of the 8 blocks, from its sums of 16.
        let s: [__m256; T] = std::array::from_fn(|t| {
            let v = _mm256_loadu_si256(x.sums[t].add(16 * g) as *const __m256i);
            _mm256_cvtepi32_ps(_mm256_madd_epi16(v, ones))
        });
        for r in 0..R {
            let base = w.add(r * rb + 8 * bb * g);
            let d = q80_scales(base, bb, IN_ORDER);
            let m = q80_scales(base.add(2), bb, IN_ORDER);
            let wv: [__m256i; 8] = std::array::from_fn(|k| affine_quants::<FIVE>(base.add(bb * k)));
            for t in 0..T {
                let a: [__m256i; 8] = std::array::from_fn(|k| {
                    let xv = _mm256_loadu_si256(x.qs[t].add(256 * g + 32 * k) as *const __m256i);
                    _mm256_madd_epi16(_mm256_maddubs_epi16(wv[k], xv), ones)
                });
                let dx = _mm256_loadu_ps(x.d[t].add(8 * g));
                let i = _mm256_cvtepi32_ps(reduce_blocks_y(a));
                let ti = _mm256_mul_ps(_mm256_mul_ps(d, dx), i);
                let tm = _mm256_mul_ps(_mm256_mul_ps(m, dx), s[t]);
                p[r][t] = _mm256_add_ps(p[r][t], _mm256_add_ps(ti, tm));
            }
        }
    }
    let mut pa = to_partials(&p);
    for b in 8 * ng..nb {
        for r in 0..R {
            let blk = w.add(r * rb + bb * b);
            let wv = affine_quants::<FIVE>(blk);
            let h = |o: usize| half::f16::from_bits((blk.add(o) as *const u16).read_unaligned());
            let (d, m) = (h(0).to_f32(), h(2).to_f32());
            for t in 0..T {
                let xv = _mm256_loadu_si256(x.qs[t].add(32 * b) as *const __m256i);
                let i = hsum_i32(_mm256_madd_epi16(_mm256_maddubs_epi16(wv, xv), ones));
                let s = *x.sums[t].add(2 * b) as i32 + *x.sums[t].add(2 * b + 1) as i32;
                let dx = *x.d[t].add(b);
                pa[r][t][b % 8] += (d * dx) * i as f32 + (m * dx) * s as f32;
            }
        }
    }
    q80_finish(pa)
}

/// The 4-row, 1-token shape as four 1-row passes (as the Q8_0 kernels'
/// decode: 4 rows' accumulators and the token's activations leave the 16
/// registers). Same bits: each row's order is its own.
#[inline(always)]
pub(super) unsafe fn affine_y_rows1<const FIVE: bool>(
    w: *const u8,
    rb: usize,
    x: &Toks,
    nb: usize,
) -> [f32; 16] {
    let mut out = [0f32; 16];
    for i in 0..4 {
        out[4 * i] = affine_y_body::<1, 1, FIVE>(w.add(i * rb), rb, x, nb)[0];
    }
    out
}
