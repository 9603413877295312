//! AVX-512 kernels for the hottest encodings; the others use the AVX2 ones.
//!
//! The 4-bit (and Q5_K's 5-bit) encodings decode through a per-(sub-)block
//! lookup table: the 16 (or 32) possible values of the block, computed with
//! the scalar decoder's own f32 operations (`dl * q - ml`, `d * level`, ...),
//! are one (or two) zmm registers, and `vpermps` / `vpermt2ps` picks each
//! element's value by its quant. The permutes use only the low 4 (5) bits of
//! each 32-bit index, so a quant byte zero-extended to 32 bits indexes its low
//! nibble directly and, shifted right by 4, its high nibble — no masking.
//! Q6_K and Q8_0 convert the integer quants with `cvtepi32_ps` instead.
//!
//! Each block decoder hands its vectors to an [`Emit`]ter: [`Store`] writes
//! the decoded values (bit-identical to the scalar decoders), [`Dot`] FMAs
//! them with `x` (tables built with a fused `fmsub`, the Q8_0 scale factored
//! out: fast, not canonical), and [`Canon`] FMAs the exact values into one
//! accumulator per token in the canonical order of `crate::gemm`, so a
//! product decoded in registers equals the decode-then-multiply one bit for
//! bit.
//!
//! Every function is `unsafe` with `#[target_feature]` AVX-512F/BW/VL plus
//! AVX2/FMA/F16C: callers must have checked the CPU and pass whole blocks.

// Index loops mirror the element offsets they compute.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use rill_dtype::DType;

use super::avx2_blocks::k4_scales_vec;
use super::{h2f, hsum};
use crate::quant::iq4::IQ4_NL_VALUES;
use crate::quant::mxfp4::{e8m0_to_f32_half, E2M1_DOUBLED};
use crate::quant::QK_K;

type Acc = [__m512; 4];

/// Where a block decoder's vectors of 16 values go. A decoder calls
/// [`Emit::put`] for elements `off..off + 16` of its block, in increasing
/// `off` (the canonical emitter relies on that order).
trait Emit {
    /// The values must be exactly the scalar decoder's (no fused scales).
    const EXACT: bool;
    /// Elements `off..off + 16` of the current block are `v`; `slot` is a
    /// hint for emitters that spread the sum over several accumulators.
    unsafe fn put(&mut self, off: usize, v: __m512, slot: usize);
    /// Elements `off..off + 32` are `d · q0` and `d · q1`.
    #[inline(always)]
    unsafe fn put_scaled32(&mut self, off: usize, d: __m512, q0: __m512, q1: __m512, slot: usize) {
        self.put(off, _mm512_mul_ps(d, q0), slot);
        self.put(off + 16, _mm512_mul_ps(d, q1), slot);
    }
}

// `Store`, `Dot` (with its own `put_scaled32`) and `scale_min`, on
// 16-lane vectors.
plain_emitters! {"avx512f,avx512bw,avx512vl,avx2,fma,f16c", __m512, _mm512_storeu_ps, _mm512_loadu_ps, _mm512_fmadd_ps,
    (_mm512_sub_ps, _mm512_mul_ps, _mm512_fmsub_ps);
    #[inline(always)]
    unsafe fn put_scaled32(&mut self, off: usize, d: __m512, q0: __m512, q1: __m512, slot: usize) {
        let s = _mm512_mul_ps(q0, _mm512_loadu_ps(self.x.add(off)));
        let s = _mm512_fmadd_ps(q1, _mm512_loadu_ps(self.x.add(off + 16)), s);
        let a = &mut self.acc[slot & 3];
        *a = _mm512_fmadd_ps(d, s, *a);
    }
}

// `Canon`: the canonical AVX-512 order, on chunks of 16.
canon_acc!(
    __m512,
    _mm512_setzero_ps,
    _mm512_loadu_ps,
    _mm512_fmadd_ps,
    super::gemm::hsum512
);

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn iota(from: f32) -> __m512 {
    _mm512_add_ps(
        _mm512_setr_ps(
            0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0,
        ),
        _mm512_set1_ps(from),
    )
}

/// `*p` in all 16 lanes, loaded with a memory-operand `vbroadcastss` (load
/// ports only). Written as asm because the compiler would otherwise forward
/// the just-stored scale through shuffle-port instructions.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn bcast(p: *const f32) -> __m512 {
    let r: __m512;
    // SAFETY: `p` points to a readable, initialised f32; the asm only reads it.
    std::arch::asm!(
        "vbroadcastss {r}, dword ptr [{p}]",
        r = out(zmm_reg) r,
        p = in(reg) p,
        options(pure, readonly, nostack, preserves_flags)
    );
    r
}

/// The Q4_K/Q5_K block scales: `d · scale` in 0..8, `dmin · min` in 8..16.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn k4_scales16(b: *const u8) -> [f32; 16] {
    let (dl, ml) = k4_scales_vec(b);
    let mut s = [0f32; 16];
    _mm256_storeu_ps(s.as_mut_ptr(), dl);
    _mm256_storeu_ps(s.as_mut_ptr().add(8), ml);
    s
}

/// 16 bytes at `p` zero-extended to 16 × i32.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn ld16u(p: *const u8) -> __m512i {
    _mm512_cvtepu8_epi32(_mm_loadu_si128(p as *const __m128i))
}

/// A 32-element block of nibbles (element `j` low nibble of byte `j`,
/// element `j + 16` its high nibble) through the 16-entry table `t`, as
/// elements `off..off + 32` of the block.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn nib32<E: Emit>(t: __m512, qs: *const u8, e: &mut E, off: usize, slot: usize) {
    let v = ld16u(qs);
    e.put(off, _mm512_permutexvar_ps(v, t), slot);
    e.put(
        off + 16,
        _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), t),
        slot + 1,
    );
}

/// The 16 i8 levels of a table encoding as f32.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn levels(t: &[i8; 16]) -> __m512 {
    _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
        t.as_ptr() as *const __m128i
    )))
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn q4_0<E: Emit>(b: *const u8, e: &mut E, slot: usize) {
    // Scalar: d * (q - 8) as f32; (q - 8) as f32 is exact, so is the table.
    let t = _mm512_mul_ps(_mm512_set1_ps(h2f(b)), iota(-8.0));
    nib32(t, b.add(2), e, 0, 2 * slot);
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn q4_1<E: Emit>(b: *const u8, e: &mut E, slot: usize) {
    let (d, m) = (_mm512_set1_ps(h2f(b)), _mm512_set1_ps(h2f(b.add(2))));
    let t = if E::EXACT {
        _mm512_add_ps(_mm512_mul_ps(d, iota(0.0)), m)
    } else {
        _mm512_fmadd_ps(d, iota(0.0), m)
    };
    nib32(t, b.add(4), e, 0, 2 * slot);
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn iq4_nl<E: Emit>(b: *const u8, e: &mut E, slot: usize) {
    let t = _mm512_mul_ps(_mm512_set1_ps(h2f(b)), levels(&IQ4_NL_VALUES));
    nib32(t, b.add(2), e, 0, 2 * slot);
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn mxfp4<E: Emit>(b: *const u8, e: &mut E, slot: usize) {
    let t = _mm512_mul_ps(_mm512_set1_ps(e8m0_to_f32_half(*b)), levels(&E2M1_DOUBLED));
    nib32(t, b.add(1), e, 0, 2 * slot);
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn iq4_xs<E: Emit>(b: *const u8, e: &mut E, _slot: usize) {
    let d = h2f(b);
    let scales_h = u16::from_le_bytes([*b.add(2), *b.add(3)]);
    let lv = levels(&IQ4_NL_VALUES);
    for ib in 0..8 {
        let low = (*b.add(4 + ib / 2) >> (4 * (ib % 2))) & 0x0F;
        let high = ((scales_h >> (2 * ib)) & 3) as u8;
        let ls = (low | (high << 4)) as i32 - 32;
        let t = _mm512_mul_ps(_mm512_set1_ps(d * ls as f32), lv);
        nib32(t, b.add(8 + 16 * ib), e, 32 * ib, 2 * ib);
    }
}

/// 16 signed bytes at `p` as 16 f32.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn ld16s_f32(p: *const u8) -> __m512 {
    _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p as *const __m128i)))
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn q8_0<E: Emit>(b: *const u8, e: &mut E, slot: usize) {
    let d = _mm512_set1_ps(h2f(b));
    let (q0, q1) = (ld16s_f32(b.add(2)), ld16s_f32(b.add(18)));
    e.put_scaled32(0, d, q0, q1, slot);
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn q4_k<E: Emit>(b: *const u8, e: &mut E, _slot: usize) {
    let s = k4_scales16(b);
    let sp = s.as_ptr();
    let qs = b.add(16);
    let q = iota(0.0);
    for c in 0..4 {
        let t0 = scale_min::<E>(bcast(sp.add(2 * c)), q, bcast(sp.add(8 + 2 * c)));
        let t1 = scale_min::<E>(bcast(sp.add(2 * c + 1)), q, bcast(sp.add(9 + 2 * c)));
        let v0 = ld16u(qs.add(32 * c));
        let v1 = ld16u(qs.add(32 * c + 16));
        let o = 64 * c;
        e.put(o, _mm512_permutexvar_ps(v0, t0), 0);
        e.put(o + 16, _mm512_permutexvar_ps(v1, t0), 1);
        e.put(
            o + 32,
            _mm512_permutexvar_ps(_mm512_srli_epi32(v0, 4), t1),
            2,
        );
        e.put(
            o + 48,
            _mm512_permutexvar_ps(_mm512_srli_epi32(v1, 4), t1),
            3,
        );
    }
}

/// `h` with its bit `g` moved to bit 4 (other bits land elsewhere).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn bit_to_4(h: __m512i, g: usize) -> __m512i {
    if g <= 4 {
        _mm512_sll_epi32(h, _mm_cvtsi32_si128(4 - g as i32))
    } else {
        _mm512_srl_epi32(h, _mm_cvtsi32_si128(g as i32 - 4))
    }
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn q5_k<E: Emit>(b: *const u8, e: &mut E, _slot: usize) {
    let s = k4_scales16(b);
    let sp = s.as_ptr();
    let qh = [ld16u(b.add(16)), ld16u(b.add(32))];
    let qs = b.add(48);
    let (q_lo, q_hi) = (iota(0.0), iota(16.0));
    let m15 = _mm512_set1_epi32(0x0F);
    for c in 0..4 {
        for (h, g) in [(0, 2 * c), (1, 2 * c + 1)] {
            // 32-entry table: q = 0..16 in one register, 16..32 in the other.
            let (dl, ml) = (bcast(sp.add(g)), bcast(sp.add(8 + g)));
            let lo = scale_min::<E>(dl, q_lo, ml);
            let hi = scale_min::<E>(dl, q_hi, ml);
            for half in 0..2 {
                let v = ld16u(qs.add(32 * c + 16 * half));
                let nib = if h == 0 { v } else { _mm512_srli_epi32(v, 4) };
                // Index = nibble (bits 0..4) | fifth bit at bit 4; the
                // permute ignores bits 5 and up. 0xE4: c ? a : b, bitwise.
                let idx = _mm512_ternarylogic_epi32(nib, bit_to_4(qh[half], g), m15, 0xE4);
                let w = _mm512_permutex2var_ps(lo, idx, hi);
                e.put(64 * c + 32 * h + 16 * half, w, 2 * h + half);
            }
        }
    }
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn q6_k<E: Emit>(b: *const u8, e: &mut E, _slot: usize) {
    let d = h2f(b.add(208));
    // The 16 sub-block scales d·sc (the same f32 products as the scalar
    // decoder), computed in one vector instead of 16 scalar conversions.
    let mut dl = [0f32; 16];
    let sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
        b.add(192) as *const __m128i
    )));
    _mm512_storeu_ps(dl.as_mut_ptr(), _mm512_mul_ps(_mm512_set1_ps(d), sc));
    // The 6-bit quants are assembled 64 at a time in bytes: half h holds
    // slices j = 0..4 of 32 elements; slice j's low 4 bits are the low
    // (j < 2) or high nibbles of ql[32(j % 2)..][..32], its top 2 bits are
    // bits 2j..2j+2 of qh[..32]. Slices 0 and 1 (elements 0..64 of the
    // half) come from the low nibbles of all 64 ql bytes, slices 2 and 3
    // from the high ones; qh is repeated in both 256-bit halves and each
    // half shifted so its pair of bits lands at bits 4..6.
    let (m0f, m30, k32) = (
        _mm512_set1_epi8(0x0F),
        _mm512_set1_epi8(0x30),
        _mm512_set1_epi8(32),
    );
    let word_shift =
        |lo: i16, hi: i16| _mm512_inserti64x4(_mm512_set1_epi16(lo), _mm256_set1_epi16(hi), 1);
    let (up01, down23) = (word_shift(4, 2), word_shift(0, 2));
    let mut q = [0i8; 128];
    for h in 0..2 {
        let l = _mm512_loadu_si512(b.add(64 * h) as *const _);
        let qh = _mm256_loadu_si256(b.add(128 + 32 * h) as *const __m256i);
        let qh2 = _mm512_inserti64x4(_mm512_castsi256_si512(qh), qh, 1);
        let h01 = _mm512_and_si512(_mm512_sllv_epi16(qh2, up01), m30);
        let h23 = _mm512_and_si512(_mm512_srlv_epi16(qh2, down23), m30);
        // 0xE4: (a & 0x0F) | (b & !0x0F) with c = 0x0F.
        let q01 = _mm512_ternarylogic_epi32(l, h01, m0f, 0xE4);
        let q23 = _mm512_ternarylogic_epi32(_mm512_srli_epi16(l, 4), h23, m0f, 0xE4);
        let qp = q.as_mut_ptr() as *mut __m512i;
        _mm512_storeu_si512(qp as *mut _, _mm512_sub_epi8(q01, k32));
        _mm512_storeu_si512(qp.add(1) as *mut _, _mm512_sub_epi8(q23, k32));
        for g in 0..8 {
            let qf = ld16s_f32(q.as_ptr().add(16 * g) as *const u8);
            let w = _mm512_mul_ps(_mm512_set1_ps(dl[8 * h + g]), qf);
            e.put(128 * h + 16 * g, w, g / 2);
        }
    }
}

/// Sum of four accumulators' lanes: their sum, upper 256 bits onto the
/// lower, then [`hsum`].
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn hsum4_z(acc: &[__m512; 4]) -> f32 {
    let s = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
    hsum(_mm256_add_ps(
        _mm512_castps512_ps256(s),
        _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1)),
    ))
}

row_kernels! {"avx512f,avx512bw,avx512vl,avx2,fma,f16c", _mm512_setzero_ps(), hsum4_z;
    q4_0: dot_q4_0, deq_q4_0, canon_q4_0: Canon; 18, 32;
    q4_1: dot_q4_1, deq_q4_1, canon_q4_1: Canon; 20, 32;
    q8_0: dot_q8_0, deq_q8_0, canon_q8_0: Canon; 34, 32;
    q4_k: dot_q4_k, deq_q4_k, canon_q4_k: Canon; 144, QK_K;
    q5_k: dot_q5_k, deq_q5_k, canon_q5_k: Canon; 176, QK_K;
    q6_k: dot_q6_k, deq_q6_k, canon_q6_k: Canon; 210, QK_K;
    iq4_nl: dot_iq4_nl, deq_iq4_nl, canon_iq4_nl: Canon; 18, 32;
    iq4_xs: dot_iq4_xs, deq_iq4_xs, canon_iq4_xs: Canon; 136, QK_K;
    mxfp4: dot_mxfp4, deq_mxfp4, canon_mxfp4: Canon; 17, 32;
}

/// # Safety
/// The CPU must have AVX-512F/BW/VL plus AVX2+FMA+F16C; whole blocks.
pub(super) unsafe fn dot(dtype: DType, row: &[u8], x: &[f32]) -> Option<f32> {
    use DType::*;
    Some(match dtype {
        Q4_0 => dot_q4_0(row, x),
        Q4_1 => dot_q4_1(row, x),
        Q8_0 => dot_q8_0(row, x),
        Q4K => dot_q4_k(row, x),
        Q5K => dot_q5_k(row, x),
        Q6K => dot_q6_k(row, x),
        IQ4NL => dot_iq4_nl(row, x),
        IQ4XS => dot_iq4_xs(row, x),
        MXFP4 => dot_mxfp4(row, x),
        _ => return None,
    })
}

/// # Safety
/// As [`dot`].
pub(super) unsafe fn dequantize(dtype: DType, src: &[u8], dst: &mut [f32]) -> bool {
    use DType::*;
    match dtype {
        Q4_0 => deq_q4_0(src, dst),
        Q4_1 => deq_q4_1(src, dst),
        // Q8_0: the AVX2 kernel stores ~2x faster (kernel_bench), so it is used.
        Q4K => deq_q4_k(src, dst),
        Q5K => deq_q5_k(src, dst),
        Q6K => deq_q6_k(src, dst),
        IQ4NL => deq_iq4_nl(src, dst),
        IQ4XS => deq_iq4_xs(src, dst),
        MXFP4 => deq_mxfp4(src, dst),
        _ => return false,
    }
    true
}
