//! The AVX2 kernels of the 8-row interleaved layouts of Q4_K and Q6_K
//! ([`rill_dtype::DType::Q4KX8`], [`rill_dtype::DType::Q6KX8`];
//! `crate::layout`'s `q4k_x8`, `q6k_x8`): the panel kernels (`ymm::body`)
//! reading the matrix where it lies instead of a panel packed per product,
//! for every token count — a decode step too, which so takes one
//! `vpmaddubsw` per 4-value group of 8 rows and one `vpmaddwd` per chain of
//! them, where the 4-row decode kernels take one of each per 32 values of a
//! row. The codes are taken apart in registers (shared by the tokens), the
//! scales by one `vpshufb` (and for Q6_K's signed ones a shift) per
//! sub-block. Integer sums and the f32 tail are the panel kernels', so the
//! bits are the reference's.

use std::arch::x86_64::*;

use super::ymm::{bcast, finish, Partials};
use super::{Res, Toks8};

/// Bytes of one block of the 8 rows: Q4_K, Q6_K.
const Q4K_BYTES: usize = 1152;
const Q6K_BYTES: usize = 1680;
/// How far ahead of their reads the kernels prefetch (Zen 1, 2 threads,
/// 65,536 × 2048, 1 token: Q6_K at 3072 / 6144 / 12288 ahead 44 / 46 / 43
/// GFLOP/s, 33 with a block's lines all at its start, 38 without).
const AHEAD: usize = 6144;

/// `vpshufb` controls: lane `i` of each 128-bit half takes bytes `a + i`
/// and `b + i` of its half into its two i16, as their low bytes (`HIGH`
/// false: unsigned values), or as their high bytes (an arithmetic shift by
/// 8 then sign-extends them), every other byte zeroed.
const fn pairs<const HIGH: bool>(a: i8, b: i8) -> [i8; 32] {
    let mut c = [-128i8; 32];
    let at = if HIGH { 1 } else { 0 };
    let mut p = 0;
    while p < 32 {
        let i = ((p % 16) / 4) as i8;
        if p % 4 == at {
            c[p] = a + i;
        } else if p % 4 == at + 2 {
            c[p] = b + i;
        }
        p += 1;
    }
    c
}

/// Sub-block `j` (mod 4) of each row as `(sc, sc)`.
static SCALE: [[i8; 32]; 4] = [
    pairs::<false>(0, 0),
    pairs::<false>(4, 4),
    pairs::<false>(8, 8),
    pairs::<false>(12, 12),
];
/// Sub-blocks `2q, 2q + 1` (mod 4) of each row as `(min, min')`.
static MINS: [[i8; 32]; 2] = [pairs::<false>(0, 4), pairs::<false>(8, 12)];
/// Q6_K: sub-block `j` (mod 4) of each row as `(sc, sc)`, high bytes.
static Q6_SCALE: [[i8; 32]; 4] = [
    pairs::<true>(0, 0),
    pairs::<true>(4, 4),
    pairs::<true>(8, 8),
    pairs::<true>(12, 12),
];
/// Q6_K: sub-blocks `2p, 2p + 1` (mod 4) of each row as `(sc, sc')`.
static Q6_PAIRS: [[i8; 32]; 2] = [pairs::<true>(0, 4), pairs::<true>(8, 12)];

#[inline(always)]
unsafe fn load(p: *const u8) -> __m256i {
    _mm256_loadu_si256(p as *const __m256i)
}

/// The 8 rows of Q4_K (`w`: their first interleaved block, `nb` blocks) ×
/// `T` tokens: lanes 0..8 of result `t` are the rows' outputs for token `t`.
#[inline(always)]
pub(super) unsafe fn q4k<const T: usize>(w: *const u8, nb: usize, x: &Toks8, out: &mut Res) {
    let z = _mm256_setzero_si256();
    let (nib, top) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x30));
    let mut p = Partials::<T>::new();
    for b in 0..nb {
        let pb = w.add(b * Q4K_BYTES);
        // The matrix is one forward stream: the bytes a little ahead (the
        // next group's, mostly) come from DRAM while these are used.
        crate::simd::x86::prefetch_stream::<1>(pb, 0, Q4K_BYTES);
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

/// The 8 rows of Q6_K (`w`: their first interleaved block, `nb` blocks) ×
/// `T` tokens, as [`q4k`]. Quarter `s` of half `h` (values `128h + 32s..`)
/// is plane `s`'s low 6 bits (s < 3) or the planes' top 2 bits put together
/// (s = 3): taken one quarter at a time, the unpack costs what taking all
/// four at once does, and holds a quarter's chains only.
#[inline(always)]
pub(super) unsafe fn q6k<const T: usize>(w: *const u8, nb: usize, x: &Toks8, out: &mut Res) {
    let z = _mm256_setzero_si256();
    let (low, top) = (_mm256_set1_epi8(0x3F), _mm256_set1_epi8(-64));
    let mut p = Partials::<T>::new();
    for b in 0..nb {
        let pb = w.add(b * Q6K_BYTES);

        let sv = [
            load(pb.add(16)),
            load(pb.add(48)),
            load(pb.add(80)),
            load(pb.add(112)),
        ];
        // (A macro, not a closure: a closure would not inherit the target
        // features, and its loads would be calls.)
        macro_rules! code {
            ($h:expr, $pl:expr, $k:expr) => {
                load(pb.add(144 + 32 * (24 * $h + 8 * $pl + $k)))
            };
        }
        let mut acc = [z; T];
        for h in 0..2 {
            for s in 0..4 {
                // The bytes ahead a few lines at a time, spread over the
                // block (all at its start, they held the reads up).
                for i in 0..4 {
                    let line = pb.wrapping_add(AHEAD + 64 * (4 * (4 * h + s) + i));
                    _mm_prefetch::<_MM_HINT_T2>(line as *const i8);
                }
                for c in 0..4 {
                    // Groups 2c, 2c + 1 of the quarter: sub-block
                    // 8h + 2s + c / 2, whose (sc, sc) pairs weigh the chain.
                    let j = 8 * h + 2 * s + c / 2;
                    let sc = _mm256_srai_epi16::<8>(_mm256_shuffle_epi8(
                        sv[j / 4],
                        load(Q6_SCALE[j % 4].as_ptr() as *const u8),
                    ));
                    let mut ch = [z; T];
                    for k in 2 * c..2 * c + 2 {
                        let wv = if s < 3 {
                            _mm256_and_si256(code!(h, s, k), low)
                        } else {
                            let t0 = _mm256_srli_epi16::<6>(_mm256_and_si256(code!(h, 0, k), top));
                            let t1 = _mm256_srli_epi16::<4>(_mm256_and_si256(code!(h, 1, k), top));
                            let t2 = _mm256_srli_epi16::<2>(_mm256_and_si256(code!(h, 2, k), top));
                            _mm256_or_si256(_mm256_or_si256(t0, t1), t2)
                        };
                        for t in 0..T {
                            let xk = bcast(x.qs[t].add(256 * b + 128 * h + 32 * s + 4 * k));
                            ch[t] = _mm256_add_epi16(ch[t], _mm256_maddubs_epi16(wv, xk));
                        }
                    }
                    for t in 0..T {
                        acc[t] = _mm256_add_epi32(acc[t], _mm256_madd_epi16(ch[t], sc));
                    }
                }
            }
        }
        // The −32 offsets: Σ_j sc_j·S16_j, pairs of sub-blocks against the
        // token's sums of 16, taken 32 times from the products' sums.
        let mut m = [z; T];
        for q in 0..8 {
            let pv = _mm256_srai_epi16::<8>(_mm256_shuffle_epi8(
                sv[q / 2],
                load(Q6_PAIRS[q % 2].as_ptr() as *const u8),
            ));
            for t in 0..T {
                let sums = x.sums[t].add(16 * b + 2 * q) as *const i8;
                m[t] = _mm256_add_epi32(m[t], _mm256_madd_epi16(pv, bcast(sums)));
            }
        }
        let d = _mm256_cvtph_ps(_mm_loadu_si128(pb as *const __m128i));
        for t in 0..T {
            let dx = _mm256_set1_ps(*x.d[t].add(b));
            let i = _mm256_sub_epi32(acc[t], _mm256_slli_epi32::<5>(m[t]));
            p.add(
                t,
                b,
                _mm256_mul_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(i)),
            );
        }
    }
    finish(p.done(nb), out)
}
