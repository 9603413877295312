//! The AVX2 kernel of Q4_K's 8-row interleaved layout
//! ([`rill_dtype::DType::Q4KX8`], `crate::layout`'s `q4k_x8`): the Q4_K
//! panel kernel (`ymm::body`) reading the matrix where it lies instead of a
//! panel packed per product, for every token count — a decode step too, which
//! so takes one `vpmaddubsw` per 4-value group of 8 rows and one `vpmaddwd`
//! per sub-block of them, where the 4-row decode kernel takes one of each
//! per 32 values of a row. The nibbles are taken apart in registers (one
//! mask, or a shift and a mask, per 32 bytes, shared by the tokens), the
//! scales by one `vpshufb` per sub-block from 96 bytes of 6-bit fields.
//! Integer sums and the f32 tail are the panel kernel's, so the bits are
//! the reference's.

use std::arch::x86_64::*;

use super::ymm::{bcast, finish, Partials};
use super::{Res, Toks8};

/// Bytes of one block of the 8 rows.
pub(super) const BYTES: usize = 1152;

/// `vpshufb` controls: lane `i` of each 128-bit half takes bytes `a + i`
/// and `b + i` of its half as an i16 pair.
const fn pairs(a: i8, b: i8) -> [i8; 32] {
    let mut c = [0i8; 32];
    let mut p = 0;
    while p < 32 {
        let i = (p % 16) / 4;
        c[p] = match p % 4 {
            0 => a + i as i8,
            2 => b + i as i8,
            _ => -128,
        };
        p += 1;
    }
    c
}

/// Sub-block `j` (mod 4) of each row as `(sc, sc)`.
static SCALE: [[i8; 32]; 4] = [pairs(0, 0), pairs(4, 4), pairs(8, 8), pairs(12, 12)];
/// Sub-blocks `2q, 2q + 1` (mod 4) of each row as `(min, min')`.
static MINS: [[i8; 32]; 2] = [pairs(0, 4), pairs(8, 12)];

#[inline(always)]
unsafe fn load(p: *const u8) -> __m256i {
    _mm256_loadu_si256(p as *const __m256i)
}

/// The 8 rows (`w`: their first interleaved block, `nb` blocks) × `T`
/// tokens: lanes 0..8 of result `t` are the rows' outputs for token `t`.
#[inline(always)]
pub(super) unsafe fn body<const T: usize>(w: *const u8, nb: usize, x: &Toks8, out: &mut Res) {
    let z = _mm256_setzero_si256();
    let (nib, top) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x30));
    let mut p = Partials::<T>::new();
    for b in 0..nb {
        let pb = w.add(b * BYTES);
        // The matrix is one forward stream: the bytes a little ahead (the
        // next group's, mostly) come from DRAM while these are used.
        crate::simd::x86::prefetch_stream::<1>(pb, 0, BYTES);
        // The 6-bit scales (u[0], u[1]) and mins (u[2], u[3]).
        let (lo0, lo1, hb) = (load(pb.add(32)), load(pb.add(64)), load(pb.add(96)));
        let u = [
            _mm256_or_si256(
                _mm256_and_si256(lo0, nib),
                _mm256_and_si256(_mm256_slli_epi16::<4>(hb), top),
            ),
            _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16::<4>(lo0), nib),
                _mm256_and_si256(_mm256_slli_epi16::<2>(hb), top),
            ),
            _mm256_or_si256(_mm256_and_si256(lo1, nib), _mm256_and_si256(hb, top)),
            _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16::<4>(lo1), nib),
                _mm256_and_si256(_mm256_srli_epi16::<2>(hb), top),
            ),
        ];
        let mut acc = [z; T];
        for j in 0..8 {
            let sc = _mm256_shuffle_epi8(u[j / 4], load(SCALE[j % 4].as_ptr() as *const u8));
            let mut s = [z; T];
            for k in 0..8 {
                let v = load(pb.add(128 + 32 * (8 * (j / 2) + k)));
                let wv = if j % 2 == 0 {
                    _mm256_and_si256(v, nib)
                } else {
                    _mm256_and_si256(_mm256_srli_epi16::<4>(v), nib)
                };
                for t in 0..T {
                    let xk = bcast(x.qs[t].add(256 * b + 32 * j + 4 * k));
                    s[t] = _mm256_add_epi16(s[t], _mm256_maddubs_epi16(wv, xk));
                }
            }
            for t in 0..T {
                acc[t] = _mm256_add_epi32(acc[t], _mm256_madd_epi16(s[t], sc));
            }
        }
        // m = Σ_j min_j·S32_j: pairs of sub-blocks against the token's
        // sums of 32 (as the Q4_K panel kernel).
        let mut s32 = [[0i32; 8]; T];
        for t in 0..T {
            let s16 = load(x.sums[t].add(16 * b) as *const u8);
            let s = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
            let packed = _mm256_packs_epi32(s, s);
            _mm256_storeu_si256(s32[t].as_mut_ptr() as *mut __m256i, packed);
        }
        let mut m = [z; T];
        for (q, at) in [0, 1, 4, 5].into_iter().enumerate() {
            let pv = _mm256_shuffle_epi8(u[2 + q / 2], load(MINS[q % 2].as_ptr() as *const u8));
            for t in 0..T {
                let pair = _mm256_set1_epi32(s32[t][at]);
                m[t] = _mm256_add_epi32(m[t], _mm256_madd_epi16(pv, pair));
            }
        }
        let d = _mm256_cvtph_ps(_mm_loadu_si128(pb as *const __m128i));
        let dmin = _mm256_cvtph_ps(_mm_loadu_si128(pb.add(16) as *const __m128i));
        for t in 0..T {
            let dx = _mm256_set1_ps(*x.d[t].add(b));
            let ti = _mm256_mul_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(acc[t]));
            let tm = _mm256_mul_ps(_mm256_mul_ps(dmin, dx), _mm256_cvtepi32_ps(m[t]));
            p.add(t, b, _mm256_sub_ps(ti, tm));
        }
    }
    finish(p.done(nb), out)
}
