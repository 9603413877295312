//! What one sequence carries between forward calls.
//!
//! GDN layers hold a fixed-size state (conv window + recurrent matrix) that
//! cannot be rewound; attention layers hold a KV cache that grows with the
//! sequence. The whole value is `Clone`, which is how snapshots are taken.

use crate::config::{LayerKind, ModelConfig};
use crate::error::ModelError;
use crate::kv::{KvCache, KvConfig};
use crate::layers::ple::PleState;
use crate::layers::qsa::{index_key_encoding, IndexKeys};
use crate::model::Model;

#[derive(Clone, Debug)]
pub(crate) enum LayerState {
    Recurrent {
        /// The last `K−1` raw conv inputs, oldest first: `[(K−1) × conv_dim]`.
        conv: Vec<f32>,
        /// Per value head a `d_k × d_v` matrix, row-major: `[n_v × d_k × d_v]`.
        ssm: Vec<f32>,
    },
    Attention {
        /// Post-norm, post-RoPE keys and the values, `[pos × n_head_kv ×
        /// head_dim]` each, in the sequence's [`KvConfig`] types.
        kv: KvCache,
    },
}

/// `n` zeros written into memory now. `vec![0.0; n]` of a recurrent
/// state's size (MiBs) is mapped zero pages, so the first write of each page
/// would fault later, inside the decode steps that update it: a few percent
/// of a step that starts several sequences.
fn written_zeros(n: usize) -> Vec<f32> {
    let mut v = Vec::with_capacity(n);
    v.resize(n, 0.0);
    v
}

/// The MTP head's own KV cache (its one attention layer). Its rows sit at
/// the trunk's positions, but it is fed after the trunk (and runs ahead of
/// it while drafting), so it keeps its own position.
#[derive(Clone, Debug)]
pub(crate) struct MtpState {
    /// Positions the head has seen (rows of its cache).
    pub pos: usize,
    /// Its keys and values, as a trunk attention layer's.
    pub kv: KvCache,
    /// The hidden row the head pairs with the token at its next position:
    /// the trunk's post-final-norm hidden of position `pos − 1` (empty:
    /// zeros, as for position 0). Kept by whoever feeds the head, so that a
    /// snapshot of the state can go on drafting where it stopped.
    pub seed: Vec<f32>,
}

/// What a qwen4exp sequence carries besides the Qwen3.5 state: the 4-stream
/// residual needs none, but the QSA index keys grow with the context and
/// the PLE layer keeps its token and conv history.
#[derive(Clone, Debug)]
pub(crate) struct HyperState {
    /// Per layer: the index keys of a QSA layer.
    pub index: Vec<Option<IndexKeys>>,
    pub ple: Option<PleState>,
}

impl HyperState {
    fn new(c: &ModelConfig, kv: &KvConfig) -> Option<Box<HyperState>> {
        let q = c.qwen4exp.as_ref()?;
        let d = q.indexer.head_dim;
        let index = (q.indexer.ratios.iter())
            .map(|&r| (r > 0).then(|| IndexKeys::new(kv, d, r)))
            .collect();
        Some(Box::new(HyperState {
            index,
            ple: q.ple.as_ref().map(|_| PleState::new(c)),
        }))
    }

    fn bytes(&self) -> usize {
        self.index
            .iter()
            .flatten()
            .map(IndexKeys::bytes)
            .sum::<usize>()
            + self.ple.as_ref().map_or(0, PleState::bytes)
    }
}

/// Most rows a rewindable step may have (a verify step of a draft of up to
/// `MAX_REWIND_ROWS − 1` tokens plus the token before it).
pub const MAX_REWIND_ROWS: usize = 16;

/// The recurrent layers' states after each row of the last rewindable step
/// (a speculative verify step), so that the step can be cut back to any of
/// its rows without recomputing or copying the state: [`SequenceState::rewind`]
/// swaps the chosen slot in as the live state.
///
/// Slot `t` holds the state after row `t` of the step, for `t < rows − 1`
/// (the state after the last row is the live one). The slots are scratch
/// for one step: a clone of the sequence state (a prompt-cache snapshot)
/// does not carry them.
#[derive(Debug, Default)]
pub(crate) struct RewindRing {
    /// Position of the step's first row.
    pub start: usize,
    /// Rows of the step the slots cover (`0`: nothing to rewind to).
    pub rows: usize,
    /// Per recurrent layer (in layer order, attention layers skipped): the
    /// conv windows and the recurrent matrices of each slot.
    pub layers: Vec<RingLayer>,
}

#[derive(Debug, Default)]
pub(crate) struct RingLayer {
    pub conv: Vec<Vec<f32>>,
    pub ssm: Vec<Vec<f32>>,
}

impl Clone for RewindRing {
    /// Snapshots are taken between steps, when the ring holds nothing that
    /// a copy would need: it starts empty.
    fn clone(&self) -> RewindRing {
        RewindRing::default()
    }
}

impl RingLayer {
    /// Room for `slots` snapshots of this shape (allocated once; later calls
    /// with as many slots or fewer allocate nothing).
    pub fn reserve(&mut self, slots: usize, conv_len: usize, ssm_len: usize) {
        while self.conv.len() < slots {
            self.conv.push(written_zeros(conv_len));
            self.ssm.push(written_zeros(ssm_len));
        }
    }
}

/// What a model's sequence state costs, by the positions it holds: the
/// worst case a memory budget reserves before a sequence starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateSize {
    /// Recurrent states and conv windows (independent of the context).
    pub recurrent: usize,
    /// Attention layers (trunk and MTP head).
    pub attention_layers: usize,
    /// Values per position of one attention layer's K (and of its V).
    pub kv_per_pos: usize,
    /// One rewind-ring slot (every recurrent layer's state once).
    pub ring_slot: usize,
    /// qwen4exp: bytes of its state that do not grow with the context (the
    /// PLE history, and the buffer of one incomplete key block's raw keys
    /// per QSA layer) ...
    pub hyper_fixed: usize,
    /// ... and at most what its index keys add per position (one pooled key
    /// per `ratio` positions and QSA layer, in the K cache's type, rounded
    /// up).
    pub hyper_per_pos: usize,
    pub kv: KvConfig,
}

impl StateSize {
    /// The size of `model`'s states with KV stored as `kv`.
    pub fn of(model: &Model, kv: KvConfig) -> StateSize {
        let c = &model.config;
        let rec = c
            .layer_kinds
            .iter()
            .filter(|k| **k == LayerKind::Recurrent)
            .count();
        let per_layer = ((c.conv_kernel - 1) * c.conv_dim()
            + c.ssm_n_v_heads * c.ssm_head_dim * c.ssm_head_dim)
            * std::mem::size_of::<f32>();
        let attn = c.layer_kinds.len() - rec + usize::from(model.has_mtp());
        let f32s = std::mem::size_of::<f32>();
        let (mut hyper_fixed, mut hyper_per_pos) = (0, 0);
        if let Some(q) = &c.qwen4exp {
            let d = q.indexer.head_dim;
            let (dtype, _) = index_key_encoding(&kv, d);
            let pooled = rill_kernels::kv::encoded_len(dtype, d);
            for &ratio in q.indexer.ratios.iter().filter(|&&r| r > 0) {
                hyper_fixed += ratio * d * f32s;
                hyper_per_pos += pooled.div_ceil(ratio);
            }
            if let Some(p) = &q.ple {
                hyper_fixed += (p.ngram - 1) * std::mem::size_of::<u32>()
                    + p.conv_history() * q.streams * c.n_embd * f32s;
            }
        }
        StateSize {
            recurrent: rec * per_layer,
            attention_layers: attn,
            kv_per_pos: c.n_head_kv * c.head_dim,
            ring_slot: rec * per_layer,
            hyper_fixed,
            hyper_per_pos,
            kv,
        }
    }

    /// Most bytes of a state holding up to `positions` positions, fed at
    /// most `step_rows` rows a step, with a rewind ring of `rewind_rows`
    /// rows (0: the sequence does not speculate).
    pub fn bytes(&self, positions: usize, step_rows: usize, rewind_rows: usize) -> usize {
        self.recurrent
            + self.attention_layers * self.kv.layer_bytes(self.kv_per_pos, positions, step_rows)
            + rewind_rows.saturating_sub(1) * self.ring_slot
            + self.hyper_fixed
            + positions * self.hyper_per_pos
    }
}

/// Why a rewind was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "cannot rewind to position {to}: the last rewindable step covered positions {start}..{end}"
)]
pub struct RewindError {
    pub to: usize,
    pub start: usize,
    pub end: usize,
}

/// The state of one sequence: position, recurrent states and KV caches
/// (the MTP head's too, when the model has one).
#[derive(Clone, Debug)]
pub struct SequenceState {
    pub(crate) pos: usize,
    pub(crate) capacity: usize,
    pub(crate) layers: Vec<LayerState>,
    pub(crate) mtp: Option<MtpState>,
    pub(crate) kv: KvConfig,
    pub(crate) ring: RewindRing,
    /// qwen4exp's extra state.
    pub(crate) hyper: Option<Box<HyperState>>,
}

impl SequenceState {
    /// An empty state for `model` that can hold up to `capacity` positions,
    /// its KV cache in f32 (the exact reference).
    pub fn new(model: &Model, capacity: usize) -> SequenceState {
        Self::build(model, capacity, KvConfig::f32())
    }

    /// An empty state whose attention layers (and MTP head) store K and V
    /// as `kv` says. Refused when the model's head dimension is not a whole
    /// number of the types' blocks.
    pub fn with_kv(
        model: &Model,
        capacity: usize,
        kv: KvConfig,
    ) -> Result<SequenceState, ModelError> {
        kv.check(&model.config)?;
        Ok(Self::build(model, capacity, kv))
    }

    /// How this state stores its KV cache.
    pub fn kv_config(&self) -> KvConfig {
        self.kv
    }

    fn build(model: &Model, capacity: usize, kv: KvConfig) -> SequenceState {
        let c: &ModelConfig = &model.config;
        let layers = c
            .layer_kinds
            .iter()
            .map(|k| match k {
                LayerKind::Recurrent => LayerState::Recurrent {
                    conv: written_zeros((c.conv_kernel - 1) * c.conv_dim()),
                    ssm: written_zeros(c.ssm_n_v_heads * c.ssm_head_dim * c.ssm_head_dim),
                },
                LayerKind::Attention => LayerState::Attention {
                    kv: KvCache::new(c, &kv),
                },
            })
            .collect();
        SequenceState {
            pos: 0,
            capacity,
            layers,
            mtp: model.has_mtp().then(|| MtpState {
                pos: 0,
                kv: KvCache::new(c, &kv),
                seed: Vec::new(),
            }),
            kv,
            ring: RewindRing::default(),
            hyper: HyperState::new(c, &kv),
        }
    }

    /// Cut the last rewindable step (a [`crate::BatchItem`] with
    /// `rewindable` set) back so that the state holds positions `..pos`:
    /// the recurrent layers take the snapshot of that row (a swap, no copy)
    /// and the KV caches drop the later rows. `pos` equal to the current
    /// position changes nothing. Any other position outside the step is
    /// refused, and the state is left as it was. The MTP head's cache is
    /// cut apart ([`truncate_mtp`](Self::truncate_mtp)).
    pub fn rewind(&mut self, pos: usize) -> Result<(), RewindError> {
        if pos == self.pos {
            self.ring.rows = 0;
            return Ok(());
        }
        let ring = &mut self.ring;
        let (start, end) = (ring.start, ring.start + ring.rows);
        if ring.rows < 2 || pos <= start || pos >= end || end != self.pos {
            return Err(RewindError {
                to: pos,
                start,
                end: if ring.rows < 2 { start } else { end },
            });
        }
        let slot = pos - start - 1;
        let mut rings = ring.layers.iter_mut();
        for layer in &mut self.layers {
            match layer {
                LayerState::Recurrent { conv, ssm } => {
                    let r = rings.next().expect("a ring layer per recurrent layer");
                    std::mem::swap(conv, &mut r.conv[slot]);
                    std::mem::swap(ssm, &mut r.ssm[slot]);
                }
                LayerState::Attention { kv } => kv.truncate(pos),
            }
        }
        ring.rows = 0;
        self.pos = pos;
        Ok(())
    }

    /// Positions the MTP head's KV cache holds (`None` without a head).
    /// It advances with [`crate::Model::forward_mtp_into`], not with the
    /// trunk's steps.
    pub fn mtp_position(&self) -> Option<usize> {
        self.mtp.as_ref().map(|m| m.pos)
    }

    /// The hidden row the MTP head pairs with the token at its next
    /// position ([`mtp_position`](Self::mtp_position)), as last set with
    /// [`set_mtp_seed`](Self::set_mtp_seed); empty means zeros (a fresh
    /// sequence). `None` without a head.
    pub fn mtp_seed(&self) -> Option<&[f32]> {
        self.mtp.as_ref().map(|m| &m.seed[..])
    }

    /// Keep `hidden` as the MTP head's seed (see [`mtp_seed`](Self::mtp_seed));
    /// reuses the allocation. No-op without a head.
    pub fn set_mtp_seed(&mut self, hidden: &[f32]) {
        if let Some(m) = &mut self.mtp {
            m.seed.clear();
            m.seed.extend_from_slice(hidden);
        }
    }

    /// Drop the MTP head's KV rows at positions `pos..` (draft rows that
    /// verification rejected); a `pos` at or past its position changes
    /// nothing. Keeps the cache's allocation.
    pub fn truncate_mtp(&mut self, pos: usize) {
        if let Some(m) = &mut self.mtp {
            if pos < m.pos {
                m.kv.truncate(pos);
                m.pos = pos;
            }
        }
    }

    /// Tokens processed so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// A copy that can hold up to `capacity` positions (at least the current
    /// position). Used to restore a cached snapshot into a new request.
    pub fn with_capacity(&self, capacity: usize) -> SequenceState {
        let mut s = self.clone();
        s.capacity = capacity.max(self.pos);
        s
    }

    /// Each KV page this state holds (trunk layers and the MTP head):
    /// `f(address, bytes)`. A page shared with other states (snapshots,
    /// sequences resumed from them) has the same address in each of them:
    /// [`SharedPages`](crate::SharedPages) counts it once.
    pub fn each_kv_page(&self, mut f: impl FnMut(usize, usize)) {
        for l in &self.layers {
            if let LayerState::Attention { kv } = l {
                kv.each_page(&mut f);
            }
        }
        if let Some(m) = &self.mtp {
            m.kv.each_page(&mut f);
        }
    }

    /// Bytes of state held besides the KV pages (recurrent states, conv
    /// windows, f16 sinks and rings, index keys, rewind slots): what this
    /// state holds alone.
    pub fn unpaged_bytes(&self) -> usize {
        let mut paged = 0;
        self.each_kv_page(|_, b| paged += b);
        self.bytes() - paged
    }

    /// Bytes of state held (recurrent states, conv windows, KV caches, the
    /// MTP head's KV cache, the rewind snapshots), every page in full
    /// whether or not another state shares it.
    pub fn bytes(&self) -> usize {
        let f = std::mem::size_of::<f32>();
        self.layers
            .iter()
            .map(|l| match l {
                LayerState::Recurrent { conv, ssm } => (conv.len() + ssm.len()) * f,
                LayerState::Attention { kv } => kv.bytes(),
            })
            .sum::<usize>()
            + self.mtp.as_ref().map_or(0, |m| m.kv.bytes())
            + self.hyper.as_ref().map_or(0, |h| h.bytes())
            + (self.ring.layers.iter())
                .flat_map(|l| l.conv.iter().chain(&l.ssm))
                .map(|v| v.len() * f)
                .sum::<usize>()
    }
}
