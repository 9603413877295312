//! The blocked inner loops of [`matmul`](crate::matmul): decoded weight
//! rows × tokens, in a canonical per-output order.
//!
//! # Canonical order (batch invariance)
//! Every output `out[t][r] = Σ_c w[r][c]·x[t][c]` is computed, for a given
//! [`Isa`], by exactly one sequence of f32 operations, whatever `n` is, what
//! the other tokens hold, which tile it lands in, or how rows are split among
//! threads:
//!
//! * `Scalar`: 8 partial sums, `p[c % 8] += w[c]·x[c]` (multiply, then add)
//!   for the whole chunks of 8 columns in order; then
//!   `((p0+p4) + (p2+p6)) + ((p1+p5) + (p3+p7))`; then the last `cols % 8`
//!   columns one by one, `s += w[c]·x[c]`.
//! * `Avx2`: one 8-lane vector accumulator, `acc = fma(w[c..c+8], x[c..c+8], acc)`
//!   over the whole chunks in order; the same horizontal sum as `Scalar`
//!   (128-bit halves, then 64-bit halves, then the two lanes); then the tail
//!   as `Scalar`.
//! * `Avx512`: one 16-lane accumulator over chunks of 16, its upper 256 bits
//!   added onto the lower, then as `Avx2` (horizontal sum, tail of `cols % 16`).
//! * `Neon` (aarch64): `Avx2`'s order exactly, so the same bits as `Avx2`:
//!   the 8-lane accumulator held as two 4-lane halves, each `vfmaq_f32`'d
//!   (one rounding, as `_mm256_fmadd_ps`), the halves added lane by lane
//!   (`Avx2`'s 128-bit halves), then as `Avx2`.
//!
//! The tile kernels keep one accumulator per output, so a tile of 4 rows × 6
//! tokens and a tile of 1 row × 1 token give each output the same bits. The
//! weights are decoded with `dequantize`, which is bit-identical on every path.
//!
//! # Blocking
//! A task owns whole output rows. It walks its tokens in tiles whose
//! activations fit in L2 ([`TILE_BYTES`]); for each tile it decodes a block
//! of weight rows that fits in L1 ([`block_rows`]) into an f32 buffer and
//! runs the microkernel over every (rows × tokens) tile of that block, so
//! each loaded weight vector feeds several tokens and each loaded activation
//! vector several rows. F32 weights are read in place, not decoded.

use crate::matmul::MatRef;
#[cfg(target_arch = "aarch64")]
use crate::simd::neon;
#[cfg(target_arch = "x86_64")]
use crate::simd::x86;
use crate::simd::Isa;
use crate::simd::{CANON_ROWS, CANON_TOKENS};
use crate::threads::SharedMut;
use rill_dtype::DType;

/// Bytes of decoded weight rows kept at once: they should stay in L1 while
/// every token of a tile passes over them.
const BLOCK_BYTES: usize = 32 * 1024;
/// Most decoded rows kept at once.
const MAX_BLOCK_ROWS: usize = 16;
/// Bytes of activations in one token tile: they stay in L2 while every row
/// block of the task passes over them.
const TILE_BYTES: usize = 512 * 1024;

/// Rows decoded at once for `n` tokens of `cols` values: about
/// [`BLOCK_BYTES`], a whole number of 4-row tiles when tiles have several
/// tokens, up to 8 one-token rows (independent FMA chains) for decode.
fn block_rows(n: usize, cols: usize) -> usize {
    let fit = BLOCK_BYTES / (4 * cols.max(1));
    if n == 1 {
        fit.clamp(1, 8)
    } else {
        fit.clamp(4, MAX_BLOCK_ROWS) / 4 * 4
    }
}

/// Most tokens of one microkernel tile on `isa`.
fn tile_tokens(isa: Isa) -> usize {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::AvxVnni => crate::simd::x86::gemm::NR_256,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 | Isa::Amx => crate::simd::x86::gemm::NR_512,
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => crate::simd::neon::gemm::NR,
        _ => 4,
    }
}

/// Most rows of one microkernel tile of `nt` tokens (more rows for one
/// token: independent FMA chains).
fn tile_rows(nt: usize) -> usize {
    if nt == 1 {
        8
    } else {
        4
    }
}

/// The canonical scalar dot (see the module doc).
pub(crate) fn dot_scalar(w: &[f32], x: &[f32]) -> f32 {
    debug_assert_eq!(w.len(), x.len());
    crate::ops::dot8(w, x, |p| {
        ((p[0] + p[4]) + (p[2] + p[6])) + ((p[1] + p[5]) + (p[3] + p[7]))
    })
}

/// `out[r·nt + t] = Σ_c w[r][c]·x[t][c]` for `nr` decoded rows and `nt`
/// tokens (at most the [`tile_shape`]), in the canonical order of `isa`.
/// The caller has checked that the CPU runs `isa`.
fn tile(isa: Isa, w: &[f32], nr: usize, x: &[f32], nt: usize, cols: usize, out: &mut [f32]) {
    assert!(nr <= tile_rows(nt) && nt <= tile_tokens(isa));
    assert!(w.len() >= nr * cols && x.len() >= nt * cols);
    assert!(out.len() >= nr * nt);
    #[cfg(target_arch = "x86_64")]
    if isa != Isa::Scalar {
        // SAFETY: the caller checked the CPU features (`Isa::check`); sizes
        // and tile bounds are asserted above.
        unsafe { crate::simd::x86::gemm::tile(isa.wide(), w, nr, x, nt, cols, out) };
        return;
    }
    #[cfg(target_arch = "aarch64")]
    if isa == Isa::Neon {
        // SAFETY: the caller checked the CPU features (`Isa::check`); sizes
        // and tile bounds are asserted above.
        unsafe { crate::simd::neon::gemm::tile(w, nr, x, nt, cols, out) };
        return;
    }
    for r in 0..nr {
        for t in 0..nt {
            out[r * nt + t] =
                dot_scalar(&w[r * cols..(r + 1) * cols], &x[t * cols..(t + 1) * cols]);
        }
    }
}

/// Scratch of one task: decoded weight rows, in a part of a buffer that the
/// caller of [`matmul`](crate::matmul) keeps between calls, one part per pool
/// thread (a worker's own buffer would grow whenever it first happens to
/// pick up a wider product).
pub(crate) struct Scratch<'a> {
    rows: &'a mut [f32],
}

impl<'a> Scratch<'a> {
    /// Floats of scratch for rows of `max_cols` values: a multiple of 16 (64
    /// bytes), so parts laid end to end do not share cache lines.
    pub(crate) fn len(max_cols: usize) -> usize {
        (MAX_BLOCK_ROWS.max(8) * max_cols + 16).next_multiple_of(16) // + 16: alignment
    }

    /// `rows` must hold at least [`Scratch::len`] of the widest product.
    pub(crate) fn new(rows: &'a mut [f32]) -> Scratch<'a> {
        Scratch { rows }
    }
}

/// Rows `r0..r1` of `out = w · xᵀ` (`n` tokens, `out` is `n × w.rows`).
/// `isa` must have passed [`Isa::check`].
///
/// # Safety
/// `out` points at the `n · w.rows` outputs of this product and no other
/// task writes the elements of rows `r0..r1`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn rows(
    isa: Isa,
    w: MatRef<'_>,
    x: &[f32],
    n: usize,
    r0: usize,
    r1: usize,
    out: SharedMut<f32>,
    scratch: &mut Scratch<'_>,
) {
    let cols = w.cols;
    if fused_rows(isa, w, x, n, r0, r1, out) {
        return;
    }
    let mt = tile_tokens(isa);
    // Tokens per tile: a whole number of microkernel tiles whose activations
    // take about TILE_BYTES.
    let tt = (TILE_BYTES / (4 * cols.max(1)) / mt * mt).max(mt);
    let row_block = block_rows(n, cols);
    let plain = as_f32(w);
    let mut res = [0f32; 64];
    let mut t0 = 0;
    while t0 < n {
        let t1 = (t0 + tt).min(n);
        let mut b0 = r0;
        while b0 < r1 {
            let b1 = (b0 + row_block).min(r1);
            let wbuf: &[f32] = match plain {
                Some(all) => &all[b0 * cols..b1 * cols],
                None => {
                    // Rows start on cache lines (cols is a multiple of 16
                    // for every block encoding): no load of the microkernel
                    // splits a line, which costs ~20% of its speed.
                    let off = scratch.rows.as_ptr().align_offset(64).min(16);
                    let buf = &mut scratch.rows[off..off + (b1 - b0) * cols];
                    for (i, r) in (b0..b1).enumerate() {
                        w.dequantize_row(isa, r, &mut buf[i * cols..(i + 1) * cols]);
                    }
                    buf
                }
            };
            let mut ta = t0;
            while ta < t1 {
                let tb = (ta + mt).min(t1);
                let xs = &x[ta * cols..tb * cols];
                let mr = tile_rows(tb - ta);
                let mut ra = b0;
                while ra < b1 {
                    let rb = (ra + mr).min(b1);
                    let ws = &wbuf[(ra - b0) * cols..(rb - b0) * cols];
                    let (nr, nt) = (rb - ra, tb - ta);
                    tile(isa, ws, nr, xs, nt, cols, &mut res);
                    for r in 0..nr {
                        for t in 0..nt {
                            // SAFETY: (ta + t, ra + r) is inside the output and
                            // row ra + r belongs to this task only.
                            unsafe { *out.at((ta + t) * w.rows + ra + r) = res[r * nt + t] };
                        }
                    }
                    ra = rb;
                }
                ta = tb;
            }
            b0 = b1;
        }
        t0 = t1;
    }
}

/// Few tokens (decode, a few sequences' decode steps): decode each weight
/// row in registers and multiply it straight away, several rows interleaved
/// — no decoded rows stored and reloaded, and several DRAM streams at once.
/// Same canonical order and decoded values as the blocked path, so the same
/// bits. `false`: no such kernel here (nothing written).
///
/// # Safety
/// As [`rows`].
unsafe fn fused_rows(
    isa: Isa,
    w: MatRef<'_>,
    x: &[f32],
    n: usize,
    r0: usize,
    r1: usize,
    out: SharedMut<f32>,
) -> bool {
    // The in-register kernel of this path: (dtype, rows, nr, x, nt, cols, out).
    type CanonTile = unsafe fn(DType, &[u8], usize, &[f32], usize, usize, &mut [f32]) -> bool;
    let canon: CanonTile = match isa {
        // SAFETY (all three): the callers of `fused_rows` checked the CPU.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::AvxVnni => {
            |d, w, nr, x, nt, c, o| unsafe { x86::canon_tile(false, d, w, nr, x, nt, c, o) }
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 | Isa::Amx => {
            |d, w, nr, x, nt, c, o| unsafe { x86::canon_tile(true, d, w, nr, x, nt, c, o) }
        }
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => |d, w, nr, x, nt, c, o| unsafe { neon::canon_tile(d, w, nr, x, nt, c, o) },
        _ => return false,
    };
    if n == 0 || n > CANON_TOKENS || w.cols == 0 {
        return false;
    }
    // Separate scale tensors (FP8, NVFP4 checkpoints) have kernels of their
    // own that read the scales where they lie: (avx512, w, r0, nr, x, nt, out).
    type ScaledTile = unsafe fn(bool, &MatRef<'_>, usize, usize, &[f32], usize, &mut [f32]) -> bool;
    #[cfg(target_arch = "x86_64")]
    let scaled: Option<(ScaledTile, bool)> = match isa {
        Isa::Avx2 | Isa::AvxVnni => Some((x86::canon_scaled_tile, false)),
        Isa::Avx512 | Isa::Amx => Some((x86::canon_scaled_tile, true)),
        _ => None,
    };
    #[cfg(not(target_arch = "x86_64"))]
    let scaled: Option<(ScaledTile, bool)> = None;
    let with_scales = w.scales != crate::Scales::None;
    if with_scales && scaled.is_none() {
        return false;
    }
    let mut res = [0f32; CANON_ROWS * CANON_TOKENS];
    let rb = w.row_bytes();
    let mut ra = r0;
    while ra < r1 {
        let re = (ra + CANON_ROWS).min(r1);
        let nr = re - ra;
        // SAFETY: `w` holds whole rows ra..re, `x` holds n ≤ CANON_TOKENS
        // tokens, `res` CANON_ROWS · CANON_TOKENS values; the callers of
        // `fused_rows` checked the CPU.
        let done = match scaled {
            Some((tile, avx512)) if with_scales => unsafe {
                tile(avx512, &w, ra, nr, x, n, &mut res)
            },
            _ => unsafe {
                canon(
                    w.dtype,
                    &w.data[ra * rb..re * rb],
                    nr,
                    x,
                    n,
                    w.cols,
                    &mut res,
                )
            },
        };
        if !done {
            // No such kernel for this encoding: nothing was written yet.
            return false;
        }
        for r in 0..nr {
            for t in 0..n {
                // SAFETY: (t, ra + r) is inside the output and row ra + r
                // belongs to this task only.
                unsafe { *out.at(t * w.rows + ra + r) = res[r * n + t] };
            }
        }
        ra = re;
    }
    true
}

/// An F32 matrix's values in place, when its bytes can be read as f32
/// directly (little-endian target, 4-byte aligned): decoding would be a copy.
fn as_f32<'a>(w: MatRef<'a>) -> Option<&'a [f32]> {
    if w.dtype != rill_dtype::DType::F32
        || cfg!(target_endian = "big")
        || !(w.data.as_ptr() as usize).is_multiple_of(std::mem::align_of::<f32>())
        || w.data.len() < 4 * w.rows * w.cols
    {
        return None;
    }
    // SAFETY: the pointer is aligned for f32 and `rows · cols` f32 lie inside
    // `data` (checked above); every bit pattern is a valid f32, and on a
    // little-endian target these are exactly the values `dequantize` yields.
    Some(unsafe { std::slice::from_raw_parts(w.data.as_ptr() as *const f32, w.rows * w.cols) })
}
