//! aarch64 prefill products on the int8 matrix-multiply instruction
//! (FEAT_I8MM, Armv8.6: Graviton 3 / 4, Neoverse V1 / V2 / N2, Apple M2 and
//! later): `smmla` multiplies a 2 × 8 block of weights by an 8 × 2 block of
//! activations into the four i32 lanes of a 2 × 2 tile — 32 products an
//! instruction, twice `sdot`'s 16, and each lane already one (row, token)
//! sum, with no horizontal reduction per block.
//!
//! As the x86 row panels (`x86::panel`), four weight rows are decoded once
//! into a panel (signed quants in element order, every sub-block's integer
//! scale and min, the f32 scales), which stays in L1 while every token goes
//! by; the tokens' quantized activations are interleaved once per call.
//! `smmla` wants both operands as two 8-byte halves: rows `2p, 2p + 1` of
//! the panel and tokens `2q, 2q + 1` of the activations, 8 columns at a time.
//!
//! # Exactness
//! The integers are the reference's for every encoding (`q8` module doc):
//! `smmla` sums exact i8 × i8 products into i32, the sub-block scales and
//! mins multiply exact i32s (the bounds of `super`'s doc hold: the same
//! integers, summed in another order), and the f32 tail runs the
//! reference's operations lane by lane — `(d·dx)·f(i)`, `− (dmin·dx)·f(m)`
//! (Q4_K / Q5_K), `+ (m·dx)·f(S)` (Q4_1 / Q5_1), the partials `p[b mod 8]`
//! from +0 and the canonical tree — so every output has the reference's
//! bits, as on every other path.

// Index loops mirror the lanes, rows and tokens they compute.
#![allow(clippy::needless_range_loop)]

use std::arch::aarch64::*;
use std::sync::OnceLock;

use super::super::groups::block_bytes;
use super::super::Q8Rows;
use super::{k4_scales, levels};
use crate::matmul::MatRef;
use crate::quant::iq4::IQ4_NL_VALUES;
use crate::simd::neon::h2f;
use crate::threads::SharedMut;
use rill_dtype::DType;

/// Fewer tokens than this run on the `sdot` kernels (`super::groups`),
/// which decode the weights once per 4 tokens too: from one whole group of
/// 4 the panel's tile of 2 × 2 pairs uses every lane of `smmla`.
pub(super) const MIN_TOKENS: usize = 4;
/// Rows of a panel: two pairs.
const ROWS: usize = 4;
/// Token pairs of one kernel call.
const PAIRS: usize = 2;

/// Whether the CPU has the int8 matrix-multiply instructions (detected once).
pub(super) fn usable() -> bool {
    static I8MM: OnceLock<bool> = OnceLock::new();
    *I8MM.get_or_init(|| std::arch::is_aarch64_feature_detected!("i8mm"))
}

/// One pool thread's buffers: the panel and the interleaved activations.
/// Only ever grown.
#[derive(Default)]
pub(crate) struct Scratch {
    panel: Vec<u8>,
    acts: Vec<i8>,
}

/// What a panel holds of an encoding's block.
#[derive(Clone, Copy)]
struct Shape {
    /// Values a block.
    len: usize,
    /// Values a sub-block (one integer scale each, where `scaled`).
    sub: usize,
    /// Bytes of a source block.
    bytes: usize,
    /// Integer sub-block scales (K encodings, IQ4_XS).
    scaled: bool,
    /// Integer sub-block mins against the activations' sums of 32 (Q4_K, Q5_K).
    mins: bool,
    /// An f32 min against the block's activation sum (Q4_1, Q5_1).
    affine: bool,
}

impl Shape {
    const fn subs(&self) -> usize {
        self.len / self.sub
    }
    /// Panel bytes a block: the quants (two pairs × the 8-column chunks × 16
    /// bytes), the scales and mins (i32 × 4 lanes per sub-block and pair),
    /// then `d` and the second f32 (`dmin` or the min) per pair.
    const fn panel_bytes(&self) -> usize {
        4 * self.len + self.subs() * 32 * (self.scaled as usize + self.mins as usize) + 64
    }
    const fn scales_at(&self) -> usize {
        4 * self.len
    }
    const fn mins_at(&self) -> usize {
        self.scales_at() + self.subs() * 32 * self.scaled as usize
    }
    const fn d_at(&self) -> usize {
        self.mins_at() + self.subs() * 32 * self.mins as usize
    }
}

/// Encodings by kind: 0..=6 the Q8_0-shaped ones by `NIB`
/// (`groups::NIB_DTYPES`), then Q4_K, Q5_K, Q6_K, IQ4_XS.
const fn shape(kind: usize) -> Shape {
    match kind {
        0..=6 => Shape {
            len: 32,
            sub: 32,
            bytes: block_bytes(kind),
            scaled: false,
            mins: false,
            affine: kind >= 5,
        },
        7 | 8 => Shape {
            len: 256,
            sub: 32,
            bytes: if kind == 7 { 144 } else { 176 },
            scaled: true,
            mins: true,
            affine: false,
        },
        9 => Shape {
            len: 256,
            sub: 16,
            bytes: 210,
            scaled: true,
            mins: false,
            affine: false,
        },
        _ => Shape {
            len: 256,
            sub: 32,
            bytes: 136,
            scaled: true,
            mins: false,
            affine: false,
        },
    }
}

fn kind(dtype: DType) -> Option<usize> {
    Some(match dtype {
        DType::Q8_0 => 0,
        DType::Q4_0 => 1,
        DType::IQ4NL => 2,
        DType::MXFP4 => 3,
        DType::Q5_0 => 4,
        DType::Q4_1 => 5,
        DType::Q5_1 => 6,
        DType::Q4K => 7,
        DType::Q5K => 8,
        DType::Q6K => 9,
        DType::IQ4XS => 10,
        _ => return None,
    })
}

/// `acc + a·bᵀ` for the 2 × 8 i8 matrices `a` (rows: bytes 0..8, 8..16) and
/// `b` (columns likewise): lanes `2i + j` add row `i` · column `j`. Written
/// out because the intrinsic (`vmmlaq_s32`) is not stable yet; only ever
/// inlined into the `i8mm` entry points.
#[inline(always)]
unsafe fn smmla(mut acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    // SAFETY: registers only; the caller's CPU has FEAT_I8MM.
    std::arch::asm!(
        "smmla {acc:v}.4s, {a:v}.16b, {b:v}.16b",
        acc = inout(vreg) acc,
        a = in(vreg) a,
        b = in(vreg) b,
        options(pure, nomem, nostack, preserves_flags),
    );
    acc
}

/// A decoded block of one row: its quants as signed bytes in element order,
/// its sub-block scales and mins, and its two f32s.
struct Block {
    q: [i8; 256],
    sc: [i32; 16],
    mn: [i32; 16],
    d: f32,
    /// `dmin` (Q4_K, Q5_K), the min (Q4_1, Q5_1), else 0.
    d2: f32,
}

/// Decode the block at `blk` of encoding `KIND` into `o`, as the `sdot`
/// kernels decode it in registers (`super::kmin`, `super::q6k_body`,
/// `levels`).
#[inline(always)]
unsafe fn decode<const KIND: usize>(blk: *const u8, o: &mut Block) {
    let q = o.q.as_mut_ptr();
    match KIND {
        0..=6 => {
            let v = levels::quants::<KIND>(blk, levels::level_table::<KIND>());
            vst1q_s8(q, v[0]);
            vst1q_s8(q.add(16), v[1]);
            o.d = levels::block_scale::<KIND>(blk);
            o.d2 = levels::block_min::<KIND>(blk);
        }
        7 | 8 => {
            let five = KIND == 8;
            let qs_at = if five { 48 } else { 16 };
            let (nib, b16) = (vdupq_n_u8(0x0F), vdupq_n_u8(0x10));
            let (sc, mn) = k4_scales(blk.add(4));
            o.sc[..8].copy_from_slice(&sc);
            let mut m = [0i16; 8];
            vst1q_s16(m.as_mut_ptr(), mn);
            for j in 0..8 {
                o.mn[j] = m[j] as i32;
            }
            let mut qh = [vld1q_u8(blk.add(16)), vld1q_u8(blk.add(32))];
            for c in 0..4 {
                let v = [
                    vld1q_u8(blk.add(qs_at + 32 * c)),
                    vld1q_u8(blk.add(qs_at + 32 * c + 16)),
                ];
                for h in 0..2 {
                    let j = 2 * c + h;
                    for k in 0..2 {
                        let mut u = if h == 0 {
                            vandq_u8(v[k], nib)
                        } else {
                            vshrq_n_u8::<4>(v[k])
                        };
                        if five {
                            u = vorrq_u8(u, vandq_u8(vshlq_n_u8::<4>(qh[k]), b16));
                        }
                        vst1q_s8(q.add(32 * j + 16 * k), vreinterpretq_s8_u8(u));
                    }
                    if five {
                        qh = [vshrq_n_u8::<1>(qh[0]), vshrq_n_u8::<1>(qh[1])];
                    }
                }
            }
            o.d = h2f(blk);
            o.d2 = h2f(blk.add(2));
        }
        9 => {
            let (nib, hib, off) = (vdupq_n_u8(0x0F), vdupq_n_u8(0x30), vdupq_n_s8(32));
            for h in 0..2 {
                let ql: [uint8x16_t; 4] = arr!(4, |k| vld1q_u8(blk.add(64 * h + 16 * k)));
                let qh: [uint8x16_t; 2] = arr!(2, |k| vld1q_u8(blk.add(128 + 32 * h + 16 * k)));
                for s in 0..8 {
                    let lo = if s < 4 {
                        vandq_u8(ql[s % 4], nib)
                    } else {
                        vshrq_n_u8::<4>(ql[s % 4])
                    };
                    let hi = vshlq_u8(qh[s % 2], vdupq_n_s8(4 - 2 * (s / 2) as i8));
                    let u = vorrq_u8(lo, vandq_u8(hi, hib));
                    // The −32 offset in the quant: Σ sc·Σ (w − 32)·q is the
                    // reference's Σ sc·(Σ w·q − 32·S16).
                    let wv = vsubq_s8(vreinterpretq_s8_u8(u), off);
                    vst1q_s8(q.add(16 * (8 * h + s)), wv);
                }
            }
            for j in 0..16 {
                o.sc[j] = *blk.add(192 + j) as i8 as i32;
            }
            o.d = h2f(blk.add(208));
            o.d2 = 0.0;
        }
        _ => {
            let lv = vld1q_s8(IQ4_NL_VALUES.as_ptr());
            let nib = vdupq_n_u8(0x0F);
            for j in 0..8 {
                let b = vld1q_u8(blk.add(8 + 16 * j));
                vst1q_s8(q.add(32 * j), vqtbl1q_s8(lv, vandq_u8(b, nib)));
                vst1q_s8(q.add(32 * j + 16), vqtbl1q_s8(lv, vshrq_n_u8::<4>(b)));
                o.sc[j] = levels::iq4xs_scale(blk, j);
            }
            o.d = h2f(blk);
            o.d2 = 0.0;
        }
    }
}

/// Rewrite rows `w..` (4 of them, `rb` bytes apart, `nb` blocks each) of
/// encoding `KIND` as a panel at `dst` ([`Shape::panel_bytes`] a block).
#[inline(always)]
unsafe fn pack<const KIND: usize>(w: *const u8, rb: usize, nb: usize, dst: *mut u8) {
    let s = shape(KIND);
    let mut blocks: [Block; ROWS] = std::array::from_fn(|_| Block {
        q: [0; 256],
        sc: [0; 16],
        mn: [0; 16],
        d: 0.0,
        d2: 0.0,
    });
    let chunks = s.len / 8;
    for b in 0..nb {
        for r in 0..ROWS {
            decode::<KIND>(w.add(r * rb + b * s.bytes), &mut blocks[r]);
        }
        let pb = dst.add(b * s.panel_bytes());
        for p in 0..2 {
            let (lo, hi) = (&blocks[2 * p], &blocks[2 * p + 1]);
            for c in 0..chunks {
                let v = vcombine_s8(
                    vld1_s8(lo.q.as_ptr().add(8 * c)),
                    vld1_s8(hi.q.as_ptr().add(8 * c)),
                );
                vst1q_s8(pb.add(16 * (p * chunks + c)) as *mut i8, v);
            }
            let lanes = |a: i32, b: i32| [a, a, b, b];
            for j in 0..s.subs() {
                if s.scaled {
                    let v = lanes(lo.sc[j], hi.sc[j]);
                    vst1q_s32(
                        pb.add(s.scales_at() + 32 * j + 16 * p) as *mut i32,
                        vld1q_s32(v.as_ptr()),
                    );
                }
                if s.mins {
                    let v = lanes(lo.mn[j], hi.mn[j]);
                    vst1q_s32(
                        pb.add(s.mins_at() + 32 * j + 16 * p) as *mut i32,
                        vld1q_s32(v.as_ptr()),
                    );
                }
            }
            let f = |a: f32, b: f32| [a, a, b, b];
            let d = f(lo.d, hi.d);
            let d2 = f(lo.d2, hi.d2);
            vst1q_f32(pb.add(s.d_at() + 16 * p) as *mut f32, vld1q_f32(d.as_ptr()));
            vst1q_f32(
                pb.add(s.d_at() + 32 + 16 * p) as *mut f32,
                vld1q_f32(d2.as_ptr()),
            );
        }
    }
}

/// Tokens `2q, 2q + 1` of every pair of a product as `smmla`'s right
/// operand: per 8-column chunk, 8 bytes of each (an odd last token pairs
/// with itself). Pair `q`'s row starts at `q · cols · 2`.
fn interleave(acts: Q8Rows<'_>, buf: &mut Vec<i8>) {
    let (n, cols) = (acts.n(), acts.cols());
    let pairs = n.div_ceil(2);
    buf.clear();
    buf.reserve(pairs * 2 * cols);
    for q in 0..pairs {
        let a = acts.row(2 * q).qs;
        let b = acts.row((2 * q + 1).min(n - 1)).qs;
        for (ca, cb) in a[..cols].chunks_exact(8).zip(b[..cols].chunks_exact(8)) {
            buf.extend_from_slice(ca);
            buf.extend_from_slice(cb);
        }
    }
}

/// The token pairs of one kernel call: their interleaved activations and
/// each token's scales and sums of 16 (tokens `2q`, `2q + 1` at `2q`, `2q + 1`).
struct Pairs {
    x: [*const i8; PAIRS],
    d: [*const f32; 2 * PAIRS],
    sums: [*const i16; 2 * PAIRS],
}

/// Lanes `[a, b, a, b]`: a token pair's values against a pair of rows.
#[inline(always)]
unsafe fn tok_f32(a: f32, b: f32) -> float32x4_t {
    let v = [a, b, a, b];
    vld1q_f32(v.as_ptr())
}

#[inline(always)]
unsafe fn tok_i32(a: i32, b: i32) -> int32x4_t {
    let v = [a, b, a, b];
    vld1q_s32(v.as_ptr())
}

/// The panel at `panel` (`nb` blocks) × `TQ` token pairs: lanes
/// `[r0·t0, r0·t1, r1·t0, r1·t1]` of `[p][q]` for row pair `p`, token pair `q`.
#[inline(always)]
unsafe fn tile<const KIND: usize, const TQ: usize>(
    panel: *const u8,
    nb: usize,
    x: &Pairs,
) -> [[float32x4_t; TQ]; 2] {
    let s = shape(KIND);
    let (chunks, sub_chunks) = (s.len / 8, s.sub / 8);
    let z = vdupq_n_s32(0);
    let mut part = [[[vdupq_n_f32(0.0); 8]; TQ]; 2];
    for b in 0..nb {
        let pb = panel.add(b * s.panel_bytes());
        let mut i = [[z; TQ]; 2];
        let mut m = [[z; TQ]; 2];
        for j in 0..s.subs() {
            let mut acc = [[z; TQ]; 2];
            for c in j * sub_chunks..(j + 1) * sub_chunks {
                let a = [
                    vld1q_s8(pb.add(16 * c) as *const i8),
                    vld1q_s8(pb.add(16 * (chunks + c)) as *const i8),
                ];
                for q in 0..TQ {
                    let bv = vld1q_s8(x.x[q].add(16 * (b * chunks + c)));
                    for p in 0..2 {
                        acc[p][q] = smmla(acc[p][q], a[p], bv);
                    }
                }
            }
            for p in 0..2 {
                if s.scaled {
                    let sc = vld1q_s32(pb.add(s.scales_at() + 32 * j + 16 * p) as *const i32);
                    for q in 0..TQ {
                        i[p][q] = vmlaq_s32(i[p][q], acc[p][q], sc);
                    }
                } else {
                    i[p] = acc[p];
                }
            }
            if s.mins {
                // Σ_j min_j·S32_j, S32 the sum of sub-block j's two sums of 16.
                let s32 = |t: usize| {
                    let at = x.sums[t].add(16 * b + 2 * j);
                    *at as i32 + *at.add(1) as i32
                };
                for q in 0..TQ {
                    let sv = tok_i32(s32(2 * q), s32(2 * q + 1));
                    for p in 0..2 {
                        let mn = vld1q_s32(pb.add(s.mins_at() + 32 * j + 16 * p) as *const i32);
                        m[p][q] = vmlaq_s32(m[p][q], mn, sv);
                    }
                }
            }
        }
        for q in 0..TQ {
            let dx = tok_f32(*x.d[2 * q].add(b), *x.d[2 * q + 1].add(b));
            for p in 0..2 {
                let d = vld1q_f32(pb.add(s.d_at() + 16 * p) as *const f32);
                let mut t = vmulq_f32(vmulq_f32(d, dx), vcvtq_f32_s32(i[p][q]));
                if s.mins || s.affine {
                    let d2 = vld1q_f32(pb.add(s.d_at() + 32 + 16 * p) as *const f32);
                    let k = vmulq_f32(d2, dx);
                    if s.mins {
                        t = vsubq_f32(t, vmulq_f32(k, vcvtq_f32_s32(m[p][q])));
                    } else {
                        let sum = |t: usize| {
                            let at = x.sums[t].add(2 * b);
                            *at as i32 + *at.add(1) as i32
                        };
                        let sv = tok_i32(sum(2 * q), sum(2 * q + 1));
                        t = vaddq_f32(t, vmulq_f32(k, vcvtq_f32_s32(sv)));
                    }
                }
                part[p][q][b % 8] = vaddq_f32(part[p][q][b % 8], t);
            }
        }
    }
    let mut out = [[vdupq_n_f32(0.0); TQ]; 2];
    for p in 0..2 {
        for q in 0..TQ {
            let a = |i: usize, j: usize| vaddq_f32(part[p][q][i], part[p][q][j]);
            out[p][q] = vaddq_f32(vaddq_f32(a(0, 4), a(2, 6)), vaddq_f32(a(1, 5), a(3, 7)));
        }
    }
    out
}

type Packer = unsafe fn(*const u8, usize, usize, *mut u8);
/// `TQ` = 1, 2 token pairs; results as [`tile`]'s, `[p][q]` at `4(2p + q)`.
type Kernel = unsafe fn(*const u8, usize, &Pairs) -> [f32; 16];

macro_rules! kinds {
    ($($k:literal),*) => {
        [$((
            {
                #[target_feature(enable = "neon,i8mm")]
                unsafe fn packer(w: *const u8, rb: usize, nb: usize, dst: *mut u8) {
                    pack::<$k>(w, rb, nb, dst)
                }
                packer as Packer
            },
            [
                {
                    #[target_feature(enable = "neon,i8mm")]
                    unsafe fn one(panel: *const u8, nb: usize, x: &Pairs) -> [f32; 16] {
                        let t = tile::<$k, 1>(panel, nb, x);
                        let mut o = [0f32; 16];
                        for p in 0..2 {
                            vst1q_f32(o.as_mut_ptr().add(8 * p), t[p][0]);
                        }
                        o
                    }
                    one as Kernel
                },
                {
                    #[target_feature(enable = "neon,i8mm")]
                    unsafe fn two(panel: *const u8, nb: usize, x: &Pairs) -> [f32; 16] {
                        let t = tile::<$k, 2>(panel, nb, x);
                        let mut o = [0f32; 16];
                        for p in 0..2 {
                            for q in 0..2 {
                                vst1q_f32(o.as_mut_ptr().add(4 * (2 * p + q)), t[p][q]);
                            }
                        }
                        o
                    }
                    two as Kernel
                },
            ],
        )),*]
    };
}

static KINDS: [(Packer, [Kernel; PAIRS]); 11] = kinds!(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10);

/// Rows `r0..r1` of `w` × every token of `acts` into `out` (as `q8::rows`),
/// a panel of 4 rows at a time; returns the first row it left (the rows
/// past the last whole panel, or all of them for an encoding without a
/// panel here or fewer than [`MIN_TOKENS`] tokens) for the `sdot` kernels.
///
/// # Safety
/// As `q8::rows`; the CPU has NEON and the int8 matrix-multiply
/// instructions ([`usable`]).
pub(super) unsafe fn rows(
    w: MatRef<'_>,
    acts: Q8Rows<'_>,
    r0: usize,
    r1: usize,
    out: SharedMut<f32>,
    scratch: &mut Scratch,
) -> usize {
    let n = acts.n();
    let Some(k) = kind(w.dtype) else { return r0 };
    if n < MIN_TOKENS || r1 - r0 < ROWS {
        return r0;
    }
    let s = shape(k);
    let (rb, nb, cols) = (w.row_bytes(), w.cols / s.len, w.cols);
    let (packer, kernels) = KINDS[k];
    interleave(acts, &mut scratch.acts);
    let panel_len = nb * s.panel_bytes();
    if scratch.panel.len() < panel_len + 16 {
        scratch.panel.resize(panel_len + 16, 0);
    }
    let at = scratch.panel.as_ptr().align_offset(16).min(16);
    let panel = scratch.panel.as_mut_ptr().add(at);
    let toks = |t: usize| acts.row(t.min(n - 1));
    let end = r0 + (r1 - r0) / ROWS * ROWS;
    let mut r = r0;
    while r < end {
        // SAFETY: rows r..r + 4 are whole rows of `w`; the panel holds
        // `panel_len` bytes.
        packer(w.data.as_ptr().add(r * rb), rb, nb, panel);
        let mut t0 = 0;
        while t0 < n {
            let nt = (n - t0).min(2 * PAIRS);
            let tq = nt.div_ceil(2);
            let q0 = t0 / 2;
            let x = Pairs {
                x: std::array::from_fn(|q| {
                    scratch.acts.as_ptr().add(2 * cols * (q0 + q.min(tq - 1)))
                }),
                d: std::array::from_fn(|t| toks(t0 + t).d.as_ptr()),
                sums: std::array::from_fn(|t| toks(t0 + t).sums.as_ptr()),
            };
            let res = kernels[tq - 1](panel, nb, &x);
            for p in 0..2 {
                for q in 0..tq {
                    for (lane, (dr, dt)) in [(0, 0), (0, 1), (1, 0), (1, 1)].into_iter().enumerate()
                    {
                        let t = 2 * q + dt;
                        if t < nt {
                            let row = r + 2 * p + dr;
                            // SAFETY: inside the output; row `row` is ours.
                            *out.at((t0 + t) * w.rows + row) = res[4 * (2 * p + q) + lane];
                        }
                    }
                }
            }
            t0 += nt;
        }
        r += ROWS;
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::q8::groups::{test_acts, test_blocks};
    use crate::q8::{dot_ref, ActFormat, Q8Acts};

    /// Every output of the panels has the reference's bits: random blocks
    /// and blocks at the bounds (largest quants, scales and mins; Q6_K
    /// scales −1 and −128, Q8_0 quants −128), 4 to 11 tokens, starts inside
    /// the matrix and rows left after the last whole panel.
    #[test]
    fn panels_give_the_reference_bits() {
        if !(crate::simd::Isa::Neon.is_available() && super::super::usable() && usable()) {
            return;
        }
        let mut rnd = crate::test_util::xorshift(0x51_7C_C1_B7_27_22_0A_95);
        for (dtype, cols) in [
            (DType::Q4K, 768),
            (DType::Q5K, 512),
            (DType::Q6K, 2560),
            (DType::Q8_0, 352),
            (DType::Q4_0, 96),
            (DType::IQ4NL, 288),
            (DType::MXFP4, 288),
            (DType::IQ4XS, 768),
            (DType::Q5_0, 352),
            (DType::Q4_1, 352),
            (DType::Q5_1, 288),
        ] {
            let n_rows = 9;
            for fill in [None, Some(0xFFu8), Some(0x80), Some(0x00)] {
                let data = test_blocks(dtype, n_rows, cols, fill, &mut rnd);
                let w = MatRef::new(dtype, n_rows, cols, &data);
                for n in [4, 5, 8, 11] {
                    let xf = test_acts(n, cols, fill, &mut rnd);
                    let mut acts = Q8Acts::default();
                    acts.quantize(ActFormat::for_weights(dtype).unwrap(), &xf, n, cols);
                    for r0 in [0, 3] {
                        let mut out = vec![f32::NAN; n * n_rows];
                        let mut scratch = Scratch::default();
                        // SAFETY: the CPU has NEON and i8mm (checked); the
                        // output holds n · rows values.
                        let done = unsafe {
                            rows(
                                w,
                                (&acts).into(),
                                r0,
                                n_rows,
                                SharedMut::new(&mut out),
                                &mut scratch,
                            )
                        };
                        assert_eq!(done, r0 + (n_rows - r0) / 4 * 4, "{dtype}");
                        for r in r0..done {
                            for t in 0..n {
                                let want = dot_ref(dtype, w.row(r), acts.row(t));
                                assert_eq!(
                                    out[t * n_rows + r].to_bits(),
                                    want.to_bits(),
                                    "{dtype} fill {fill:?} n{n} r0 {r0} r{r} t{t}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}
