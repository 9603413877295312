//! The AVX2 panel kernels: 8 rows; the class's table ([`SET`]) and the
//! pieces its other panels share. (IQ4_XS, whose levels are signed: see
//! [`body_iq4xs`]; the 32-value block encodings are in `b32`.) Without `vpdpbusd`, a 4-value group is
//! one `vpmaddubsw` (two pair sums per row lane, each ≤ 2·63·127) added in
//! i16 over a chain of groups, then one `vpmaddwd` with the sub-block's
//! `(sc, sc)` pairs sums the row's halves and applies the scale at once.
//! A chain holds at most 32004 / 31496 / 30480 in magnitude (Q6_K 2 groups
//! of quants ≤ 63, Q5_K 4 groups of ≤ 31, Q4_K 8 groups of ≤ 15, against
//! |q| ≤ 127): no i16 step overflows, so the integers stay exact.

#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;
use std::mem::MaybeUninit;

use super::{layout, Kind, Layout, Res, Set, Toks8};

/// Rows of a panel: the i32 lanes of a vector.
pub(super) const ROWS: usize = 8;
/// Tokens of one call: two vectors each (a chain and the block's i32
/// sums) and the weights fit the 16 registers.
const CALL_TOKENS: usize = 6;

const Q4K: Layout = layout(144, 8, true, 32);
const Q5K: Layout = layout(176, 8, true, 32);
const Q6K: Layout = layout(210, 16, false, 32);

const fn layout_of(kind: usize) -> Layout {
    match kind {
        0 => Q4K,
        1 => Q5K,
        _ => Q6K,
    }
}

/// 4-value groups per i16 chain (see the module doc).
const fn chain(kind: usize) -> usize {
    match kind {
        0 => 8,
        1 => 4,
        _ => 2,
    }
}

/// 8 vectors of 8 i32 lanes, transposed: lane `r` of result `k` is lane
/// `k` of `a[r]`.
#[inline(always)]
pub(super) unsafe fn transpose8(a: [__m256i; 8]) -> [__m256i; 8] {
    let mut t = [_mm256_setzero_si256(); 8];
    for i in 0..4 {
        t[2 * i] = _mm256_unpacklo_epi32(a[2 * i], a[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_epi32(a[2 * i], a[2 * i + 1]);
    }
    // u[4i + c], 128-bit lane L: rows 4i..4i+3 of column 4L + c.
    let mut u = [_mm256_setzero_si256(); 8];
    for i in 0..2 {
        u[4 * i] = _mm256_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = _mm256_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm256_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm256_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    let mut o = [_mm256_setzero_si256(); 8];
    for c in 0..4 {
        o[c] = _mm256_permute2x128_si256::<0x20>(u[c], u[4 + c]);
        o[4 + c] = _mm256_permute2x128_si256::<0x31>(u[c], u[4 + c]);
    }
    o
}

/// The 8 rows' 32 bytes at `at(r)`, transposed by 4-byte groups (lane `r`
/// of result `k` is bytes `4k..4k + 4` of row `r`).
#[inline(always)]
unsafe fn rows_t(at: impl Fn(usize) -> *const u8) -> [__m256i; 8] {
    let mut v = [_mm256_setzero_si256(); 8];
    for (r, vr) in v.iter_mut().enumerate() {
        *vr = _mm256_loadu_si256(at(r) as *const __m256i);
    }
    transpose8(v)
}

/// Write the unsigned quants of the 8 rows' block (`blk(r)`) into the panel
/// block at `pb`: values `32u..32u + 32` as vectors `8u..8u + 8`, 4-value
/// group `k` of every row in vector `8u + k`. Every step after the loads
/// works byte by byte (the 16-bit shifts are masked back to each byte's own
/// bits), and a transpose moves whole 4-byte groups, so the raw bytes are
/// transposed once and the nibbles and high bits taken after: one transpose
/// serves both nibbles of a Q4_K / Q5_K byte run, and Q6_K's `qh` serves four
/// vectors (before, every vector of quants was transposed on its own).
/// `PLANAR` (with `KIND` 2): the blocks are Q6_K's planar layout, whose
/// three planes per half give the four vectors (`avx2::q6k_planes_y`).
#[inline(always)]
unsafe fn pack_quants<const KIND: usize, const PLANAR: bool>(
    blk: impl Fn(usize) -> *const u8,
    pb: *mut u8,
) {
    let nib = _mm256_set1_epi8(0x0F);
    if KIND == 2 && PLANAR {
        for h in 0..2 {
            let planes: [[__m256i; 8]; 3] =
                std::array::from_fn(|p| rows_t(|r| blk(r).add(96 * h + 32 * p)));
            for k in 0..8 {
                // Group k of the rows' three planes: the unpack is byte by
                // byte, so it applies to transposed bytes as to the source.
                let q =
                    super::super::avx2::q6k_planes_y([planes[0][k], planes[1][k], planes[2][k]]);
                for (s, v) in q.into_iter().enumerate() {
                    _mm256_storeu_si256(pb.add(32 * (8 * (4 * h + s) + k)) as *mut __m256i, v);
                }
            }
        }
        return;
    }
    if KIND == 2 {
        // Q6_K: half h = u/4, quarter s = u%4: nibble s/2 of
        // ql[64h + 32(s%2)..], bits 2s..2s+1 of qh[32h..] as 16·hi.
        let hib = _mm256_set1_epi8(0x30);
        for h in 0..2 {
            let ql = [
                rows_t(|r| blk(r).add(64 * h)),
                rows_t(|r| blk(r).add(64 * h + 32)),
            ];
            let qh = rows_t(|r| blk(r).add(128 + 32 * h));
            for s in 0..4 {
                for k in 0..8 {
                    let l = ql[s % 2][k];
                    let lo = if s < 2 { l } else { _mm256_srli_epi16::<4>(l) };
                    let hi = super::super::avx2::shift16_y(qh[k], 4 - 2 * s as i32);
                    let v = _mm256_or_si256(_mm256_and_si256(lo, nib), _mm256_and_si256(hi, hib));
                    _mm256_storeu_si256(pb.add(32 * (8 * (4 * h + s) + k)) as *mut __m256i, v);
                }
            }
        }
        return;
    }
    // Q4_K / Q5_K: run m of qs holds values 64m.. (low nibbles, u = 2m)
    // and 64m + 32.. (high nibbles, u = 2m + 1); Q5_K: bit u of qh[l] as 16.
    let qs_at = if KIND == 1 { 48 } else { 16 };
    let qh = if KIND == 1 {
        rows_t(|r| blk(r).add(16))
    } else {
        [_mm256_setzero_si256(); 8]
    };
    let sixteen = _mm256_set1_epi8(16);
    for m in 0..4 {
        let qs = rows_t(|r| blk(r).add(qs_at + 32 * m));
        for k in 0..8 {
            let mut lo = _mm256_and_si256(qs[k], nib);
            let mut hi = _mm256_and_si256(_mm256_srli_epi16::<4>(qs[k]), nib);
            if KIND == 1 {
                // (No closures here: they would not inherit the target
                // features.)
                let (b0, b1) = (
                    _mm256_set1_epi8(1 << (2 * m)),
                    _mm256_set1_epi8(2 << (2 * m)),
                );
                let set0 = _mm256_cmpeq_epi8(_mm256_and_si256(qh[k], b0), b0);
                let set1 = _mm256_cmpeq_epi8(_mm256_and_si256(qh[k], b1), b1);
                lo = _mm256_or_si256(lo, _mm256_and_si256(set0, sixteen));
                hi = _mm256_or_si256(hi, _mm256_and_si256(set1, sixteen));
            }
            _mm256_storeu_si256(pb.add(32 * (8 * (2 * m) + k)) as *mut __m256i, lo);
            _mm256_storeu_si256(pb.add(32 * (8 * (2 * m + 1) + k)) as *mut __m256i, hi);
        }
    }
}

/// `(v, v)` i16 pairs of the i32 lanes `v` (each within i16).
#[inline(always)]
pub(super) unsafe fn pair_of(v: __m256i) -> __m256i {
    _mm256_or_si256(
        _mm256_and_si256(v, _mm256_set1_epi32(0xFFFF)),
        _mm256_slli_epi32::<16>(v),
    )
}

/// `(a, b)` i16 pairs of the i32 lanes `a`, `b` (each within i16).
#[inline(always)]
unsafe fn pair_ab(a: __m256i, b: __m256i) -> __m256i {
    _mm256_or_si256(
        _mm256_and_si256(a, _mm256_set1_epi32(0xFFFF)),
        _mm256_slli_epi32::<16>(b),
    )
}

/// Rewrite rows `w..` (8 of them, `rb` bytes apart, `nb` blocks each) as
/// a panel at `dst` (`nb · layout.bytes` bytes).
#[inline(always)]
unsafe fn pack<const KIND: usize, const PLANAR: bool>(
    w: *const u8,
    rb: usize,
    nb: usize,
    dst: *mut u8,
) {
    let l = layout_of(KIND);
    for b in 0..nb {
        let blk = |r: usize| w.add(r * rb + b * l.block);
        let pb = dst.add(b * l.bytes);
        let store = |at: usize, v: __m256i| _mm256_storeu_si256(pb.add(at) as *mut __m256i, v);
        pack_quants::<KIND, PLANAR>(blk, pb);
        let mut lo = [_mm256_setzero_si256(); 8];
        let mut hi = [_mm256_setzero_si256(); 8];
        if KIND == 2 {
            // Q6_K: 16 signed 8-bit scales, sc 0..7 and 8..15.
            for r in 0..ROWS {
                let s = blk(r).add(192);
                lo[r] = _mm256_cvtepi8_epi32(_mm_loadl_epi64(s as *const __m128i));
                hi[r] = _mm256_cvtepi8_epi32(_mm_loadl_epi64(s.add(8) as *const __m128i));
            }
        } else {
            // Q4_K / Q5_K: [sc0..sc7, m0..m7] as bytes, 2 rows a vector.
            for q in 0..4 {
                let raw = _mm256_loadu2_m128i(
                    blk(2 * q + 1).add(4) as *const __m128i,
                    blk(2 * q).add(4) as *const __m128i,
                );
                let sm = k4_unpack!(
                    raw,
                    _mm256_broadcastsi128_si256,
                    _mm256_shuffle_epi8,
                    _mm256_and_si256,
                    _mm256_or_si256,
                    _mm256_srli_epi16
                );
                for i in 0..2 {
                    let row = if i == 0 {
                        _mm256_castsi256_si128(sm)
                    } else {
                        _mm256_extracti128_si256::<1>(sm)
                    };
                    lo[2 * q + i] = _mm256_cvtepu8_epi32(row);
                    hi[2 * q + i] = _mm256_cvtepu8_epi32(_mm_srli_si128::<8>(row));
                }
            }
        }
        let (lo, hi) = (transpose8(lo), transpose8(hi));
        if KIND == 2 {
            let neg32 =
                |v: __m256i| _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32::<5>(v));
            let sc = |j: usize| if j < 8 { lo[j] } else { hi[j - 8] };
            for j in 0..16 {
                store(l.sc + 32 * j, pair_of(sc(j)));
            }
            for p in 0..8 {
                store(
                    l.pairs + 32 * p,
                    pair_ab(neg32(sc(2 * p)), neg32(sc(2 * p + 1))),
                );
            }
        } else {
            for j in 0..8 {
                store(l.sc + 32 * j, pair_of(lo[j]));
            }
            for q in 0..4 {
                store(l.pairs + 32 * q, pair_ab(hi[2 * q], hi[2 * q + 1]));
            }
        }
        // d (and dmin) of each row, f16 → f32.
        let h: [u32; 8] = std::array::from_fn(|r| {
            if KIND == 2 {
                (blk(r).add(208) as *const u16).read_unaligned() as u32
            } else {
                (blk(r) as *const u32).read_unaligned()
            }
        });
        let h = _mm256_loadu_si256(h.as_ptr() as *const __m256i);
        // The low halves of the 8 lanes, packed into 8 words.
        let words = |v: __m256i| {
            let v = _mm256_and_si256(v, _mm256_set1_epi32(0xFFFF));
            let p = _mm256_packus_epi32(v, v);
            _mm256_castsi256_si128(_mm256_permute4x64_epi64::<0b1000>(p))
        };
        _mm256_storeu_ps(pb.add(l.d) as *mut f32, _mm256_cvtph_ps(words(h)));
        if KIND != 2 {
            let dmin = _mm256_cvtph_ps(words(_mm256_srli_epi32::<16>(h)));
            _mm256_storeu_ps(pb.add(l.d + 32) as *mut f32, dmin);
        }
    }
}

/// The 4 bytes at `p` in every lane.
#[inline(always)]
pub(super) unsafe fn bcast(p: *const i8) -> __m256i {
    _mm256_set1_epi32((p as *const i32).read_unaligned())
}

/// The panel at `panel` (`nb` blocks) × `T` tokens: lanes 0..8 of result
/// `t` are the 8 rows' outputs for token `t`.
#[inline(always)]
unsafe fn body<const KIND: usize, const T: usize>(
    panel: *const u8,
    nb: usize,
    x: &Toks8,
    out: &mut Res,
) {
    let l = layout_of(KIND);
    let per = 64 / l.subs;
    let ch = chain(KIND);
    let z = _mm256_setzero_si256();
    let mut p = Partials::<T>::new();
    for b in 0..nb {
        let pb = panel.add(b * l.bytes);
        let mut acc = [z; T];
        for j in 0..l.subs {
            let sc = _mm256_loadu_si256(pb.add(l.sc + 32 * j) as *const __m256i);
            for c0 in (0..per).step_by(ch) {
                let mut s = [z; T];
                for kk in c0..c0 + ch {
                    let k = j * per + kk;
                    let wv = _mm256_loadu_si256(pb.add(32 * k) as *const __m256i);
                    for t in 0..T {
                        let xk = bcast(x.qs[t].add(256 * b + 4 * k));
                        s[t] = _mm256_add_epi16(s[t], _mm256_maddubs_epi16(wv, xk));
                    }
                }
                for t in 0..T {
                    acc[t] = _mm256_add_epi32(acc[t], _mm256_madd_epi16(s[t], sc));
                }
            }
        }
        // Q4_K / Q5_K: m = Σ_j min_j·S32_j, pairs of sub-blocks against
        // the token's sums of 32 (one `vpmaddwd` makes them from its sums of
        // 16; each ≤ 32·127, an i16); Q6_K: the −32 offsets into acc,
        // against the sums of 16.
        let mut m = [z; T];
        if KIND == 2 {
            for q in 0..8 {
                let pv = _mm256_loadu_si256(pb.add(l.pairs + 32 * q) as *const __m256i);
                for t in 0..T {
                    let sums = x.sums[t].add(16 * b + 2 * q) as *const i8;
                    m[t] = _mm256_add_epi32(m[t], _mm256_madd_epi16(pv, bcast(sums)));
                }
            }
        } else {
            let mut s32 = [[0i32; 8]; T];
            for t in 0..T {
                let s16 = _mm256_loadu_si256(x.sums[t].add(16 * b) as *const __m256i);
                let s = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
                // i16 words [S0..S3, S0..S3 | S4..S7, S4..S7]: pair q of
                // sub-blocks (2q, 2q + 1) is dword 0, 1, 4, 5.
                let packed = _mm256_packs_epi32(s, s);
                _mm256_storeu_si256(s32[t].as_mut_ptr() as *mut __m256i, packed);
            }
            for (q, at) in [0, 1, 4, 5].into_iter().enumerate() {
                let pv = _mm256_loadu_si256(pb.add(l.pairs + 32 * q) as *const __m256i);
                for t in 0..T {
                    let pair = _mm256_set1_epi32(s32[t][at]);
                    m[t] = _mm256_add_epi32(m[t], _mm256_madd_epi16(pv, pair));
                }
            }
        }
        let d = _mm256_loadu_ps(pb.add(l.d) as *const f32);
        for t in 0..T {
            let dx = _mm256_set1_ps(*x.d[t].add(b));
            let term = if KIND == 2 {
                let i = _mm256_add_epi32(acc[t], m[t]);
                _mm256_mul_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(i))
            } else {
                let dmin = _mm256_loadu_ps(pb.add(l.d + 32) as *const f32);
                let ti = _mm256_mul_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(acc[t]));
                let tm = _mm256_mul_ps(_mm256_mul_ps(dmin, dx), _mm256_cvtepi32_ps(m[t]));
                _mm256_sub_ps(ti, tm)
            };
            p.add(t, b, term);
        }
    }
    finish(p.done(nb), out)
}

/// The canonical tree's partial sums of `T` tokens: `[t][k]` adds the
/// terms of blocks `k, k + 8, …` in order, from 0. Each partial is set at its
/// first block (`0 + term`, the reference's first step) instead of zeroed
/// up front: 8·T vectors zeroed per kernel call were a `memset` call (~2%
/// of a Q8_0 prefill).
pub(super) struct Partials<const T: usize>(MaybeUninit<[[__m256; 8]; T]>);

impl<const T: usize> Partials<T> {
    #[inline(always)]
    pub(super) fn new() -> Self {
        Partials(MaybeUninit::uninit())
    }

    /// Add token `t`'s term of block `b` (each token's blocks in
    /// increasing order from 0).
    #[inline(always)]
    pub(super) unsafe fn add(&mut self, t: usize, b: usize, term: __m256) {
        let at = (self.0.as_mut_ptr() as *mut __m256).add(8 * t + b % 8);
        let prev = if b < 8 {
            _mm256_setzero_ps()
        } else {
            at.read()
        };
        at.write(_mm256_add_ps(prev, term));
    }

    /// Add every token's term of block `b` of a single-scale encoding:
    /// `(d · dx) · sums[t]`, `d` the 8 rows' block scales and `dx` the
    /// token's activation scale of the block (the reference's order).
    #[inline(always)]
    pub(super) unsafe fn add_scaled(
        &mut self,
        b: usize,
        d: __m256,
        x: &Toks8,
        sums: &[__m256i; T],
    ) {
        for (t, s) in sums.iter().enumerate() {
            let dx = _mm256_set1_ps(*x.d[t].add(b));
            self.add(
                t,
                b,
                _mm256_mul_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(*s)),
            );
        }
    }

    /// The partials after `nb` blocks (those of no block are 0).
    #[inline(always)]
    pub(super) unsafe fn done(&mut self, nb: usize) -> &[[__m256; 8]; T] {
        let p = self.0.as_mut_ptr() as *mut __m256;
        for t in 0..T {
            for k in nb.min(8)..8 {
                p.add(8 * t + k).write(_mm256_setzero_ps());
            }
        }
        // SAFETY: every partial was written by `add` (blocks 0..8 each
        // set one) or just above.
        unsafe { self.0.assume_init_ref() }
    }
}

/// Each token's 8 partial vectors through the canonical tree.
#[inline(always)]
pub(super) unsafe fn finish<const T: usize>(p: &[[__m256; 8]; T], out: &mut Res) {
    for t in 0..T {
        let a = |i: usize, j: usize| _mm256_add_ps(p[t][i], p[t][j]);
        let s = _mm256_add_ps(
            _mm256_add_ps(a(0, 4), a(2, 6)),
            _mm256_add_ps(a(1, 5), a(3, 7)),
        );
        _mm256_storeu_ps(out[t].as_mut_ptr(), s);
    }
}

macro_rules! panel_entries {
    ($($kernel:ident, $packer:ident = $kind:literal;)*) => {$(
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn $kernel<const T: usize>(panel: *const u8, nb: usize, x: &Toks8, out: &mut Res) {
            body::<$kind, T>(panel, nb, x, out)
        }
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn $packer(w: *const u8, rb: usize, nb: usize, dst: *mut u8) {
            pack::<$kind, false>(w, rb, nb, dst)
        }
    )*};
}

panel_entries! {
    q4k_panel, q4k_pack = 0;
    q5k_panel, q5k_pack = 1;
    q6k_panel, q6k_pack = 2;
}

/// Q6_K's planar layout: its own packer, Q6_K's panel kernels.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6kp_pack(w: *const u8, rb: usize, nb: usize, dst: *mut u8) {
    pack::<2, true>(w, rb, nb, dst)
}

/// IQ4_XS panel bytes per block: per 4-value group the 8 rows' signed
/// levels and their magnitudes, then per sub-block the `(ls, ls)` pairs,
/// then `d` as f32.
const IQ4XS_BYTES: usize = 64 * 64 + 8 * 32 + 32;

/// Rewrite rows `w..` (8 of them, `rb` bytes apart, `nb` IQ4_XS blocks
/// each) as an IQ4_XS panel at `dst`.
#[inline(always)]
unsafe fn pack_iq4xs(w: *const u8, rb: usize, nb: usize, dst: *mut u8) {
    let levels = crate::q8::x86::nib_levels::<2>();
    let nib = _mm_set1_epi8(0x0F);
    for b in 0..nb {
        let pb = dst.add(b * IQ4XS_BYTES);
        let blk = |r: usize| w.add(r * rb + 136 * b);
        // Sub-block u: byte e holds element e (low nibble) and 16 + e.
        for u in 0..8 {
            let mut v = [_mm256_setzero_si256(); 8];
            for r in 0..ROWS {
                let q = _mm_loadu_si128(blk(r).add(8 + 16 * u) as *const __m128i);
                let lo = _mm_shuffle_epi8(levels, _mm_and_si128(q, nib));
                let hi = _mm_shuffle_epi8(levels, _mm_and_si128(_mm_srli_epi16::<4>(q), nib));
                v[r] = _mm256_set_m128i(hi, lo);
            }
            let t = transpose8(v);
            for k in 0..8 {
                let at = pb.add(64 * (8 * u + k));
                _mm256_storeu_si256(at as *mut __m256i, t[k]);
                _mm256_storeu_si256(at.add(32) as *mut __m256i, _mm256_abs_epi8(t[k]));
            }
        }
        // ls_j = (4 bits of scales_l | 2 bits of scales_h << 4) − 32.
        let sh4 = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
        let sh2 = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
        let mut a = [_mm256_setzero_si256(); 8];
        for r in 0..ROWS {
            let sl = _mm256_set1_epi32((blk(r).add(4) as *const i32).read_unaligned());
            let sh = _mm256_set1_epi32((blk(r).add(2) as *const u16).read_unaligned() as i32);
            let lo = _mm256_and_si256(_mm256_srlv_epi32(sl, sh4), _mm256_set1_epi32(0x0F));
            let hi = _mm256_and_si256(_mm256_srlv_epi32(sh, sh2), _mm256_set1_epi32(3));
            let ls = _mm256_or_si256(lo, _mm256_slli_epi32::<4>(hi));
            a[r] = _mm256_sub_epi32(ls, _mm256_set1_epi32(32));
        }
        let o = transpose8(a);
        for j in 0..8 {
            _mm256_storeu_si256(pb.add(4096 + 32 * j) as *mut __m256i, pair_of(o[j]));
        }
        let h: [u16; 8] = std::array::from_fn(|r| (blk(r) as *const u16).read_unaligned());
        let d = _mm256_cvtph_ps(_mm_loadu_si128(h.as_ptr() as *const __m128i));
        _mm256_storeu_ps(pb.add(4096 + 256) as *mut f32, d);
    }
}

/// The IQ4_XS panel at `panel` (`nb` blocks) × `T` tokens: per group
/// `|L|·(x with L's sign)` (pair sums ≤ 2·127·127, exact in i16), then
/// `vpmaddwd` with the sub-block's `(ls, ls)`: `i = Σ_j ls_j·Σ L·q`.
#[inline(always)]
unsafe fn body_iq4xs<const T: usize>(panel: *const u8, nb: usize, x: &Toks8, out: &mut Res) {
    let z = _mm256_setzero_si256();
    let mut p = Partials::<T>::new();
    for b in 0..nb {
        let pb = panel.add(b * IQ4XS_BYTES);
        let mut acc = [z; T];
        for j in 0..8 {
            let sc = _mm256_loadu_si256(pb.add(4096 + 32 * j) as *const __m256i);
            for kk in 0..8 {
                let k = 8 * j + kk;
                let wv = _mm256_loadu_si256(pb.add(64 * k) as *const __m256i);
                let wa = _mm256_loadu_si256(pb.add(64 * k + 32) as *const __m256i);
                for t in 0..T {
                    let xs = _mm256_sign_epi8(bcast(x.qs[t].add(256 * b + 4 * k)), wv);
                    let pairs = _mm256_maddubs_epi16(wa, xs);
                    acc[t] = _mm256_add_epi32(acc[t], _mm256_madd_epi16(pairs, sc));
                }
            }
        }
        p.add_scaled(
            b,
            _mm256_loadu_ps(pb.add(4096 + 256) as *const f32),
            x,
            &acc,
        );
    }
    finish(p.done(nb), out)
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq4xs_panel<const T: usize>(panel: *const u8, nb: usize, x: &Toks8, out: &mut Res) {
    body_iq4xs::<T>(panel, nb, x, out)
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq4xs_pack(w: *const u8, rb: usize, nb: usize, dst: *mut u8) {
    pack_iq4xs(w, rb, nb, dst)
}

/// The panel of codebook encoding `$k` (`super::codebook`), its kernel
/// by the largest level.
macro_rules! codebook_kind {
    ($k:literal, $kernel:ident) => {
        Some(Kind {
            values: 256,
            bytes: super::codebook::BYTES,
            pack: super::codebook::packer::<$k>,
            kernels: super::by_tokens!($kernel),
        })
    };
}
use super::b32::{
    q40_pack, q40_panel, q41_pack, q41_panel, q50_pack, q50_panel, q51_pack, q51_panel, q80_pack,
    q80_panel, unsigned_bytes, Q80_BYTES,
};
use super::codebook::{panel_narrow, panel_wide};
use super::nvfp4::panel as nvfp4_panel;

/// The AVX2 panels.
pub(in crate::q8::x86) static SET: Set = Set {
    rows: ROWS,
    min_tokens: 6,
    tokens: CALL_TOKENS,
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
            bytes: unsigned_bytes(false),
            pack: q40_pack,
            kernels: super::by_tokens!(q40_panel),
        }),
        Some(Kind {
            values: 32,
            bytes: Q80_BYTES,
            pack: q80_pack::<2>,
            kernels: super::by_tokens!(q80_panel),
        }),
        Some(Kind {
            values: 256,
            bytes: IQ4XS_BYTES,
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
            bytes: unsigned_bytes(false),
            pack: q50_pack,
            kernels: super::by_tokens!(q50_panel),
        }),
        Some(Kind {
            values: 32,
            bytes: unsigned_bytes(true),
            pack: q41_pack,
            kernels: super::by_tokens!(q41_panel),
        }),
        Some(Kind {
            values: 32,
            bytes: unsigned_bytes(true),
            pack: q51_pack,
            kernels: super::by_tokens!(q51_panel),
        }),
        codebook_kind!(0, panel_wide),
        codebook_kind!(1, panel_wide),
        codebook_kind!(2, panel_wide),
        codebook_kind!(3, panel_wide),
        codebook_kind!(4, panel_narrow),
        codebook_kind!(5, panel_narrow),
        codebook_kind!(6, panel_narrow),
        Some(Kind {
            values: 64,
            bytes: super::nvfp4::BYTES,
            pack: super::nvfp4::pack,
            kernels: super::by_tokens!(nvfp4_panel),
        }),
        Some(Kind {
            values: 256,
            bytes: Q6K.bytes,
            pack: q6kp_pack,
            kernels: super::by_tokens!(q6k_panel),
        }),
    ],
};
