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

use super::{h2f, hsum4, ld8s, ld8u4};
use crate::quant::iq4::IQ4_NL_VALUES;
use crate::quant::k_quants::q3_k_scales;
use crate::quant::mxfp4::{e8m0_to_f32_half, E2M1_DOUBLED};
use crate::quant::QK_K;

mod parted;
mod unpacked;
// The K blocks' in-register canonical kernels unpack each block to bytes
// first (see `unpacked`).
pub(super) use unpacked::{canon_q4_k, canon_q5_k, canon_q6_k};

type Acc = [__m256; 4];

/// Where a block decoder's vectors of 8 values go. A decoder calls
/// [`Emit::put`] for elements `off..off + 8` of its block, in increasing
/// `off` (the canonical emitter relies on that order).
pub(super) trait Emit {
    /// The values must be exactly the scalar decoder's (no fused scales).
    const EXACT: bool;
    /// Elements `off..off + 8` of the current block are `v`; `slot` is a
    /// hint for emitters that spread the sum over several accumulators.
    unsafe fn put(&mut self, off: usize, v: __m256, slot: usize);
    /// Elements `off..off + 32` are `d · q[k]` (a single-scale block).
    #[inline(always)]
    unsafe fn scaled32(&mut self, off: usize, d: f32, q: [__m256; 4], slot: usize) {
        let dv = _mm256_set1_ps(d);
        for (k, v) in q.iter().enumerate() {
            self.put(off + 8 * k, _mm256_mul_ps(dv, *v), slot);
        }
    }
}

// `Store`, `Dot` (with its own `scaled32`: factored block scale) and
// `scale_min`, on 8-lane vectors.
plain_emitters! {"avx2,fma,f16c", __m256, _mm256_storeu_ps, _mm256_loadu_ps, _mm256_fmadd_ps,
    (_mm256_sub_ps, _mm256_mul_ps, _mm256_fmsub_ps);
    #[inline(always)]
    unsafe fn scaled32(&mut self, off: usize, d: f32, q: [__m256; 4], slot: usize) {
        let p = self.x.add(off);
        let l0 = _mm256_mul_ps(q[0], _mm256_loadu_ps(p));
        let l1 = _mm256_mul_ps(q[1], _mm256_loadu_ps(p.add(8)));
        let l0 = _mm256_fmadd_ps(q[2], _mm256_loadu_ps(p.add(16)), l0);
        let l1 = _mm256_fmadd_ps(q[3], _mm256_loadu_ps(p.add(24)), l1);
        let a = &mut self.acc[slot & 3];
        *a = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_add_ps(l0, l1), *a);
    }
}

// `Canon`: the canonical AVX2 order, on chunks of 8.
canon_acc!(
    __m256,
    _mm256_setzero_ps,
    _mm256_loadu_ps,
    _mm256_fmadd_ps,
    super::hsum
);

/// [`Canon`] in the AVX-512 path's canonical order (16-lane accumulators),
/// for encodings without an AVX-512 decoder: each 16-lane accumulator is
/// held as two 8-lane halves, every lane gets the same FMAs in the same
/// order, and the upper half added onto the lower is exactly the first
/// step of the AVX-512 horizontal sum — the same bits as the AVX-512
/// blocked path, with AVX2 instructions.
pub(super) struct Canon16<const T: usize> {
    pub(super) x: *const f32,
    pub(super) stride: usize,
    pub(super) acc: [[__m256; 2]; T],
}

impl<const T: usize> super::RowAcc<T> for Canon16<T> {
    #[inline(always)]
    unsafe fn start(x: *const f32, stride: usize) -> Self {
        Canon16 {
            x,
            stride,
            acc: [[_mm256_setzero_ps(); 2]; T],
        }
    }
    #[inline(always)]
    fn at_block(&mut self, x: *const f32) {
        self.x = x;
    }
    /// The upper halves added onto the lower, then the AVX2 sum: the
    /// AVX-512 horizontal sum of the 16-lane accumulator.
    #[inline(always)]
    unsafe fn sums(&self) -> [f32; T] {
        self.acc.map(|[lo, hi]| super::hsum(_mm256_add_ps(lo, hi)))
    }
}

impl<const T: usize> Emit for Canon16<T> {
    const EXACT: bool = true;
    #[inline(always)]
    unsafe fn put(&mut self, off: usize, v: __m256, _slot: usize) {
        let half = (off / 8) % 2;
        for t in 0..T {
            let xv = _mm256_loadu_ps(self.x.add(t * self.stride + off));
            self.acc[t][half] = _mm256_fmadd_ps(v, xv, self.acc[t][half]);
        }
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

/// A 32-element block whose values are `d * q + m`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn emit_affine32<E: Emit>(e: &mut E, d: f32, m: f32, q: [__m256; 4]) {
    let (dv, mv) = (_mm256_set1_ps(d), _mm256_set1_ps(m));
    for (k, v) in q.iter().enumerate() {
        let w = if E::EXACT {
            _mm256_add_ps(_mm256_mul_ps(dv, *v), mv)
        } else {
            _mm256_fmadd_ps(dv, *v, mv)
        };
        e.put(8 * k, w, k);
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

/// The 32 five-bit quants of a Q5_0 / Q5_1 block (nibbles at `qs`, fifth
/// bits from the little-endian u32 at `qh`), elements 0..16 and 16..32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn quants5(qh: *const u8, qs: *const u8) -> (__m128i, __m128i) {
    let qh = u32::from_le_bytes(*(qh as *const [u8; 4]));
    let (lo, hi) = nibbles16(qs);
    let (blo, bhi) = fifth_bits(qh);
    (_mm_or_si128(lo, blo), _mm_or_si128(hi, bhi))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_0<E: Emit>(b: *const u8, e: &mut E, slot: usize) {
    let (lo, hi) = nibbles16(b.add(2));
    let eight = _mm_set1_epi8(8);
    let q = four(_mm_sub_epi8(lo, eight), _mm_sub_epi8(hi, eight));
    e.scaled32(0, h2f(b), q, slot);
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_1<E: Emit>(b: *const u8, e: &mut E, _slot: usize) {
    let (lo, hi) = nibbles16(b.add(4));
    emit_affine32(e, h2f(b), h2f(b.add(2)), four(lo, hi));
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_0<E: Emit>(b: *const u8, e: &mut E, slot: usize) {
    let (lo, hi) = quants5(b.add(2), b.add(6));
    let k16 = _mm_set1_epi8(16);
    let (lo, hi) = (_mm_sub_epi8(lo, k16), _mm_sub_epi8(hi, k16));
    e.scaled32(0, h2f(b), four(lo, hi), slot);
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_1<E: Emit>(b: *const u8, e: &mut E, _slot: usize) {
    let (lo, hi) = quants5(b.add(4), b.add(8));
    let q = four(lo, hi);
    emit_affine32(e, h2f(b), h2f(b.add(2)), q);
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_0<E: Emit>(b: *const u8, e: &mut E, slot: usize) {
    let qs = b.add(2);
    let q = [
        cvt(ld8s(qs)),
        cvt(ld8s(qs.add(8))),
        cvt(ld8s(qs.add(16))),
        cvt(ld8s(qs.add(24))),
    ];
    e.scaled32(0, h2f(b), q, slot);
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
unsafe fn iq4_nl<E: Emit>(b: *const u8, e: &mut E, slot: usize) {
    e.scaled32(0, h2f(b), table32(iq4_table(), b.add(2)), slot);
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn mxfp4<E: Emit>(b: *const u8, e: &mut E, slot: usize) {
    let table = _mm_loadu_si128(E2M1_DOUBLED.as_ptr() as *const __m128i);
    e.scaled32(0, e8m0_to_f32_half(*b), table32(table, b.add(1)), slot);
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq4_xs<E: Emit>(b: *const u8, e: &mut E, _slot: usize) {
    let d = h2f(b);
    let scales_h = u16::from_le_bytes([*b.add(2), *b.add(3)]);
    let table = iq4_table();
    for ib in 0..8 {
        let low = (*b.add(4 + ib / 2) >> (4 * (ib % 2))) & 0x0F;
        let high = ((scales_h >> (2 * ib)) & 3) as u8;
        let ls = (low | (high << 4)) as i32 - 32;
        let q = table32(table, b.add(8 + 16 * ib));
        e.scaled32(32 * ib, d * ls as f32, q, ib);
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q2_k<E: Emit>(b: *const u8, e: &mut E, _slot: usize) {
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
        let raw = ld8u4(qs);
        for j in 0..4 {
            let base = 128 * h + 32 * j;
            for (k, r) in raw.iter().enumerate() {
                let g = base / 16 + k / 2;
                let q = cvt(_mm256_and_si256(srl(*r, 2 * j as i32), three));
                let w = scale_min::<E>(_mm256_set1_ps(dl[g]), q, _mm256_set1_ps(ml[g]));
                e.put(base + 8 * k, w, k);
            }
        }
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q3_k<E: Emit>(b: *const u8, e: &mut E, _slot: usize) {
    let scales = q3_k_scales(&*(b.add(96) as *const [u8; 12]));
    let d = h2f(b.add(108));
    let mut dl = [0f32; 16];
    for (o, &s) in dl.iter_mut().zip(&scales) {
        *o = d * s as f32;
    }
    let hm = ld8u4(b);
    let (one, three, four) = (
        _mm256_set1_epi32(1),
        _mm256_set1_epi32(3),
        _mm256_set1_epi32(4),
    );
    for h in 0..2 {
        let qs = b.add(32 + 32 * h);
        let raw = ld8u4(qs);
        for j in 0..4 {
            let base = 128 * h + 32 * j;
            for k in 0..4 {
                let low = _mm256_and_si256(srl(raw[k], 2 * j as i32), three);
                let hbit = _mm256_and_si256(srl(hm[k], (4 * h + j) as i32), one);
                // A set high bit adds 4 to low - 4.
                let q = _mm256_sub_epi32(_mm256_or_si256(low, _mm256_slli_epi32(hbit, 2)), four);
                let w = _mm256_mul_ps(_mm256_set1_ps(dl[base / 16 + k / 2]), cvt(q));
                e.put(base + 8 * k, w, k);
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

/// Q4_K, Q5_K and Q6_K: the 64-value parts of `parted` in order (the
/// canonical kernels interleave rows between parts; one decoding of each
/// encoding serves both).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_k<E: Emit>(b: *const u8, e: &mut E, _slot: usize) {
    parted::emit::<parted::Q4K, E>(b, e)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_k<E: Emit>(b: *const u8, e: &mut E, _slot: usize) {
    parted::emit::<parted::Q5K, E>(b, e)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6_k<E: Emit>(b: *const u8, e: &mut E, _slot: usize) {
    parted::emit::<parted::Q6K, E>(b, e)
}

row_kernels! {"avx2,fma,f16c", _mm256_setzero_ps(), hsum4;
    q4_0: dot_q4_0, deq_q4_0, canon_q4_0: Canon, canon16_q4_0: Canon16; 18, 32;
    q4_1: dot_q4_1, deq_q4_1, canon_q4_1: Canon, canon16_q4_1: Canon16; 20, 32;
    q5_0: dot_q5_0, deq_q5_0, canon_q5_0: Canon, canon16_q5_0: Canon16; 22, 32;
    q5_1: dot_q5_1, deq_q5_1, canon_q5_1: Canon, canon16_q5_1: Canon16; 24, 32;
    q8_0: dot_q8_0, deq_q8_0, canon_q8_0: Canon, canon16_q8_0: Canon16; 34, 32;
    q2_k: dot_q2_k, deq_q2_k, canon_q2_k: Canon, canon16_q2_k: Canon16; 84, QK_K;
    q3_k: dot_q3_k, deq_q3_k, canon_q3_k: Canon, canon16_q3_k: Canon16; 110, QK_K;
    q4_k: dot_q4_k, deq_q4_k; 144, QK_K;
    q5_k: dot_q5_k, deq_q5_k; 176, QK_K;
    q6_k: dot_q6_k, deq_q6_k; 210, QK_K;
    iq4_nl: dot_iq4_nl, deq_iq4_nl, canon_iq4_nl: Canon, canon16_iq4_nl: Canon16; 18, 32;
    iq4_xs: dot_iq4_xs, deq_iq4_xs, canon_iq4_xs: Canon, canon16_iq4_xs: Canon16; 136, QK_K;
    mxfp4: dot_mxfp4, deq_mxfp4, canon_mxfp4: Canon, canon16_mxfp4: Canon16; 17, 32;
}
