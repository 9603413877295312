//! The 256-value K blocks — Q4_K, Q5_K, Q6_K — decoded in parts of 64
//! values: [`emit`] feeds a block's parts to an emitter in order
//! (`dequantize`, the fused dot). The exact in-register kernels unpack the
//! blocks to bytes instead (`super::unpacked`).

use std::arch::x86_64::*;

use super::super::{ld8u, ld8u4};
use super::{cvt, k4_scales, scale_min, srl, Emit};
use crate::quant::QK_K;

/// A 256-value block decoded in [`PARTS`] parts of 64 values.
pub(super) trait Parted {
    /// What every part of one block needs (its scales).
    type Shared: Copy + Default;
    unsafe fn prepare(b: *const u8) -> Self::Shared;
    /// Elements `64p..64p + 64` of the block, 8 per vector in order: the
    /// scalar decoder's values (the same f32 operations, nothing fused)
    /// where `E::EXACT`, else a scale and min may be fused.
    unsafe fn part<E: Emit>(b: *const u8, s: &Self::Shared, p: usize) -> [__m256; 8];
    /// The accumulator hint ([`Emit::put`]'s `slot`) of vector `k` of part
    /// `p`.
    fn slot(p: usize, k: usize) -> usize;
}

/// The whole block at `b`, its parts in order, into `e`.
#[inline(always)]
pub(super) unsafe fn emit<P: Parted, E: Emit>(b: *const u8, e: &mut E) {
    let s = P::prepare(b);
    for p in 0..PARTS {
        let v = P::part::<E>(b, &s, p);
        for (k, vk) in v.into_iter().enumerate() {
            e.put(64 * p + 8 * k, vk, P::slot(p, k));
        }
    }
}

const PARTS: usize = QK_K / 64;

/// Scale and min of sub-blocks `2c` and `2c + 1` (Q4_K, Q5_K), broadcast.
#[inline(always)]
unsafe fn pair_scales(dl: &[f32; 8], ml: &[f32; 8], c: usize) -> [__m256; 4] {
    [
        _mm256_set1_ps(dl[2 * c]),
        _mm256_set1_ps(ml[2 * c]),
        _mm256_set1_ps(dl[2 * c + 1]),
        _mm256_set1_ps(ml[2 * c + 1]),
    ]
}

pub(super) struct Q4K;
impl Parted for Q4K {
    type Shared = ([f32; 8], [f32; 8]);
    /// Low nibbles in slots 0..4, high ones in 2, 3, 0, 1.
    #[inline(always)]
    fn slot(_p: usize, k: usize) -> usize {
        (k % 4) ^ (k / 4 * 2)
    }
    #[inline(always)]
    unsafe fn prepare(b: *const u8) -> Self::Shared {
        k4_scales(b)
    }
    /// Part `c` of `super::q4_k`: the low then high nibbles of `qs[32c..]`.
    #[inline(always)]
    unsafe fn part<E: Emit>(b: *const u8, (dl, ml): &Self::Shared, c: usize) -> [__m256; 8] {
        let qs = b.add(16);
        let m15 = _mm256_set1_epi32(15);
        let [dl0, ml0, dl1, ml1] = pair_scales(dl, ml, c);
        let mut out = [_mm256_setzero_ps(); 8];
        for k in 0..4 {
            let v = ld8u(qs.add(32 * c + 8 * k));
            out[k] = scale_min::<E>(dl0, cvt(_mm256_and_si256(v, m15)), ml0);
            out[k + 4] = scale_min::<E>(dl1, cvt(_mm256_srli_epi32(v, 4)), ml1);
        }
        out
    }
}

pub(super) struct Q5K;
impl Parted for Q5K {
    type Shared = ([f32; 8], [f32; 8]);
    #[inline(always)]
    fn slot(p: usize, k: usize) -> usize {
        Q4K::slot(p, k)
    }
    #[inline(always)]
    unsafe fn prepare(b: *const u8) -> Self::Shared {
        Q4K::prepare(b)
    }
    /// Part `c` of `super::q5_k`: Q4_K's plus bits `2c`, `2c + 1` of `qh`.
    #[inline(always)]
    unsafe fn part<E: Emit>(b: *const u8, (dl, ml): &Self::Shared, c: usize) -> [__m256; 8] {
        let qs = b.add(48);
        let hraw = ld8u4(b.add(16));
        let (m15, one) = (_mm256_set1_epi32(15), _mm256_set1_epi32(1));
        let [dl0, ml0, dl1, ml1] = pair_scales(dl, ml, c);
        let mut out = [_mm256_setzero_ps(); 8];
        for k in 0..4 {
            let v = ld8u(qs.add(32 * c + 8 * k));
            let h0 = _mm256_slli_epi32(_mm256_and_si256(srl(hraw[k], 2 * c as i32), one), 4);
            let h1 = _mm256_slli_epi32(_mm256_and_si256(srl(hraw[k], 2 * c as i32 + 1), one), 4);
            let lo = _mm256_or_si256(_mm256_and_si256(v, m15), h0);
            let hi = _mm256_or_si256(_mm256_srli_epi32(v, 4), h1);
            out[k] = scale_min::<E>(dl0, cvt(lo), ml0);
            out[k + 4] = scale_min::<E>(dl1, cvt(hi), ml1);
        }
        out
    }
}

pub(super) struct Q6K;
impl Parted for Q6K {
    /// The 16 sub-block scales `d·sc`, as `super::q6_k` computes them.
    type Shared = [f32; 16];
    /// Slot `g / 4` for vector `g` of each half.
    #[inline(always)]
    fn slot(p: usize, k: usize) -> usize {
        2 * (p % 2) + k / 4
    }
    #[inline(always)]
    unsafe fn prepare(b: *const u8) -> Self::Shared {
        let vd = _mm256_set1_ps(super::h2f(b.add(208)));
        let mut dl = [0f32; 16];
        for half in 0..2 {
            let sc = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
                b.add(192 + 8 * half) as *const __m128i,
            )));
            _mm256_storeu_ps(dl.as_mut_ptr().add(8 * half), _mm256_mul_ps(vd, sc));
        }
        dl
    }
    /// Part `p`: slices `2(p % 2)`, `2(p % 2) + 1` of half `p / 2` in
    /// `super::q6_k`'s terms (the low or high nibbles of `ql[0..32]` and
    /// `ql[32..64]` of the half, bits `2j..2j + 2` of its `qh` on top).
    #[inline(always)]
    unsafe fn part<E: Emit>(b: *const u8, dl: &Self::Shared, p: usize) -> [__m256; 8] {
        let (h, j0) = (p / 2, 2 * (p % 2));
        let (m0f, m03, k32) = (
            _mm256_set1_epi8(0x0F),
            _mm256_set1_epi8(0x03),
            _mm256_set1_epi8(32),
        );
        let l0 = _mm256_loadu_si256(b.add(64 * h) as *const __m256i);
        let l1 = _mm256_loadu_si256(b.add(64 * h + 32) as *const __m256i);
        let qh = _mm256_loadu_si256(b.add(128 + 32 * h) as *const __m256i);
        // Bits 2j..2j+2 of every qh byte at bits 4..6 (16-bit shifts move
        // bits across bytes; the masks keep each byte's own). No closures:
        // they would not inherit the target features.
        let top0 = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * j0 as i32)), m03);
        let top1 = _mm256_and_si256(
            _mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * j0 as i32 + 2)),
            m03,
        );
        let (n0, n1) = if j0 == 0 {
            (_mm256_and_si256(l0, m0f), _mm256_and_si256(l1, m0f))
        } else {
            (
                _mm256_and_si256(_mm256_srli_epi16(l0, 4), m0f),
                _mm256_and_si256(_mm256_srli_epi16(l1, 4), m0f),
            )
        };
        // The 64 signed quants, widened 8 at a time from the registers.
        let s0 = _mm256_sub_epi8(_mm256_or_si256(n0, _mm256_slli_epi16(top0, 4)), k32);
        let s1 = _mm256_sub_epi8(_mm256_or_si256(n1, _mm256_slli_epi16(top1, 4)), k32);
        let quarters = [
            _mm256_castsi256_si128(s0),
            _mm256_extracti128_si256::<1>(s0),
            _mm256_castsi256_si128(s1),
            _mm256_extracti128_si256::<1>(s1),
        ];
        let mut out = [_mm256_setzero_ps(); 8];
        for (q, src) in quarters.into_iter().enumerate() {
            for (e, eight) in [src, _mm_srli_si128::<8>(src)].into_iter().enumerate() {
                // Sub-block of 16: elements 16·(g / 2).. of the half.
                let g = 4 * j0 + 2 * q + e;
                let qf = cvt(_mm256_cvtepi8_epi32(eight));
                out[2 * q + e] = _mm256_mul_ps(_mm256_set1_ps(dl[8 * h + g / 2]), qf);
            }
        }
        out
    }
}
