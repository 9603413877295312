//! Prefill products of the K encodings (Q4_K, Q5_K, Q6_K) on row panels,
//! AVX-512 VNNI: the 16 i32 lanes of a vector are 16 weight rows.
//!
//! The 4-row × 4-token kernels of `avx512` put 64 values of one row in a
//! vector, so every block's sums end in a horizontal reduction, and every
//! weight vector is decoded again for each group of 4 tokens. With many
//! tokens it pays to rewrite 16 rows once into a panel in the task's
//! scratch (it stays in L2 while every token goes by):
//! * the quants, unpacked to bytes: per 4-value group `k` of a block, a
//!   vector of the 16 rows' 4 quants (row `r` in lane `r`);
//! * per sub-block, the 16 rows' scales as i32, and the mins (Q4_K / Q5_K)
//!   or the −32 offsets times the scales (Q6_K) as i16 pairs against the
//!   activations' sums of 16;
//! * `d` (and `dmin`) as f32.
//!
//! A token then costs one `vpdpbusd` per 4-value group (its 4 activations
//! broadcast from memory), one `vpmulld` + `vpaddd` per sub-block and 8
//! `vpdpwssd` per block, for all 16 rows at once, with no reduction: lane
//! `r` holds row `r`'s integers. They are the reference's (exact integer
//! sums, in any order: unsigned quants ≤ 63 times |q| ≤ 127, no 16-bit
//! step), and the f32 tail runs the reference's operations lane by lane,
//! so the bits are the reference's (module doc of `q8`).

#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::avx512::{dot16, q6k_quants_z, tree_z};
use crate::matmul::MatRef;
use crate::q8::Q8Rows;
use crate::threads::SharedMut;
use rill_dtype::DType;

/// Rows of a panel: the i32 lanes of a vector.
pub(super) const ROWS: usize = 16;
/// Tokens of one kernel call at most.
const TOKENS: usize = 8;
/// Fewer tokens than this run on the 4 × 4 kernels: the panel's rewrite
/// would not pay for itself.
pub(super) const MIN_TOKENS: usize = 8;

/// What a panel holds of each block, by encoding: byte offsets within the
/// block's part of the panel (every vector 64 bytes, 16 lanes).
#[derive(Clone, Copy)]
struct Layout {
    /// Source block bytes.
    block: usize,
    /// 64 vectors of quants (4-value group `k` at `64k`) come first.
    /// Per sub-block scales, i32 lanes.
    sc: usize,
    /// Sub-blocks (and their values each).
    subs: usize,
    /// 8 vectors of i16 pairs against the activations' sums of 16: Q4_K /
    /// Q5_K `(min_j, min_j)`, Q6_K `(−32·sc_2p, −32·sc_2p+1)`.
    pairs: usize,
    /// f32 `d`, then (Q4_K / Q5_K) f32 `dmin`.
    d: usize,
    /// Panel bytes per block.
    bytes: usize,
}

const fn layout(block: usize, subs: usize, mins: bool) -> Layout {
    let sc = 64 * 64;
    let pairs = sc + 64 * subs;
    let d = pairs + 64 * 8;
    Layout {
        block,
        sc,
        subs,
        pairs,
        d,
        bytes: d + if mins { 128 } else { 64 },
    }
}

const Q4K: Layout = layout(144, 8, true);
const Q5K: Layout = layout(176, 8, true);
const Q6K: Layout = layout(210, 16, false);

/// Encodings with panel kernels (`KIND` of the kernels: 0 Q4_K, 1 Q5_K, 2 Q6_K).
fn kind(dtype: DType) -> Option<usize> {
    match dtype {
        DType::Q4K => Some(0),
        DType::Q5K => Some(1),
        DType::Q6K => Some(2),
        _ => None,
    }
}

const fn layout_of(kind: usize) -> Layout {
    match kind {
        0 => Q4K,
        1 => Q5K,
        _ => Q6K,
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
    if KIND == 2 {
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
                raw = super::avx512::ins128(raw, v, i);
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
        } else {
            (blk(r) as *const u32).read_unaligned()
        }
    });
    let h = _mm512_loadu_si512(h.as_ptr() as *const _);
    let f16s = |v: __m512i| _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_and_si512(v, lo16)));
    _mm512_storeu_ps(pb.add(l.d) as *mut f32, f16s(h));
    if KIND != 2 {
        _mm512_storeu_ps(
            pb.add(l.d + 64) as *mut f32,
            f16s(_mm512_srli_epi32::<16>(h)),
        );
    }
}

/// Up to [`TOKENS`] tokens' quantized activations (unused slots repeat the last).
struct Toks8 {
    qs: [*const i8; TOKENS],
    d: [*const f32; TOKENS],
    sums: [*const i16; TOKENS],
}

impl Toks8 {
    fn new(acts: Q8Rows<'_>, t0: usize, nt: usize) -> Toks8 {
        let row = |t: usize| acts.row(t0 + t.min(nt - 1));
        Toks8 {
            qs: std::array::from_fn(|t| row(t).qs.as_ptr()),
            d: std::array::from_fn(|t| row(t).d.as_ptr()),
            sums: std::array::from_fn(|t| row(t).sums.as_ptr()),
        }
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
) -> [[f32; 16]; TOKENS] {
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
        // Q4_K / Q5_K: m = Σ_j min_j·S32_j; Q6_K: the −32 offsets into acc.
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
            let term = if KIND == 2 {
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
    let mut out = [[0f32; 16]; TOKENS];
    for t in 0..T {
        out[t] = tree_z(&p[t]);
    }
    out
}

type PanelKernel = unsafe fn(*const u8, usize, &Toks8) -> [[f32; 16]; TOKENS];
type Packer = unsafe fn(*const u8, usize, usize, *mut u8);

macro_rules! panel_entries {
    ($($kernel:ident, $packer:ident = $kind:literal;)*) => {$(
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
        unsafe fn $kernel<const T: usize>(panel: *const u8, nb: usize, x: &Toks8) -> [[f32; 16]; TOKENS] {
            body::<$kind, T>(panel, nb, x)
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
}

macro_rules! by_tokens {
    ($f:ident) => {
        [
            $f::<1>, $f::<2>, $f::<3>, $f::<4>, $f::<5>, $f::<6>, $f::<7>, $f::<8>,
        ]
    };
}

static KERNELS: [[PanelKernel; TOKENS]; 3] = [
    by_tokens!(q4k_panel),
    by_tokens!(q5k_panel),
    by_tokens!(q6k_panel),
];
static PACKERS: [Packer; 3] = [q4k_pack, q5k_pack, q6k_pack];

/// Whether `dtype` has panel kernels.
pub(super) fn supports(dtype: DType) -> bool {
    kind(dtype).is_some()
}

/// Rows `r0..r1` of `w` × every token of `acts` into `out` (as `q8::rows`),
/// 16 rows at a time through a panel in `buf`; returns the first row it
/// left (the rows past the last whole panel) for the 4-row kernels.
///
/// # Safety
/// As `q8::rows`; the CPU runs AVX-512 F/BW/VL and VNNI; `w.dtype` is one
/// that [`supports`] accepts.
pub(super) unsafe fn rows(
    w: MatRef<'_>,
    acts: Q8Rows<'_>,
    r0: usize,
    r1: usize,
    out: SharedMut<f32>,
    buf: &mut Vec<u8>,
) -> usize {
    let Some(kind) = kind(w.dtype) else {
        return r0;
    };
    let l = layout_of(kind);
    let (rb, nb, n) = (w.row_bytes(), w.cols / 256, acts.n());
    let bytes = nb * l.bytes;
    if buf.len() < bytes + 64 {
        buf.resize(bytes + 64, 0);
    }
    let at = buf.as_ptr().align_offset(64).min(64);
    let panel = buf.as_mut_ptr().add(at);
    // The token groups' activations, found once for every panel.
    let groups: Vec<(usize, usize, Toks8)> = (0..n)
        .step_by(TOKENS)
        .map(|t0| {
            let nt = (n - t0).min(TOKENS);
            (t0, nt, Toks8::new(acts, t0, nt))
        })
        .collect();
    let mut r = r0;
    while r + ROWS <= r1 {
        // SAFETY: rows r..r + 16 are whole rows of `w`; the panel holds
        // `bytes`.
        PACKERS[kind](w.data.as_ptr().add(r * rb), rb, nb, panel);
        // The next panel's rows come from DRAM while this one is used:
        // packing waited on them (~85% of its time) without this.
        let next = w.data.as_ptr().wrapping_add((r + ROWS) * rb);
        for o in (0..ROWS * rb).step_by(64) {
            _mm_prefetch(next.wrapping_add(o) as *const i8, _MM_HINT_T2);
        }
        for &(t0, nt, ref toks) in &groups {
            let res = KERNELS[kind][nt - 1](panel, nb, toks);
            for t in 0..nt {
                // SAFETY: rows r..r + 16 of the output are this caller's.
                std::ptr::copy_nonoverlapping(res[t].as_ptr(), out.at((t0 + t) * w.rows + r), ROWS);
            }
        }
        r += ROWS;
    }
    r
}

#[cfg(test)]
mod tests {
    use crate::matmul::MatRef;
    use crate::q8::{dot_ref, ActFormat, Q8Acts};
    use crate::simd::Isa;
    use crate::threads::SharedMut;
    use rill_dtype::DType;

    /// Every output of the panel path (through `x86::rows`, so whole
    /// panels, the rows after them and starts inside a panel) has the
    /// reference's bits: random blocks and blocks at the bounds (largest
    /// quants, scales and mins; Q6_K scales −1 and −128), activations random
    /// or all ±1, 8 to 19 tokens.
    #[test]
    fn panels_give_the_reference_bits() {
        if !(Isa::Avx512.is_available() && super::super::vnni()) {
            return;
        }
        let mut rnd = crate::test_util::xorshift(0x5EED_0F9A_4E15);
        let f16 = |v: f32| half::f16::from_f32(v).to_bits().to_le_bytes();
        for (dtype, cols) in [(DType::Q4K, 768), (DType::Q5K, 512), (DType::Q6K, 1280)] {
            for fill in [None, Some(0xFFu8), Some(0x80), Some(0x00)] {
                let rows = 37;
                let (bb, bl) = (dtype.block_bytes(), dtype.block_len());
                let mut data: Vec<u8> = (0..rows * cols / bl * bb)
                    .map(|_| fill.unwrap_or(rnd() as u8))
                    .collect();
                for blk in data.chunks_exact_mut(bb) {
                    let s = (rnd() % 1000) as f32 / 1e4;
                    let d_at = if dtype == DType::Q6K { 208 } else { 0 };
                    blk[d_at..d_at + 2].copy_from_slice(&f16(s));
                    if dtype != DType::Q6K {
                        blk[2..4].copy_from_slice(&f16(s * 0.3));
                    }
                }
                let w = MatRef::new(dtype, rows, cols, &data);
                for n in [8, 13, 19] {
                    let xf: Vec<f32> = (0..n * cols)
                        .map(|i| match (fill, (i / cols) % 3) {
                            (Some(_), 0) => 1.0,
                            (Some(_), 1) => -1.0,
                            _ => (rnd() % 2001) as f32 / 100.0 - 10.0,
                        })
                        .collect();
                    let mut acts = Q8Acts::default();
                    acts.quantize(ActFormat::for_weights(dtype).unwrap(), &xf, n, cols);
                    for r0 in [0, 3] {
                        let mut out = vec![f32::NAN; n * rows];
                        let mut buf = Vec::new();
                        // SAFETY: the CPU runs AVX-512 VNNI (checked); the
                        // output holds n · rows values.
                        let done = unsafe {
                            super::super::rows(
                                Isa::Avx512,
                                w,
                                (&acts).into(),
                                r0,
                                rows,
                                SharedMut::new(&mut out),
                                &mut buf,
                            )
                        };
                        assert!(done);
                        for r in r0..rows {
                            for t in 0..n {
                                let want = dot_ref(dtype, w.row(r), acts.row(t));
                                assert_eq!(
                                    out[t * rows + r].to_bits(),
                                    want.to_bits(),
                                    "{dtype} fill {fill:?} n {n} r0 {r0} row {r} token {t}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}
