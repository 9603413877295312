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
//! < 2^27`: far from i32's limits. IQ4_XS takes the same split of
//! `c = ls·L` (its signed level times its sub-block's signed scale, |c| ≤
//! 32·127) and Q6_K's term. Q8_0's weights are signed bytes already
//! (TDPBSSD), one tile product per block of 32 (`|i| < 2^19`).
//!
//! Since a super-block's integers are one exact sum, the order of its 256
//! products is free: Q4_K's weights (and so the activations, in
//! [`relayout`]) take the order in which the quants are stored (nibbles of
//! 64 bytes), so that [`decode`] needs no shuffles of them.
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
//!
//! # Files
//! This one: detection, the scratch buffers, the driver over row tiles and
//! token blocks. `tiles`: the tile configuration and instructions.
//! `layout`: the operands (activations relaid into B tiles, weights decoded
//! into A tiles). `kernel`: one row tile's tile products, f32 terms and
//! output.

mod kernel;
mod layout;
mod tiles;

use super::{ActFormat, Q8Rows};
use crate::matmul::MatRef;
use crate::threads::SharedMut;
use kernel::{row_tile_k, row_tile_q8_0};
use layout::{decode, relayout};
use rill_dtype::DType;
use std::arch::asm;
use std::arch::x86_64::*;
use std::sync::OnceLock;
use tiles::TileCfg;

/// Fewest tokens for which [`super::rows`] takes this kernel rather than
/// the in-register VNNI one (which runs groups of 4 tokens). Tiles of
/// fewer than 16 tokens are padded, but the tile products are cheap next
/// to the weights' decode, which either kernel pays once per group or
/// call. Measured on MoE-expert shapes (Q4_K / Q6_K, GFLOP/s per CPU
/// second, VNNI → AMX): with 8 tokens 512 × 2048 153 → 141 / 152 → 153
/// and 2048 × 512 154 → 188 / 141 → 188 (even on 32768 × 2048, from
/// DRAM); with 12 tokens AMX is 30-90% ahead everywhere; with 6-7 about
/// even. 8 is VNNI's best case (two whole groups) and already AMX's, for a
/// MoE layer's three matrices together.
pub(super) const MIN_TOKENS: usize = 8;

/// Most tokens relaid per block: bounds the scratch while each row tile's
/// decoded weights serve many token tiles.
const TOKEN_BLOCK: usize = 512;

/// Bytes of relaid activations per block: every row tile reads all of
/// them, so they should stay in L2. At 2 MiB (512 tokens × 4096 values,
/// the GDN and attention output projections) they did not: blocks of
/// 1 MiB ran those 17-20% faster (2048 × 4096 Q4_K / Q6_K, 512 tokens,
/// 3 alternations), and blocks smaller than 1 MiB gained nothing more at
/// 2048 values.
const RELAID_BYTES: usize = 1 << 20;

/// Tokens per block for rows of `cols` values: a whole number of token-tile
/// pairs.
fn token_block(cols: usize) -> usize {
    (RELAID_BYTES / cols.max(1)).clamp(32, TOKEN_BLOCK) / 32 * 32
}

/// Whether this CPU and OS run AMX-INT8 tiles (and the AVX-512 the f32
/// tail needs), checked once per process.
pub(super) fn usable() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(detect)
}

fn detect() -> bool {
    if !(is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512vbmi")
        && is_x86_feature_detected!("avx512vnni")
        && is_x86_feature_detected!("f16c")
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
    /// IQ4_XS: `c = ls·L` (|c| ≤ 32·127), Q6_K's term (no mins).
    IQ4,
    /// Q4_0 / IQ4_NL: the Q8_0 blocks of their levels.
    Nib,
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

/// One pool thread's buffers, only ever grown (see [`grow`]); part of
/// the product's staging (`super::RowScratch`).
#[derive(Default)]
pub(super) struct Scratch {
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
    /// Pairs of mins (Q4_K/Q5_K), `[super-block][row][pair]`.
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
/// encoding has no kernel here. `s` is the calling task's own buffers.
///
/// # Safety
/// [`usable`] returned true; otherwise as [`super::rows`].
pub(super) unsafe fn rows(
    w: MatRef<'_>,
    acts: Q8Rows<'_>,
    r0: usize,
    r1: usize,
    out: SharedMut<f32>,
    s: &mut Scratch,
) -> bool {
    let (kind, format) = match w.dtype {
        DType::Q4K => (Kind::Q4, ActFormat::K256),
        DType::Q5K => (Kind::Q5, ActFormat::K256),
        DType::Q6K => (Kind::Q6, ActFormat::K256),
        DType::Q8_0 => (Kind::Q80, ActFormat::B32),
        DType::IQ4XS => (Kind::IQ4, ActFormat::K256),
        DType::Q4_0 | DType::IQ4NL => (Kind::Nib, ActFormat::B32),
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
            Kind::Q6 | Kind::Q80 | Kind::IQ4 | Kind::Nib => 0,
        },
    };
    let tiles = acts.n().min(token_block(cols)).div_ceil(16);
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
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx512vnni,f16c")]
unsafe fn run(
    g: Geo,
    w: MatRef<'_>,
    acts: Q8Rows<'_>,
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
    let tb = token_block(g.cols);
    for tb0 in (0..n).step_by(tb) {
        let tn = tb.min(n - tb0);
        relayout(g, acts, tb0, tn, b);
        for rt in (r0..r1).step_by(16) {
            let nr = 16.min(r1 - rt);
            let d = Dest {
                out,
                rows: w.rows,
                rt,
                nr,
                tb0,
                tn,
            };
            match g.kind {
                Kind::Q80 | Kind::Nib => {
                    decode(g, w, rt, nr, 0..g.blocks, b);
                    row_tile_q8_0(g, b, d)
                }
                Kind::Q6 | Kind::IQ4 => row_tile_k::<true>(g, w, b, d),
                _ => row_tile_k::<false>(g, w, b, d),
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

#[cfg(test)]
mod tests;
