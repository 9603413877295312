//! The forward pass: embeddings, the layer stack, the output head.

use crate::error::ForwardError;
use crate::layers::{attention, gdn};
use crate::model::{Mixer, Model};
use crate::state::{LayerState, SequenceState};
use rill_kernels::ops::rms_norm;
use rill_kernels::{matmul, Threads};

/// Which positions' logits a forward call returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    /// Every position: `[n_tokens × n_vocab]`.
    All,
    /// The last position only: `[n_vocab]`.
    Last,
    /// None (prefill of a prompt prefix).
    None,
}

impl Model {
    /// Run `tokens` through the model, continuing `state`, and return the
    /// logits asked for. The state advances by `tokens.len()` positions.
    pub fn forward(
        &self,
        threads: &Threads,
        state: &mut SequenceState,
        tokens: &[u32],
        want: Logits,
    ) -> Result<Vec<f32>, ForwardError> {
        let c = &self.config;
        let n = tokens.len();
        if n == 0 {
            return Err(ForwardError::Empty);
        }
        if let Some(&id) = tokens.iter().find(|&&t| t as usize >= c.n_vocab) {
            return Err(ForwardError::TokenOutOfRange {
                id,
                n_vocab: c.n_vocab,
            });
        }
        if state.pos + n > state.capacity {
            return Err(ForwardError::ContextFull {
                needed: state.pos + n,
                capacity: state.capacity,
            });
        }
        let h = c.n_embd;
        let mut x = vec![0f32; n * h];
        let embd = self.token_embd.view();
        for (t, &id) in tokens.iter().enumerate() {
            embd.dequantize_row(id as usize, &mut x[t * h..(t + 1) * h]);
        }

        let mut xn = vec![0f32; n * h];
        for (layer, ls) in self.layers.iter().zip(state.layers.iter_mut()) {
            for t in 0..n {
                rms_norm(
                    &x[t * h..(t + 1) * h],
                    &layer.attn_norm,
                    c.rms_eps,
                    &mut xn[t * h..(t + 1) * h],
                );
            }
            let mixed = match (&layer.mixer, ls) {
                (Mixer::Attention(w), LayerState::Attention { k, v }) => {
                    attention::forward(w, c, &self.rope_inv_freq, threads, &xn, n, state.pos, k, v)
                }
                (Mixer::Recurrent(w), LayerState::Recurrent { conv, ssm }) => {
                    gdn::forward(w, c, threads, &xn, n, conv, ssm)
                }
                _ => unreachable!("state layout is built from the same layer kinds"),
            };
            for (xi, mi) in x.iter_mut().zip(&mixed) {
                *xi += mi;
            }
            for t in 0..n {
                rms_norm(
                    &x[t * h..(t + 1) * h],
                    &layer.post_attention_norm,
                    c.rms_eps,
                    &mut xn[t * h..(t + 1) * h],
                );
            }
            let f = layer.ffn.forward(c, threads, &xn, n);
            for (xi, fi) in x.iter_mut().zip(&f) {
                *xi += fi;
            }
        }
        state.pos += n;

        let rows: Vec<usize> = match want {
            Logits::All => (0..n).collect(),
            Logits::Last => vec![n - 1],
            Logits::None => return Ok(Vec::new()),
        };
        let m = rows.len();
        let mut normed = vec![0f32; m * h];
        for (i, &t) in rows.iter().enumerate() {
            rms_norm(
                &x[t * h..(t + 1) * h],
                &self.output_norm,
                c.rms_eps,
                &mut normed[i * h..(i + 1) * h],
            );
        }
        let mut logits = vec![0f32; m * c.n_vocab];
        matmul(
            threads,
            self.output_matrix().view(),
            &normed,
            m,
            &mut logits,
        );
        Ok(logits)
    }
}
