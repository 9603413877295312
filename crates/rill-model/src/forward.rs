//! The forward pass: embeddings, the layer stack, the output head.
//!
//! A step runs any number of sequences at once, each with its own tokens
//! (a prefill chunk or one decode token) and state. Every weight matrix is
//! applied to all the step's tokens together, so its bytes are read once per
//! step for everyone — the mixers' projections included; only the
//! attention over a KV cache and the GDN conv + recurrence run per sequence,
//! on that sequence's slice of the rows and its own state.

use crate::error::ForwardError;
use crate::layers::attention::{self, AttnSeq};
use crate::layers::gdn::{self, GdnSeq};
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

/// One sequence's part of a batched step.
pub struct BatchItem<'a> {
    pub state: &'a mut SequenceState,
    pub tokens: &'a [u32],
    pub logits: Logits,
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
        let mut items = [BatchItem {
            state,
            tokens,
            logits: want,
        }];
        Ok(self
            .forward_batch(threads, &mut items)?
            .pop()
            .unwrap_or_default())
    }

    fn check(&self, item: &BatchItem) -> Result<(), ForwardError> {
        let c = &self.config;
        let n = item.tokens.len();
        if n == 0 {
            return Err(ForwardError::Empty);
        }
        if let Some(&id) = item.tokens.iter().find(|&&t| t as usize >= c.n_vocab) {
            return Err(ForwardError::TokenOutOfRange {
                id,
                n_vocab: c.n_vocab,
            });
        }
        if item.state.pos + n > item.state.capacity {
            return Err(ForwardError::ContextFull {
                needed: item.state.pos + n,
                capacity: item.state.capacity,
            });
        }
        Ok(())
    }

    /// One step over several sequences. Returns, per item, the logits it
    /// asked for. Every item is checked before any state changes, so a
    /// refused step leaves all states as they were.
    pub fn forward_batch(
        &self,
        threads: &Threads,
        items: &mut [BatchItem],
    ) -> Result<Vec<Vec<f32>>, ForwardError> {
        for item in items.iter() {
            self.check(item)?;
        }
        let c = &self.config;
        let h = c.n_embd;
        // Row ranges of each item in the step's activation matrix.
        let mut spans = Vec::with_capacity(items.len());
        let mut n = 0;
        for item in items.iter() {
            spans.push(n..n + item.tokens.len());
            n += item.tokens.len();
        }
        let mut x = vec![0f32; n * h];
        let embd = self.token_embd.view();
        for (t, &id) in items.iter().flat_map(|i| i.tokens).enumerate() {
            embd.dequantize_row(id as usize, &mut x[t * h..(t + 1) * h]);
        }

        let mut xn = vec![0f32; n * h];
        for (il, layer) in self.layers.iter().enumerate() {
            for t in 0..n {
                rms_norm(
                    &x[t * h..(t + 1) * h],
                    &layer.attn_norm,
                    c.rms_eps,
                    &mut xn[t * h..(t + 1) * h],
                );
            }
            let mixed = match &layer.mixer {
                Mixer::Attention(w) => {
                    let mut seqs: Vec<AttnSeq> = items
                        .iter_mut()
                        .zip(&spans)
                        .map(|(item, span)| {
                            let pos = item.state.pos;
                            match &mut item.state.layers[il] {
                                LayerState::Attention { k, v } => AttnSeq {
                                    rows: span.clone(),
                                    pos,
                                    k_cache: k,
                                    v_cache: v,
                                },
                                _ => {
                                    unreachable!("state layout is built from the same layer kinds")
                                }
                            }
                        })
                        .collect();
                    attention::forward(w, c, &self.rope_inv_freq, threads, &xn, n, &mut seqs)
                }
                Mixer::Recurrent(w) => {
                    let mut seqs: Vec<GdnSeq> = items
                        .iter_mut()
                        .zip(&spans)
                        .map(|(item, span)| match &mut item.state.layers[il] {
                            LayerState::Recurrent { conv, ssm } => GdnSeq {
                                rows: span.clone(),
                                conv,
                                ssm,
                            },
                            _ => unreachable!("state layout is built from the same layer kinds"),
                        })
                        .collect();
                    gdn::forward(w, c, threads, &xn, n, &mut seqs)
                }
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
        for item in items.iter_mut() {
            item.state.pos += item.tokens.len();
        }

        // The output head, on the rows someone asked for, all at once.
        let mut rows = Vec::new();
        for (item, span) in items.iter().zip(&spans) {
            match item.logits {
                Logits::All => rows.extend(span.clone()),
                Logits::Last => rows.push(span.end - 1),
                Logits::None => {}
            }
        }
        let v = c.n_vocab;
        let mut logits = vec![0f32; rows.len() * v];
        if !rows.is_empty() {
            let mut normed = vec![0f32; rows.len() * h];
            for (i, &t) in rows.iter().enumerate() {
                rms_norm(
                    &x[t * h..(t + 1) * h],
                    &self.output_norm,
                    c.rms_eps,
                    &mut normed[i * h..(i + 1) * h],
                );
            }
            matmul(
                threads,
                self.output_matrix().view(),
                &normed,
                rows.len(),
                &mut logits,
            );
        }
        let mut out = Vec::with_capacity(items.len());
        let mut at = 0;
        for (item, span) in items.iter().zip(&spans) {
            let k = match item.logits {
                Logits::All => span.len(),
                Logits::Last => 1,
                Logits::None => 0,
            };
            out.push(logits[at * v..(at + k) * v].to_vec());
            at += k;
        }
        Ok(out)
    }
}
