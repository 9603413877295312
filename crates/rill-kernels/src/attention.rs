//! Causal grouped-query softmax attention of one sequence's new rows over
//! its KV cache, as blocked matrix products.
//!
//! Work is split into jobs of (KV head, block of query positions). A job
//! stacks the queries of the KV head's group of query heads at the block's
//! positions into one matrix and walks the keys in tiles of [`KEY_TILE`] at
//! fixed absolute positions (0, 64, 128, …). Per tile: the scores are one
//! product (each key row loaded once for every query of the block, not once
//! per (query, key) pair as a dot product would), an online softmax step
//! (running maximum and sum per query row; Milakov & Gimelshein, arXiv
//! 1805.02867), and P·V as a second product, added into the rows'
//! accumulators, that reads f32 value rows in the cache in place. The
//! scratch is a fixed size, whatever the context length.
//!
//! # Invariance
//! A query's result depends only on its own vector and the keys and values at
//! positions up to its own — not on the other queries of its block, the
//! block size, the number of new rows or the thread split:
//! - every score is one fused multiply-add chain over the head dimension
//!   in order (`small::product_nn`), whatever the tile holds;
//! - key tiles sit at absolute positions, so a query meets the same tiles
//!   whichever block it is in. Tiles that are entirely in its future are
//!   skipped for it (its row's state is left untouched);
//! - a tile's weights are summed in sixteen lanes by absolute key position,
//!   then a fixed tree (unused weights are +0);
//! - P·V continues each output's chain of fused multiply-adds from the
//!   rescaled accumulator over the tile's keys in order
//!   (`small::product_nn_add`); keys past the query's position come last
//!   with weight exactly 0, and such a term changes an accumulator only if
//!   it is a zero of the other sign, which the `+ 0.0` that ends the
//!   product removes.
//!
//! So a prompt gives the same bits in one step, in chunks, or alone or in a
//! batch with other sequences, and decode (one row) takes the same path.

mod index;
mod sparse;
pub use index::{block_scores, block_scores_scratch_len};
pub use sparse::{attend_positions, positions_scratch_len};

use crate::kv::{ExactRows, KvRows, KvSide};
use crate::ops::exp_fast;
use crate::simd::{on_widest_vectors, Isa};
use crate::small::{product_nn, product_nn_add, room_len, split, transpose};
use crate::threads::{SharedMut, Threads};
#[cfg(target_arch = "x86_64")]
use rill_dtype::DType;

/// Keys per tile.
pub const KEY_TILE: usize = 64;
/// Query rows (positions × heads of a group) per job: enough that a loaded
/// key or value vector feeds many FMAs, few enough that a job's buffers stay
/// in L2.
const BLOCK_ROWS: usize = 128;

/// Head geometry of an attention layer.
#[derive(Clone, Copy, Debug)]
pub struct AttnShape {
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
}

impl AttnShape {
    fn group(&self) -> usize {
        self.n_head / self.n_head_kv
    }

    /// Query positions per job.
    fn block_positions(&self) -> usize {
        (BLOCK_ROWS / self.group()).max(1)
    }

    /// Lengths of the parts of one thread's scratch: stacked queries, key
    /// tile (transposed), scores, weights, output accumulator, running
    /// max, running sum; then for a coded cache the decoded key tile, the
    /// exact rows' key tile (transposed), their scores and weights, and the
    /// decoded value tiles (coded, exact).
    fn parts(&self) -> [usize; 13] {
        let rows = self.block_positions() * self.group();
        let hd = self.head_dim;
        [
            rows * hd,
            KEY_TILE * hd,
            rows * KEY_TILE,
            rows * KEY_TILE,
            rows * hd,
            rows,
            rows,
            KEY_TILE * hd,
            KEY_TILE * hd,
            rows * KEY_TILE,
            rows * KEY_TILE,
            KEY_TILE * hd,
            KEY_TILE * hd,
        ]
    }

    /// The checks of the attention kernels' arguments: the query heads
    /// split evenly over the KV heads, and `q`, `out` hold `m` rows of
    /// them. Returns (query heads, KV heads, head dim).
    #[inline(always)]
    fn check_rows(&self, q: &[f32], out: &[f32], m: usize) -> (usize, usize, usize) {
        let (nh, nkv, hd) = (self.n_head, self.n_head_kv, self.head_dim);
        assert!(
            nkv > 0 && nh.is_multiple_of(nkv),
            "heads {nh} / kv heads {nkv}"
        );
        assert_eq!(q.len(), m * nh * hd);
        assert_eq!(out.len(), m * nh * hd);
        (nh, nkv, hd)
    }

    /// Floats of scratch each pool thread needs: the caller of
    /// [`attend_causal`] passes `threads.count()` times this. It does not
    /// depend on the context length.
    pub fn scratch_per_thread(&self) -> usize {
        room_len(&self.parts())
    }
}

/// Causal softmax attention of `m` query rows at positions `pos0..pos0 + m`
/// (`q`, `out`: `[m × n_head × head_dim]`) over a cache that already holds
/// their keys and values (`[pos × n_head_kv × head_dim]` in the encodings
/// of `k` and `v`, at least `pos0 + m` positions). Scores are scaled by
/// `1/√head_dim`. A coded cache is decoded a tile at a time in the scratch.
#[allow(clippy::too_many_arguments)]
pub fn attend_causal(
    isa: Isa,
    threads: &Threads,
    shape: AttnShape,
    q: &[f32],
    m: usize,
    pos0: usize,
    k: KvSide<'_>,
    v: KvSide<'_>,
    scratch: &mut [f32],
    out: &mut [f32],
) {
    let (_, nkv, hd) = shape.check_rows(q, out, m);
    assert!(k.positions(nkv * hd) >= pos0 + m && v.positions(nkv * hd) >= pos0 + m);
    for side in [&k, &v] {
        let pp = side.rows.page_positions().unwrap_or(KEY_TILE);
        assert!(pp.is_multiple_of(KEY_TILE), "pages of {pp} positions");
    }
    let per = shape.scratch_per_thread();
    assert!(scratch.len() >= threads.count() * per);
    isa.check();
    let bp = shape.block_positions();
    let blocks = m.div_ceil(bp);
    let scratch_ptr = SharedMut::new(scratch);
    let out_ptr = SharedMut::new(out);
    threads.for_ranges_on(blocks * nkv, 1, |slot, a, b| {
        // SAFETY: part `slot` of the scratch is used by one task at a time.
        let room = unsafe { std::slice::from_raw_parts_mut(scratch_ptr.at(slot * per), per) };
        for j in a..b {
            // The last blocks (most keys) first: the long jobs start early.
            let blk = blocks - 1 - j / nkv;
            let t0 = blk * bp;
            let job = Job {
                isa,
                shape,
                q,
                pos0,
                rows: t0..(t0 + bp).min(m),
                kvh: j % nkv,
                k,
                v,
            };
            job.run(room, out_ptr);
        }
    });
}

/// One (KV head, block of query positions) of [`attend_causal`].
struct Job<'a> {
    isa: Isa,
    shape: AttnShape,
    q: &'a [f32],
    pos0: usize,
    /// The block's rows (indices into the step's `m` rows).
    rows: std::ops::Range<usize>,
    kvh: usize,
    k: KvSide<'a>,
    v: KvSide<'a>,
}

/// Which versions of a tile's rows a block reads: the coded rows (`lo`)
/// and/or the exact f16 ones (`hi`).
#[derive(Clone, Copy)]
struct Reads {
    lo: bool,
    hi: bool,
}

/// What the queries at positions `first..=last` read of the tile of keys
/// `k0..k0 + kt` (only keys at or before a query's own position count).
fn tile_reads(exact: &Option<ExactRows>, first: usize, last: usize, k0: usize, kt: usize) -> Reads {
    let Some(e) = exact else {
        return Reads {
            lo: true,
            hi: false,
        };
    };
    let k_last = (k0 + kt - 1).min(last);
    // Some pair (i, j), j ≤ i, with j < sinks or i − j < window.
    let hi = k0 < e.sinks || (e.window > 0 && k_last + e.window > first);
    // Every such pair exact: the whole tile is sinks, or in every query's window.
    let all_hi = k_last < e.sinks || (e.window > 0 && k0 + e.window > last);
    Reads { lo: !all_hi, hi }
}

impl Job<'_> {
    /// The job, its element-wise loops compiled for the CPU's widest
    /// vectors (the same IEEE operations in the same order: the same bits).
    fn run(&self, room: &mut [f32], out: SharedMut<f32>) {
        on_widest_vectors!(self.isa, (job: &Job = self, room: &mut [f32] = room,
            out: SharedMut<f32> = out) => job.body(room, out));
        self.body(room, out)
    }

    #[inline(always)]
    fn body(&self, room: &mut [f32], out: SharedMut<f32>) {
        let (nh, nkv, hd) = (self.shape.n_head, self.shape.n_head_kv, self.shape.head_dim);
        let geo = (nkv, hd, self.kvh);
        let group = self.shape.group();
        let scale = 1.0 / (hd as f32).sqrt();
        let n = self.rows.len() * group;
        let [qb, kb, s, p, o, mx, l, kd, kb_hi, s_hi, p_hi, vd, vd_hi] =
            split(room, self.shape.parts());
        // Query row r is (position t0 + r / group, head kvh·group + r % group):
        // the group's heads are adjacent in q, so a position is one copy.
        for (i, t) in self.rows.clone().enumerate() {
            let src = (t * nh + self.kvh * group) * hd;
            qb[i * group * hd..(i + 1) * group * hd]
                .copy_from_slice(&self.q[src..src + group * hd]);
        }
        let qb = &qb[..n * hd];
        o[..n * hd].fill(0.0);
        mx[..n].fill(f32::NEG_INFINITY);
        l[..n].fill(0.0);
        let (first, last) = (self.pos0 + self.rows.start, self.pos0 + self.rows.end - 1);
        let end = last + 1;
        let mut k0 = 0;
        while k0 < end {
            let kt = KEY_TILE.min(end - k0);
            // The runs (pages) holding the tile: a tile never straddles
            // two (the page length is a multiple of KEY_TILE).
            let (v_run, v_base) = self.v.rows.run_of(k0);
            let kr = tile_reads(&self.k.exact, first, last, k0, kt);
            let vr = tile_reads(&self.v.exact, first, last, k0, kt);
            // Rows before `r0` (positions before the tile: rows are in
            // position order) have no key here; they are left out.
            let r0 = (k0.saturating_sub(first) * group).min(n);
            let rows = n - r0;
            // The tile's keys transposed, `[hd × KEY_TILE]`: the right factor
            // of the scores' product.
            if kr.lo {
                self.k
                    .decode_rows_transposed(self.isa, geo, k0, kt, (kb, KEY_TILE), kd);
                let (q, s) = (&qb[r0 * hd..], &mut s[r0 * kt..]);
                product_nn(self.isa, (q, hd), (kb, KEY_TILE), (rows, hd, kt), (s, kt));
            }
            if kr.hi {
                self.k.decode_exact_rows(self.isa, geo, k0, kt, kd, hd);
                transpose(kd, hd, (kt, hd), kb_hi, KEY_TILE);
                product_nn(
                    self.isa,
                    (&qb[r0 * hd..], hd),
                    (kb_hi, KEY_TILE),
                    (rows, hd, kt),
                    (&mut s_hi[r0 * kt..], kt),
                );
            }
            for r in r0..n {
                let pos = first + r / group;
                // Keys of this tile at or before the row's position (≥ 1).
                let valid = (pos + 1 - k0).min(kt);
                let pr = &mut p[r * KEY_TILE..(r + 1) * KEY_TILE];
                pr.fill(0.0);
                if vr.hi {
                    p_hi[r * KEY_TILE..(r + 1) * KEY_TILE].fill(0.0);
                }
                let sr = &mut s[r * kt..r * kt + valid];
                if let (true, Some(e)) = (kr.hi, &self.k.exact) {
                    // Each score from the version of its key this query reads.
                    let shr = &s_hi[r * kt..r * kt + valid];
                    for (j, (a, &b)) in sr.iter_mut().zip(shr).enumerate() {
                        if e.reads_exact(pos, k0 + j) {
                            *a = b;
                        }
                    }
                }
                sr.iter_mut().for_each(|v| *v *= scale);
                // Sixteen running maxima, then theirs: the same maximum
                // (exact in any order), in vector lanes.
                let mut lanes = [f32::NEG_INFINITY; 16];
                for c in sr.chunks(16) {
                    for (m, &v) in lanes.iter_mut().zip(c) {
                        *m = m.max(v);
                    }
                }
                let tile_max = lanes.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
                let new_max = mx[r].max(tile_max);
                let alpha = (mx[r] - new_max).exp();
                mx[r] = new_max;
                // The weights with `exp_fast` (vector instructions, the same
                // bits on every path), summed in sixteen lanes by absolute key
                // position and then a fixed tree: one order whatever the
                // block, chunk or instruction set (the tile's unused weights
                // are +0 and change no lane).
                for (pj, &sj) in pr.iter_mut().zip(sr.iter()) {
                    *pj = exp_fast(sj - new_max);
                }
                let sum = lane_sum(pr);
                if let (true, Some(e)) = (vr.hi, &self.v.exact) {
                    // Weights of the values this query reads exact move to
                    // the exact product.
                    let phr = &mut p_hi[r * KEY_TILE..r * KEY_TILE + valid];
                    for (j, (a, b)) in pr.iter_mut().zip(phr).enumerate() {
                        if e.reads_exact(pos, k0 + j) {
                            (*a, *b) = (0.0, *a);
                        }
                    }
                }
                l[r] = l[r] * alpha + sum;
                if alpha != 1.0 {
                    o[r * hd..(r + 1) * hd].iter_mut().for_each(|v| *v *= alpha);
                }
            }
            // P·V: the coded values' product, then the exact values', added
            // into the rows' accumulators (module doc, Invariance).
            for lo in [true, false] {
                let (reads, weights) = if lo { (vr.lo, &*p) } else { (vr.hi, &*p_hi) };
                if !reads {
                    continue;
                }
                let a = (&weights[r0 * KEY_TILE..], KEY_TILE);
                let acc = &mut o[r0 * hd..];
                #[cfg(target_arch = "x86_64")]
                if let (
                    true,
                    KvRows::Coded {
                        dtype: DType::F16,
                        bytes,
                    },
                ) = (lo, v_run)
                {
                    // f16 values converted as the product loads them (the same
                    // bits as decoding the tile first, without the f32 copy).
                    let (row, head) = (2 * nkv * hd, 2 * hd);
                    let b = &bytes[(k0 - v_base) * row + self.kvh * head..];
                    // SAFETY: an x86 class (not scalar) has AVX2+FMA+F16C.
                    if self.isa != Isa::Scalar
                        && unsafe {
                            crate::simd::x86::product_add_f16(
                                a,
                                (b, row),
                                (rows, kt, hd),
                                (acc, hd),
                            )
                        }
                    {
                        continue;
                    }
                }
                let values: (&[f32], usize) = match (lo, v_run) {
                    (true, KvRows::F32(c)) => {
                        (&c[((k0 - v_base) * nkv + self.kvh) * hd..], nkv * hd)
                    }
                    (true, _) => {
                        self.v.decode_rows(self.isa, geo, k0, kt, vd, hd);
                        (&*vd, hd)
                    }
                    (false, _) => {
                        self.v.decode_exact_rows(self.isa, geo, k0, kt, vd_hi, hd);
                        (&*vd_hi, hd)
                    }
                };
                product_nn_add(self.isa, a, values, (rows, kt, hd), (acc, hd));
            }
            k0 += kt;
        }
        for r in 0..n {
            let t = self.rows.start + r / group;
            let head = self.kvh * group + r % group;
            // SAFETY: this job alone writes the rows of its positions and
            // group of heads.
            let dst = unsafe { std::slice::from_raw_parts_mut(out.at((t * nh + head) * hd), hd) };
            let inv = 1.0 / l[r];
            for (d, &v) in dst.iter_mut().zip(&o[r * hd..(r + 1) * hd]) {
                *d = v * inv;
            }
        }
    }
}

/// Σ of a tile's weights (`KEY_TILE` of them): sixteen lane sums, lane
/// `j mod 16`, then pairs of lanes in a fixed tree.
#[inline(always)]
fn lane_sum(p: &[f32]) -> f32 {
    let mut lanes = [0f32; 16];
    for c in p.chunks_exact(16) {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l += v;
        }
    }
    let mut w = 16;
    while w > 1 {
        w /= 2;
        for i in 0..w {
            lanes[i] += lanes[i + w];
        }
    }
    lanes[0]
}

#[cfg(test)]
mod tests;
