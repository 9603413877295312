//! QSA (qwen4exp's sparse attention, DESIGN.md §2.5): a gated attention
//! layer whose causal mask is cut down to the key blocks an indexer picks.
//!
//! - Index queries `q = RoPE(RMSNorm(W_q x))`, `n_idx` heads of `d_I`, at
//!   the query's position; a raw index key `W_k x` (one head) per token,
//!   cached ([`IndexKeys`]).
//! - Keys pooled per complete block of `ratio` tokens: the mean of its raw
//!   keys, RMSNorm, RoPE at the block's first position (a block's key is
//!   fixed once it is complete, so it is computed then and kept).
//! - A query at position `p` sees `p + 1` tokens, `nb = (p + 1) / ratio`
//!   complete blocks. While `nb ≤ budget / ratio` it attends densely.
//!   Otherwise it scores the blocks, `Σ_heads relu(q_h · k_b) / √d_I`, and
//!   attends to the `budget / ratio` best blocks (ties: the lower block) plus
//!   the tokens of the incomplete tail — as transformers' `Qwen4ExpTextQSAIndexer`
//!   does (llama.cpp's top-k over tokens differs past the budget, wave2.md §C.2).

use crate::config::ModelConfig;
use crate::error::ModelError;
use crate::kv::{KvCache, KvConfig};
use crate::rope::{Rope, Rotation};
use crate::scratch::Exec;
use crate::state_io::{put_bytes, put_f32s, put_u64, Reader};
use crate::weights::{Binder, Matrix};
use rill_dtype::DType;
use rill_kernels::attention::{
    attend_positions, block_scores, block_scores_scratch_len, positions_scratch_len, AttnShape,
};
use rill_kernels::kv::{encode, encoded_len, hadamard, hadamard_block, KvRows};
use rill_kernels::ops::rms_norm_inplace;
use rill_kernels::threads::SharedMut;
use rill_kernels::MatRef;

/// One attention layer's indexer.
pub(crate) struct IndexerWeights {
    proj: IndexProj,
    q_norm: Vec<f32>,
    k_norm: Vec<f32>,
    pub choice: BlockChoice,
}

/// The index projections: apart (GGUF: `indexer.q_proj`, `indexer.k_proj`)
/// or as one matrix whose first rows are the queries' (Hugging Face:
/// `index_qk_proj`).
enum IndexProj {
    Apart { q: Matrix, k: Matrix },
    Fused { qk: Matrix, q_rows: usize },
}

/// The geometry of the block choice.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BlockChoice {
    pub n_head: usize,
    pub head_dim: usize,
    /// Tokens per key block.
    pub ratio: usize,
    /// Complete blocks a query attends to past the dense start.
    pub top_blocks: usize,
}

impl BlockChoice {
    /// The first position that attends sparsely: `budget + ratio − 1`.
    pub fn sparse_from(&self) -> usize {
        (self.top_blocks + 1) * self.ratio - 1
    }
}

impl IndexerWeights {
    pub fn bind(b: &Binder, c: &ModelConfig, p: &str, ratio: usize) -> Result<Self, ModelError> {
        let q4 = c.qwen4exp.as_ref().expect("an indexer belongs to qwen4exp");
        let ix = &q4.indexer;
        let (h, d) = (c.n_embd, ix.head_dim);
        let fused = format!("{p}.indexer.qk_proj.weight");
        let proj = match b.has(&fused)? {
            true => IndexProj::Fused {
                qk: b.matrix_parts(&fused, (ix.n_head + 1) * d, h, ix.n_head * d)?,
                q_rows: ix.n_head * d,
            },
            false => IndexProj::Apart {
                q: b.matrix(&format!("{p}.indexer.q_proj.weight"), ix.n_head * d, h)?,
                k: b.matrix(&format!("{p}.indexer.k_proj.weight"), d, h)?,
            },
        };
        Ok(IndexerWeights {
            proj,
            q_norm: b.vector(&format!("{p}.indexer.q_norm.weight"), d)?,
            k_norm: b.vector(&format!("{p}.indexer.k_norm.weight"), d)?,
            choice: BlockChoice {
                n_head: ix.n_head,
                head_dim: d,
                ratio,
                top_blocks: ix.budget / ratio,
            },
        })
    }

    pub fn weight_bytes(&self) -> u64 {
        let v = (self.q_norm.len() + self.k_norm.len()) * 4;
        let m = match &self.proj {
            IndexProj::Apart { q, k } => q.byte_len() + k.byte_len(),
            IndexProj::Fused { qk, .. } => qk.byte_len(),
        };
        (m + v) as u64
    }

    /// `[n_head·head_dim × n_embd]`: the index queries' projection.
    pub fn q_view(&self) -> MatRef<'_> {
        match &self.proj {
            IndexProj::Apart { q, .. } => q.view(),
            IndexProj::Fused { qk, q_rows } => qk.view().slice_rows(0, *q_rows),
        }
    }

    /// `[head_dim × n_embd]`: the raw index key's.
    pub fn k_view(&self) -> MatRef<'_> {
        match &self.proj {
            IndexProj::Apart { k, .. } => k.view(),
            IndexProj::Fused { qk, q_rows } => qk.view().slice_rows(*q_rows, qk.rows),
        }
    }
}

/// A sequence's index keys of one QSA layer. A block's key depends only
/// on its own tokens' raw keys, so those are kept only until the block is
/// complete: the cache grows by one key per `ratio` tokens (llama.cpp keeps
/// every token's raw key).
///
/// The pooled keys are stored in the sequence's K cache type (`-ctk`), as
/// llama.cpp stores its indexer keys; a quantized type rotates them (and
/// the queries scored against them) by a Walsh–Hadamard transform first
/// when the K cache is rotated, which leaves the scores as they are. Where
/// the type's blocks do not divide the key length, the keys are f16.
#[derive(Clone, Debug)]
pub(crate) struct IndexKeys {
    /// Positions seen.
    pos: usize,
    /// Values per key (`d_I`) and tokens per block.
    head_dim: usize,
    ratio: usize,
    /// The raw keys of the incomplete block's positions, `[< ratio × d_I]`
    /// (room for `ratio` keys reserved once).
    tail: Vec<f32>,
    /// How the pooled keys are stored.
    dtype: DType,
    /// Walsh–Hadamard block the pooled keys and the queries are rotated by
    /// (1: none).
    rotation: usize,
    /// The pooled, normed and rotated key of each complete block, `[blocks × d_I]`
    /// in `dtype`.
    blocks: Vec<u8>,
}

/// How a sequence stores its index keys of `head_dim` values: the K cache's
/// type where its blocks divide the key, else f16; and the rotation.
pub(crate) fn index_key_encoding(kv: &KvConfig, head_dim: usize) -> (DType, usize) {
    let t = kv.k.dtype();
    if !head_dim.is_multiple_of(t.block_len()) {
        return (DType::F16, 1);
    }
    let rotate = kv.rotate && kv.k.is_quantized();
    (
        t,
        if rotate {
            hadamard_block(head_dim, 256)
        } else {
            1
        },
    )
}

impl IndexKeys {
    pub fn new(kv: &KvConfig, head_dim: usize, ratio: usize) -> IndexKeys {
        let (dtype, rotation) = index_key_encoding(kv, head_dim);
        IndexKeys {
            pos: 0,
            head_dim,
            ratio,
            tail: Vec::with_capacity(ratio * head_dim),
            dtype,
            rotation,
            blocks: Vec::new(),
        }
    }

    pub fn bytes(&self) -> usize {
        self.tail.capacity() * 4 + self.blocks.len()
    }

    /// The pooled keys as the scoring kernel reads them.
    fn rows(&self) -> KvRows<'_> {
        KvRows::Coded {
            dtype: self.dtype,
            bytes: &self.blocks,
        }
    }

    /// The keys as bytes (`crate::state_io`'s format).
    pub fn write_to(&self, out: &mut Vec<u8>) {
        put_u64(out, self.pos as u64);
        put_f32s(out, &self.tail);
        put_bytes(out, &self.blocks);
    }

    /// Read keys written by [`write_to`](Self::write_to) into these (of
    /// the same layer and KV types), checked against a sequence at `pos`.
    pub fn read_into(&mut self, r: &mut Reader, pos: usize) -> Result<(), String> {
        let (at, tail, blocks) = (r.usize()?, r.f32s()?, r.bytes()?);
        let (d, ratio) = (self.head_dim, self.ratio);
        if at != pos
            || tail.len() != pos % ratio * d
            || blocks.len() != pos / ratio * encoded_len(self.dtype, d)
        {
            return Err(format!(
                "index keys of {at} positions ({} raw values, {} pooled bytes) in a state at {pos}",
                tail.len(),
                blocks.len()
            ));
        }
        self.pos = at;
        self.tail.clear();
        self.tail.extend_from_slice(&tail);
        self.blocks = blocks;
        Ok(())
    }

    /// Append the raw keys of positions `pos0..` (`[m × d_I]`) and pool
    /// the blocks they complete.
    fn append(
        &mut self,
        raw: &[f32],
        pos0: usize,
        w: &IndexerWeights,
        c: &ModelConfig,
        rope: &Rope,
    ) {
        let (d, r) = (self.head_dim, self.ratio);
        debug_assert_eq!((d, r), (w.choice.head_dim, w.choice.ratio));
        debug_assert_eq!(self.pos, pos0);
        // Room for one block's raw keys, exactly (a clone's buffer is only
        // as long as its keys, and would otherwise grow by doubling).
        self.tail.reserve_exact(r * d - self.tail.len());
        let mut pooled = vec![0f32; d];
        let row_bytes = encoded_len(self.dtype, d);
        for row in raw.chunks_exact(d) {
            self.tail.extend_from_slice(row);
            self.pos += 1;
            if !self.pos.is_multiple_of(r) {
                continue;
            }
            let blk = self.pos / r - 1;
            pooled.fill(0.0);
            for key in self.tail.chunks_exact(d) {
                for (p, &x) in pooled.iter_mut().zip(key) {
                    *p += x;
                }
            }
            self.tail.clear();
            let inv = 1.0 / r as f32;
            for p in pooled.iter_mut() {
                *p *= inv;
            }
            rms_norm_inplace(&mut pooled, &w.k_norm, c.rms_eps);
            let mut rot = Rotation::new(rope);
            rot.set(blk * r);
            rot.apply(&mut pooled);
            if self.rotation > 1 {
                hadamard(&mut pooled, self.rotation);
            }
            let at = self.blocks.len();
            self.blocks.resize(at + row_bytes, 0);
            encode(self.dtype, &pooled, &mut self.blocks[at..]);
        }
    }
}

/// The positions a query at `query` attends to, given the scores of the
/// complete blocks it sees (`[(query + 1) / ratio]`, from
/// [`block_scores`]), into `positions` (ascending); `false` when it attends
/// densely (every position up to its own). `order` is scratch.
pub(crate) fn select(
    w: &BlockChoice,
    scores: &[f32],
    query: usize,
    order: &mut Vec<(f32, usize)>,
    positions: &mut Vec<usize>,
) -> bool {
    let r = w.ratio;
    let nb = (query + 1) / r;
    if nb <= w.top_blocks {
        return false;
    }
    assert_eq!(scores.len(), nb, "one score per complete block");
    order.clear();
    order.extend(scores.iter().copied().zip(0..));
    // Best first; equal scores: the lower block first.
    order.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    order.truncate(w.top_blocks);
    order.sort_unstable_by_key(|&(_, b)| b);
    positions.clear();
    for &(_, b) in order.iter() {
        positions.extend(b * r..(b + 1) * r);
    }
    positions.extend(nb * r..=query);
    true
}

/// Queries scored together against each decoded tile of block keys.
const QUERY_GROUP: usize = 8;

/// The QSA part of one sequence's attention step, after its keys and
/// values are in the cache: index the rows `iq` (`[m × n_idx·d]`, raw,
/// normed and rotated here) and `ik` (`[m × d]`), then attend the rows
/// from the first sparse one on (`q`, `out`: `[m × n_head·head_dim]`).
/// Returns how many leading rows are dense (attended by the caller with
/// the dense kernel).
#[allow(clippy::too_many_arguments)]
pub(crate) fn index_and_attend_sparse(
    w: &IndexerWeights,
    c: &ModelConfig,
    rope: &Rope,
    ex: Exec<'_>,
    iq: &mut [f32],
    ik: &[f32],
    pos0: usize,
    keys: &mut IndexKeys,
    kv: &KvCache,
    q: &[f32],
    out: &mut [f32],
) -> usize {
    let ch = w.choice;
    let (d, m) = (ch.head_dim, ik.len() / ch.head_dim);
    keys.append(ik, pos0, w, c, rope);
    let dense = ch.sparse_from().saturating_sub(pos0).min(m);
    if dense == m {
        return m;
    }
    let mut rot = Rotation::new(rope);
    for (t, row) in iq.chunks_exact_mut(ch.n_head * d).enumerate().skip(dense) {
        rot.set(pos0 + t);
        for qh in row.chunks_exact_mut(d) {
            rms_norm_inplace(qh, &w.q_norm, c.rms_eps);
            rot.apply(qh);
        }
        if keys.rotation > 1 {
            hadamard(row, keys.rotation);
        }
    }
    let shape = AttnShape {
        n_head: c.n_head,
        n_head_kv: c.n_head_kv,
        head_dim: c.head_dim,
    };
    let (width, iw) = (c.n_head * c.head_dim, ch.n_head * d);
    let (rows, iq) = (keys.rows(), &*iq);
    let (k_side, v_side) = (kv.k.side(), kv.v.side());
    let out_ptr = SharedMut::new(out);
    let most = (ch.top_blocks + 1) * ch.ratio;
    // Every row's complete blocks are among the last row's.
    let nb_most = (pos0 + m) / ch.ratio;
    ex.threads.for_ranges(m - dense, 1, |a, b| {
        let mut order = Vec::new();
        let mut positions = Vec::with_capacity(most);
        let mut scratch = vec![0f32; positions_scratch_len(shape, most)];
        let group = QUERY_GROUP.min(b - a).max(1);
        let mut score_room = vec![0f32; block_scores_scratch_len(ch.n_head, d, group)];
        let mut scores = vec![0f32; group * nb_most];
        for g0 in (dense + a..dense + b).step_by(group) {
            let g1 = (g0 + group).min(dense + b);
            // The group's last query sees the most complete blocks.
            let nb = (pos0 + g1) / ch.ratio;
            block_scores(
                ex.isa,
                &iq[g0 * iw..g1 * iw],
                (ch.n_head, d),
                rows,
                nb,
                &mut score_room,
                &mut scores,
            );
            for t in g0..g1 {
                let query = pos0 + t;
                let s = &scores[(t - g0) * nb..][..(query + 1) / ch.ratio];
                if !select(&ch, s, query, &mut order, &mut positions) {
                    unreachable!("rows past `sparse_from` attend sparsely");
                }
                // SAFETY: row t of out is this task's alone.
                let o = unsafe { std::slice::from_raw_parts_mut(out_ptr.at(t * width), width) };
                attend_positions(
                    ex.isa,
                    shape,
                    &q[t * width..(t + 1) * width],
                    query,
                    &positions,
                    k_side,
                    v_side,
                    &mut scratch,
                    o,
                );
            }
        }
    });
    dense
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weights(ratio: usize, budget: usize, n_head: usize, d: usize) -> BlockChoice {
        BlockChoice {
            n_head,
            head_dim: d,
            ratio,
            top_blocks: budget / ratio,
        }
    }

    /// The definition, written out directly: every complete block's score,
    /// the `budget / ratio` highest (ties to the lower block), their tokens
    /// and the tail's, or everything while the complete blocks fit.
    fn direct(w: &BlockChoice, q: &[f32], query: usize, blocks: &[f32]) -> Vec<usize> {
        let (d, r) = (w.head_dim, w.ratio);
        let nb = (query + 1) / r;
        if nb <= w.top_blocks {
            return (0..=query).collect();
        }
        let score = |b: usize| -> f32 {
            let mut s = 0.0f32;
            for h in 0..w.n_head {
                // one fused multiply-add chain in order (the kernel's contract)
                let dot = (0..d).fold(0f32, |a, i| q[h * d + i].mul_add(blocks[b * d + i], a));
                s += dot.max(0.0);
            }
            s / (d as f32).sqrt()
        };
        let mut chosen = Vec::new();
        let mut left: Vec<usize> = (0..nb).collect();
        for _ in 0..w.top_blocks {
            let mut best = 0;
            for i in 1..left.len() {
                if score(left[i]) > score(left[best]) {
                    best = i;
                }
            }
            chosen.push(left.remove(best));
        }
        chosen.sort();
        let mut out: Vec<usize> = chosen.iter().flat_map(|&b| b * r..(b + 1) * r).collect();
        out.extend(nb * r..=query);
        out
    }

    fn noise(seed: u64, n: usize) -> Vec<f32> {
        let mut s = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    /// `select` on the scores of `block_scores`.
    fn pick(
        w: &BlockChoice,
        q: &[f32],
        query: usize,
        blocks: &[f32],
        pos: &mut Vec<usize>,
    ) -> bool {
        let (d, nb) = (w.head_dim, (query + 1) / w.ratio);
        let mut room = vec![0f32; block_scores_scratch_len(w.n_head, d, 1)];
        let mut scores = vec![0f32; nb];
        let rows = KvRows::F32(blocks);
        let isa = rill_kernels::Isa::Scalar;
        block_scores(isa, q, (w.n_head, d), rows, nb, &mut room, &mut scores);
        select(w, &scores, query, &mut Vec::new(), pos)
    }

    fn check(w: &BlockChoice, q: &[f32], query: usize, blocks: &[f32]) {
        let mut pos = Vec::new();
        let sparse = pick(w, q, query, blocks, &mut pos);
        let want = direct(w, q, query, blocks);
        if sparse {
            assert_eq!(pos, want, "query {query}");
        } else {
            assert_eq!((0..=query).collect::<Vec<_>>(), want, "query {query}");
        }
    }

    #[test]
    fn selection_is_the_definition_at_every_context_length() {
        for (ratio, budget) in [(4, 8), (2, 12), (4, 16), (1, 3)] {
            let w = weights(ratio, budget, 2, 8);
            let blocks = noise(ratio as u64 * 31 + budget as u64, 200 * 8);
            let q = noise(7, 2 * 8);
            for query in 0..120 {
                check(&w, &q, query, &blocks);
            }
            // Dense exactly up to `budget + ratio − 2`, sparse from `budget + ratio − 1`.
            let mut p = Vec::new();
            let first = w.sparse_from();
            assert!(!pick(&w, &q, first - 1, &blocks, &mut p));
            assert!(pick(&w, &q, first, &blocks, &mut p));
            // There, `budget / ratio + 1` blocks are complete and the tail is empty.
            assert_eq!(p.len(), budget);
        }
    }

    #[test]
    fn ties_go_to_the_lower_block_and_the_tail_is_always_kept() {
        let w = weights(4, 8, 1, 4);
        // Every block scores the same: the first two blocks win.
        let blocks = vec![0.5f32; 50 * 4];
        let q = vec![1.0f32; 4];
        let mut p = Vec::new();
        assert!(pick(&w, &q, 13, &blocks, &mut p));
        // 14 tokens: 3 complete blocks (0..12), tail 12..=13.
        assert_eq!(p, vec![0, 1, 2, 3, 4, 5, 6, 7, 12, 13]);
        // A query that completes a block has no tail.
        assert!(pick(&w, &q, 15, &blocks, &mut p));
        assert_eq!(p, vec![0, 1, 2, 3, 4, 5, 6, 7]);
        check(&w, &q, 15, &blocks);
        // All scores negative: relu makes them 0 — still ties, still the lower blocks.
        let q = vec![-1.0f32; 4];
        assert!(pick(&w, &q, 20, &blocks, &mut p));
        assert_eq!(p, vec![0, 1, 2, 3, 4, 5, 6, 7, 20]);
    }
}
