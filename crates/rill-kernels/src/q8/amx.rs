//! Prefill products with 8-bit activations on Intel AMX-INT8: many tokens
//! at once, in the canonical order of the module above, so bit for bit the
//! same as [`super::dot_ref`] (and so as one token alone on any path).
//!
//! # Integers
//! A tile product `C[16 rows][16 tokens] += A[16 rows][64 k] · B[64 k][16
//! tokens]` sums exact int8 products into i32. The weights go in A, one
//! row per tile row; the activations go in B, in the "VNNI" layout the
//! instruction wants (line `k/4` holds each token's bytes `k..k+4`), which
//! [`relayout`] builds once per block of tokens.
//!
//! The K encodings scale each sub-block of 32 (16 for Q6_K) values by its
//! own small integer `sc`. Rather than one tile product per sub-block and
//! an integer multiply of the tile afterwards, the scale goes into the
//! weights: `c = sc·w` (0..=31·63 for Q5_K; Q6_K folds in its offset too,
//! `c = sc·(w − 32)`, |c| ≤ 128·32) is split into bytes, `c = lo + 256·hi`
//! with `lo` in 0..=255 (unsigned, TDPBUSD) and `hi` in −16..=16 (signed,
//! TDPBSSD). Then `Σ_j sc_j·Σ_{k∈j} w_k·x_k = Σ_k lo_k·x_k + 256·Σ_k
//! hi_k·x_k` exactly, over a whole super-block: two tile products per 64
//! values and no per-sub-block work. For Q6_K that is the reference's
//! `Σ_j sc_j·(Σ w·q − 32·S16_j)` as one sum. Bounds per super-block and
//! output: `|Σ lo·x| ≤ 256·255·127 < 2^24`, `256·|Σ hi·x| ≤ 256·256·16·127
//! < 2^27`: far from i32's limits. Q8_0's weights are signed bytes already
//! (TDPBSSD), one tile product per block of 32 (`|i| < 2^19`).
//!
//! The mins' term `m = Σ_j min_j·S32_j` (Q4_K/Q5_K, `|m| < 2^21`) comes from
//! the activations' stored sums with VPDPWSSD (pairs of i16 products summed
//! into i32, exact).
//!
//! # f32
//! Each super-block's (block's) integers then take the f32 operations of
//! `reference.rs` in the same order, sixteen tokens per AVX-512 register
//! with the row's scales broadcast: every lane does the scalar code's IEEE
//! operations (no FMA), so every lane gets its bits. Terms go into the 8
//! partials `p[b mod 8]`, summed by the same tree at the end.

use super::{ActFormat, Q8Acts};
use crate::matmul::MatRef;
use crate::quant::f16_at;
use crate::quant::k_quants::scale_min_k4;
use crate::threads::SharedMut;
use rill_dtype::DType;
use std::arch::asm;
use std::arch::x86_64::*;
use std::cell::RefCell;
use std::sync::OnceLock;

/// Fewest tokens for which [`super::rows`] takes this kernel: one full
/// tile of tokens; below it most of each tile product would be padding.
pub(super) const MIN_TOKENS: usize = 16;

/// Tokens relaid per block: bounds the scratch (`TOKEN_BLOCK · cols`
/// bytes) while each row tile's decoded weights serve many token tiles.
const TOKEN_BLOCK: usize = 512;

/// Whether this CPU and OS run AMX-INT8 tiles (and the AVX-512 the f32
/// tail needs), checked once per process.
pub(super) fn usable() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(detect)
}

fn detect() -> bool {
    if !(is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vnni")
        && is_x86_feature_detected!("xsave"))
    {
        return false;
    }
    // CPUID.(7,0):EDX bit 24 is AMX-TILE, bit 25 AMX-INT8 (leaf 7 exists:
    // AVX-512 was reported from it).
    if (__cpuid_count(7, 0).edx >> 24) & 3 != 3 {
        return false;
    }
    // XCR0 bits 17 and 18: the OS saves the tile state (XTILECFG,
    // XTILEDATA). OSXSAVE (CPUID.1:ECX bit 27) makes XGETBV legal.
    if (__cpuid(1).ecx >> 27) & 1 == 0 {
        return false;
    }
    let (lo, hi): (u32, u32);
    // SAFETY: XGETBV with ECX = 0 is legal once OSXSAVE is set (checked);
    // it reads a register and touches no memory.
    unsafe {
        asm!("xgetbv", in("ecx") 0u32, out("eax") lo, out("edx") hi,
             options(nomem, nostack, preserves_flags));
    }
    let xcr0 = (u64::from(hi) << 32) | u64::from(lo);
    (xcr0 >> 17) & 3 == 3 && request_permission()
}

/// Linux hands out the tile state only to processes that ask
/// (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`); it may refuse
/// (e.g. a too small alternate signal stack), and then AMX stays unused.
#[cfg(target_os = "linux")]
fn request_permission() -> bool {
    const SYS_ARCH_PRCTL: usize = 158;
    const ARCH_REQ_XCOMP_PERM: usize = 0x1023;
    const XFEATURE_XTILEDATA: usize = 18;
    let ret: isize;
    // SAFETY: the arch_prctl system call with these arguments only changes
    // the process's permitted xsave features; the kernel clobbers rcx and
    // r11 (declared) and reads no user memory for this request.
    unsafe {
        asm!("syscall",
             inlateout("rax") SYS_ARCH_PRCTL as isize => ret,
             in("rdi") ARCH_REQ_XCOMP_PERM, in("rsi") XFEATURE_XTILEDATA,
             lateout("rcx") _, lateout("r11") _, options(nostack));
    }
    ret == 0
}

#[cfg(not(target_os = "linux"))]
fn request_permission() -> bool {
    false
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Q4,
    Q5,
    Q6,
    Q80,
}

/// The shape of one product: chunks of 64 values (one tile product's K),
/// scale blocks (super-blocks or Q8_0 blocks), and i16 pairs of mins per
/// super-block (4 for Q4_K/Q5_K).
#[derive(Clone, Copy)]
struct Geo {
    kind: Kind,
    cols: usize,
    chunks: usize,
    blocks: usize,
    pairs: usize,
}

/// 64 bytes on a cache line: tile rows and the scratch made of them.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// One thread's buffers, only ever grown (see [`grow`]).
#[derive(Default)]
struct Scratch {
    /// Relaid activations: `[token tile][chunk][k/4]` lines of 16 tokens.
    bt: Vec<Line>,
    /// Activation scales, `[token tile][block][token]`.
    xd: Vec<f32>,
    /// Pairs of activation sums S32 (Q4_K/Q5_K),
    /// `[token tile][super-block][pair][token]`.
    xs: Vec<i32>,
    /// Weights of one row tile: `[chunk][lo, hi][row]` lines (Q8_0: even
    /// then odd block, 32 bytes per row).
    wa: Vec<Line>,
    /// Weight scales `d` (`[block][row]`) and `dmin` (`[super-block][row]`).
    wd: Vec<f32>,
    wm: Vec<f32>,
    /// Pairs of mins (Q4_K/Q5_K), `[super-block][pair][row]`.
    wp: Vec<i32>,
    /// Four stored i32 tiles.
    c: Vec<Line>,
    /// Partial sums, `[token tile of 2][b mod 8][row][token]`.
    p: Vec<f32>,
}

fn grow<T: Copy>(v: &mut Vec<T>, len: usize, zero: T) {
    if v.len() < len {
        v.resize(len, zero);
    }
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// The buffers as raw pointers: the tile instructions and the vector loops
/// read and write them through addresses anyway.
#[derive(Clone, Copy)]
struct Bufs {
    bt: *mut u8,
    xd: *mut f32,
    xs: *mut i32,
    wa: *mut u8,
    wd: *mut f32,
    wm: *mut f32,
    wp: *mut i32,
    c: *mut u8,
    p: *mut f32,
}

/// `out[t·rows + r]` for rows `r0..r1` of `w` and every token of `acts`,
/// like [`super::dot_ref`]. Returns false (nothing written) if `w`'s
/// encoding has no kernel here or the thread's scratch is in use.
///
/// # Safety
/// [`usable`] returned true; otherwise as [`super::rows`].
pub(super) unsafe fn rows(
    w: MatRef<'_>,
    acts: &Q8Acts,
    r0: usize,
    r1: usize,
    out: SharedMut<f32>,
) -> bool {
    let (kind, format) = match w.dtype {
        DType::Q4K => (Kind::Q4, ActFormat::K256),
        DType::Q5K => (Kind::Q5, ActFormat::K256),
        DType::Q6K => (Kind::Q6, ActFormat::K256),
        DType::Q8_0 => (Kind::Q80, ActFormat::B32),
        _ => return false,
    };
    if acts.format() != Some(format) || acts.cols() != w.cols {
        return false;
    }
    let cols = w.cols;
    let g = Geo {
        kind,
        cols,
        chunks: cols.div_ceil(64),
        blocks: cols / format.block(),
        pairs: match kind {
            Kind::Q4 | Kind::Q5 => 4,
            Kind::Q6 | Kind::Q80 => 0,
        },
    };
    let ran = SCRATCH.try_with(|cell| {
        let Ok(mut s) = cell.try_borrow_mut() else {
            return false;
        };
        let tiles = acts.n().min(TOKEN_BLOCK).div_ceil(16);
        grow(&mut s.bt, tiles * g.chunks * 16, Line([0; 64]));
        grow(&mut s.xd, tiles * g.blocks * 16, 0.0);
        grow(&mut s.xs, tiles * g.blocks * g.pairs * 16, 0);
        grow(&mut s.wa, g.chunks * 32, Line([0; 64]));
        grow(&mut s.wd, g.blocks * 16, 0.0);
        grow(&mut s.wm, g.blocks * 16, 0.0);
        grow(&mut s.wp, g.blocks * g.pairs * 16, 0);
        grow(&mut s.c, 64, Line([0; 64]));
        grow(&mut s.p, 2 * 8 * 256, 0.0);
        let b = Bufs {
            bt: s.bt.as_mut_ptr().cast(),
            xd: s.xd.as_mut_ptr(),
            xs: s.xs.as_mut_ptr(),
            wa: s.wa.as_mut_ptr().cast(),
            wd: s.wd.as_mut_ptr(),
            wm: s.wm.as_mut_ptr(),
            wp: s.wp.as_mut_ptr(),
            c: s.c.as_mut_ptr().cast(),
            p: s.p.as_mut_ptr(),
        };
        // SAFETY: the buffers were just sized for `g` and this token count;
        // `usable()` (the caller's contract) vouches for the instructions;
        // the output contract is the caller's.
        unsafe { run(g, w, acts, r0, r1, out, b) };
        true
    });
    ran == Ok(true)
}

/// Tile configuration (palette 1): C tiles 0–3, weight tiles 4–5,
/// activation tiles 6–7, each 16 rows of 64 bytes, except Q8_0's blocks of
/// 32: weight tiles of 32 bytes a row and activation tiles of 8 lines.
#[repr(C, align(64))]
struct TileCfg {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    colsb: [u16; 16],
    rows: [u8; 16],
}

impl TileCfg {
    fn new(kind: Kind) -> TileCfg {
        let mut c = TileCfg {
            palette: 1,
            start_row: 0,
            reserved: [0; 14],
            colsb: [0; 16],
            rows: [0; 16],
        };
        for t in 0..8 {
            c.colsb[t] = 64;
            c.rows[t] = 16;
        }
        if kind == Kind::Q80 {
            c.colsb[4] = 32;
            c.colsb[5] = 32;
            c.rows[6] = 8;
            c.rows[7] = 8;
        }
        c
    }
}

// The tile instructions. Rust has no stable AMX intrinsics; the assembler
// knows the mnemonics. None of these blocks is `nomem`/`pure`, so the
// compiler keeps them in program order with each other and with the plain
// memory accesses around them (tile stores are read back by vector code).
// Callers: AMX usable and configured by `ldtilecfg` on this thread.

#[inline(always)]
unsafe fn tilezero<const T: u8>() {
    asm!("tilezero tmm{t}", t = const T, options(nostack, preserves_flags));
}

/// Tile `T` ← 16 (or its configured) rows at `p`, `stride` bytes apart.
#[inline(always)]
unsafe fn tileload<const T: u8>(p: *const u8, stride: usize) {
    asm!("tileloadd tmm{t}, [{p} + {s}*1]", t = const T, p = in(reg) p, s = in(reg) stride,
         options(nostack, readonly, preserves_flags));
}

#[inline(always)]
unsafe fn tilestore<const T: u8>(p: *mut u8, stride: usize) {
    asm!("tilestored [{p} + {s}*1], tmm{t}", t = const T, p = in(reg) p, s = in(reg) stride,
         options(nostack, preserves_flags));
}

/// `C += A (u8) · B (s8)`.
#[inline(always)]
unsafe fn dpbusd<const C: u8, const A: u8, const B: u8>() {
    asm!("tdpbusd tmm{c}, tmm{a}, tmm{b}", c = const C, a = const A, b = const B,
         options(nostack, preserves_flags));
}

/// `C += A (s8) · B (s8)`.
#[inline(always)]
unsafe fn dpbssd<const C: u8, const A: u8, const B: u8>() {
    asm!("tdpbssd tmm{c}, tmm{a}, tmm{b}", c = const C, a = const A, b = const B,
         options(nostack, preserves_flags));
}

#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn run(
    g: Geo,
    w: MatRef<'_>,
    acts: &Q8Acts,
    r0: usize,
    r1: usize,
    out: SharedMut<f32>,
    b: Bufs,
) {
    let cfg = TileCfg::new(g.kind);
    // SAFETY: a valid palette-1 configuration; AMX is usable (contract).
    // The pool threads are long-lived and other code may have configured
    // them differently, so every call configures its own tiles.
    asm!("ldtilecfg [{}]", in(reg) &cfg as *const TileCfg, options(nostack, readonly));
    let n = acts.n();
    for tb0 in (0..n).step_by(TOKEN_BLOCK) {
        let tn = TOKEN_BLOCK.min(n - tb0);
        relayout(g, acts, tb0, tn, b);
        for rt in (r0..r1).step_by(16) {
            let nr = 16.min(r1 - rt);
            decode(g, w, rt, nr, b);
            let d = Dest {
                out,
                rows: w.rows,
                rt,
                nr,
                tb0,
                tn,
            };
            match g.kind {
                Kind::Q80 => row_tile_q8_0(g, b, d),
                Kind::Q6 => row_tile_k::<true>(g, b, d),
                _ => row_tile_k::<false>(g, b, d),
            }
        }
    }
    // SAFETY: releases this thread's tile state (it holds nothing we need).
    asm!("tilerelease", options(nostack, nomem, preserves_flags));
}

/// Where one row tile's outputs go: rows `rt..rt + nr` of `out` (`rows`
/// wide) for tokens `tb0..tb0 + tn`.
#[derive(Clone, Copy)]
struct Dest {
    out: SharedMut<f32>,
    rows: usize,
    rt: usize,
    nr: usize,
    tb0: usize,
    tn: usize,
}

/// One step of a row tile: token tiles `tt..tt + nt` (1 or 2) and
/// super-block (Q8_0: chunk of two blocks) `k`.
#[derive(Clone, Copy)]
struct Step {
    tt: usize,
    nt: usize,
    k: usize,
}

/// The steps of a row tile, pairs of token tiles in order: for each pair,
/// `(first token tile, tiles)`.
fn pairs(tiles: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..tiles).step_by(2).map(move |tt| (tt, 2.min(tiles - tt)))
}

/// Tokens `tb0..tb0 + tn` into the B layout: per token tile and chunk of
/// 64 values, line `k/4` holds the 16 tokens' bytes `k..k+4` (a 16×16
/// transpose of i32), absent tokens and values zero; and their scales and
/// sum pairs per token tile.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn relayout(g: Geo, acts: &Q8Acts, tb0: usize, tn: usize, b: Bufs) {
    // SAFETY (whole function): rows `tb0..tb0 + tn` exist; each row's
    // `cols` quants start at `base + t·stride` inside `acts.qs`, and the
    // masked loads touch only those; the scratch writes stay within the
    // sizes `rows` grew for `tn` tokens.
    let q = acts.qs.as_ptr().add(acts.base);
    let ns = g.cols / 16;
    for tile in 0..tn.div_ceil(16) {
        let t0 = tb0 + tile * 16;
        let nt = 16.min(tb0 + tn - t0);
        for ch in 0..g.chunks {
            let k = ch * 64;
            let valid = 64.min(g.cols - k);
            let mask = if valid == 64 { !0 } else { (1u64 << valid) - 1 };
            let mut r = [_mm512_setzero_si512(); 16];
            for (i, v) in r.iter_mut().enumerate().take(nt) {
                *v = _mm512_maskz_loadu_epi8(mask, q.add((t0 + i) * acts.stride + k).cast());
            }
            let r = transpose16(r);
            let dst = b.bt.add((tile * g.chunks + ch) * 1024);
            for (k4, v) in r.iter().enumerate() {
                _mm512_store_si512(dst.add(k4 * 64).cast(), *v);
            }
        }
        for t in 0..16 {
            for blk in 0..g.blocks {
                *b.xd.add((tile * g.blocks + blk) * 16 + t) = if t < nt {
                    acts.d[(t0 + t) * g.blocks + blk]
                } else {
                    0.0
                };
            }
            for sb in 0..g.blocks * (g.pairs > 0) as usize {
                let s = |j: usize| -> i16 {
                    if t < nt {
                        acts.sums[(t0 + t) * ns + 16 * sb + j]
                    } else {
                        0
                    }
                };
                for pr in 0..g.pairs {
                    // Pairs of S32 = two S16 (|S32| ≤ 32·127 fits i16).
                    let (a, c) = (s(4 * pr) + s(4 * pr + 1), s(4 * pr + 2) + s(4 * pr + 3));
                    *b.xs.add(((tile * g.blocks + sb) * g.pairs + pr) * 16 + t) = pair(a, c);
                }
            }
        }
    }
}

/// Two i16 in one i32 lane, as VPDPWSSD reads them (first in the low half).
fn pair(a: i16, b: i16) -> i32 {
    (a as u16 as u32 | ((b as u16 as u32) << 16)) as i32
}

/// Transpose a 16×16 matrix of i32 (row `i` in `r[i]`).
#[target_feature(enable = "avx512f")]
fn transpose16(r: [__m512i; 16]) -> [__m512i; 16] {
    let mut a = [_mm512_setzero_si512(); 16];
    for i in 0..8 {
        a[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        a[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    // Now, per 128-bit lane L, `c[4i + j]` holds element 4L + j of rows
    // 4i..4i+4.
    let mut c = [_mm512_setzero_si512(); 16];
    for i in 0..4 {
        c[4 * i] = _mm512_unpacklo_epi64(a[4 * i], a[4 * i + 2]);
        c[4 * i + 1] = _mm512_unpackhi_epi64(a[4 * i], a[4 * i + 2]);
        c[4 * i + 2] = _mm512_unpacklo_epi64(a[4 * i + 1], a[4 * i + 3]);
        c[4 * i + 3] = _mm512_unpackhi_epi64(a[4 * i + 1], a[4 * i + 3]);
    }
    // A 4×4 transpose of 128-bit lanes for each j.
    let mut o = [_mm512_setzero_si512(); 16];
    for j in 0..4 {
        let (v0, v1, v2, v3) = (c[j], c[4 + j], c[8 + j], c[12 + j]);
        let e0 = _mm512_shuffle_i32x4::<0x44>(v0, v1);
        let e1 = _mm512_shuffle_i32x4::<0xEE>(v0, v1);
        let e2 = _mm512_shuffle_i32x4::<0x44>(v2, v3);
        let e3 = _mm512_shuffle_i32x4::<0xEE>(v2, v3);
        o[j] = _mm512_shuffle_i32x4::<0x88>(e0, e2);
        o[4 + j] = _mm512_shuffle_i32x4::<0xDD>(e0, e2);
        o[8 + j] = _mm512_shuffle_i32x4::<0x88>(e1, e3);
        o[12 + j] = _mm512_shuffle_i32x4::<0xDD>(e1, e3);
    }
    o
}

/// Rows `rt..rt + nr` of `w` into the A layout and their scales.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn decode(g: Geo, w: MatRef<'_>, rt: usize, nr: usize, b: Bufs) {
    // SAFETY (whole function): writes stay inside the row-tile buffers
    // `rows` sized for `g` (row index < 16), reads inside `w.row(..)`.
    let bb = w.dtype.block_bytes();
    for r in 0..nr {
        let row = w.row(rt + r);
        if g.kind == Kind::Q80 {
            for blk in 0..g.blocks {
                let src = &row[blk * bb..(blk + 1) * bb];
                *b.wd.add(blk * 16 + r) = f16_at(src, 0);
                let dst = b.wa.add((blk / 2) * 2048 + (blk % 2) * 1024 + r * 32);
                std::ptr::copy_nonoverlapping(src[2..34].as_ptr(), dst, 32);
            }
            continue;
        }
        for sb in 0..g.blocks {
            let blk = &row[sb * bb..(sb + 1) * bb];
            let mut sc = [0u16; 16];
            let (d, dmin) = if g.kind == Kind::Q6 {
                for (j, s) in sc.iter_mut().enumerate() {
                    *s = blk[192 + j] as u16;
                }
                (f16_at(blk, 208), 0.0)
            } else {
                let mut mn = [0i16; 8];
                for j in 0..8 {
                    let (s, m) = scale_min_k4(&blk[4..16], j);
                    sc[j] = s as u16;
                    mn[j] = m as i16;
                }
                for p in 0..4 {
                    *b.wp.add((sb * 4 + p) * 16 + r) = pair(mn[2 * p], mn[2 * p + 1]);
                }
                (f16_at(blk, 0), f16_at(blk, 2))
            };
            *b.wd.add(sb * 16 + r) = d;
            *b.wm.add(sb * 16 + r) = dmin;
            let scv = _mm512_castsi256_si512(_mm256_loadu_si256(sc.as_ptr().cast()));
            for c in 0..4 {
                // The sub-block of each pair of bytes (i16 word i) of chunk
                // c: 2c + i/16, or for Q6_K 4c + i/8.
                let ci = c as i16;
                let idx = if g.kind == Kind::Q6 {
                    let eighths = _mm512_maskz_set1_epi16(0xFF00_FF00, 1);
                    _mm512_add_epi16(halves(4 * ci, 4 * ci + 2), eighths)
                } else {
                    halves(2 * ci, 2 * ci + 1)
                };
                // Words [sc, 0] and [0, sc]: VPMADDUBSW then gives each
                // even and each odd byte's w·sc as an i16.
                let sc_even = _mm512_permutexvar_epi16(idx, scv);
                let sc_odd = _mm512_slli_epi16::<8>(sc_even);
                let q = quants(g.kind, blk, c);
                let (mut e, mut o) = (
                    _mm512_maddubs_epi16(q, sc_even),
                    _mm512_maddubs_epi16(q, sc_odd),
                );
                if g.kind == Kind::Q6 {
                    // Q6_K's offset folded in: c = sc·(w − 32), |c| ≤ 4096.
                    let sc32 = _mm512_slli_epi16::<5>(_mm512_srai_epi16::<8>(sc_odd));
                    e = _mm512_sub_epi16(e, sc32);
                    o = _mm512_sub_epi16(o, sc32);
                }
                // lo = low bytes, hi = high bytes (0xEA: (A & B) | C).
                let lo = _mm512_ternarylogic_epi32::<0xEA>(
                    e,
                    _mm512_set1_epi16(0x00FF),
                    _mm512_slli_epi16::<8>(o),
                );
                let hi = _mm512_ternarylogic_epi32::<0xEA>(
                    o,
                    _mm512_set1_epi16(0xFF00u16 as i16),
                    _mm512_srli_epi16::<8>(e),
                );
                let dst = b.wa.add((4 * sb + c) * 2048 + r * 64);
                _mm512_store_si512(dst.cast(), lo);
                _mm512_store_si512(dst.add(1024).cast(), hi);
            }
        }
    }
}

/// Words `a` (first 16) and `b` (last 16).
#[target_feature(enable = "avx512f,avx512bw")]
fn halves(a: i16, b: i16) -> __m512i {
    _mm512_mask_blend_epi16(0xFFFF_0000, _mm512_set1_epi16(a), _mm512_set1_epi16(b))
}

/// The 64 unsigned quants of chunk `c` (values `64c..64c+64`) of a K block,
/// in element order (as `reference.rs` unpacks them). Word shifts are safe
/// on bytes here: each mask keeps no more than `8 − shift` bits.
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn quants(kind: Kind, blk: &[u8], c: usize) -> __m512i {
    // SAFETY (loads): all offsets lie inside the block (Q4_K 144 bytes,
    // Q5_K 176, Q6_K 210), checked by the slicing.
    let bcast32 = |s: &[u8]| _mm512_broadcast_i64x4(_mm256_loadu_si256(s[..32].as_ptr().cast()));
    let m4 = _mm512_set1_epi8(0x0F);
    match kind {
        Kind::Q4 | Kind::Q5 => {
            // Values 64c + l: low nibbles of qs[32c + l] (l < 32), high
            // nibbles after.
            let qs = if kind == Kind::Q4 { 16 } else { 48 };
            let v = bcast32(&blk[qs + 32 * c..]);
            let q = _mm512_and_si512(_mm512_srlv_epi16(v, halves(0, 4)), m4);
            if kind == Kind::Q4 {
                return q;
            }
            // Q5_K's fifth bit of value e: bit e/32 of qh[e % 32].
            let h = bcast32(&blk[16..]);
            let s = (2 * c) as i16;
            let hb = _mm512_and_si512(_mm512_srlv_epi16(h, halves(s, s + 1)), _mm512_set1_epi8(1));
            _mm512_or_si512(q, _mm512_slli_epi16::<4>(hb))
        }
        _ => {
            // Q6_K value 128h + t (c = 2h + t/64): low 4 bits from
            // ql[64h + t % 64] >> 4(t/64), high 2 from qh[32h + t % 32] >>
            // 2(t/32).
            let (h, half) = (c / 2, (c % 2) as i16);
            let ql = _mm512_loadu_si512(blk[64 * h..64 * h + 64].as_ptr().cast());
            let lo = _mm512_and_si512(_mm512_srlv_epi16(ql, _mm512_set1_epi16(4 * half)), m4);
            let qh = bcast32(&blk[128 + 32 * h..]);
            let hi = _mm512_and_si512(
                _mm512_srlv_epi16(qh, halves(4 * half, 4 * half + 2)),
                _mm512_set1_epi8(3),
            );
            _mm512_or_si512(lo, _mm512_slli_epi16::<4>(hi))
        }
    }
}

/// One row tile against every token tile of the block, K encodings.
///
/// The steps form one software pipeline: a step issues its tile products,
/// then (a quarter after each chunk) the f32 work of the previous step,
/// whose tiles it stored, so that the two may overlap, also across pairs of
/// token tiles. (On the Sapphire Rapids measured they mostly do not: the
/// time is about the sum of the two.)
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn row_tile_k<const Q6: bool>(g: Geo, b: Bufs, d: Dest) {
    // SAFETY (whole function): tile loads read chunk `ch < g.chunks` of
    // the weights and of token tiles `tt`, `tt + 1` (which exist when
    // nt = 2); stores fill the 4 KiB of `b.c`; the rest as the callees.
    let mut pending: Option<Step> = None;
    for (tt, nt) in pairs(d.tn.div_ceil(16)) {
        let bt = b.bt.add(tt * g.chunks * 1024);
        let bt2 = bt.add(g.chunks * 1024);
        for sb in 0..g.blocks {
            tilezero::<0>();
            tilezero::<1>();
            if nt == 2 {
                tilezero::<2>();
                tilezero::<3>();
            }
            for c in 0..4 {
                let ch = 4 * sb + c;
                tileload::<4>(b.wa.add(ch * 2048), 64);
                tileload::<6>(bt.add(ch * 1024), 64);
                dpbusd::<0, 4, 6>();
                tileload::<5>(b.wa.add(ch * 2048 + 1024), 64);
                dpbssd::<1, 5, 6>();
                if nt == 2 {
                    tileload::<7>(bt2.add(ch * 1024), 64);
                    dpbusd::<2, 4, 7>();
                    dpbssd::<3, 5, 7>();
                }
                if let Some(p) = pending {
                    terms_k::<Q6>(g, b, p, (4 * c).min(d.nr)..(4 * c + 4).min(d.nr));
                }
            }
            if let Some(p) = pending.filter(|p| p.k + 1 == g.blocks) {
                write_out(b, g.blocks, d, p);
            }
            tilestore::<0>(b.c, 64);
            tilestore::<1>(b.c.add(1024), 64);
            if nt == 2 {
                tilestore::<2>(b.c.add(2048), 64);
                tilestore::<3>(b.c.add(3072), 64);
            }
            pending = Some(Step { tt, nt, k: sb });
        }
    }
    if let Some(p) = pending {
        terms_k::<Q6>(g, b, p, 0..d.nr);
        write_out(b, g.blocks, d, p);
    }
}

/// `p[r] = p[r] + t` for a partial's row at `pr`: its first term starts
/// from +0 without reading the (stale) buffer.
#[inline(always)]
unsafe fn accumulate(pr: *mut f32, first: bool, t: __m512) {
    let p = if first {
        _mm512_setzero_ps()
    } else {
        _mm512_loadu_ps(pr)
    };
    _mm512_storeu_ps(pr, _mm512_add_ps(p, t));
}

/// Step `s`'s super-block terms for rows `rows`, from the stored tiles,
/// into the partials: `reference.rs`'s `term_k_min` / `term_q6_k` per
/// (row, token).
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn terms_k<const Q6: bool>(g: Geo, b: Bufs, s: Step, rows: std::ops::Range<usize>) {
    // SAFETY (whole function): indices stay inside the buffers `rows`
    // sized (row < 16, token tile < tiles, sb < blocks).
    let sb = s.k;
    for u in 0..s.nt {
        let tile = s.tt + u;
        let clo = b.c.add(2 * u * 1024);
        let chi = clo.add(1024);
        let dx = _mm512_loadu_ps(b.xd.add((tile * g.blocks + sb) * 16));
        let xs = b.xs.add((tile * g.blocks + sb) * 4 * 16);
        let pp = b.p.add((u * 8 + sb % 8) * 256);
        let (wd, wm, wp) = (b.wd.add(sb * 16), b.wm.add(sb * 16), b.wp.add(sb * 4 * 16));
        for r in rows.clone() {
            let lo = _mm512_load_si512(clo.add(r * 64).cast());
            let hi = _mm512_load_si512(chi.add(r * 64).cast());
            let i = _mm512_add_epi32(lo, _mm512_slli_epi32::<8>(hi));
            let d = _mm512_set1_ps(*wd.add(r));
            let t = if Q6 {
                // i = Σ_j sc_j·Σ (w − 32)·q, exactly as Σ_j sc_j·(Σ w·q − 32·S16_j).
                _mm512_mul_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(i))
            } else {
                // (d·dx)·i − (dmin·dx)·m, with m = Σ_j min_j·S32_j.
                let mut m = _mm512_setzero_si512();
                for p in 0..4 {
                    m = dpwssd(m, xs.add(p * 16), wp.add(p * 16 + r));
                }
                let dmin = _mm512_set1_ps(*wm.add(r));
                _mm512_sub_ps(
                    _mm512_mul_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(i)),
                    _mm512_mul_ps(_mm512_mul_ps(dmin, dx), _mm512_cvtepi32_ps(m)),
                )
            };
            accumulate(pp.add(r * 16), sb < 8, t);
        }
    }
}

/// `acc + Σ pairs(x) · pairs(*w)` (VPDPWSSD, the weight pair broadcast):
/// written out because the compiler would split it into two instructions.
#[target_feature(enable = "avx512f,avx512vnni")]
#[inline]
unsafe fn dpwssd(acc: __m512i, x: *const i32, w: *const i32) -> __m512i {
    let mut a = acc;
    // SAFETY: reads 64 bytes at `x` and 4 at `w`, valid (caller).
    asm!("vpdpwssd {a}, {x}, dword ptr [{w}]{{1to16}}",
         a = inout(zmm_reg) a, x = in(zmm_reg) _mm512_loadu_si512(x.cast()), w = in(reg) w,
         options(pure, readonly, nostack, preserves_flags));
    a
}

/// One row tile against every token tile of the block, Q8_0: steps of one
/// chunk (two blocks), pipelined as in [`row_tile_k`].
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn row_tile_q8_0(g: Geo, b: Bufs, d: Dest) {
    // SAFETY (whole function): as in `row_tile_k`; a chunk's odd block
    // past the last one reads scratch whose products are never used.
    let mut pending: Option<Step> = None;
    for (tt, nt) in pairs(d.tn.div_ceil(16)) {
        let bt = b.bt.add(tt * g.chunks * 1024);
        let bt2 = bt.add(g.chunks * 1024);
        for ch in 0..g.chunks {
            tilezero::<0>();
            tilezero::<1>();
            tileload::<4>(b.wa.add(ch * 2048), 32);
            tileload::<6>(bt.add(ch * 1024), 64);
            dpbssd::<0, 4, 6>();
            tileload::<5>(b.wa.add(ch * 2048 + 1024), 32);
            tileload::<7>(bt.add(ch * 1024 + 512), 64);
            dpbssd::<1, 5, 7>();
            if nt == 2 {
                tilezero::<2>();
                tilezero::<3>();
                tileload::<6>(bt2.add(ch * 1024), 64);
                dpbssd::<2, 4, 6>();
                tileload::<7>(bt2.add(ch * 1024 + 512), 64);
                dpbssd::<3, 5, 7>();
            }
            if let Some(p) = pending {
                terms_q8_0(g, b, p, d.nr);
                if p.k + 1 == g.chunks {
                    write_out(b, g.blocks, d, p);
                }
            }
            tilestore::<0>(b.c, 64);
            tilestore::<1>(b.c.add(1024), 64);
            if nt == 2 {
                tilestore::<2>(b.c.add(2048), 64);
                tilestore::<3>(b.c.add(3072), 64);
            }
            pending = Some(Step { tt, nt, k: ch });
        }
    }
    if let Some(p) = pending {
        terms_q8_0(g, b, p, d.nr);
        write_out(b, g.blocks, d, p);
    }
}

/// Step `s`'s block terms `(d·dx)·i` from the stored tiles.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn terms_q8_0(g: Geo, b: Bufs, s: Step, nr: usize) {
    // SAFETY (whole function): as in `terms_k`.
    for u in 0..s.nt {
        let tile = s.tt + u;
        for e in 0..2 {
            let blk = 2 * s.k + e;
            if blk >= g.blocks {
                break;
            }
            let cv = b.c.add((2 * u + e) * 1024);
            let dx = _mm512_loadu_ps(b.xd.add((tile * g.blocks + blk) * 16));
            let pp = b.p.add((u * 8 + blk % 8) * 256);
            for r in 0..nr {
                let i = _mm512_load_si512(cv.add(r * 64).cast());
                let d = _mm512_set1_ps(*b.wd.add(blk * 16 + r));
                let t = _mm512_mul_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(i));
                accumulate(pp.add(r * 16), blk < 8, t);
            }
        }
    }
}

/// Step `s`'s token tiles are done: the partials' fixed tree, to
/// `out[t·rows + r]`.
#[target_feature(enable = "avx512f")]
unsafe fn write_out(b: Bufs, blocks: usize, d: Dest, s: Step) {
    // SAFETY: the partials of tiles u < 2 are inside `b.p`; the output
    // indices are this task's rows of tokens < n (caller's contract).
    for u in 0..s.nt {
        let t0 = (s.tt + u) * 16;
        let ntok = 16.min(d.tn - t0);
        let pp = b.p.add(u * 8 * 256);
        let mut v = [_mm512_setzero_si512(); 16];
        for (r, v) in v.iter_mut().enumerate().take(d.nr) {
            // `sum_partials` lane by lane: the same additions in the same
            // tree; partials no block reached are its +0 (not stale).
            let p = |j: usize| {
                if j < blocks {
                    _mm512_loadu_ps(pp.add(j * 256 + r * 16))
                } else {
                    _mm512_setzero_ps()
                }
            };
            *v = _mm512_castps_si512(_mm512_add_ps(
                _mm512_add_ps(_mm512_add_ps(p(0), p(4)), _mm512_add_ps(p(2), p(6))),
                _mm512_add_ps(_mm512_add_ps(p(1), p(5)), _mm512_add_ps(p(3), p(7))),
            ));
        }
        // Rows × tokens to tokens × rows: one masked store of the tile's
        // rows per token (and per cache line: split stores are slow).
        let v = transpose16(v);
        let mask = ((1u32 << d.nr) - 1) as u16;
        for (t, v) in v.iter().enumerate().take(ntok) {
            let dst = d.out.at((d.tb0 + t0 + t) * d.rows + d.rt);
            let split = 16 - (dst as usize % 64) / 4;
            let first = mask & ((1u32 << split) - 1) as u16;
            _mm512_mask_storeu_epi32(dst.cast(), first, *v);
            if mask & !first != 0 {
                _mm512_mask_storeu_epi32(dst.cast(), mask & !first, *v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::q8::dot_ref;

    /// Straight to the kernel (when this machine has AMX), so a passing
    /// comparison proves this code ran: every shape edge against the
    /// scalar reference.
    #[test]
    fn tiles_give_the_reference_bits() {
        if !usable() {
            eprintln!("no AMX-INT8 here: kernel not tested");
            return;
        }
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for (dtype, cols) in [
            (DType::Q4K, 512),
            (DType::Q5K, 256),
            (DType::Q6K, 768),
            (DType::Q8_0, 96),
            (DType::Q8_0, 64),
        ] {
            let rows = 19;
            let rb = cols / dtype.block_len() * dtype.block_bytes();
            let mut data: Vec<u8> = (0..rows * rb).map(|_| next() as u8).collect();
            // Finite, moderate f16 scales (exponent bits kept small).
            let bb = dtype.block_bytes();
            let at: &[usize] = match dtype {
                DType::Q8_0 => &[0],
                DType::Q6K => &[208],
                _ => &[0, 2],
            };
            for blk in data.chunks_mut(bb) {
                for &o in at {
                    let h = (next() as u16 & 0x83FF) | 0x2800;
                    blk[o..o + 2].copy_from_slice(&h.to_le_bytes());
                }
            }
            let w = MatRef {
                dtype,
                rows,
                cols,
                data: &data,
            };
            let format = ActFormat::for_weights(dtype).unwrap();
            for n in [1, 16, 33, 47] {
                let x: Vec<f32> = (0..n * cols)
                    .map(|_| (next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5)
                    .collect();
                let mut acts = Q8Acts::default();
                acts.quantize(format, &x, n, cols);
                for (r0, r1) in [(0, rows), (3, 4), (5, 19)] {
                    let mut out = vec![f32::NAN; n * rows];
                    let sh = SharedMut::new(&mut out);
                    // SAFETY: AMX is usable; `out` holds n·rows values.
                    assert!(unsafe { rows_fn(w, &acts, r0, r1, sh) });
                    for t in 0..n {
                        for r in 0..rows {
                            let got = out[t * rows + r];
                            if (r0..r1).contains(&r) {
                                let want = dot_ref(dtype, w.row(r), acts.row(t));
                                assert_eq!(
                                    got.to_bits(),
                                    want.to_bits(),
                                    "{dtype} n {n} t {t} r {r}"
                                );
                            } else {
                                assert!(
                                    got.is_nan(),
                                    "{dtype}: row {r} outside {r0}..{r1} written"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    use super::rows as rows_fn;
}
