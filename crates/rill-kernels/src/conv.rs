//! The causal depthwise convolution of the Gated DeltaNet mixer, with its
//! SiLU, over a step of tokens and the carried window of earlier inputs.
//!
//! For channel `c` and token `t`, with `K` taps and `x` the raw inputs
//! (window rows first):
//! ```text
//! y_t[c] = silu( w[K−1][c]·x_t[c] + Σ_{j<K−1} w[j][c]·x_{t−(K−1)+j}[c] )
//! ```
//! each product rounded, then added in that order (no fused operations), so
//! every instruction-set path and every split of the channels gives the same
//! bits.

use crate::ops::exp_fast;
use crate::simd::{on_widest_vectors, Isa};
use crate::threads::{SharedMut, Threads};

/// Most taps a conv may have: a block's last inputs live on the stack.
pub const MAX_CONV_TAPS: usize = 8;

/// Channels a task carries through every token at once: a row's slice is
/// a whole number of cache lines, and long enough to keep the vector loops
/// busy (blocks of 64 ran the prefill's conv ~2× slower).
const BLOCK: usize = 256;

/// `x` (`n` rows of `channels`) → `silu(conv(x))` in place; `taps` is
/// `[K × channels]` (tap `j` of channel `c` at `j·channels + c`) and
/// `window` the last `K − 1` raw input rows before this step, which it
/// then holds for the next. Channels run in parallel.
///
/// Panics if the sizes disagree or `K` is 0 or over [`MAX_CONV_TAPS`].
pub fn causal_conv_silu(
    isa: Isa,
    threads: &Threads,
    taps: &[f32],
    k: usize,
    x: &mut [f32],
    n: usize,
    window: &mut [f32],
) {
    assert!((1..=MAX_CONV_TAPS).contains(&k), "conv of {k} taps");
    let channels = taps.len() / k;
    assert_eq!(taps.len(), k * channels, "conv taps");
    assert_eq!(x.len(), n * channels, "conv inputs");
    assert_eq!(window.len(), (k - 1) * channels, "conv window");
    isa.check();
    let (x, window) = (SharedMut::new(x), SharedMut::new(window));
    // A decode step's few channels × taps stay on one thread.
    let min_blocks = (64 / n.max(1)).max(1);
    threads.for_ranges(channels.div_ceil(BLOCK), min_blocks, |b0, b1| {
        for b in b0..b1 {
            let c0 = b * BLOCK;
            let block = Block {
                taps,
                k,
                channels,
                c0,
                width: BLOCK.min(channels - c0),
                n,
            };
            // SAFETY: channels `c0..c0 + width` of every row of `x` and of
            // `window` are this task's alone (blocks are disjoint).
            unsafe { block.run(isa, x, window) };
        }
    });
}

/// One block of channels through every token.
struct Block<'a> {
    taps: &'a [f32],
    k: usize,
    channels: usize,
    c0: usize,
    width: usize,
    n: usize,
}

impl Block<'_> {
    /// # Safety
    /// The block's channels of `x` (`n` rows) and `window` (`k − 1` rows)
    /// are the caller's alone.
    unsafe fn run(&self, isa: Isa, x: SharedMut<f32>, window: SharedMut<f32>) {
        on_widest_vectors!(isa, (b: &Block = self, x: SharedMut<f32> = x,
            w: SharedMut<f32> = window) => b.body(x, w));
        self.body(x, window)
    }

    #[inline(always)]
    unsafe fn body(&self, x: SharedMut<f32>, window: SharedMut<f32>) {
        let (cs, c0, bw, m) = (self.channels, self.c0, self.width, self.k - 1);
        // Ring slot `p % m` holds the raw inputs of position `p`: window row
        // `j` is position `j`, token `t`'s input position `m + t`.
        let mut ring = [[0f32; BLOCK]; MAX_CONV_TAPS - 1];
        let mut acc = [0f32; BLOCK];
        let win = |j: usize| std::slice::from_raw_parts_mut(window.at(j * cs + c0), bw);
        for (j, slot) in ring.iter_mut().enumerate().take(m) {
            slot[..bw].copy_from_slice(win(j));
        }
        let tap = |j: usize| &self.taps[j * cs + c0..j * cs + c0 + bw];
        let last = tap(m);
        for t in 0..self.n {
            let row = std::slice::from_raw_parts_mut(x.at(t * cs + c0), bw);
            for ((o, &w), &v) in acc[..bw].iter_mut().zip(last).zip(row.iter()) {
                *o = w * v;
            }
            for j in 0..m {
                for ((o, &w), &v) in acc[..bw]
                    .iter_mut()
                    .zip(tap(j))
                    .zip(&ring[(t + j) % m][..bw])
                {
                    *o += w * v;
                }
            }
            if m > 0 {
                // Position t's slot now takes position m + t.
                ring[t % m][..bw].copy_from_slice(row);
            }
            for (y, &a) in row.iter_mut().zip(&acc[..bw]) {
                *y = a / (1.0 + exp_fast(-a));
            }
        }
        for j in 0..m {
            win(j).copy_from_slice(&ring[(self.n + j) % m][..bw]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::noise;

    /// The definition, token by token over the whole sequence.
    fn reference(taps: &[f32], k: usize, x: &[f32], n: usize, window: &[f32]) -> Vec<f32> {
        let cs = taps.len() / k;
        let mut all = window.to_vec();
        all.extend_from_slice(x);
        let mut y = vec![0f32; n * cs];
        for t in 0..n {
            for c in 0..cs {
                let mut a = taps[(k - 1) * cs + c] * all[(t + k - 1) * cs + c];
                for j in 0..k - 1 {
                    a += taps[j * cs + c] * all[(t + j) * cs + c];
                }
                y[t * cs + c] = a / (1.0 + exp_fast(-a));
            }
        }
        y
    }

    #[test]
    fn steps_equal_the_definition_and_carry_the_window() {
        let (k, cs) = (4, 600);
        let taps = noise(3, k * cs);
        let x = noise(5, 37 * cs);
        let want = reference(&taps, k, &x, 37, &vec![0.0; (k - 1) * cs]);
        for (isa, threads) in Isa::available().into_iter().flat_map(|i| [(i, 1), (i, 3)]) {
            let th = Threads::new(threads);
            // One step of 37, then steps of 1, 2 and 34 with the window carried.
            for cuts in [vec![37], vec![1, 2, 34]] {
                let mut window = vec![0f32; (k - 1) * cs];
                let mut got = Vec::new();
                let mut t0 = 0;
                for len in cuts {
                    let mut step = x[t0 * cs..(t0 + len) * cs].to_vec();
                    causal_conv_silu(isa, &th, &taps, k, &mut step, len, &mut window);
                    got.extend_from_slice(&step);
                    t0 += len;
                }
                assert!(
                    got.iter()
                        .zip(&want)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{isa}, {threads} threads"
                );
                assert_eq!(&window[..], &x[(37 - (k - 1)) * cs..], "window");
            }
        }
    }
}
