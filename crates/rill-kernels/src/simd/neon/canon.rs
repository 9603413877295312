//! Where the NEON block decoders' values go ([`Emit`]), and the kernels
//! built from each decoder: `deq_NAME` (store the exact values:
//! `dequantize`) and `canon_NAME::<R, T>` (multiply them in registers in
//! the canonical order of `crate::gemm`: the few-token `matmul` path).
//!
//! The canonical emitter FMAs each decoded 8-value chunk straight into one
//! accumulator per token (two `float32x4_t`, lanes 0..4 and 4..8), with the
//! same operations and operand order as the blocked microkernel
//! (`neon::gemm::tile4`: `acc = vfmaq_f32(acc, w, x)`, chunks in increasing
//! column order, then [`hsum`](super::hsum)), so a token's outputs have the
//! same bits on both paths — which are [`Isa::Avx2`](crate::simd::Isa)'s.
//! Nothing is stored and reloaded, and `R` rows are decoded interleaved
//! block by block, each prefetched ahead, so several DRAM streams are in
//! flight at once.
//!
//! Everything is `unsafe`: callers must have checked that the CPU has NEON.

use std::arch::aarch64::*;

/// Where a block decoder's values go. A decoder calls [`Emit::put`] for
/// elements `off..off + 8` of its block in increasing `off`: the canonical
/// emitter relies on that order (it is the summation order).
pub(super) trait Emit {
    /// Elements `off..off + 4` of the current block are `v[0]`, elements
    /// `off + 4..off + 8` are `v[1]`: exactly the scalar decoder's values.
    unsafe fn put(&mut self, off: usize, v: [float32x4_t; 2]);
}

/// Stores the decoded block at `p` (`dequantize`).
pub(super) struct Store {
    pub(super) p: *mut f32,
}

impl Emit for Store {
    #[inline(always)]
    unsafe fn put(&mut self, off: usize, v: [float32x4_t; 2]) {
        vst1q_f32(self.p.add(off), v[0]);
        vst1q_f32(self.p.add(off + 4), v[1]);
    }
}

/// One row against `T` tokens in the canonical order: one 8-lane
/// accumulator (two halves) per token. `x` is this block's part of token
/// 0; token `t` is `t · stride` values further.
pub(super) struct Canon<const T: usize> {
    pub(super) x: *const f32,
    pub(super) stride: usize,
    pub(super) acc: [[float32x4_t; 2]; T],
}

impl<const T: usize> Emit for Canon<T> {
    #[inline(always)]
    unsafe fn put(&mut self, off: usize, v: [float32x4_t; 2]) {
        for t in 0..T {
            let x = self.x.add(t * self.stride + off);
            // (acc, w, x) as in the blocked microkernel: with NaN operands
            // the operand order decides which NaN comes out.
            let a = &mut self.acc[t];
            a[0] = vfmaq_f32(a[0], v[0], vld1q_f32(x));
            a[1] = vfmaq_f32(a[1], v[1], vld1q_f32(x.add(4)));
        }
    }
}

/// Bytes ahead of the block being decoded that [`prefetch_ahead`] asks for.
/// The x86 value (best of 256..4096 on 0.5-1 GB Q4_K / Q6_K / Q8_0
/// matrices, 4 rows at a time); not yet measured on an aarch64 host.
const PREFETCH_AHEAD: usize = 384;

/// Prefetch (into L1) the bytes [`PREFETCH_AHEAD`] past the block at
/// `off..off + bb` of the encoded row at `row`, clamped to the row: several
/// rows stream from DRAM at once, and the hardware prefetcher alone does
/// not keep up on x86; assumed alike here. 64-byte steps: the smallest
/// cache line of current aarch64 cores (a 128-byte line just gets two asks).
#[inline(always)]
pub(super) unsafe fn prefetch_ahead(row: *const u8, off: usize, bb: usize, row_bytes: usize) {
    let mut o = 0;
    while o < bb {
        let p = row.add((off + PREFETCH_AHEAD + o).min(row_bytes - 1));
        // `core::arch::aarch64::_prefetch` is unstable; `prfm` is a hint
        // that reads nothing architecturally and cannot fault.
        std::arch::asm!(
            "prfm pldl1keep, [{p}]",
            p = in(reg) p,
            options(nostack, readonly, preserves_flags)
        );
        o += 64;
    }
}

/// `deq_NAME(src, dst)` and `canon_NAME::<R, T>(w, x, cols)` over whole
/// blocks of one encoding, from its block decoder
/// `NAME<E: Emit>(block: *const u8, e: &mut E)`.
macro_rules! row_kernels {
    ($($block:ident: $deq:ident, $canon:ident, $bb:expr, $bl:expr;)*) => {$(
        #[target_feature(enable = "neon")]
        pub(super) unsafe fn $deq(src: &[u8], dst: &mut [f32]) {
            use super::canon::Store;
            let n = dst.len() / $bl;
            debug_assert_eq!(src.len(), n * $bb);
            let (sp, dp) = (src.as_ptr(), dst.as_mut_ptr());
            for i in 0..n {
                $block(sp.add(i * $bb), &mut Store { p: dp.add(i * $bl) });
            }
        }

        /// `R` consecutive encoded rows at `w` × `T` tokens at `x` (`cols`
        /// values each), decoded in registers block by block (the rows
        /// interleaved, each prefetched ahead) and multiplied in the
        /// canonical order.
        #[target_feature(enable = "neon")]
        pub(super) unsafe fn $canon<const R: usize, const T: usize>(
            w: *const u8,
            x: *const f32,
            cols: usize,
        ) -> [[f32; T]; R] {
            use super::canon::{prefetch_ahead, Canon};
            let n = cols / $bl;
            let row_bytes = n * $bb;
            let z = vdupq_n_f32(0.0);
            let mut e = [(); R].map(|_| Canon::<T> {
                x,
                stride: cols,
                acc: [[z; 2]; T],
            });
            for i in 0..n {
                for (r, er) in e.iter_mut().enumerate() {
                    prefetch_ahead(w.add(r * row_bytes), i * $bb, $bb, row_bytes);
                    er.x = x.add(i * $bl);
                    $block(w.add(r * row_bytes + i * $bb), er);
                }
            }
            // Block encodings have whole chunks of 8: no element-wise tail.
            e.map(|er| er.acc.map(|a| super::hsum(a[0], a[1])))
        }
    )*};
}
