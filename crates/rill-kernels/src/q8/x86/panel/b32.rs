//! AVX2 row panels of the 32-value block encodings, 8 rows: Q8_0 and the
//! Q8_0 blocks of the IQ4_NL / MXFP4 levels (signed quants: the kernel takes
//! the weights' magnitudes and puts their signs onto the activations), and
//! Q4_0 / Q5_0 / Q4_1 / Q5_1 as unsigned quants with the offset or the min
//! taken from the activations' sums. The K encodings' panels, the shared
//! pieces and the class's table are in `ymm`.

#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::ymm::{bcast, finish, transpose8, Partials, ROWS};
use super::{Res, Toks8};

/// Q8_0 panel bytes per block: per 4-value group, the 8 rows' quants, then
/// `d` as f32. (`vpmaddubsw` multiplies unsigned by signed: the kernel
/// takes the weights' magnitudes, once per group for all its tokens, and
/// puts their signs onto the activations. Stored too, the magnitudes
/// doubled what packing writes, in the MoE experts' few-token products
/// a tenth of the time.)
pub(super) const Q80_BYTES: usize = 9 * 32;

/// Rewrite rows `w..` (8 of them, `rb` bytes apart, `nb` blocks each) of
/// Q8_0 (`NIB` 0), Q4_0 (1), IQ4_NL (2), MXFP4 (3) or Q5_0 (4) as a Q8_0 panel at
/// `dst` (the 4-bit encodings as the Q8_0 blocks of their levels).
#[inline(always)]
unsafe fn pack_q80<const NIB: usize>(w: *const u8, rb: usize, nb: usize, dst: *mut u8) {
    let bb_bytes = crate::q8::x86::block_bytes(NIB);
    let levels = crate::q8::x86::nib_levels::<NIB>();
    let quants = |blk: *const u8| crate::q8::x86::q80_quants::<NIB>(blk, levels);
    for b in 0..nb {
        let pb = dst.add(b * Q80_BYTES);
        let blk = |r: usize| w.add(r * rb + bb_bytes * b);
        let mut v = [_mm256_setzero_si256(); 8];
        for r in 0..ROWS {
            v[r] = quants(blk(r));
        }
        let t = transpose8(v);
        for k in 0..8 {
            _mm256_storeu_si256(pb.add(32 * k) as *mut __m256i, t[k]);
        }
        let d = if NIB == 3 {
            let d: [f32; 8] = std::array::from_fn(|r| crate::q8::x86::block_scale::<NIB>(blk(r)));
            _mm256_loadu_ps(d.as_ptr())
        } else {
            // The 8 f16 scales in one conversion (one call of `half`'s
            // converter per row and block cost ~5% of a Q8_0 prefill).
            let h: [u16; 8] = std::array::from_fn(|r| (blk(r) as *const u16).read_unaligned());
            _mm256_cvtph_ps(_mm_loadu_si128(h.as_ptr() as *const __m128i))
        };
        _mm256_storeu_ps(pb.add(256) as *mut f32, d);
    }
}

/// The Q8_0 panel at `panel` (`nb` blocks) × `T` tokens: per group
/// `|w|·(x with w's sign)` (pair sums ≤ 2·128·127, exact in i16), the pairs
/// summed into i32 by `vpmaddwd` with ones.
#[inline(always)]
unsafe fn body_q80<const T: usize>(panel: *const u8, nb: usize, x: &Toks8, out: &mut Res) {
    let z = _mm256_setzero_si256();
    let ones = _mm256_set1_epi16(1);
    let mut p = Partials::<T>::new();
    for b in 0..nb {
        let pb = panel.add(b * Q80_BYTES);
        let mut s = [z; T];
        for k in 0..8 {
            let wv = _mm256_loadu_si256(pb.add(32 * k) as *const __m256i);
            let wa = _mm256_abs_epi8(wv);
            for t in 0..T {
                let xs = _mm256_sign_epi8(bcast(x.qs[t].add(32 * b + 4 * k)), wv);
                let pairs = _mm256_maddubs_epi16(wa, xs);
                s[t] = _mm256_add_epi32(s[t], _mm256_madd_epi16(pairs, ones));
            }
        }
        p.add_scaled(b, _mm256_loadu_ps(pb.add(256) as *const f32), x, &s);
    }
    finish(p.done(nb), out)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q80_panel<const T: usize>(
    panel: *const u8,
    nb: usize,
    x: &Toks8,
    out: &mut Res,
) {
    body_q80::<T>(panel, nb, x, out)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q80_pack<const NIB: usize>(w: *const u8, rb: usize, nb: usize, dst: *mut u8) {
    pack_q80::<NIB>(w, rb, nb, dst)
}

/// Panel bytes per block of the unsigned-quant encodings: the 8 rows'
/// quants per 4-value group, then `d` as f32, then (Q4_1 / Q5_1) `m`.
pub(super) const fn unsigned_bytes(min: bool) -> usize {
    if min {
        10 * 32
    } else {
        9 * 32
    }
}

/// Rewrite rows `w..` (8 of them, `rb` bytes apart, `nb` blocks each) of
/// Q4_0 (`FIVE`, `MIN` false), Q5_0 (`FIVE`), Q4_1 (`MIN`) or Q5_1 (both)
/// as a panel of unsigned quants at `dst`.
#[inline(always)]
unsafe fn pack_unsigned<const FIVE: bool, const MIN: bool>(
    w: *const u8,
    rb: usize,
    nb: usize,
    dst: *mut u8,
) {
    let nib = _mm_set1_epi8(0x0F);
    let bytes = unsigned_bytes(MIN);
    let bb = match (FIVE, MIN) {
        (false, false) => 18,
        (true, false) => 22,
        (false, true) => crate::q8::x86::affine::affine_bytes(false),
        (true, true) => crate::q8::x86::affine::affine_bytes(true),
    };
    for b in 0..nb {
        let pb = dst.add(b * bytes);
        let blk = |r: usize| w.add(r * rb + bb * b);
        let mut v = [_mm256_setzero_si256(); 8];
        for r in 0..ROWS {
            v[r] = if MIN {
                crate::q8::x86::affine::affine_quants::<FIVE>(blk(r))
            } else if FIVE {
                let (nibbles, set) = crate::q8::x86::q5_parts(blk(r));
                _mm256_or_si256(nibbles, _mm256_and_si256(set, _mm256_set1_epi8(16)))
            } else {
                let q = _mm_loadu_si128(blk(r).add(2) as *const __m128i);
                let hi = _mm_and_si128(_mm_srli_epi16::<4>(q), nib);
                _mm256_set_m128i(hi, _mm_and_si128(q, nib))
            };
        }
        let t = transpose8(v);
        for k in 0..8 {
            _mm256_storeu_si256(pb.add(32 * k) as *mut __m256i, t[k]);
        }
        let f16s = |o: usize| {
            let h: [u16; 8] =
                std::array::from_fn(|r| (blk(r).add(o) as *const u16).read_unaligned());
            _mm256_cvtph_ps(_mm_loadu_si128(h.as_ptr() as *const __m128i))
        };
        _mm256_storeu_ps(pb.add(256) as *mut f32, f16s(0));
        if MIN {
            _mm256_storeu_ps(pb.add(288) as *mut f32, f16s(2));
        }
    }
}

/// The panel of unsigned quants at `panel` (`nb` blocks) × `T` tokens:
/// the quants against the activations in i16 chains (4-bit: one per
/// block, 16 products ≤ 15·127 a lane, ≤ 30480; 5-bit: two, 8 products ≤
/// 31·127, ≤ 31496), `vpmaddwd` with ones into `i = Σ q·x`. Q4_0 / Q5_0:
/// `i − OFF·S` (`OFF` 8 / 16, `S` from the activations' sums) is the
/// reference's integer; Q4_1 / Q5_1: `(d·dx)·f(i) + (m·dx)·f(S)`.
#[inline(always)]
unsafe fn body_unsigned<const T: usize, const FIVE: bool, const MIN: bool>(
    panel: *const u8,
    nb: usize,
    x: &Toks8,
    out: &mut Res,
) {
    let z = _mm256_setzero_si256();
    let ones = _mm256_set1_epi16(1);
    let bytes = unsigned_bytes(MIN);
    let (chain, off) = if FIVE { (4, 16) } else { (8, 8) };
    let mut p = Partials::<T>::new();
    for b in 0..nb {
        let pb = panel.add(b * bytes);
        let mut s = [z; T];
        for k0 in (0..8).step_by(chain) {
            let mut s16 = [z; T];
            for k in k0..k0 + chain {
                let wv = _mm256_loadu_si256(pb.add(32 * k) as *const __m256i);
                for t in 0..T {
                    let xk = bcast(x.qs[t].add(32 * b + 4 * k));
                    s16[t] = _mm256_add_epi16(s16[t], _mm256_maddubs_epi16(wv, xk));
                }
            }
            for t in 0..T {
                s[t] = _mm256_add_epi32(s[t], _mm256_madd_epi16(s16[t], ones));
            }
        }
        let d = _mm256_loadu_ps(pb.add(256) as *const f32);
        for t in 0..T {
            let sum = *x.sums[t].add(2 * b) as i32 + *x.sums[t].add(2 * b + 1) as i32;
            let dx = _mm256_set1_ps(*x.d[t].add(b));
            let term = if MIN {
                let m = _mm256_loadu_ps(pb.add(288) as *const f32);
                let ti = _mm256_mul_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(s[t]));
                let tm = _mm256_mul_ps(_mm256_mul_ps(m, dx), _mm256_set1_ps(sum as f32));
                _mm256_add_ps(ti, tm)
            } else {
                let i = _mm256_sub_epi32(s[t], _mm256_set1_epi32(off * sum));
                _mm256_mul_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(i))
            };
            p.add(t, b, term);
        }
    }
    finish(p.done(nb), out)
}

macro_rules! unsigned_entries {
    ($($kernel:ident, $packer:ident = $five:literal, $min:literal;)*) => {$(
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) unsafe fn $kernel<const T: usize>(panel: *const u8, nb: usize, x: &Toks8, out: &mut Res) {
            body_unsigned::<T, $five, $min>(panel, nb, x, out)
        }
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) unsafe fn $packer(w: *const u8, rb: usize, nb: usize, dst: *mut u8) {
            pack_unsigned::<$five, $min>(w, rb, nb, dst)
        }
    )*};
}

unsigned_entries! {
    q40_panel, q40_pack = false, false;
    q50_panel, q50_pack = true, false;
    q41_panel, q41_pack = false, true;
    q51_panel, q51_pack = true, true;
}
