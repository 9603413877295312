//! The AVX-512 VNNI panel kernels: 16 rows, the 4 activations of a group
//! broadcast into `vpdpbusd`; the K encodings' sub-block scales applied by
//! `vpmulld`, Q8_0's signed quants offset by +128.

#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::super::avx512::{dot16, ins128, q6k_quants_z, tree_z};
use super::{layout, Kind, Layout, Res, Set, Toks8, TOKENS};

/// Rows of a panel: the i32 lanes of a vector.
const ROWS: usize = 16;

const Q4K: Layout = layout(144, 8, true, 64);
const Q5K: Layout = layout(176, 8, true, 64);
const Q6K: Layout = layout(210, 16, false, 64);
const IQ4XS: Layout = layout(136, 8, false, 64);

const fn layout_of(kind: usize) -> Layout {
    match kind {
        0 => Q4K,
        1 => Q5K,
        2 => Q6K,
        _ => IQ4XS,
    }
}

/// 16 vectors of 16 i32 lanes, transposed: lane `r` of result `k` is lane
/// `k` of `a[r]`.
#[inline(always)]
unsafe fn transpose16(a: [__m512i; 16]) -> [__m512i; 16] {
    let mut t = [_mm512_setzero_si512(); 16];
    for i in 0..8 {
        t[2 * i] = _mm512_unpacklo_epi32(a[2 * i], a[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(a[2 * i], a[2 * i + 1]);
    }
    // u[4i + c], 128-bit lane L: rows 4i..4i+3 of column 4L + c.
    let mut u = [_mm512_setzero_si512(); 16];
    for i in 0..4 {
        u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    let mut o = [_mm512_setzero_si512(); 16];
    for c in 0..4 {
        let v0 = _mm512_shuffle_i32x4::<0x44>(u[c], u[4 + c]);
        let v1 = _mm512_shuffle_i32x4::<0xEE>(u[c], u[4 + c]);
        let v2 = _mm512_shuffle_i32x4::<0x44>(u[8 + c], u[12 + c]);
        let v3 = _mm512_shuffle_i32x4::<0xEE>(u[8 + c], u[12 + c]);
        o[c] = _mm512_shuffle_i32x4::<0x88>(v0, v2);
        o[4 + c] = _mm512_shuffle_i32x4::<0xDD>(v0, v2);
        o[8 + c] = _mm512_shuffle_i32x4::<0x88>(v1, v3);
        o[12 + c] = _mm512_shuffle_i32x4::<0xDD>(v1, v3);
    }
    o
}

/// The unsigned quants of values `64m..64m + 64` of block `blk`, in
/// element order.
#[inline(always)]
unsafe fn chunk<const KIND: usize>(blk: *const u8, m: usize) -> __m512i {
    if KIND == 2 {
        return q6k_quants_z(blk, m);
    }
    if KIND == 3 {
        // IQ4_XS: sub-block j's 16 bytes hold elements e (low nibbles) and
        // 16 + e (high); chunk m is sub-blocks 2m, 2m + 1. The levels + 128
        // (unsigned for vpdpbusd; the sums take the 128 off again).
        let nib = _mm256_set1_epi8(0x0F);
        let q = _mm256_loadu_si256(blk.add(8 + 32 * m) as *const __m256i);
        let lo = _mm256_and_si256(q, nib);
        let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(q), nib);
        let v = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi);
        // [lo of 2m, hi of 2m, lo of 2m + 1, hi of 2m + 1]
        let v = _mm512_shuffle_i32x4::<0xD8>(v, v);
        let levels = _mm_xor_si128(crate::q8::x86::nib_levels::<2>(), _mm_set1_epi8(-128));
        return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(levels), v);
    }
    let z = _mm512_setzero_si512();
    let qs_at = if KIND == 1 { 48 } else { 16 };
    // Low nibbles of run m are values 64m.., high ones 64m + 32...
    let shift = _mm512_mask_blend_epi64(0xF0, z, _mm512_set1_epi16(4));
    let v = _mm512_broadcast_i64x4(_mm256_loadu_si256(blk.add(qs_at + 32 * m) as *const __m256i));
    let q = _mm512_and_si512(_mm512_srlv_epi16(v, shift), _mm512_set1_epi8(0x0F));
    if KIND == 0 {
        return q;
    }
    // Q5_K: bit 2m (values 64m + l) / 2m + 1 (64m + 32 + l) of qh[l] as 16.
    let qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(blk.add(16) as *const __m256i));
    let bits = _mm512_mask_blend_epi64(
        0xF0,
        _mm512_set1_epi8(1 << (2 * m)),
        _mm512_set1_epi8(1 << (2 * m + 1)),
    );
    let k = _mm512_test_epi8_mask(qh, bits);
    _mm512_mask_add_epi8(q, k, q, _mm512_set1_epi8(16))
}

/// Rewrite rows `w..` (16 of them, `rb` bytes apart, `nb` blocks each) as
/// a panel at `dst` (`nb · layout.bytes` bytes).
#[inline(always)]
unsafe fn pack<const KIND: usize>(w: *const u8, rb: usize, nb: usize, dst: *mut u8) {
    let l = layout_of(KIND);
    for b in 0..nb {
        let blk = |r: usize| w.add(r * rb + b * l.block);
        let pb = dst.add(b * l.bytes);
        for m in 0..4 {
            let mut v = [_mm512_setzero_si512(); 16];
            for r in 0..ROWS {
                v[r] = chunk::<KIND>(blk(r), m);
            }
            let t = transpose16(v);
            for k in 0..16 {
                _mm512_storeu_si512(pb.add(64 * (16 * m + k)) as *mut _, t[k]);
            }
        }
        scales::<KIND>(&blk, pb, l);
    }
}

/// Block `blk(r)`'s scales (and mins) of the 16 rows into the panel block
/// at `pb`: one vector of 16 i32 per source row, transposed.
#[inline(always)]
unsafe fn scales<const KIND: usize>(blk: &impl Fn(usize) -> *const u8, pb: *mut u8, l: Layout) {
    let mut a = [_mm512_setzero_si512(); 16];
    if KIND == 3 {
        // IQ4_XS: ls_j = (4 bits of scales_l | 2 bits of scales_h << 4) − 32.
        let sh4 = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 0, 0, 0, 0, 0, 0, 0);
        let sh2 = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 0, 0, 0, 0, 0, 0, 0, 0);
        for r in 0..ROWS {
            let sl = _mm512_set1_epi32((blk(r).add(4) as *const i32).read_unaligned());
            let sh = _mm512_set1_epi32((blk(r).add(2) as *const u16).read_unaligned() as i32);
            let lo = _mm512_and_si512(_mm512_srlv_epi32(sl, sh4), _mm512_set1_epi32(0x0F));
            let hi = _mm512_and_si512(_mm512_srlv_epi32(sh, sh2), _mm512_set1_epi32(3));
            let ls = _mm512_or_si512(lo, _mm512_slli_epi32::<4>(hi));
            a[r] = _mm512_sub_epi32(ls, _mm512_set1_epi32(32));
        }
    } else if KIND == 2 {
        // Q6_K: 16 signed 8-bit scales.
        for r in 0..ROWS {
            a[r] = _mm512_cvtepi8_epi32(_mm_loadu_si128(blk(r).add(192) as *const __m128i));
        }
    } else {
        // Q4_K / Q5_K: [sc0..sc7, m0..m7] as bytes, 4 rows a vector.
        for q in 0..4 {
            let mut raw = _mm512_setzero_si512();
            for i in 0..4 {
                let v = _mm_loadu_si128(blk(4 * q + i).add(4) as *const __m128i);
                raw = ins128(raw, v, i);
            }
            let sm = k4_unpack!(
                raw,
                _mm512_broadcast_i32x4,
                _mm512_shuffle_epi8,
                _mm512_and_si512,
                _mm512_or_si512,
                _mm512_srli_epi16
            );
            a[4 * q] = _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32::<0>(sm));
            a[4 * q + 1] = _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32::<1>(sm));
            a[4 * q + 2] = _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32::<2>(sm));
            a[4 * q + 3] = _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32::<3>(sm));
        }
    }
    let o = transpose16(a);
    let store = |at: usize, v: __m512i| _mm512_storeu_si512(pb.add(at) as *mut _, v);
    let lo16 = _mm512_set1_epi32(0xFFFF);
    if KIND == 2 {
        for j in 0..16 {
            store(l.sc + 64 * j, o[j]);
        }
        let neg32 =
            |v: __m512i| _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32::<5>(v));
        for p in 0..8 {
            let (e, f) = (neg32(o[2 * p]), neg32(o[2 * p + 1]));
            store(
                l.pairs + 64 * p,
                _mm512_or_si512(_mm512_and_si512(e, lo16), _mm512_slli_epi32::<16>(f)),
            );
        }
    } else if KIND == 3 {
        // (−128·ls_j, −128·ls_j) against the sums of sub-block j's halves.
        for j in 0..8 {
            store(l.sc + 64 * j, o[j]);
            let n = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32::<7>(o[j]));
            store(
                l.pairs + 64 * j,
                _mm512_or_si512(_mm512_and_si512(n, lo16), _mm512_slli_epi32::<16>(n)),
            );
        }
    } else {
        for j in 0..8 {
            store(l.sc + 64 * j, o[j]);
            let m = o[8 + j];
            store(
                l.pairs + 64 * j,
                _mm512_or_si512(m, _mm512_slli_epi32::<16>(m)),
            );
        }
    }
    // d (and dmin) of each row, f16 → f32.
    let h: [u32; 16] = std::array::from_fn(|r| {
        if KIND == 2 {
            (blk(r).add(208) as *const u16).read_unaligned() as u32
        } else if KIND == 3 {
            (blk(r) as *const u16).read_unaligned() as u32
        } else {
            (blk(r) as *const u32).read_unaligned()
        }
    });
    let h = _mm512_loadu_si512(h.as_ptr() as *const _);
    let f16s = |v: __m512i| _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_and_si512(v, lo16)));
    _mm512_storeu_ps(pb.add(l.d) as *mut f32, f16s(h));
    if KIND < 2 {
        _mm512_storeu_ps(
            pb.add(l.d + 64) as *mut f32,
            f16s(_mm512_srli_epi32::<16>(h)),
        );
    }
}

/// The 4 bytes at `p` in every lane.
#[inline(always)]
unsafe fn bcast(p: *const i8) -> __m512i {
    _mm512_set1_epi32((p as *const i32).read_unaligned())
}

/// The panel at `panel` (`nb` blocks) × `T` tokens: lanes of result `t`
/// are the 16 rows' outputs for token `t`.
#[inline(always)]
unsafe fn body<const KIND: usize, const T: usize>(
    panel: *const u8,
    nb: usize,
    x: &Toks8,
    out: &mut Res,
) {
    let l = layout_of(KIND);
    let per = 64 / l.subs;
    let z = _mm512_setzero_si512();
    let mut p = [[_mm512_setzero_ps(); 8]; T];
    for b in 0..nb {
        let pb = panel.add(b * l.bytes);
        let mut acc = [z; T];
        for j in 0..l.subs {
            let mut s = [z; T];
            for kk in 0..per {
                let k = j * per + kk;
                let wv = _mm512_loadu_si512(pb.add(64 * k) as *const _);
                for t in 0..T {
                    s[t] = _mm512_dpbusd_epi32(s[t], wv, bcast(x.qs[t].add(256 * b + 4 * k)));
                }
            }
            let sc = _mm512_loadu_si512(pb.add(l.sc + 64 * j) as *const _);
            for t in 0..T {
                acc[t] = _mm512_add_epi32(acc[t], _mm512_mullo_epi32(s[t], sc));
            }
        }
        // Q4_K / Q5_K: m = Σ_j min_j·S32_j; Q6_K: the −32 offsets into
        // acc; IQ4_XS: the +128 of its levels taken off.
        let mut m = [z; T];
        for q in 0..8 {
            let pv = _mm512_loadu_si512(pb.add(l.pairs + 64 * q) as *const _);
            for t in 0..T {
                let sums = x.sums[t].add(16 * b + 2 * q) as *const i8;
                m[t] = dot16::<true>(m[t], pv, bcast(sums));
            }
        }
        let d = _mm512_loadu_ps(pb.add(l.d) as *const f32);
        for t in 0..T {
            let dx = _mm512_set1_ps(*x.d[t].add(b));
            let term = if KIND >= 2 {
                let i = _mm512_add_epi32(acc[t], m[t]);
                _mm512_mul_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(i))
            } else {
                let dmin = _mm512_loadu_ps(pb.add(l.d + 64) as *const f32);
                let ti = _mm512_mul_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(acc[t]));
                let tm = _mm512_mul_ps(_mm512_mul_ps(dmin, dx), _mm512_cvtepi32_ps(m[t]));
                _mm512_sub_ps(ti, tm)
            };
            p[t][b % 8] = _mm512_add_ps(p[t][b % 8], term);
        }
    }
    for t in 0..T {
        out[t] = tree_z(&p[t]);
    }
}

macro_rules! panel_entries {
    ($($kernel:ident, $packer:ident = $kind:literal;)*) => {$(
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
        unsafe fn $kernel<const T: usize>(panel: *const u8, nb: usize, x: &Toks8, out: &mut Res) {
            body::<$kind, T>(panel, nb, x, out)
        }
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
        unsafe fn $packer(w: *const u8, rb: usize, nb: usize, dst: *mut u8) {
            pack::<$kind>(w, rb, nb, dst)
        }
    )*};
}

panel_entries! {
    q4k_panel, q4k_pack = 0;
    q5k_panel, q5k_pack = 1;
    q6k_panel, q6k_pack = 2;
    iq4xs_panel, iq4xs_pack = 3;
}

/// Q8_0 panel bytes per block: the 16 rows' quants + 128 (unsigned, for
/// `vpdpbusd`) in 8 vectors of 4-value groups, then `d` as f32.
const Q80_BYTES: usize = 9 * 64;

/// Rewrite rows `w..` (16 of them, `rb` bytes apart, `nb` blocks each) of
/// Q8_0 (`NIB` 0), Q4_0 (1), IQ4_NL (2), MXFP4 (3) or Q5_0 (4) as a Q8_0 panel at `dst` (the
/// 4-bit encodings as the Q8_0 blocks of their levels, as the reference
/// runs them): two blocks at a time, 16 dwords a row.
#[inline(always)]
unsafe fn pack_q80<const NIB: usize>(w: *const u8, rb: usize, nb: usize, dst: *mut u8) {
    let flip = _mm512_set1_epi8(-128);
    let lo16 = _mm512_set1_epi32(0xFFFF);
    let bb_bytes = crate::q8::x86::block_bytes(NIB);
    let levels = crate::q8::x86::nib_levels::<NIB>();
    // A block's 32 quants (Q4_0 / IQ4_NL / MXFP4 / Q5_0: byte j's low nibble is
    // element j, its high one element j + 16).
    let quants = |blk: *const u8| crate::q8::x86::q80_quants::<NIB>(blk, levels);
    let mut b = 0;
    while b < nb {
        let two = b + 1 < nb;
        let blk = |r: usize, bb: usize| w.add(r * rb + bb_bytes * bb);
        let mut v = [_mm512_setzero_si512(); 16];
        for r in 0..ROWS {
            let hi = if two {
                quants(blk(r, b + 1))
            } else {
                _mm256_setzero_si256()
            };
            v[r] = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(quants(blk(r, b))), hi);
        }
        let t = transpose16(v);
        for (half, bb) in [(0, b), (1, b + 1)] {
            if bb >= nb {
                break;
            }
            let pb = dst.add(bb * Q80_BYTES);
            for k in 0..8 {
                _mm512_storeu_si512(
                    pb.add(64 * k) as *mut _,
                    _mm512_xor_si512(t[8 * half + k], flip),
                );
            }
            if NIB == 3 {
                let d: [f32; 16] =
                    std::array::from_fn(|r| crate::q8::x86::block_scale::<NIB>(blk(r, bb)));
                _mm512_storeu_ps(pb.add(512) as *mut f32, _mm512_loadu_ps(d.as_ptr()));
                continue;
            }
            let h: [u32; 16] =
                std::array::from_fn(|r| (blk(r, bb) as *const u16).read_unaligned() as u32);
            let h = _mm512_and_si512(_mm512_loadu_si512(h.as_ptr() as *const _), lo16);
            _mm512_storeu_ps(
                pb.add(512) as *mut f32,
                _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h)),
            );
        }
        b += 2;
    }
}

/// The Q8_0 panel at `panel` (`nb` blocks) × `T` tokens. The quants carry
/// +128, so `Σ (w + 128)·x − 128·Σx` is the reference's `Σ w·x` (from the
/// activations' sums of 16).
#[inline(always)]
unsafe fn body_q80<const T: usize>(panel: *const u8, nb: usize, x: &Toks8, out: &mut Res) {
    let z = _mm512_setzero_si512();
    let mut p = [[_mm512_setzero_ps(); 8]; T];
    for b in 0..nb {
        let pb = panel.add(b * Q80_BYTES);
        let mut s = [z; T];
        for k in 0..8 {
            let wv = _mm512_loadu_si512(pb.add(64 * k) as *const _);
            for t in 0..T {
                s[t] = _mm512_dpbusd_epi32(s[t], wv, bcast(x.qs[t].add(32 * b + 4 * k)));
            }
        }
        let d = _mm512_loadu_ps(pb.add(512) as *const f32);
        for t in 0..T {
            let sum = *x.sums[t].add(2 * b) as i32 + *x.sums[t].add(2 * b + 1) as i32;
            let i = _mm512_sub_epi32(s[t], _mm512_set1_epi32(128 * sum));
            let dx = _mm512_set1_ps(*x.d[t].add(b));
            let term = _mm512_mul_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(i));
            p[t][b % 8] = _mm512_add_ps(p[t][b % 8], term);
        }
    }
    for t in 0..T {
        out[t] = tree_z(&p[t]);
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn q80_panel<const T: usize>(panel: *const u8, nb: usize, x: &Toks8, out: &mut Res) {
    body_q80::<T>(panel, nb, x, out)
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn q80_pack<const NIB: usize>(w: *const u8, rb: usize, nb: usize, dst: *mut u8) {
    pack_q80::<NIB>(w, rb, nb, dst)
}

/// The AVX-512 VNNI panels.
pub(in crate::q8::x86) static SET: Set = Set {
    rows: ROWS,
    min_tokens: 5,
    tokens: TOKENS,
    kinds: [
        Some(Kind {
            values: 256,
            bytes: Q4K.bytes,
            pack: q4k_pack,
            kernels: super::by_tokens!(q4k_panel),
        }),
        Some(Kind {
            values: 256,
            bytes: Q5K.bytes,
            pack: q5k_pack,
            kernels: super::by_tokens!(q5k_panel),
        }),
        Some(Kind {
            values: 256,
            bytes: Q6K.bytes,
            pack: q6k_pack,
            kernels: super::by_tokens!(q6k_panel),
        }),
        Some(Kind {
            values: 32,
            bytes: Q80_BYTES,
            pack: q80_pack::<0>,
            kernels: super::by_tokens!(q80_panel),
        }),
        Some(Kind {
            values: 32,
            bytes: Q80_BYTES,
            pack: q80_pack::<1>,
            kernels: super::by_tokens!(q80_panel),
        }),
        Some(Kind {
            values: 32,
            bytes: Q80_BYTES,
            pack: q80_pack::<2>,
            kernels: super::by_tokens!(q80_panel),
        }),
        Some(Kind {
            values: 256,
            bytes: IQ4XS.bytes,
            pack: iq4xs_pack,
            kernels: super::by_tokens!(iq4xs_panel),
        }),
        Some(Kind {
            values: 32,
            bytes: Q80_BYTES,
            pack: q80_pack::<3>,
            kernels: super::by_tokens!(q80_panel),
        }),
        Some(Kind {
            values: 32,
            bytes: Q80_BYTES,
            pack: q80_pack::<4>,
            kernels: super::by_tokens!(q80_panel),
        }),
        // Q4_1 / Q5_1: the 4-row kernels.
        None,
        None,
        // The codebook encodings: the AVX2 panels (`super::rows`).
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        // GGUF's NVFP4: the AVX2 panel.
        None,
        // Q6_K's planar layout (made for the AVX2 class): the AVX2 panel.
        None,
    ],
};
