//! What one sequence carries between forward calls.
//!
//! GDN layers hold a fixed-size state (conv window + recurrent matrix) that
//! cannot be rewound; attention layers hold a KV cache that grows with the
//! sequence. The whole value is `Clone`, which is how snapshots are taken.

use crate::config::{LayerKind, ModelConfig};
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
        /// Post-norm, post-RoPE keys: `[pos × n_head_kv × head_dim]`.
        k: Vec<f32>,
        /// Values: `[pos × n_head_kv × head_dim]`.
        v: Vec<f32>,
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
#[derive(Clone, Debug, Default)]
pub(crate) struct MtpState {
    /// Positions the head has seen (rows of `k` and `v`).
    pub pos: usize,
    /// Post-norm, post-RoPE keys: `[pos × n_head_kv × head_dim]`.
    pub k: Vec<f32>,
    /// Values: `[pos × n_head_kv × head_dim]`.
    pub v: Vec<f32>,
}

/// The state of one sequence: position, recurrent states and KV caches
/// (the MTP head's too, when the model has one).
#[derive(Clone, Debug)]
pub struct SequenceState {
    pub(crate) pos: usize,
    pub(crate) capacity: usize,
    pub(crate) layers: Vec<LayerState>,
    pub(crate) mtp: Option<MtpState>,
}

impl SequenceState {
    /// An empty state for `model` that can hold up to `capacity` positions.
    pub fn new(model: &Model, capacity: usize) -> SequenceState {
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
                    k: Vec::new(),
                    v: Vec::new(),
                },
            })
            .collect();
        SequenceState {
            pos: 0,
            capacity,
            layers,
            mtp: model.has_mtp().then(MtpState::default),
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
                let per = m.k.len() / m.pos.max(1);
                m.k.truncate(pos * per);
                m.v.truncate(pos * per);
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
        let floats: usize = self
            .layers
            .iter()
            .map(|l| match l {
                LayerState::Recurrent { conv, ssm } => conv.len() + ssm.len(),
                LayerState::Attention { k, v } => k.len() + v.len(),
            })
            .sum::<usize>()
            + self.mtp.as_ref().map_or(0, |m| m.k.len() + m.v.len());
        floats * std::mem::size_of::<f32>()
    }
}
