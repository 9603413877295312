//! AVX2 block decoders for every quantized encoding, each used two ways:
//! `deq_*` stores the decoded f32 values (bit-identical to the scalar
//! decoders: same widening, same f32 multiply/subtract order, nothing fused)
//! and `dot_*` multiplies them straight into f32 accumulators against `x`.
//!
//! Quants are widened to 8 × i32 (`vpmovzxbd`/`vpmovsxbd`, nibbles and bit
//! fields split with integer shifts and masks, table encodings through
//! `pshufb`), converted with `cvtepi32_ps`, scaled, and FMA'd with `x`.
//! In the dots, a scale-and-min is fused (`fmsub(d, q, m)`) and the scale of a
//! single-scale 32-element block is factored out of its sum (`d · Σ q·x`).
//!
//! Every function is `unsafe` with `#[target_feature(enable = "avx2,fma,f16c")]`:
//! callers must have checked the CPU, and pass whole blocks (`src`/`row`
//! exactly the encoded size of `dst`/`x`), as the `quant` contract says.

// Index loops mirror the element offsets they compute.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::{h2f, hsum4, ld8s, ld8u};
use crate::quant::iq4::IQ4_NL_VALUES;
use crate::quant::k_quants::q3_k_scales;
use crate::quant::mxfp4::{e8m0_to_f32_half, E2M1_DOUBLED};
use crate::quant::QK_K;

type Acc = [__m256; 4];

/// Emit 8 decoded values for elements `off..off + 8` of the block at `p`:
/// store them there (`S`), or FMA them with `x` there into `acc[slot]`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn put<const S: bool>(p: *mut f32, off: usize, v: __m256, acc: &mut Acc, slot: usize) {
    if S {
        _mm256_storeu_ps(p.add(off), v);
    } else {
        let a = &mut acc[slot & 3];
        *a = _mm256_fmadd_ps(v, _mm256_loadu_ps(p.add(off)), *a);
    }
}

/// `dl * q - ml`: exactly as the scalar decoder (mul, then sub) when storing;
/// fused (one rounding) in the dot.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scale_min<const S: bool>(dl: __m256, q: __m256, ml: __m256) -> __m256 {
    if S {
        _mm256_sub_ps(_mm256_mul_ps(dl, q), ml)
    } else {
        _mm256_fmsub_ps(dl, q, ml)
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn cvt(q: __m256i) -> __m256 {
    _mm256_cvtepi32_ps(q)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn srl(v: __m256i, n: i32) -> __m256i {
    _mm256_srl_epi32(v, _mm_cvtsi32_si128(n))
}

/// 16 i8 → two vectors of 8 f32 (elements 0..8 and 8..16).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn i8x16_to_f32(v: __m128i) -> [__m256; 2] {
    [
        cvt(_mm256_cvtepi8_epi32(v)),
        cvt(_mm256_cvtepi8_epi32(_mm_srli_si128(v, 8))),
    ]
}

/// The 16 bytes at `p` split into low nibbles (elements 0..16) and high
/// nibbles (elements 16..32), as the 32-element 4-bit formats pack them.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn nibbles16(p: *const u8) -> (__m128i, __m128i) {
    let v = _mm_loadu_si128(p as *const __m128i);
    let m = _mm_set1_epi8(0x0F);
    (_mm_and_si128(v, m), _mm_and_si128(_mm_srli_epi16(v, 4), m))
}

/// 32 elements as 4 × 8 f32, from 32 i8 values in two halves.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn four(lo: __m128i, hi: __m128i) -> [__m256; 4] {
    let [a, b] = i8x16_to_f32(lo);
    let [c, d] = i8x16_to_f32(hi);
    [a, b, c, d]
}

/// A 32-element block whose values are `d * q`: store them exactly, or add
/// `d · Σ q·x` into `acc[slot]`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn emit_scaled32<const S: bool>(
    p: *mut f32,
    d: f32,
    q: [__m256; 4],
    acc: &mut Acc,
    slot: usize,
) {
    let dv = _mm256_set1_ps(d);
    if S {
        for (k, v) in q.iter().enumerate() {
            _mm256_storeu_ps(p.add(8 * k), _mm256_mul_ps(dv, *v));
        }
    } else {
        let l0 = _mm256_mul_ps(q[0], _mm256_loadu_ps(p));
        let l1 = _mm256_mul_ps(q[1], _mm256_loadu_ps(p.add(8)));
        let l0 = _mm256_fmadd_ps(q[2], _mm256_loadu_ps(p.add(16)), l0);
        let l1 = _mm256_fmadd_ps(q[3], _mm256_loadu_ps(p.add(24)), l1);
        let a = &mut acc[slot & 3];
        *a = _mm256_fmadd_ps(dv, _mm256_add_ps(l0, l1), *a);
    }
}

/// A 32-element block whose values are `d * q + m`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn emit_affine32<const S: bool>(p: *mut f32, d: f32, m: f32, q: [__m256; 4], acc: &mut Acc) {
    let (dv, mv) = (_mm256_set1_ps(d), _mm256_set1_ps(m));
    for (k, v) in q.iter().enumerate() {
        let w = if S {
            _mm256_add_ps(_mm256_mul_ps(dv, *v), mv)
        } else {
            _mm256_fmadd_ps(dv, *v, mv)
        };
        put::<S>(p, 8 * k, w, acc, k);
    }
}

/// 16 fifth bits (bit `i` → byte `i`) as a 16-byte vector of `0x10` / `0`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn fifth_bits16(h: u32) -> __m128i {
    let spread = _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    let sel = _mm_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let v = _mm_shuffle_epi8(_mm_set1_epi16(h as u16 as i16), spread);
    let set = _mm_cmpeq_epi8(_mm_and_si128(v, sel), sel);
    _mm_and_si128(set, _mm_set1_epi8(0x10))
}

/// The 32 fifth bits of a Q5 block (`qh` bit `i` → element `i`), for the
/// low-nibble and high-nibble halves.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn fifth_bits(qh: u32) -> (__m128i, __m128i) {
    (fifth_bits16(qh & 0xFFFF), fifth_bits16(qh >> 16))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_0<const S: bool>(b: *const u8, p: *mut f32, acc: &mut Acc, slot: usize) {
    let (lo, hi) = nibbles16(b.add(2));
    let eight = _mm_set1_epi8(8);
    let q = four(_mm_sub_epi8(lo, eight), _mm_sub_epi8(hi, eight));
    emit_scaled32::<S>(p, h2f(b), q, acc, slot);
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_1<const S: bool>(b: *const u8, p: *mut f32, acc: &mut Acc, _slot: usize) {
    let (lo, hi) = nibbles16(b.add(4));
    emit_affine32::<S>(p, h2f(b), h2f(b.add(2)), four(lo, hi), acc);
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_0<const S: bool>(b: *const u8, p: *mut f32, acc: &mut Acc, slot: usize) {
    let qh = u32::from_le_bytes(*(b.add(2) as *const [u8; 4]));
    let (lo, hi) = nibbles16(b.add(6));
    let (blo, bhi) = fifth_bits(qh);
    let k16 = _mm_set1_epi8(16);
    let lo = _mm_sub_epi8(_mm_or_si128(lo, blo), k16);
    let hi = _mm_sub_epi8(_mm_or_si128(hi, bhi), k16);
    emit_scaled32::<S>(p, h2f(b), four(lo, hi), acc, slot);
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_1<const S: bool>(b: *const u8, p: *mut f32, acc: &mut Acc, _slot: usize) {
    let qh = u32::from_le_bytes(*(b.add(4) as *const [u8; 4]));
    let (lo, hi) = nibbles16(b.add(8));
    let (blo, bhi) = fifth_bits(qh);
    let q = four(_mm_or_si128(lo, blo), _mm_or_si128(hi, bhi));
    emit_affine32::<S>(p, h2f(b), h2f(b.add(2)), q, acc);
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_0<const S: bool>(b: *const u8, p: *mut f32, acc: &mut Acc, slot: usize) {
    let qs = b.add(2);
    let q = [
        cvt(ld8s(qs)),
        cvt(ld8s(qs.add(8))),
        cvt(ld8s(qs.add(16))),
        cvt(ld8s(qs.add(24))),
    ];
    emit_scaled32::<S>(p, h2f(b), q, acc, slot);
}

/// 32 table-coded elements (nibbles as Q4_0) → their i8 levels as f32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn table32(table: __m128i, qs: *const u8) -> [__m256; 4] {
    let (lo, hi) = nibbles16(qs);
    four(_mm_shuffle_epi8(table, lo), _mm_shuffle_epi8(table, hi))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq4_table() -> __m128i {
    _mm_loadu_si128(IQ4_NL_VALUES.as_ptr() as *const __m128i)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq4_nl<const S: bool>(b: *const u8, p: *mut f32, acc: &mut Acc, slot: usize) {
    emit_scaled32::<S>(p, h2f(b), table32(iq4_table(), b.add(2)), acc, slot);
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn mxfp4<const S: bool>(b: *const u8, p: *mut f32, acc: &mut Acc, slot: usize) {
    let table = _mm_loadu_si128(E2M1_DOUBLED.as_ptr() as *const __m128i);
    emit_scaled32::<S>(p, e8m0_to_f32_half(*b), table32(table, b.add(1)), acc, slot);
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq4_xs<const S: bool>(b: *const u8, p: *mut f32, acc: &mut Acc, _slot: usize) {
    let d = h2f(b);
    let scales_h = u16::from_le_bytes([*b.add(2), *b.add(3)]);
    let table = iq4_table();
    for ib in 0..8 {
        let low = (*b.add(4 + ib / 2) >> (4 * (ib % 2))) & 0x0F;
        let high = ((scales_h >> (2 * ib)) & 3) as u8;
        let ls = (low | (high << 4)) as i32 - 32;
        let q = table32(table, b.add(8 + 16 * ib));
        emit_scaled32::<S>(p.add(32 * ib), d * ls as f32, q, acc, ib);
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q2_k<const S: bool>(b: *const u8, p: *mut f32, acc: &mut Acc, _slot: usize) {
    let d = h2f(b.add(80));
    let dmin = h2f(b.add(82));
    let (mut dl, mut ml) = ([0f32; 16], [0f32; 16]);
    for g in 0..16 {
        let sc = *b.add(g);
        dl[g] = d * (sc & 0x0F) as f32;
        ml[g] = dmin * (sc >> 4) as f32;
    }
    let three = _mm256_set1_epi32(3);
    for h in 0..2 {
        let qs = b.add(16 + 32 * h);
        let raw = [
            ld8u(qs),
            ld8u(qs.add(8)),
            ld8u(qs.add(16)),
            ld8u(qs.add(24)),
        ];
        for j in 0..4 {
            let base = 128 * h + 32 * j;
            for (k, r) in raw.iter().enumerate() {
                let g = base / 16 + k / 2;
                let q = cvt(_mm256_and_si256(srl(*r, 2 * j as i32), three));
                let w = scale_min::<S>(_mm256_set1_ps(dl[g]), q, _mm256_set1_ps(ml[g]));
                put::<S>(p, base + 8 * k, w, acc, k);
            }
        }
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q3_k<const S: bool>(b: *const u8, p: *mut f32, acc: &mut Acc, _slot: usize) {
    let scales = q3_k_scales(&*(b.add(96) as *const [u8; 12]));
    let d = h2f(b.add(108));
    let mut dl = [0f32; 16];
    for (o, &s) in dl.iter_mut().zip(&scales) {
        *o = d * s as f32;
    }
    let hm = [ld8u(b), ld8u(b.add(8)), ld8u(b.add(16)), ld8u(b.add(24))];
    let (one, three, four) = (
        _mm256_set1_epi32(1),
        _mm256_set1_epi32(3),
        _mm256_set1_epi32(4),
    );
    for h in 0..2 {
        let qs = b.add(32 + 32 * h);
        let raw = [
            ld8u(qs),
            ld8u(qs.add(8)),
            ld8u(qs.add(16)),
            ld8u(qs.add(24)),
        ];
        for j in 0..4 {
            let base = 128 * h + 32 * j;
            for k in 0..4 {
                let low = _mm256_and_si256(srl(raw[k], 2 * j as i32), three);
                let hbit = _mm256_and_si256(srl(hm[k], (4 * h + j) as i32), one);
                // A set high bit adds 4 to low - 4.
                let q = _mm256_sub_epi32(_mm256_or_si256(low, _mm256_slli_epi32(hbit, 2)), four);
                let w = _mm256_mul_ps(_mm256_set1_ps(dl[base / 16 + k / 2]), cvt(q));
                put::<S>(p, base + 8 * k, w, acc, k);
            }
        }
    }
}

/// The 8 `d · scale` and 8 `dmin · min` of a Q4_K/Q5_K block, as vectors.
/// The 6-bit fields are unpacked four at a time from the three little-endian
/// words of `scales` (layout: see `scale_min_k4`); `d * (field as f32)` as in
/// the scalar decoder.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn k4_scales_vec(b: *const u8) -> (__m256, __m256) {
    const M6: u32 = 0x3F3F_3F3F;
    const M4: u32 = 0x0F0F_0F0F;
    const M2: u32 = 0x0303_0303;
    let w = |i: usize| u32::from_le_bytes(*(b.add(4 + 4 * i) as *const [u8; 4]));
    let (w0, w1, w2) = (w(0), w(1), w(2));
    let sc_lo = w0 & M6;
    let sc_hi = (w2 & M4) | (((w0 >> 6) & M2) << 4);
    let m_lo = w1 & M6;
    let m_hi = ((w2 >> 4) & M4) | (((w1 >> 6) & M2) << 4);
    let widen = |lo: u32, hi: u32| {
        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_set_epi32(
            0, 0, hi as i32, lo as i32,
        )))
    };
    (
        _mm256_mul_ps(_mm256_set1_ps(h2f(b)), widen(sc_lo, sc_hi)),
        _mm256_mul_ps(_mm256_set1_ps(h2f(b.add(2))), widen(m_lo, m_hi)),
    )
}

/// [`k4_scales_vec`] as arrays.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn k4_scales(b: *const u8) -> ([f32; 8], [f32; 8]) {
    let (d, m) = k4_scales_vec(b);
    let (mut dl, mut ml) = ([0f32; 8], [0f32; 8]);
    _mm256_storeu_ps(dl.as_mut_ptr(), d);
    _mm256_storeu_ps(ml.as_mut_ptr(), m);
    (dl, ml)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_k<const S: bool>(b: *const u8, p: *mut f32, acc: &mut Acc, _slot: usize) {
    let (dl, ml) = k4_scales(b);
    let qs = b.add(16);
    let m15 = _mm256_set1_epi32(15);
    for c in 0..4 {
        let (g0, g1) = (2 * c, 2 * c + 1);
        let (dl0, ml0) = (_mm256_set1_ps(dl[g0]), _mm256_set1_ps(ml[g0]));
        let (dl1, ml1) = (_mm256_set1_ps(dl[g1]), _mm256_set1_ps(ml[g1]));
        for k in 0..4 {
            let v = ld8u(qs.add(32 * c + 8 * k));
            let lo = cvt(_mm256_and_si256(v, m15));
            let hi = cvt(_mm256_srli_epi32(v, 4));
            put::<S>(p, 64 * c + 8 * k, scale_min::<S>(dl0, lo, ml0), acc, k);
            put::<S>(
                p,
                64 * c + 32 + 8 * k,
                scale_min::<S>(dl1, hi, ml1),
                acc,
                k ^ 2,
            );
        }
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_k<const S: bool>(b: *const u8, p: *mut f32, acc: &mut Acc, _slot: usize) {
    let (dl, ml) = k4_scales(b);
    let qh = b.add(16);
    let qs = b.add(48);
    let hraw = [
        ld8u(qh),
        ld8u(qh.add(8)),
        ld8u(qh.add(16)),
        ld8u(qh.add(24)),
    ];
    let (m15, one) = (_mm256_set1_epi32(15), _mm256_set1_epi32(1));
    for c in 0..4 {
        let (g0, g1) = (2 * c, 2 * c + 1);
        let (dl0, ml0) = (_mm256_set1_ps(dl[g0]), _mm256_set1_ps(ml[g0]));
        let (dl1, ml1) = (_mm256_set1_ps(dl[g1]), _mm256_set1_ps(ml[g1]));
        for k in 0..4 {
            let v = ld8u(qs.add(32 * c + 8 * k));
            let h0 = _mm256_slli_epi32(_mm256_and_si256(srl(hraw[k], g0 as i32), one), 4);
            let h1 = _mm256_slli_epi32(_mm256_and_si256(srl(hraw[k], g1 as i32), one), 4);
            let lo = cvt(_mm256_or_si256(_mm256_and_si256(v, m15), h0));
            let hi = cvt(_mm256_or_si256(_mm256_srli_epi32(v, 4), h1));
            put::<S>(p, 64 * c + 8 * k, scale_min::<S>(dl0, lo, ml0), acc, k);
            put::<S>(
                p,
                64 * c + 32 + 8 * k,
                scale_min::<S>(dl1, hi, ml1),
                acc,
                k ^ 2,
            );
        }
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6_k<const S: bool>(b: *const u8, p: *mut f32, acc: &mut Acc, _slot: usize) {
    let d = h2f(b.add(208));
    // The 16 sub-block scales d·sc (the same f32 products as the scalar
    // decoder), in two vectors instead of 16 scalar conversions.
    let mut dl = [0f32; 16];
    let vd = _mm256_set1_ps(d);
    for half in 0..2 {
        let sc = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
            b.add(192 + 8 * half) as *const __m128i
        )));
        _mm256_storeu_ps(dl.as_mut_ptr().add(8 * half), _mm256_mul_ps(vd, sc));
    }
    let (m15, three, k32) = (
        _mm256_set1_epi32(15),
        _mm256_set1_epi32(3),
        _mm256_set1_epi32(32),
    );
    for h in 0..2 {
        let ql = b.add(64 * h);
        let qh = b.add(128 + 32 * h);
        for k in 0..4 {
            let a = ld8u(ql.add(8 * k));
            let c = ld8u(ql.add(32 + 8 * k));
            let hv = ld8u(qh.add(8 * k));
            let lows = [
                _mm256_and_si256(a, m15),
                _mm256_and_si256(c, m15),
                _mm256_srli_epi32(a, 4),
                _mm256_srli_epi32(c, 4),
            ];
            for (j, lo) in lows.iter().enumerate() {
                let hi = _mm256_and_si256(srl(hv, 2 * j as i32), three);
                let q = _mm256_sub_epi32(_mm256_or_si256(*lo, _mm256_slli_epi32(hi, 4)), k32);
                let g = 8 * h + 2 * j + k / 2;
                let w = _mm256_mul_ps(_mm256_set1_ps(dl[g]), cvt(q));
                put::<S>(p, 128 * h + 32 * j + 8 * k, w, acc, j);
            }
        }
    }
}

/// `dot_NAME(row, x)` and `deq_NAME(src, dst)` over whole blocks of one encoding.
macro_rules! row_kernels {
    ($($block:ident: $dot:ident, $deq:ident, $bb:expr, $bl:expr;)*) => {$(
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) unsafe fn $dot(row: &[u8], x: &[f32]) -> f32 {
            let n = x.len() / $bl;
            debug_assert_eq!(row.len(), n * $bb);
            let mut acc = [_mm256_setzero_ps(); 4];
            let (rp, xp) = (row.as_ptr(), x.as_ptr() as *mut f32);
            // Four blocks per step so that each gets a constant accumulator
            // slot (a computed one would keep the accumulators in memory).
            // x is only read (S = false).
            let mut i = 0;
            while i + 4 <= n {
                for k in 0..4 {
                    $block::<false>(rp.add((i + k) * $bb), xp.add((i + k) * $bl), &mut acc, k);
                }
                i += 4;
            }
            while i < n {
                $block::<false>(rp.add(i * $bb), xp.add(i * $bl), &mut acc, 0);
                i += 1;
            }
            hsum4(&acc)
        }

        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) unsafe fn $deq(src: &[u8], dst: &mut [f32]) {
            let n = dst.len() / $bl;
            debug_assert_eq!(src.len(), n * $bb);
            let mut acc = [_mm256_setzero_ps(); 4];
            let (sp, dp) = (src.as_ptr(), dst.as_mut_ptr());
            for i in 0..n {
                $block::<true>(sp.add(i * $bb), dp.add(i * $bl), &mut acc, 0);
            }
        }
    )*};
}

row_kernels! {
    q4_0: dot_q4_0, deq_q4_0, 18, 32;
    q4_1: dot_q4_1, deq_q4_1, 20, 32;
    q5_0: dot_q5_0, deq_q5_0, 22, 32;
    q5_1: dot_q5_1, deq_q5_1, 24, 32;
    q8_0: dot_q8_0, deq_q8_0, 34, 32;
    q2_k: dot_q2_k, deq_q2_k, 84, QK_K;
    q3_k: dot_q3_k, deq_q3_k, 110, QK_K;
    q4_k: dot_q4_k, deq_q4_k, 144, QK_K;
    q5_k: dot_q5_k, deq_q5_k, 176, QK_K;
    q6_k: dot_q6_k, deq_q6_k, 210, QK_K;
    iq4_nl: dot_iq4_nl, deq_iq4_nl, 18, 32;
    iq4_xs: dot_iq4_xs, deq_iq4_xs, 136, QK_K;
    mxfp4: dot_mxfp4, deq_mxfp4, 17, 32;
}
