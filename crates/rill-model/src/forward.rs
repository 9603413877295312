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
use crate::scratch::{Buf, Reused, Runner};
use crate::state::{LayerState, SequenceState};
use rill_kernels::ops::rms_norm;
use rill_kernels::threads::SharedMut;
use rill_kernels::{matmul_in, Threads};
use std::ops::Range;

/// Which of an item's positions a step returns outputs for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rows {
    /// Every position.
    All,
    /// The last position only.
    Last,
    /// None (prefill of a prompt prefix).
    None,
}

/// What a step returns for one item: which rows, and for each of them the
/// logits and/or the hidden state after the final norm (what a draft head
/// such as MTP reads, and what embeddings are made of).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outputs {
    pub rows: Rows,
    pub logits: bool,
    /// The post-final-norm hidden state, `n_embd` values per row.
    pub hidden: bool,
}

impl Outputs {
    /// Nothing back: the item only advances its state.
    pub const NONE: Outputs = Outputs {
        rows: Rows::None,
        logits: false,
        hidden: false,
    };

    /// The logits of `rows`.
    pub const fn logits(rows: Rows) -> Outputs {
        Outputs {
            rows,
            logits: true,
            hidden: false,
        }
    }

    /// The logits of the last position (a decode step, a prompt's end).
    pub const fn last_logits() -> Outputs {
        Outputs::logits(Rows::Last)
    }

    /// Also the hidden state of the same rows.
    pub const fn with_hidden(self) -> Outputs {
        Outputs {
            hidden: true,
            ..self
        }
    }

    fn wants_rows(&self) -> bool {
        self.rows != Rows::None && (self.logits || self.hidden)
    }
}

/// One sequence's part of a batched step.
pub struct BatchItem<'a> {
    pub state: &'a mut SequenceState,
    pub tokens: &'a [u32],
    pub outputs: Outputs,
}

/// The outputs of a step, in buffers that a caller keeps and passes to
/// every [`Model::forward_batch_into`]: they grow to the largest step and
/// are then reused, so decoding allocates nothing for them.
#[derive(Clone, Debug, Default)]
pub struct StepOutputs {
    /// The logits rows of every item, item after item: `[rows × n_vocab]`.
    logits: Vec<f32>,
    /// The hidden-state rows, the same way: `[rows × n_embd]`.
    hidden: Vec<f32>,
    /// Each item's part of `logits` and of `hidden`.
    logit_spans: Vec<Range<usize>>,
    hidden_spans: Vec<Range<usize>>,
}

impl StepOutputs {
    pub fn new() -> StepOutputs {
        StepOutputs::default()
    }

    /// Item `i`'s logits, as its [`Outputs`] asked: `[rows × n_vocab]`
    /// (empty when it asked for none).
    pub fn logits(&self, i: usize) -> &[f32] {
        &self.logits[self.logit_spans[i].clone()]
    }

    /// Item `i`'s post-final-norm hidden states: `[rows × n_embd]`.
    pub fn hidden(&self, i: usize) -> &[f32] {
        &self.hidden[self.hidden_spans[i].clone()]
    }

    /// Items of the last step.
    pub fn len(&self) -> usize {
        self.logit_spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.logit_spans.is_empty()
    }

    /// Every item's logits, in order.
    pub fn iter_logits(&self) -> impl ExactSizeIterator<Item = &[f32]> + '_ {
        self.logit_spans.iter().map(|s| &self.logits[s.clone()])
    }

    /// The logits buffer whole (a single-item step's rows).
    pub fn into_logits(self) -> Vec<f32> {
        self.logits
    }
}

impl Model {
    /// Run `tokens` through the model, continuing `state`, and return the
    /// logits of `rows`. The state advances by `tokens.len()` positions.
    /// `run` says how (threads, numerics) and lends the buffers.
    pub fn forward(
        &self,
        run: &Runner,
        state: &mut SequenceState,
        tokens: &[u32],
        rows: Rows,
    ) -> Result<Vec<f32>, ForwardError> {
        let mut out = StepOutputs::new();
        self.forward_into(run, state, tokens, Outputs::logits(rows), &mut out)?;
        Ok(out.into_logits())
    }

    /// One sequence's step into a kept [`StepOutputs`] (its item 0).
    pub fn forward_into(
        &self,
        run: &Runner,
        state: &mut SequenceState,
        tokens: &[u32],
        outputs: Outputs,
        out: &mut StepOutputs,
    ) -> Result<(), ForwardError> {
        let mut items = [BatchItem {
            state,
            tokens,
            outputs,
        }];
        self.forward_batch_into(run, &mut items, out)
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
        run: &Runner,
        items: &mut [BatchItem],
    ) -> Result<Vec<Vec<f32>>, ForwardError> {
        let mut out = StepOutputs::new();
        self.forward_batch_into(run, items, &mut out)?;
        Ok(out.iter_logits().map(<[f32]>::to_vec).collect())
    }

    /// [`forward_batch`](Self::forward_batch) into a kept [`StepOutputs`]:
    /// the serving loop's form. Once a step of the same shape has run (one
    /// decode token per sequence), a step makes no heap allocation: its
    /// temporaries come from `run`'s workspace (`crate::scratch`) and the
    /// KV caches are reserved for the sequences' capacities.
    pub fn forward_batch_into(
        &self,
        run: &Runner,
        items: &mut [BatchItem],
        out: &mut StepOutputs,
    ) -> Result<(), ForwardError> {
        let ex = run.exec();
        let threads = ex.threads;
        for item in items.iter() {
            self.check(item)?;
        }
        let c = &self.config;
        let h = c.n_embd;
        // Row ranges of each item in the step's activation matrix.
        let mut spans = Reused::take(ex.ws);
        let mut n = 0;
        for item in items.iter() {
            spans.push(n..n + item.tokens.len());
            n += item.tokens.len();
        }
        let mut x = Buf::for_output(ex.ws, n * h);
        let embd = self.token_embd.view();
        for (t, &id) in items.iter().flat_map(|i| i.tokens).enumerate() {
            embd.dequantize_row(id as usize, &mut x[t * h..(t + 1) * h]);
        }

        let mut xn = Buf::for_output(ex.ws, n * h);
        // The last layer's FFN output, added to the residual stream with the
        // next norm (or after the loop).
        let mut pending: Option<Buf> = None;
        for (il, layer) in self.layers.iter().enumerate() {
            let (eps, prev) = (c.rms_eps, pending.take());
            add_then_norm(
                threads,
                h,
                &mut x,
                prev.as_deref(),
                &layer.attn_norm,
                eps,
                &mut xn,
            );
            // Each sequence's rows and its state of this layer (no list is
            // built: the mixers take them as they go).
            let mixed = match &layer.mixer {
                Mixer::Attention(w) => {
                    let seqs = items.iter_mut().zip(spans.iter()).map(|(item, span)| {
                        let (pos, capacity) = (item.state.pos, item.state.capacity);
                        match &mut item.state.layers[il] {
                            LayerState::Attention { k, v } => AttnSeq {
                                rows: span.clone(),
                                pos,
                                capacity,
                                k_cache: k,
                                v_cache: v,
                            },
                            _ => unreachable!("state layout is built from the same layer kinds"),
                        }
                    });
                    attention::forward(w, c, &self.rope_inv_freq, ex, &xn, n, seqs)
                }
                Mixer::Recurrent(w) => {
                    let seqs =
                        items.iter_mut().zip(spans.iter()).map(|(item, span)| {
                            match &mut item.state.layers[il] {
                                LayerState::Recurrent { conv, ssm } => GdnSeq {
                                    rows: span.clone(),
                                    conv,
                                    ssm,
                                },
                                _ => {
                                    unreachable!("state layout is built from the same layer kinds")
                                }
                            }
                        });
                    gdn::forward(w, c, ex, &xn, n, seqs)
                }
            };
            let post = &layer.post_attention_norm;
            add_then_norm(threads, h, &mut x, Some(&mixed), post, c.rms_eps, &mut xn);
            pending = Some(layer.ffn.forward(c, ex, &xn, n));
        }
        if let Some(f) = pending {
            for (xi, fi) in x.iter_mut().zip(f.iter()) {
                *xi += fi;
            }
        }
        for item in items.iter_mut() {
            item.state.pos += item.tokens.len();
        }

        // The final norm and the output head, on the rows someone asked
        // for, all at once, straight into the caller's buffers.
        let v = c.n_vocab;
        let mut rows = Reused::take(ex.ws);
        for (item, span) in items.iter().zip(spans.iter()) {
            if !item.outputs.wants_rows() {
                continue;
            }
            match item.outputs.rows {
                Rows::All => rows.extend(span.clone()),
                Rows::Last => rows.push(span.end - 1),
                Rows::None => {}
            }
        }
        let mut normed = Buf::for_output(ex.ws, rows.len() * h);
        for (i, &t) in rows.iter().enumerate() {
            rms_norm(
                &x[t * h..(t + 1) * h],
                &self.output_norm,
                c.rms_eps,
                &mut normed[i * h..(i + 1) * h],
            );
        }
        // Which of the normed rows go through the LM head, and where each
        // item's outputs land.
        let mut logit_rows = Reused::take(ex.ws);
        out.logit_spans.clear();
        out.hidden_spans.clear();
        out.hidden.clear();
        let mut at = 0;
        for item in items.iter() {
            let o = item.outputs;
            let n_rows = match o.rows {
                _ if !o.wants_rows() => 0,
                Rows::All => item.tokens.len(),
                Rows::Last => 1,
                Rows::None => 0,
            };
            let (lf, hf) = (logit_rows.len(), out.hidden.len());
            if o.logits {
                logit_rows.extend(at..at + n_rows);
            }
            if o.hidden {
                out.hidden
                    .extend_from_slice(&normed[at * h..(at + n_rows) * h]);
            }
            out.logit_spans.push(lf * v..logit_rows.len() * v);
            out.hidden_spans.push(hf..out.hidden.len());
            at += n_rows;
        }
        out.logits.clear();
        out.logits.resize(logit_rows.len() * v, 0.0);
        if !logit_rows.is_empty() {
            // Usually every normed row; otherwise the ones asked for, packed.
            let packed;
            let input: &[f32] = if logit_rows.len() == rows.len() {
                &normed
            } else {
                let mut p = Buf::for_output(ex.ws, logit_rows.len() * h);
                for (i, &r) in logit_rows.iter().enumerate() {
                    p[i * h..(i + 1) * h].copy_from_slice(&normed[r * h..(r + 1) * h]);
                }
                packed = p;
                &packed
            };
            matmul_in(
                ex.precision,
                threads,
                self.output_matrix().view(),
                input,
                logit_rows.len(),
                &mut out.logits,
            );
        }
        Ok(())
    }
}

/// `x[t] += add[t]` (when given), then `xn[t] = rms_norm(x[t]) ⊙ w`, for
/// every row of `h` values, rows in parallel (the same operations per row
/// as one after another).
fn add_then_norm(
    threads: &Threads,
    h: usize,
    x: &mut [f32],
    add: Option<&[f32]>,
    w: &[f32],
    eps: f32,
    xn: &mut [f32],
) {
    let n = x.len() / h;
    let (x_ptr, xn_ptr) = (SharedMut::new(x), SharedMut::new(xn));
    threads.for_ranges(n, 16, |t0, t1| {
        // SAFETY: rows t0..t1 of x and xn are this task's alone.
        let (x, xn) = unsafe {
            (
                std::slice::from_raw_parts_mut(x_ptr.at(t0 * h), (t1 - t0) * h),
                std::slice::from_raw_parts_mut(xn_ptr.at(t0 * h), (t1 - t0) * h),
            )
        };
        if let Some(add) = add {
            for (xi, ai) in x.iter_mut().zip(&add[t0 * h..t1 * h]) {
                *xi += ai;
            }
        }
        for (row, out) in x.chunks_exact(h).zip(xn.chunks_exact_mut(h)) {
            rms_norm(row, w, eps, out);
        }
    });
}
