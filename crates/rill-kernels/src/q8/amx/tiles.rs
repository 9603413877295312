//! The tile configuration and instructions.

use super::Kind;
use std::arch::asm;

/// Tile configuration (palette 1): C tiles 0–3, weight tiles 4–5,
/// activation tiles 6–7, each 16 rows of 64 bytes, except Q8_0's blocks of
/// 32: weight tiles of 32 bytes a row and activation tiles of 8 lines.
#[repr(C, align(64))]
pub(super) struct TileCfg {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    colsb: [u16; 16],
    rows: [u8; 16],
}

impl TileCfg {
    pub(super) fn new(kind: Kind) -> TileCfg {
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
        if matches!(kind, Kind::Q80 | Kind::Nib) {
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
pub(super) unsafe fn tilezero<const T: u8>() {
    asm!("tilezero tmm{t}", t = const T, options(nostack, preserves_flags));
}

/// Tile `T` ← 16 (or its configured) rows at `p`, `stride` bytes apart.
#[inline(always)]
pub(super) unsafe fn tileload<const T: u8>(p: *const u8, stride: usize) {
    asm!("tileloadd tmm{t}, [{p} + {s}*1]", t = const T, p = in(reg) p, s = in(reg) stride,
         options(nostack, readonly, preserves_flags));
}

#[inline(always)]
pub(super) unsafe fn tilestore<const T: u8>(p: *mut u8, stride: usize) {
    asm!("tilestored [{p} + {s}*1], tmm{t}", t = const T, p = in(reg) p, s = in(reg) stride,
         options(nostack, preserves_flags));
}

/// `C += A (u8) · B (s8)`.
#[inline(always)]
pub(super) unsafe fn dpbusd<const C: u8, const A: u8, const B: u8>() {
    asm!("tdpbusd tmm{c}, tmm{a}, tmm{b}", c = const C, a = const A, b = const B,
         options(nostack, preserves_flags));
}

/// `C += A (s8) · B (s8)`.
#[inline(always)]
pub(super) unsafe fn dpbssd<const C: u8, const A: u8, const B: u8>() {
    asm!("tdpbssd tmm{c}, tmm{a}, tmm{b}", c = const C, a = const A, b = const B,
         options(nostack, preserves_flags));
}
