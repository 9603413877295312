//! What one sequence carries between forward calls.
//!
//! GDN layers hold a fixed-size state (conv window + recurrent matrix) that
//! cannot be rewound; attention layers hold a KV cache that grows with the
//! sequence. The whole value is `Clone`, which is how snapshots are taken.

use crate::config::{LayerKind, ModelConfig};
use crate::error::ModelError;
use crate::kv::{KvCache, KvConfig};
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
            }),
            kv,
        }
    }

    /// Positions the MTP head's KV cache holds (`None` without a head).
    /// It advances with [`crate::Model::forward_mtp_into`], not with the
    /// trunk's steps.
    pub fn mtp_position(&self) -> Option<usize> {
        self.mtp.as_ref().map(|m| m.pos)
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

    /// Bytes of state held (recurrent states, conv windows, KV caches, the
    /// MTP head's KV cache).
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
    }
}
