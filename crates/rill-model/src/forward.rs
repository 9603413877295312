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
use crate::scratch::{Buf, Reused};
use crate::state::{LayerState, SequenceState};
use rill_kernels::ops::rms_norm;
use rill_kernels::threads::SharedMut;
use rill_kernels::{matmul_in, Threads};
use std::cell::Cell;
use std::ops::Range;

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

/// The logits of a step, in one buffer that a caller keeps and passes to
/// every [`Model::forward_batch_into`]: it grows to the largest step and is
/// then reused, so decoding allocates nothing for them.
#[derive(Clone, Debug, Default)]
pub struct StepLogits {
    /// The rows of every item, item after item: `[rows × n_vocab]`.
    data: Vec<f32>,
    /// Each item's part of `data`.
    spans: Vec<Range<usize>>,
}

impl StepLogits {
    pub fn new() -> StepLogits {
        StepLogits::default()
    }

    /// Item `i`'s logits, as its [`Logits`] asked: `[n_tokens × n_vocab]`
    /// (`All`), `[n_vocab]` (`Last`) or nothing (`None`).
    pub fn get(&self, i: usize) -> &[f32] {
        &self.data[self.spans[i].clone()]
    }

    /// Items of the last step.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Every item's logits, in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[f32]> + '_ {
        self.spans.iter().map(|s| &self.data[s.clone()])
    }
}

thread_local! {
    static SPANS: Cell<Vec<Range<usize>>> = const { Cell::new(Vec::new()) };
    static ROWS: Cell<Vec<usize>> = const { Cell::new(Vec::new()) };
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
        let mut out = StepLogits::new();
        self.forward_into(threads, state, tokens, want, &mut out)?;
        Ok(out.data)
    }

    /// [`forward`](Self::forward) into a kept [`StepLogits`] (its item 0).
    pub fn forward_into(
        &self,
        threads: &Threads,
        state: &mut SequenceState,
        tokens: &[u32],
        want: Logits,
        out: &mut StepLogits,
    ) -> Result<(), ForwardError> {
        let mut items = [BatchItem {
            state,
            tokens,
            logits: want,
        }];
        self.forward_batch_into(threads, &mut items, out)
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
        let mut out = StepLogits::new();
        self.forward_batch_into(threads, items, &mut out)?;
        Ok(out.iter().map(<[f32]>::to_vec).collect())
    }

    /// [`forward_batch`](Self::forward_batch) into a kept [`StepLogits`]:
    /// the serving loop's form. Once a step of the same shape has run (one
    /// decode token per sequence), a step makes no heap allocation: its
    /// temporaries come from per-thread buffers (`crate::scratch`) and the
    /// KV caches are reserved for the sequences' capacities.
    pub fn forward_batch_into(
        &self,
        threads: &Threads,
        items: &mut [BatchItem],
        out: &mut StepLogits,
    ) -> Result<(), ForwardError> {
        for item in items.iter() {
            self.check(item)?;
        }
        let c = &self.config;
        let h = c.n_embd;
        // Row ranges of each item in the step's activation matrix.
        let mut spans = Reused::take(&SPANS);
        let mut n = 0;
        for item in items.iter() {
            spans.push(n..n + item.tokens.len());
            n += item.tokens.len();
        }
        let mut x = Buf::for_output(n * h);
        let embd = self.token_embd.view();
        for (t, &id) in items.iter().flat_map(|i| i.tokens).enumerate() {
            embd.dequantize_row(id as usize, &mut x[t * h..(t + 1) * h]);
        }

        let mut xn = Buf::for_output(n * h);
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
                    attention::forward(w, c, &self.rope_inv_freq, threads, &xn, n, seqs)
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
                    gdn::forward(w, c, threads, &xn, n, seqs)
                }
            };
            let post = &layer.post_attention_norm;
            add_then_norm(threads, h, &mut x, Some(&mixed), post, c.rms_eps, &mut xn);
            pending = Some(layer.ffn.forward(c, threads, &xn, n));
        }
        if let Some(f) = pending {
            for (xi, fi) in x.iter_mut().zip(f.iter()) {
                *xi += fi;
            }
        }
        for item in items.iter_mut() {
            item.state.pos += item.tokens.len();
        }

        // The output head, on the rows someone asked for, all at once,
        // straight into the caller's buffer.
        let v = c.n_vocab;
        let mut rows = Reused::take(&ROWS);
        out.spans.clear();
        for (item, span) in items.iter().zip(spans.iter()) {
            let first = rows.len();
            match item.logits {
                Logits::All => rows.extend(span.clone()),
                Logits::Last => rows.push(span.end - 1),
                Logits::None => {}
            }
            out.spans.push(first * v..rows.len() * v);
        }
        out.data.clear();
        out.data.resize(rows.len() * v, 0.0);
        if !rows.is_empty() {
            let mut normed = Buf::for_output(rows.len() * h);
            for (i, &t) in rows.iter().enumerate() {
                rms_norm(
                    &x[t * h..(t + 1) * h],
                    &self.output_norm,
                    c.rms_eps,
                    &mut normed[i * h..(i + 1) * h],
                );
            }
            matmul_in(
                c.precision,
                threads,
                self.output_matrix().view(),
                &normed,
                rows.len(),
                &mut out.data,
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
