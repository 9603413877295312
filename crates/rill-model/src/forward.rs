//! The forward pass: embeddings, the layer stack, the output head.
//!
//! A step runs any number of sequences at once, each with its own tokens
//! (a prefill chunk or one decode token) and state. Every weight matrix is
//! applied to all the step's tokens together, so its bytes are read once per
//! step for everyone — the mixers' projections included; only the
//! attention over a KV cache and the GDN conv + recurrence run per sequence,
//! on that sequence's slice of the rows and its own state.

use crate::config::{LayerKind, ModelConfig};
use crate::error::ForwardError;
use crate::layers::attention::{self, AttnSeq};
use crate::layers::gdn::{self, GdnSeq};
use crate::model::{Mixer, Model};
use crate::scratch::{Buf, Exec, Reused, Runner};
use crate::state::{LayerState, SequenceState, MAX_REWIND_ROWS};
use rill_kernels::ops::{rms_norm, rms_norm_inplace};
use rill_kernels::threads::SharedMut;
use rill_kernels::{matmul_on, MatRef, Threads};
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

/// What a step returns for one item: the logits of some of its rows, and
/// the hidden state after the final norm of some (what a draft head such as
/// MTP reads, and what embeddings are made of).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outputs {
    /// The rows whose logits come back.
    pub logits: Rows,
    /// The rows whose post-final-norm hidden state (`n_embd` values a row)
    /// comes back.
    pub hidden: Rows,
}

impl Outputs {
    /// Nothing back: the item only advances its state.
    pub const NONE: Outputs = Outputs {
        logits: Rows::None,
        hidden: Rows::None,
    };

    /// The logits of `rows`.
    pub const fn logits(rows: Rows) -> Outputs {
        Outputs {
            logits: rows,
            hidden: Rows::None,
        }
    }

    /// The hidden states of `rows`, no logits.
    pub const fn hidden(rows: Rows) -> Outputs {
        Outputs {
            logits: Rows::None,
            hidden: rows,
        }
    }

    /// The logits of the last position (a decode step, a prompt's end).
    pub const fn last_logits() -> Outputs {
        Outputs::logits(Rows::Last)
    }

    /// Also the hidden states of the rows whose logits come back.
    pub const fn with_hidden(self) -> Outputs {
        self.with_hidden_rows(self.logits)
    }

    /// Also the hidden states of `rows`.
    pub const fn with_hidden_rows(self, rows: Rows) -> Outputs {
        Outputs {
            hidden: rows,
            ..self
        }
    }

    /// The rows that go through the final norm: those of either output.
    fn normed_rows(&self) -> Rows {
        match (self.logits, self.hidden) {
            (Rows::All, _) | (_, Rows::All) => Rows::All,
            (Rows::Last, _) | (_, Rows::Last) => Rows::Last,
            _ => Rows::None,
        }
    }
}

/// How many of an item's `span_len` rows `rows` picks.
fn row_count(rows: Rows, span_len: usize) -> usize {
    match rows {
        Rows::All => span_len,
        Rows::Last => 1,
        Rows::None => 0,
    }
}

/// One sequence's part of a batched step.
pub struct BatchItem<'a> {
    pub state: &'a mut SequenceState,
    pub tokens: &'a [u32],
    pub outputs: Outputs,
    /// Keep what [`SequenceState::rewind`] needs to cut this step back to
    /// any of its rows (a speculative verify step): the recurrent layers run
    /// token by token, as decoding does, and keep their state after each
    /// row. At most [`crate::MAX_REWIND_ROWS`] tokens.
    pub rewindable: bool,
}

impl<'a> BatchItem<'a> {
    /// An ordinary step's item (not rewindable).
    pub fn new(state: &'a mut SequenceState, tokens: &'a [u32], outputs: Outputs) -> Self {
        BatchItem {
            state,
            tokens,
            outputs,
            rewindable: false,
        }
    }
}

/// One sequence's part of an MTP-head step
/// ([`Model::forward_mtp_into`]).
pub struct MtpItem<'a> {
    /// The sequence; its MTP KV cache advances by `tokens.len()`.
    pub state: &'a mut SequenceState,
    /// Token `x_p` for each of the head's next positions `p` (from
    /// [`SequenceState::mtp_position`] on).
    pub tokens: &'a [u32],
    /// One `n_embd` row per token, the state paired with `x_p`: the trunk's
    /// post-final-norm hidden of position `p − 1` (zeros for a sequence's
    /// first row), or, for a chained draft step, the head's own `hidden`
    /// output of the step before.
    pub hidden: &'a [f32],
    /// Logits (of `x_{p+1}`) and/or the head's output after
    /// `shared_head_norm`.
    pub outputs: Outputs,
}

/// How an MTP-head step runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MtpOptions {
    /// Logits of only the first `n` vocabulary rows (the most frequent
    /// tokens in a BPE vocabulary, whose ids follow merge order): a draft
    /// only proposes, and the target verifies over the whole vocabulary, so
    /// a narrower head saves most of the head's LM product on a large
    /// vocabulary for little acceptance. `None`: the whole vocabulary.
    pub vocab_rows: Option<usize>,
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
        let mut items = [BatchItem::new(state, tokens, outputs)];
        self.forward_batch_into(run, &mut items, out)
    }

    /// A step's tokens: at least one, each inside the vocabulary.
    fn check_tokens(&self, tokens: &[u32]) -> Result<(), ForwardError> {
        if tokens.is_empty() {
            return Err(ForwardError::Empty);
        }
        let n_vocab = self.config.n_vocab;
        match tokens.iter().find(|&&t| t as usize >= n_vocab) {
            Some(&id) => Err(ForwardError::TokenOutOfRange { id, n_vocab }),
            None => Ok(()),
        }
    }

    fn check(&self, item: &BatchItem) -> Result<(), ForwardError> {
        let n = item.tokens.len();
        self.check_tokens(item.tokens)?;
        if item.state.pos + n > item.state.capacity {
            return Err(ForwardError::ContextFull {
                needed: item.state.pos + n,
                capacity: item.state.capacity,
            });
        }
        if item.rewindable && self.output_hyper.is_some() {
            return Err(ForwardError::NoRewind {
                arch: self.config.arch.name(),
            });
        }
        if item.rewindable && n > MAX_REWIND_ROWS {
            return Err(ForwardError::RewindRows {
                rows: n,
                max: MAX_REWIND_ROWS,
            });
        }
        Ok(())
    }

    /// Arm (or clear) each item's rewind ring for this step: room for a
    /// snapshot after each row but the last, reserved once per sequence.
    fn prepare_rewind(&self, items: &mut [BatchItem]) {
        let c = &self.config;
        let conv_len = (c.conv_kernel - 1) * c.conv_dim();
        let ssm_len = c.ssm_n_v_heads * c.ssm_head_dim * c.ssm_head_dim;
        let recurrent = c
            .layer_kinds
            .iter()
            .filter(|k| **k == LayerKind::Recurrent)
            .count();
        for item in items.iter_mut() {
            let (pos, ring) = (item.state.pos, &mut item.state.ring);
            ring.start = pos;
            ring.rows = 0;
            if item.rewindable && item.tokens.len() > 1 {
                let slots = item.tokens.len() - 1;
                ring.layers.resize_with(recurrent, Default::default);
                for layer in &mut ring.layers {
                    layer.reserve(slots, conv_len, ssm_len);
                }
                ring.rows = item.tokens.len();
            }
        }
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
        self.prepare_rewind(items);
        let c = &self.config;
        let h = c.n_embd;
        let (spans, n) = row_spans(ex.ws, items.iter().map(|i| i.tokens.len()));
        if let Some(final_mix) = &self.output_hyper {
            return self.forward_hyper(ex, final_mix, items, &spans, n, out);
        }
        let mut x = Buf::for_output(ex.ws, n * h);
        let embd = self.token_embd.view();
        for (t, &id) in items.iter().flat_map(|i| i.tokens).enumerate() {
            embd.dequantize_row(ex.isa, id as usize, &mut x[t * h..(t + 1) * h]);
        }

        let mut xn = Buf::for_output(ex.ws, n * h);
        // The last layer's FFN output, added to the residual stream with the
        // next norm (or after the loop).
        let mut pending: Option<Buf> = None;
        // The index of the current layer among the recurrent ones (its
        // rewind ring's layer).
        let mut recurrent_index = 0;
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
                            LayerState::Attention { kv } => AttnSeq {
                                rows: span.clone(),
                                pos,
                                capacity,
                                kv,
                                index: None,
                            },
                            _ => unreachable!("state layout is built from the same layer kinds"),
                        }
                    });
                    attention::forward(w, c, &self.rope, ex, &xn, n, seqs)
                }
                Mixer::Recurrent(w) => {
                    let ri = recurrent_index;
                    recurrent_index += 1;
                    let seqs = items.iter_mut().zip(spans.iter()).map(|(item, span)| {
                        let st = &mut *item.state;
                        let ring = (st.ring.rows > 1).then(|| &mut st.ring.layers[ri]);
                        match &mut st.layers[il] {
                            LayerState::Recurrent { conv, ssm } => GdnSeq {
                                rows: span.clone(),
                                conv,
                                ssm,
                                ring,
                            },
                            _ => unreachable!("state layout is built from the same layer kinds"),
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
        let head = self.output_matrix().view();
        let (outputs, norm) = (
            |i: usize| items[i].outputs,
            Some(self.output_norm.as_slice()),
        );
        emit(ex, c, &x, &spans, outputs, norm, head, out);
        Ok(())
    }

    fn check_mtp(&self, item: &MtpItem) -> Result<(), ForwardError> {
        let c = &self.config;
        let n = item.tokens.len();
        self.check_tokens(item.tokens)?;
        if item.hidden.len() != n * c.n_embd {
            return Err(ForwardError::HiddenRows {
                got: item.hidden.len(),
                want: n * c.n_embd,
            });
        }
        let pos = item.state.mtp.as_ref().ok_or(ForwardError::NoMtp)?.pos;
        if pos + n > item.state.capacity {
            return Err(ForwardError::ContextFull {
                needed: pos + n,
                capacity: item.state.capacity,
            });
        }
        Ok(())
    }

    /// One step of the MTP head over several sequences (DESIGN.md §2.4,
    /// wave2.md A.4): for each row, token `x_p` at the head's next position
    /// `p` paired with its hidden row `h`,
    /// `z = eh_proj · [enorm(embed(x_p)); hnorm(h)]`, then the block (the
    /// trunk's attention and FFN code, over the head's own KV cache in each
    /// state), then `shared_head_norm` — the item's `hidden` output, which
    /// later draft steps feed back — and the LM head (its `logits`).
    ///
    /// Only the head's position advances (by each item's token count); the
    /// trunk's state is not touched. Every item is checked first, so a
    /// refused step changes nothing. Like
    /// [`forward_batch_into`](Self::forward_batch_into), a step of a shape
    /// that has run before allocates nothing.
    pub fn forward_mtp_into(
        &self,
        run: &Runner,
        items: &mut [MtpItem],
        out: &mut StepOutputs,
    ) -> Result<(), ForwardError> {
        self.forward_mtp_with(run, items, MtpOptions::default(), out)
    }

    /// [`forward_mtp_into`](Self::forward_mtp_into) with `options` (a
    /// draft's narrower LM head).
    pub fn forward_mtp_with(
        &self,
        run: &Runner,
        items: &mut [MtpItem],
        options: MtpOptions,
        out: &mut StepOutputs,
    ) -> Result<(), ForwardError> {
        let m = self.mtp.as_ref().ok_or(ForwardError::NoMtp)?;
        for item in items.iter() {
            self.check_mtp(item)?;
        }
        let ex = run.exec();
        let threads = ex.threads;
        let c = &self.config;
        let h = c.n_embd;
        let (spans, n) = row_spans(ex.ws, items.iter().map(|i| i.tokens.len()));
        // [enorm(embedding) ; hnorm(hidden)] per row: the embedding first.
        let mut cat = Buf::for_output(ex.ws, n * 2 * h);
        let embd = m.embed.as_ref().unwrap_or(&self.token_embd).view();
        let rows = items
            .iter()
            .flat_map(|i| i.tokens.iter().zip(i.hidden.chunks_exact(h)));
        for ((&id, hid), row) in rows.zip(cat.chunks_exact_mut(2 * h)) {
            let (e, hn) = row.split_at_mut(h);
            embd.dequantize_row(ex.isa, id as usize, e);
            rms_norm_inplace(e, &m.enorm, c.rms_eps);
            rms_norm(hid, &m.hnorm, c.rms_eps, hn);
        }
        let mut x = Buf::for_output(ex.ws, n * h);
        matmul_on(
            ex.isa,
            ex.precision,
            threads,
            m.eh_proj.view(),
            &cat,
            n,
            &mut x,
        );
        drop(cat);

        // The block, as a trunk attention layer, over the head's own cache.
        let layer = &m.layer;
        let Mixer::Attention(w) = &layer.mixer else {
            unreachable!("the MTP block is bound as an attention layer")
        };
        let mut xn = Buf::for_output(ex.ws, n * h);
        add_then_norm(
            threads,
            h,
            &mut x,
            None,
            &layer.attn_norm,
            c.rms_eps,
            &mut xn,
        );
        let seqs = items.iter_mut().zip(spans.iter()).map(|(item, span)| {
            let capacity = item.state.capacity;
            let s = item.state.mtp.as_mut().expect("checked above");
            AttnSeq {
                rows: span.clone(),
                pos: s.pos,
                capacity,
                kv: &mut s.kv,
                index: None,
            }
        });
        let mixed = attention::forward(w, c, &self.rope, ex, &xn, n, seqs);
        let post = &layer.post_attention_norm;
        add_then_norm(threads, h, &mut x, Some(&mixed), post, c.rms_eps, &mut xn);
        drop(mixed);
        let f = layer.ffn.forward(c, ex, &xn, n);
        for (xi, fi) in x.iter_mut().zip(f.iter()) {
            *xi += fi;
        }
        drop(f);
        for item in items.iter_mut() {
            if let Some(s) = &mut item.state.mtp {
                s.pos += item.tokens.len();
            }
        }
        let mut head = self.mtp_head_matrix(m).view();
        if let Some(rows) = options.vocab_rows {
            head = head.slice_rows(0, rows.clamp(1, c.n_vocab));
        }
        let (outputs, norm) = (
            |i: usize| items[i].outputs,
            Some(m.shared_head_norm.as_slice()),
        );
        emit(ex, c, &x, &spans, outputs, norm, head, out);
        Ok(())
    }
}

/// The end of a step, trunk or MTP head: `norm` (none after a final
/// hyper-connection mix) and the `head` projection on the rows the items
/// asked for, all at once, into `out` (item `i` has rows `spans[i]` of `x`
/// and asked for `outputs(i)`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn emit(
    ex: Exec<'_>,
    c: &ModelConfig,
    x: &[f32],
    spans: &[Range<usize>],
    outputs: impl Fn(usize) -> Outputs,
    norm: Option<&[f32]>,
    head: MatRef<'_>,
    out: &mut StepOutputs,
) {
    let threads = ex.threads;
    let (h, v) = (c.n_embd, head.rows);
    let mut rows = Reused::take(ex.ws);
    for (i, span) in spans.iter().enumerate() {
        match outputs(i).normed_rows() {
            Rows::All => rows.extend(span.clone()),
            Rows::Last => rows.push(span.end - 1),
            Rows::None => {}
        }
    }
    let mut normed = Buf::for_output(ex.ws, rows.len() * h);
    for (i, &t) in rows.iter().enumerate() {
        let (src, dst) = (&x[t * h..(t + 1) * h], &mut normed[i * h..(i + 1) * h]);
        match norm {
            Some(w) => rms_norm(src, w, c.rms_eps, dst),
            None => dst.copy_from_slice(src),
        }
    }
    // Which of the normed rows go through the LM head, and where each
    // item's outputs land. An item's normed rows are all its rows or its
    // last; each output takes all of them or the last.
    let mut logit_rows = Reused::take(ex.ws);
    out.logit_spans.clear();
    out.hidden_spans.clear();
    out.hidden.clear();
    let mut at = 0;
    for (i, span) in spans.iter().enumerate() {
        let o = outputs(i);
        let n_rows = row_count(o.normed_rows(), span.len());
        let (lf, hf) = (logit_rows.len(), out.hidden.len());
        let n_logits = row_count(o.logits, span.len());
        logit_rows.extend(at + n_rows - n_logits..at + n_rows);
        let n_hidden = row_count(o.hidden, span.len());
        out.hidden
            .extend_from_slice(&normed[(at + n_rows - n_hidden) * h..(at + n_rows) * h]);
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
        matmul_on(
            ex.isa,
            ex.precision,
            threads,
            head,
            input,
            logit_rows.len(),
            &mut out.logits,
        );
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

/// The row range of each item (of `lens` rows each) in a step's activation
/// matrix, and the matrix's row count.
fn row_spans<'w>(
    ws: &'w crate::scratch::Workspace,
    lens: impl Iterator<Item = usize>,
) -> (Reused<'w, std::ops::Range<usize>>, usize) {
    let mut spans = Reused::take(ws);
    let mut n = 0;
    for len in lens {
        spans.push(n..n + len);
        n += len;
    }
    (spans, n)
}
