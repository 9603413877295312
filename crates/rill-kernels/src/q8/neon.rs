//! aarch64 kernels of the 8-bit-activation products: NEON with the Armv8.2
//! dot-product instructions (FEAT_DotProd: `sdot`, four i8 × i8 products
//! summed into each i32 lane), detected at run time. Without them `q8`
//! keeps its scalar reference.
//!
//! The plan is the x86 kernels' (`super::x86`): each call multiplies
//! `R` ∈ {1, 4} consecutive weight rows by `T` ≤ 4 tokens, every weight
//! vector is decoded once and used for all `T` tokens, and the `R` rows
//! are interleaved (several DRAM streams) and prefetched ahead. Results
//! come back in lanes `4r + t` of a `[f32; 16]`, and `super::groups` walks
//! a product's rows and tokens through these shapes.
//!
//! # Exactness
//! The integer part of every block term (see the module doc of `q8`) is
//! computed exactly, so any order of the integer additions gives the
//! reference's integers; the f32 part then runs the reference's operations
//! in the same order, lane by lane (`(d·dx)·f(i) − (dmin·dx)·f(m)`, no
//! fused multiply-add), so each output has the reference's bits. Nothing
//! saturates: `sdot` sums four products into a 32-bit lane, and every other
//! integer step is a wrapping i32 (or i16 → i32 widening) operation, so
//! the result is exact whenever the true value fits in an i32:
//! * Q4_K / Q5_K: quants ≤ 15 / 31 go into `sdot` as they are (non-negative
//!   i8). A 32-value sub-block sums to at most 32·31·127 = 125984; times
//!   its scale (≤ 63) and over 8 sub-blocks, |i| ≤ 63.5·10⁶. The mins
//!   (≤ 63) times the 32-value activation sums (|S32| ≤ 32·127 = 4064,
//!   made from the i16 sums of 16 without overflow): |m| ≤ 2.1·10⁶.
//! * Q6_K: quants offset to `w − 32` ∈ [−32, 31] (i8), so a 16-value
//!   sub-block gives `Σ w·q − 32·S16` directly, |·| ≤ 16·32·127 = 65024;
//!   times its i8 scale (|sc| ≤ 128) over 16 sub-blocks: |i| ≤ 133·10⁶.
//! * Q8_0: i8 × i8 over 32 values: |i| ≤ 32·128·127 = 520192.
//!
//! All are far below 2³¹.
//!
//! # Shape of the f32 tail
//! K encodings: one vector per row, its lanes the `T` tokens (unused
//! lanes compute on zero scales and are dropped); `p[b mod 8]` is a vector
//! of partials per row. Q8_0 (32-value blocks): the lanes are 4
//! consecutive blocks of one (row, token) pair, so the two vectors of a
//! pair's partials hold `p[0..4]` and `p[4..8]`, and the canonical tree
//! ends the sum.
//!
//! Developed on x86-64 and run under qemu-user (whose CPU model has
//! FEAT_DotProd); the tests here and `tests/q8.rs` check every kernel
//! shape bit for bit against the reference.

// Index loops mirror the lanes and rows they compute.
#![allow(clippy::needless_range_loop)]

use std::arch::aarch64::*;
use std::sync::OnceLock;

use super::groups::{self, block_bytes, Table, Toks};
use super::Q8Rows;
use crate::matmul::MatRef;
use crate::simd::neon::h2f;
use crate::threads::SharedMut;
use rill_dtype::DType;

mod levels;
mod mmla;
mod nvfp4;
use levels::iq4xs_body;
pub(super) use mmla::Scratch;
pub(super) use nvfp4::dot as nvfp4_dot;

/// Bytes ahead of the block being read that are prefetched, per row: the
/// x86 kernels' distance (not yet measured on aarch64 hardware).
const AHEAD: usize = 2048;

/// Whether the CPU has the dot-product instructions (detected once).
pub(super) fn usable() -> bool {
    static DOTPROD: OnceLock<bool> = OnceLock::new();
    *DOTPROD.get_or_init(|| std::arch::is_aarch64_feature_detected!("dotprod"))
}

/// Rows `r0..r1` of `w` × every token of `acts` into `out` (as `q8::rows`):
/// many tokens on the `smmla` panels where the CPU has them (`mmla`), the
/// rest on the `sdot` kernels. `false`: no kernel for this encoding here
/// (nothing written).
///
/// # Safety
/// As `q8::rows`; the CPU must have NEON and the dot-product instructions
/// ([`usable`]).
pub(super) unsafe fn rows(
    w: MatRef<'_>,
    acts: Q8Rows<'_>,
    r0: usize,
    r1: usize,
    out: SharedMut<f32>,
    scratch: &mut Scratch,
) -> bool {
    let Some(k) = table(w.dtype) else {
        return false;
    };
    let mut r = r0;
    if acts.n() >= mmla::MIN_TOKENS && mmla::usable() {
        // SAFETY: as this function, and the CPU has FEAT_I8MM.
        r = unsafe { mmla::rows(w, acts, r0, r1, out, scratch) };
    }
    groups::run(k, w, acts, r, r1, out, w.rows, 0);
    true
}

static KERNELS: [Table; 11] = [
    shapes!(q4k),
    shapes!(q5k),
    shapes!(q6k),
    shapes!(q80),
    shapes!(q40),
    shapes!(iq4nl),
    shapes!(mxfp4),
    shapes!(q50),
    shapes!(q41),
    shapes!(q51),
    shapes!(iq4xs),
];

/// The kernels of `dtype`, if any.
fn table(dtype: DType) -> Option<&'static Table> {
    Some(match dtype {
        DType::Q4K => &KERNELS[0],
        DType::Q5K => &KERNELS[1],
        DType::Q6K => &KERNELS[2],
        DType::Q8_0 => &KERNELS[3],
        DType::Q4_0 => &KERNELS[4],
        DType::IQ4NL => &KERNELS[5],
        DType::MXFP4 => &KERNELS[6],
        DType::Q5_0 => &KERNELS[7],
        DType::Q4_1 => &KERNELS[8],
        DType::Q5_1 => &KERNELS[9],
        DType::IQ4XS => &KERNELS[10],
        _ => return None,
    })
}

entry! {"neon,dotprod":
    q4k = kmin::<false>;
    q5k = kmin::<true>;
    q6k = q6k_body::<>;
    q80 = q80_body::<0>;
    q40 = q80_body::<1>;
    iq4nl = q80_body::<2>;
    mxfp4 = q80_body::<3>;
    q50 = q80_body::<4>;
    q41 = q80_body::<5>;
    q51 = q80_body::<6>;
    iq4xs = iq4xs_body::<>;
}

// ---------------------------------------------------------------------------
// Shared pieces.

/// `acc + a·b`, each i32 lane adding the four i8 × i8 products of its
/// bytes: `sdot`. Written out because the intrinsic (`vdotq_s32`) is not
/// stable yet; only ever inlined into the `dotprod` entry points.
#[inline(always)]
unsafe fn sdot(mut acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    // SAFETY: registers only; the caller's CPU has FEAT_DotProd.
    std::arch::asm!(
        "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
        acc = inout(vreg) acc,
        a = in(vreg) a,
        b = in(vreg) b,
        options(pure, nomem, nostack, preserves_flags),
    );
    acc
}

/// Σ (32 i8 × i8 products) of `w` against the 32 activations at `x`, in
/// four i32 lanes.
#[inline(always)]
unsafe fn dot32(w: [int8x16_t; 2], x: *const i8) -> int32x4_t {
    let a = sdot(vdupq_n_s32(0), w[0], vld1q_s8(x));
    sdot(a, w[1], vld1q_s8(x.add(16)))
}

/// Lane `k` = the sum of `a[k]`'s lanes (`a[k]` past `N` read as 0).
#[inline(always)]
unsafe fn reduce4<const N: usize>(a: &[int32x4_t; N]) -> int32x4_t {
    let v = |k: usize| if k < N { a[k] } else { vdupq_n_s32(0) };
    vpaddq_s32(vpaddq_s32(v(0), v(1)), vpaddq_s32(v(2), v(3)))
}

/// Prefetch, for each of the `R` rows at `w` (`rb` bytes apart), the
/// `bytes` that lie [`AHEAD`] past its offset `off`; past the row's end,
/// the same place of the row `R` further on, the next this stream reads.
#[inline(always)]
unsafe fn prefetch<const R: usize>(w: *const u8, rb: usize, off: usize, bytes: usize) {
    let a = off + AHEAD;
    let at = w.wrapping_add(if a < rb { a } else { a + (R - 1) * rb });
    for r in 0..R {
        let mut o = 0;
        while o < bytes {
            // `core::arch::aarch64::_prefetch` is unstable; `prfm` is a hint
            // that reads nothing architecturally and cannot fault, so the
            // address may lie past the matrix.
            std::arch::asm!(
                "prfm pldl1keep, [{p}]",
                p = in(reg) at.wrapping_add(r * rb + o),
                options(nostack, readonly, preserves_flags)
            );
            o += 64;
        }
    }
}

/// Four tokens' scales of block `b` (tokens past `T` read 0).
#[inline(always)]
unsafe fn dx4<const T: usize>(x: &Toks, b: usize) -> float32x4_t {
    let v: [f32; 4] = arr!(4, |t| if t < T { *x.d[t].add(b) } else { 0.0 });
    vld1q_f32(v.as_ptr())
}

/// `(d·dx)·f(i)` lane by lane, as the reference (`d` the row's scale).
#[inline(always)]
unsafe fn term(d: f32, dx: float32x4_t, i: int32x4_t) -> float32x4_t {
    vmulq_f32(vmulq_f32(vdupq_n_f32(d), dx), vcvtq_f32_s32(i))
}

/// The canonical tree over per-row partials `p[k][r]` (lanes = tokens),
/// into lanes `4r + t`.
#[inline(always)]
unsafe fn tree_rows<const R: usize>(p: &[[float32x4_t; R]; 8]) -> [f32; 16] {
    let mut out = [0f32; 16];
    for r in 0..R {
        let a = |i: usize, j: usize| vaddq_f32(p[i][r], p[j][r]);
        let s = vaddq_f32(vaddq_f32(a(0, 4), a(2, 6)), vaddq_f32(a(1, 5), a(3, 7)));
        vst1q_f32(out.as_mut_ptr().add(4 * r), s);
    }
    out
}

// ---------------------------------------------------------------------------
// Kernels.

/// Q4_K/Q5_K's packed 6-bit scales and mins (the 12 bytes at `p`, see
/// `scale_min_k4`) → `([sc0..sc7], [m0..m7])`. The low bits come from
/// bytes 0..3 / 8..11 / 4..7, the top 2 bits of scales and mins 4..7 from
/// the top of bytes 0..3 / 4..7. Reads 16 bytes (the block goes on).
#[inline(always)]
unsafe fn k4_scales(p: *const u8) -> ([i32; 8], int16x8_t) {
    let c = |b: [u8; 16]| vld1q_u8(b.as_ptr());
    let v = vld1q_u8(p);
    let a = vqtbl1q_u8(v, c([0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11]));
    let low = vandq_u8(
        a,
        c([63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0]),
    );
    let mhi = vandq_u8(
        vshrq_n_u8::<4>(a),
        c([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15]),
    );
    // Out-of-range indices (255) give 0.
    let top = vqtbl1q_u8(
        v,
        c([
            255, 255, 255, 255, 0, 1, 2, 3, 255, 255, 255, 255, 4, 5, 6, 7,
        ]),
    );
    let top = vandq_u8(vshrq_n_u8::<2>(top), vdupq_n_u8(0x30));
    let sm = vorrq_u8(vorrq_u8(low, mhi), top);
    let mut b = [0u8; 16];
    vst1q_u8(b.as_mut_ptr(), sm);
    let sc: [i32; 8] = arr!(8, |j| b[j] as i32);
    (sc, vreinterpretq_s16_u16(vmovl_high_u8(sm)))
}

/// Q4_K / Q5_K: one pair of vectors per 32-value sub-block (Q4_K's
/// sub-blocks 2c and 2c + 1 are the low and high nibbles of the same 32
/// bytes; Q5_K's bit 4 of sub-block j is bit j of the 32 `qh` bytes).
#[inline(always)]
unsafe fn kmin<const R: usize, const T: usize, const Q5: bool>(
    w: *const u8,
    rb: usize,
    x: &Toks,
    nb: usize,
) -> [f32; 16] {
    let (bb, qs_at) = if Q5 { (176, 48) } else { (144, 16) };
    let (nib, b16) = (vdupq_n_u8(0x0F), vdupq_n_u8(0x10));
    let mut p = [[vdupq_n_f32(0.0); R]; 8];
    for b in 0..nb {
        let blk = |r: usize| w.add(r * rb + b * bb);
        prefetch::<R>(w, rb, b * bb, bb);
        // The sums of each 32 activations (pairs of the i16 sums of 16).
        let s32: [int16x8_t; T] = arr!(T, |t| {
            let s = x.sums[t].add(16 * b);
            vpaddq_s16(vld1q_s16(s), vld1q_s16(s.add(8)))
        });
        let dx = dx4::<T>(x, b);
        for r in 0..R {
            let (sc, mn) = k4_scales(blk(r).add(4));
            let q = blk(r).add(qs_at);
            let mut qh = [vld1q_u8(blk(r).add(16)), vld1q_u8(blk(r).add(32))];
            let mut acc = [vdupq_n_s32(0); T];
            for c in 0..4 {
                let v = [vld1q_u8(q.add(32 * c)), vld1q_u8(q.add(32 * c + 16))];
                for h in 0..2 {
                    let j = 2 * c + h;
                    let wv: [int8x16_t; 2] = arr!(2, |k| {
                        let mut u = if h == 0 {
                            vandq_u8(v[k], nib)
                        } else {
                            vshrq_n_u8::<4>(v[k])
                        };
                        if Q5 {
                            // Bit j of qh (shifted down one per sub-block) to bit 4.
                            u = vorrq_u8(u, vandq_u8(vshlq_n_u8::<4>(qh[k]), b16));
                        }
                        vreinterpretq_s8_u8(u)
                    });
                    if Q5 {
                        qh = [vshrq_n_u8::<1>(qh[0]), vshrq_n_u8::<1>(qh[1])];
                    }
                    for t in 0..T {
                        let d = dot32(wv, x.qs[t].add(256 * b + 32 * j));
                        acc[t] = vmlaq_n_s32(acc[t], d, sc[j]);
                    }
                }
            }
            let i = reduce4(&acc);
            // Σ_j min_j·S32_j: i16 × i16 → i32, lanes j and j + 4.
            let m: [int32x4_t; T] = arr!(T, |t| vmlal_high_s16(
                vmull_s16(vget_low_s16(mn), vget_low_s16(s32[t])),
                mn,
                s32[t]
            ));
            let m = reduce4(&m);
            let (d, dmin) = (h2f(blk(r)), h2f(blk(r).add(2)));
            let tm = term(dmin, dx, m);
            p[b % 8][r] = vaddq_f32(p[b % 8][r], vsubq_f32(term(d, dx, i), tm));
        }
    }
    tree_rows(&p)
}

/// Q6_K: one vector per 16-value sub-block `j = 8h + s` (half `h`):
/// nibble `s / 4` of `ql[64h + 16(s % 4)..]`, bits `2(s / 2)..` of
/// `qh[32h + 16(s % 2)..]`, offset by −32.
#[inline(always)]
unsafe fn q6k_body<const R: usize, const T: usize>(
    w: *const u8,
    rb: usize,
    x: &Toks,
    nb: usize,
) -> [f32; 16] {
    let (nib, hib, off) = (vdupq_n_u8(0x0F), vdupq_n_u8(0x30), vdupq_n_s8(32));
    let mut p = [[vdupq_n_f32(0.0); R]; 8];
    for b in 0..nb {
        let blk = |r: usize| w.add(r * rb + b * 210);
        prefetch::<R>(w, rb, b * 210, 210);
        let dx = dx4::<T>(x, b);
        for r in 0..R {
            let base = blk(r);
            let sc: [i32; 16] = arr!(16, |j| *base.add(192 + j) as i8 as i32);
            let mut acc = [vdupq_n_s32(0); T];
            for h in 0..2 {
                let ql: [uint8x16_t; 4] = arr!(4, |k| vld1q_u8(base.add(64 * h + 16 * k)));
                let qh: [uint8x16_t; 2] = arr!(2, |k| vld1q_u8(base.add(128 + 32 * h + 16 * k)));
                for s in 0..8 {
                    let j = 8 * h + s;
                    let lo = if s < 4 {
                        vandq_u8(ql[s % 4], nib)
                    } else {
                        vshrq_n_u8::<4>(ql[s % 4])
                    };
                    // Bits 2(s/2)..2(s/2)+1 to 4..5 (a negative count shifts right).
                    let hi = vshlq_u8(qh[s % 2], vdupq_n_s8(4 - 2 * (s / 2) as i8));
                    let u = vorrq_u8(lo, vandq_u8(hi, hib));
                    let wv = vsubq_s8(vreinterpretq_s8_u8(u), off);
                    for t in 0..T {
                        let xv = vld1q_s8(x.qs[t].add(256 * b + 16 * j));
                        let d = sdot(vdupq_n_s32(0), wv, xv);
                        acc[t] = vmlaq_n_s32(acc[t], d, sc[j]);
                    }
                }
            }
            let i = reduce4(&acc);
            p[b % 8][r] = vaddq_f32(p[b % 8][r], term(h2f(base.add(208)), dx, i));
        }
    }
    tree_rows(&p)
}

/// The Q8_0-shaped encodings (`groups::NIB_DTYPES`: Q8_0, and the blocks
/// of 32 that [`levels::quants`] widens to Q8_0 blocks), 8 blocks at a
/// time (two vectors of 4): lane `k` of a pair's vector `h` is block
/// `4h + k` of the group, i.e. partial `p[4h + k]`. Q4_1 / Q5_1 add their
/// min's term against the blocks' activation sums: `(d·dx)·f(i) +
/// (m·dx)·f(S)`, the reference's operations lane by lane.
#[inline(always)]
unsafe fn q80_body<const R: usize, const T: usize, const NIB: usize>(
    w: *const u8,
    rb: usize,
    x: &Toks,
    nb: usize,
) -> [f32; 16] {
    let (bb, levels) = (block_bytes(NIB), levels::level_table::<NIB>());
    let affine = NIB >= 5;
    let mut p = [[[vdupq_n_f32(0.0); 2]; T]; R];
    let ng = nb / 8;
    for g in 0..ng {
        prefetch::<R>(w, rb, 8 * bb * g, 8 * bb);
        for r in 0..R {
            for h in 0..2 {
                let b0 = 8 * g + 4 * h;
                let blk = |k: usize| w.add(r * rb + bb * (b0 + k));
                let dw: [f32; 4] = arr!(4, |k| levels::block_scale::<NIB>(blk(k)));
                let dw = vld1q_f32(dw.as_ptr());
                let mw: [f32; 4] = arr!(4, |k| levels::block_min::<NIB>(blk(k)));
                let mw = vld1q_f32(mw.as_ptr());
                let wv: [[int8x16_t; 2]; 4] = arr!(4, |k| levels::quants::<NIB>(blk(k), levels));
                for t in 0..T {
                    let xq = x.qs[t].add(32 * b0);
                    let i: [int32x4_t; 4] = arr!(4, |k| dot32(wv[k], xq.add(32 * k)));
                    let dx = vld1q_f32(x.d[t].add(b0));
                    let mut tv = vmulq_f32(vmulq_f32(dw, dx), vcvtq_f32_s32(reduce4(&i)));
                    if affine {
                        // S per block: its two sums of 16.
                        let s = vpaddlq_s16(vld1q_s16(x.sums[t].add(2 * b0)));
                        tv = vaddq_f32(tv, vmulq_f32(vmulq_f32(mw, dx), vcvtq_f32_s32(s)));
                    }
                    p[r][t][h] = vaddq_f32(p[r][t][h], tv);
                }
            }
        }
    }
    let mut out = [0f32; 16];
    for r in 0..R {
        for t in 0..T {
            let mut pa = [0f32; 8];
            vst1q_f32(pa.as_mut_ptr(), p[r][t][0]);
            vst1q_f32(pa.as_mut_ptr().add(4), p[r][t][1]);
            // Blocks past the last whole group, as the reference adds them.
            for b in 8 * ng..nb {
                let blk = w.add(r * rb + bb * b);
                let i = vaddvq_s32(dot32(
                    levels::quants::<NIB>(blk, levels),
                    x.qs[t].add(32 * b),
                ));
                let dx = *x.d[t].add(b);
                let mut tv = (levels::block_scale::<NIB>(blk) * dx) * i as f32;
                if affine {
                    let s = *x.sums[t].add(2 * b) as i32 + *x.sums[t].add(2 * b + 1) as i32;
                    tv += (levels::block_min::<NIB>(blk) * dx) * s as f32;
                }
                pa[b % 8] += tv;
            }
            out[4 * r + t] = super::reference::sum_partials(&pa);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_give_the_reference_bits() {
        if !(crate::simd::Isa::Neon.is_available() && usable()) {
            return;
        }
        // SAFETY: the CPU has NEON and the dot-product instructions.
        unsafe { groups::check_kernels(table) }
    }
}
