//! Gated full attention (DESIGN.md §2.1): per-head QK RMSNorm, partial NeoX
//! RoPE, grouped-query attention over the KV cache, sigmoid output gate.

use super::qsa::{self, IndexKeys, IndexerWeights};
use crate::config::ModelConfig;
use crate::error::ModelError;
use crate::kv::KvCache;
use crate::rope::{Rope, Rotation};
use crate::scratch::{Buf, Exec, JobList};
use crate::weights::{Binder, Matrix};
use rill_kernels::attention::{attend_causal, AttnShape};
use rill_kernels::kv::hadamard;
use rill_kernels::ops::{mul_sigmoid_inplace_with, rms_norm_inplace};
use rill_kernels::threads::SharedMut;
use rill_kernels::{matmul_many_on, matmul_on, MatJob};

pub(crate) struct AttentionWeights {
    /// `[2·n_head·head_dim × n_embd]`: per head, Q then the gate.
    q: Matrix,
    k: Matrix,
    v: Matrix,
    o: Matrix,
    q_norm: Vec<f32>,
    k_norm: Vec<f32>,
    /// QSA's indexer (qwen4exp layers with a compress ratio): the layer
    /// then attends to the blocks it picks.
    pub indexer: Option<IndexerWeights>,
}

impl AttentionWeights {
    /// Bytes of every weight of the layer.
    pub fn weight_bytes(&self) -> u64 {
        let m = self.q.byte_len() + self.k.byte_len() + self.v.byte_len() + self.o.byte_len();
        let ix = self
            .indexer
            .as_ref()
            .map_or(0, IndexerWeights::weight_bytes);
        (m + (self.q_norm.len() + self.k_norm.len()) * 4) as u64 + ix
    }

    pub fn bind(b: &Binder, c: &ModelConfig, p: &str) -> Result<Self, ModelError> {
        let (h, hd) = (c.n_embd, c.head_dim);
        Ok(AttentionWeights {
            q: b.matrix(&format!("{p}.attn_q.weight"), 2 * c.n_head * hd, h)?,
            k: b.matrix(&format!("{p}.attn_k.weight"), c.n_head_kv * hd, h)?,
            v: b.matrix(&format!("{p}.attn_v.weight"), c.n_head_kv * hd, h)?,
            o: b.matrix(&format!("{p}.attn_output.weight"), h, c.n_head * hd)?,
            q_norm: b.vector(&format!("{p}.attn_q_norm.weight"), hd)?,
            k_norm: b.vector(&format!("{p}.attn_k_norm.weight"), hd)?,
            indexer: None,
        })
    }
}

/// One sequence's rows of an attention step: where it starts and its cache.
pub(crate) struct AttnSeq<'a> {
    pub rows: std::ops::Range<usize>,
    /// Position of the first row.
    pub pos: usize,
    /// Positions the sequence can hold.
    pub capacity: usize,
    pub kv: &'a mut KvCache,
    /// The layer's index keys, for a QSA layer.
    pub index: Option<&'a mut IndexKeys>,
}

/// Attention for a step of `n` rows (`x` normed) spread over `seqs`: the
/// projections run once over all rows, the attention itself per sequence
/// over its own KV cache (to which the new keys and values are appended).
pub(crate) fn forward<'s, 'w>(
    w: &AttentionWeights,
    c: &ModelConfig,
    rope: &Rope,
    ex: Exec<'w>,
    x: &[f32],
    n: usize,
    seqs: impl IntoIterator<Item = AttnSeq<'s>>,
) -> Buf<'w> {
    let threads = ex.threads;
    let (nh, nkv, hd) = (c.n_head, c.n_head_kv, c.head_dim);
    let mut qg = Buf::for_output(ex.ws, n * 2 * nh * hd);
    let mut k = Buf::for_output(ex.ws, n * nkv * hd);
    let mut v = Buf::for_output(ex.ws, n * nkv * hd);
    // A QSA layer's index queries and raw index keys, with the same read of x.
    let (iq_len, ik_len) = w.indexer.as_ref().map_or((0, 0), |ix| {
        let ch = ix.choice;
        (n * ch.n_head * ch.head_dim, n * ch.head_dim)
    });
    let mut iq = Buf::for_output(ex.ws, iq_len);
    let mut ik = Buf::for_output(ex.ws, ik_len);
    {
        let mut jobs = JobList::take(ex.ws);
        jobs.push(MatJob {
            w: w.q.view(),
            x,
            n,
            out: &mut qg,
            pick: None,
        });
        jobs.push(MatJob {
            w: w.k.view(),
            x,
            n,
            out: &mut k,
            pick: None,
        });
        jobs.push(MatJob {
            w: w.v.view(),
            x,
            n,
            out: &mut v,
            pick: None,
        });
        if let Some(ix) = &w.indexer {
            jobs.push(MatJob {
                w: ix.q_view(),
                x,
                n,
                out: &mut iq,
                pick: None,
            });
            jobs.push(MatJob {
                w: ix.k_view(),
                x,
                n,
                out: &mut ik,
                pick: None,
            });
        }
        matmul_many_on(ex.isa, ex.precision, threads, &mut jobs);
    }

    let mut q = Buf::for_output(ex.ws, n * nh * hd);
    let mut gate = Buf::for_output(ex.ws, n * nh * hd);
    let mut attn = Buf::for_output(ex.ws, n * nh * hd);
    for s in seqs {
        // Split Q from its gate, norm and rotate Q and K at each row's
        // position: rows in parallel, each row's rotation computed once for
        // all its heads.
        let (q_ptr, gate_ptr, k_ptr) = (
            SharedMut::new(&mut q),
            SharedMut::new(&mut gate),
            SharedMut::new(&mut k),
        );
        let (row0, pos0) = (s.rows.start, s.pos);
        threads.for_ranges(s.rows.len(), 8, |r0, r1| {
            let mut rot = Rotation::new(rope);
            for t in row0 + r0..row0 + r1 {
                rot.set(pos0 + (t - row0));
                // SAFETY: row t of q, gate and k is this task's alone.
                let (qt, gt, kt) = unsafe {
                    (
                        std::slice::from_raw_parts_mut(q_ptr.at(t * nh * hd), nh * hd),
                        std::slice::from_raw_parts_mut(gate_ptr.at(t * nh * hd), nh * hd),
                        std::slice::from_raw_parts_mut(k_ptr.at(t * nkv * hd), nkv * hd),
                    )
                };
                let src = &qg[t * nh * 2 * hd..(t + 1) * nh * 2 * hd];
                for ((qh, gh), sh) in qt
                    .chunks_exact_mut(hd)
                    .zip(gt.chunks_exact_mut(hd))
                    .zip(src.chunks_exact(2 * hd))
                {
                    qh.copy_from_slice(&sh[..hd]);
                    gh.copy_from_slice(&sh[hd..]);
                    rms_norm_inplace(qh, &w.q_norm, c.rms_eps);
                    rot.apply(qh);
                }
                for kh in kt.chunks_exact_mut(hd) {
                    rms_norm_inplace(kh, &w.k_norm, c.rms_eps);
                    rot.apply(kh);
                }
            }
        });
        let (a, b) = (s.rows.start, s.rows.end);
        // A quantized cache stores rotated rows (kv.rs, `KvConfig::rotate`):
        // Q and K alike (the scores do not change), V with the output
        // rotated back below.
        let (kr, vr) = (s.kv.k.rotation(), s.kv.v.rotation());
        if kr > 1 {
            hadamard(&mut q[a * nh * hd..b * nh * hd], kr);
            hadamard(&mut k[a * nkv * hd..b * nkv * hd], kr);
        }
        if vr > 1 {
            hadamard(&mut v[a * nkv * hd..b * nkv * hd], vr);
        }
        s.kv.k.append(&k[a * nkv * hd..b * nkv * hd], s.capacity);
        s.kv.v.append(&v[a * nkv * hd..b * nkv * hd], s.capacity);
        // A QSA layer attends densely until a query sees more complete
        // blocks than its budget, then to the blocks the indexer picks.
        let dense = match (&w.indexer, s.index) {
            (Some(ix), Some(keys)) => {
                let ch = ix.choice;
                let (iw, kw) = (ch.n_head * ch.head_dim, ch.head_dim);
                qsa::index_and_attend_sparse(
                    ix,
                    c,
                    rope,
                    ex,
                    &mut iq[a * iw..b * iw],
                    &ik[a * kw..b * kw],
                    s.pos,
                    keys,
                    s.kv,
                    &q[a * nh * hd..b * nh * hd],
                    &mut attn[a * nh * hd..b * nh * hd],
                )
            }
            _ => b - a,
        };
        if dense > 0 {
            attend(
                c,
                ex,
                &q[a * nh * hd..(a + dense) * nh * hd],
                dense,
                s.pos,
                s.kv,
                &mut attn[a * nh * hd..(a + dense) * nh * hd],
            );
        }
        if vr > 1 {
            hadamard(&mut attn[a * nh * hd..b * nh * hd], vr);
        }
    }
    let attn_ptr = SharedMut::new(&mut attn);
    threads.for_ranges(n, 8, |t0, t1| {
        let w = nh * hd;
        // SAFETY: rows t0..t1 of attn are this task's alone.
        let a = unsafe { std::slice::from_raw_parts_mut(attn_ptr.at(t0 * w), (t1 - t0) * w) };
        mul_sigmoid_inplace_with(ex.isa, a, &gate[t0 * w..t1 * w]);
    });
    let mut out = Buf::for_output(ex.ws, n * c.n_embd);
    matmul_on(
        ex.isa,
        ex.precision,
        threads,
        w.o.view(),
        &attn,
        n,
        &mut out,
    );
    out
}

/// Causal GQA softmax attention of `m` query rows at positions `pos0..`
/// over the cache (which already holds them): blocked products in
/// `rill_kernels::attention`, with a scratch whose size does not depend on
/// the context (so decode steps find it in place and allocate nothing).
#[allow(clippy::too_many_arguments)]
fn attend(
    c: &ModelConfig,
    ex: Exec<'_>,
    q: &[f32],
    m: usize,
    pos0: usize,
    kv: &KvCache,
    attn: &mut [f32],
) {
    let threads = ex.threads;
    let shape = AttnShape {
        n_head: c.n_head,
        n_head_kv: c.n_head_kv,
        head_dim: c.head_dim,
    };
    let mut scratch = Buf::for_output(ex.ws, threads.count() * shape.scratch_per_thread());
    attend_causal(
        ex.isa,
        threads,
        shape,
        q,
        m,
        pos0,
        kv.k.side(),
        kv.v.side(),
        &mut scratch,
        attn,
    );
}
