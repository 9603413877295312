//! One sequence's life in the engine, the same for every front end.
//!
//! A sequence is admitted with a state (fresh, or resumed from the prompt
//! cache), prefills its prompt a chunk per step, then takes one token per
//! step: sampled from the step's logits, checked against end of generation,
//! the stop strings, the token budget and the context, turned into text, and
//! sent to the client as an [`Event`]. It finishes with exactly one
//! [`Event::Done`] (or [`Event::Error`]).

use crate::indent::IndentLimit;
use crate::metrics::Metrics;
use crate::output::TextOutput;
use crate::request::{Done, Event, Failure, FinishReason, PromptProgress, Request, TokenInfo};
use crate::speculation::{Speculation, MAX_DRAFT};
use crate::thinking::Thinking;
use rill_grammar::Constraint;
use rill_model::{BatchItem, MtpItem, Outputs, Rows, SequenceState};
use rill_sampler::{Drawn, Sampler};
use rill_tokenizer::Tokenizer;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc::UnboundedSender;

/// A request as the worker holds it: where its events go, and whether its
/// client still wants it.
pub(crate) struct Submitted {
    pub req: Request,
    /// The request's grammar, compiled at submission.
    pub constraint: Option<Constraint>,
    pub events: UnboundedSender<Event>,
    pub cancel: Arc<AtomicBool>,
    pub at: Instant,
}

impl Submitted {
    /// The client cancelled or went away.
    pub fn is_gone(&self) -> bool {
        self.cancel.load(Relaxed) || self.events.is_closed()
    }
}

/// What the worker shares with every sequence when it takes a token.
pub(crate) struct TokenContext<'a> {
    pub tok: &'a Tokenizer,
    pub metrics: &'a Metrics,
    /// Logits per row (the model's vocabulary).
    pub n_vocab: usize,
}

/// A running sequence.
pub(crate) struct Sequence {
    pub sub: Submitted,
    pub state: SequenceState,
    /// Prompt tokens already in the state.
    fed: usize,
    /// Of those, how many came from the prompt cache.
    cached: usize,
    /// The token to feed next once generating (the last sampled one).
    next_input: Option<u32>,
    /// Prompt and generated tokens (the penalties' window).
    history: Vec<u32>,
    generated: usize,
    sampler: Sampler,
    out: TextOutput,
    /// `min_indent`'s watch over the text, when the request sets one.
    indent: Option<IndentLimit>,
    admitted_at: Instant,
    first_token_at: Option<Instant>,
    /// When the last token was committed (the inter-token latency's start).
    last_token_at: Option<Instant>,
    /// Structured output: the grammar, whether it applies yet, and the
    /// masked copy of the logits row (kept: no allocation per token).
    constraint: Option<Constrained>,
    /// Speculative decoding with the MTP head, when this sequence uses it.
    spec: Option<Speculation>,
    /// The thinking block's budget, while the block is open.
    thinking: Option<Thinking>,
    /// Bytes of the memory budget this sequence reserved (its worst case).
    pub reserved: usize,
    /// The prompt's tokens with their log-probabilities so far (requests
    /// with `prompt_logprobs`), sent once the prompt has run.
    prompt_info: Vec<TokenInfo>,
    /// The stop string that ended the sequence.
    stop_word: Option<String>,
    /// The logits row with the ending tokens out, before `min_tokens`
    /// (kept: no allocation per token).
    banned: Vec<f32>,
}

/// How a step ended a sequence.
enum End {
    Done(Done),
    Failed(Failure),
}

impl End {
    fn into_result(self) -> Result<Done, Failure> {
        match self {
            End::Done(d) => Ok(d),
            End::Failed(why) => Err(why),
        }
    }
}

struct Constrained {
    grammar: Constraint,
    active: bool,
    after: Option<u32>,
    masked: Vec<f32>,
    /// Drafts of this step taken into the grammar's state (taken back
    /// before the verify step).
    drafts_in_grammar: usize,
    /// A rollback failed: the grammar's state no longer follows the text.
    broken: bool,
}

/// `row` under the grammar's mask when one applies (a copy, kept), or
/// `row` itself; `Err` when the grammar broke down or allows nothing.
fn masked<'a>(
    constraint: &'a mut Option<Constrained>,
    row: &'a [f32],
) -> Result<&'a [f32], Failure> {
    match constraint {
        Some(k) if k.broken => Err(Failure::Internal("the grammar's state was lost".into())),
        Some(k) if k.active => {
            k.masked.clear();
            k.masked.extend_from_slice(row);
            match k.grammar.mask(&mut k.masked) {
                Ok(n) if n > 0 => Ok(&k.masked),
                Ok(_) => Err(Failure::Grammar("the grammar allows no next token".into())),
                Err(e) => Err(Failure::Grammar(e.0)),
            }
        }
        _ => Ok(row),
    }
}

impl Sequence {
    pub fn new(
        mut sub: Submitted,
        state: SequenceState,
        cached: usize,
        sampler: Sampler,
    ) -> Sequence {
        let after = sub.req.constraint.as_ref().and_then(|c| c.after);
        let constraint = sub.constraint.take().map(|grammar| Constrained {
            grammar,
            active: after.is_none(),
            after,
            masked: Vec::new(),
            drafts_in_grammar: 0,
            broken: false,
        });
        let thinking = sub.req.thinking_budget.clone().map(Thinking::new);
        let mut sampler = sampler;
        if let (Some(k), true) = (sub.req.logprobs, sub.req.post_sampling_probs) {
            sampler.record_draws(k);
        }
        Sequence {
            constraint,
            thinking,
            history: sub.req.prompt.clone(),
            out: TextOutput::new(&sub.req.stop, sub.req.include_stop_str),
            indent: IndentLimit::new(sub.req.min_indent),
            sub,
            state,
            fed: cached,
            cached,
            next_input: None,
            generated: 0,
            reserved: 0,
            sampler,
            admitted_at: Instant::now(),
            first_token_at: None,
            last_token_at: None,
            spec: None,
            prompt_info: Vec::new(),
            stop_word: None,
            banned: Vec::new(),
        }
    }

    /// Speculate with `spec` (the engine checked that the model has a head
    /// and that the state's head cache is where the trunk is). With a
    /// grammar, each draft is drawn under the grammar's mask of the state
    /// the drafts before it lead to, and each verify row is masked the same
    /// way, so the output is the one plain constrained decoding gives.
    pub fn with_speculation(mut self, spec: Speculation) -> Sequence {
        self.spec = Some(spec);
        self
    }

    pub fn speculates(&self) -> bool {
        self.spec.is_some()
    }

    /// Plan this decoding step's draft: how many tokens the context and the
    /// token budget leave room for. True when the head has rows to take.
    pub fn plan_draft(&mut self) -> bool {
        let (Some(spec), Some(next)) = (self.spec.as_mut(), self.next_input) else {
            return false;
        };
        let room = (self.state.capacity() - self.state.position())
            .saturating_sub(1)
            .min(self.sub.req.max_tokens.saturating_sub(self.generated + 1))
            .min(MAX_DRAFT)
            // Closing a thinking block is written, not drafted.
            .min(
                self.thinking
                    .as_ref()
                    .map_or(usize::MAX, Thinking::free_tokens),
            );
        spec.plan(&self.state, next, room);
        true
    }

    /// Plan the head's catch-up on the prompt rows the trunk just took.
    pub fn plan_catch_up(&mut self) -> bool {
        match self.spec.as_mut() {
            Some(spec) => {
                spec.plan_catch_up(&self.state);
                true
            }
            None => false,
        }
    }

    /// The head's first step of this round for this sequence.
    pub fn first_draft_item(&mut self) -> Option<MtpItem<'_>> {
        self.spec.as_mut()?.first_item(&mut self.state)
    }

    /// The head's next chained draft step for this sequence.
    pub fn next_draft_item(&mut self) -> Option<MtpItem<'_>> {
        self.spec.as_mut()?.next_item(&mut self.state)
    }

    pub fn is_drafting(&self) -> bool {
        self.spec.as_ref().is_some_and(Speculation::is_extending)
    }

    /// Take the head's output for this sequence's last draft step. Under
    /// an active grammar the head's row is masked first, and the draft goes
    /// into the grammar's state until the trunk's step (see
    /// [`Sequence::batch_item`]).
    pub fn take_draft(&mut self, logits: &[f32], hidden: &[f32], tok: &Tokenizer) {
        let Some(spec) = &mut self.spec else {
            return;
        };
        let Some(k) = self.constraint.as_mut().filter(|k| k.active) else {
            spec.take_draft(logits, hidden);
            return;
        };
        k.masked.clear();
        k.masked.extend_from_slice(logits);
        // A grammar that breaks down or allows nothing stops the draft: the
        // verify step finds out and says so.
        if !matches!(k.grammar.mask(&mut k.masked), Ok(n) if n > 0) {
            spec.stop_drafting();
            return;
        }
        let before = spec.drafted_now();
        spec.take_draft(&k.masked, hidden);
        if let Some(d) = spec.draft(before).filter(|_| spec.drafted_now() > before) {
            // Nothing follows the end of the turn.
            if tok.is_eog(d) || k.grammar.commit(d).is_err() {
                spec.stop_drafting();
            } else {
                k.drafts_in_grammar += 1;
            }
        }
    }

    /// Stop speculating (the head failed): decoding goes on plainly.
    pub fn stop_speculating(&mut self) {
        self.spec = None;
    }

    /// A prompt chunk `span` went through the trunk with these hidden rows:
    /// queue them for the head.
    pub fn record_prefill(&mut self, span: &Range<usize>, hidden: &[f32]) {
        if let Some(spec) = &mut self.spec {
            let tokens = &self.sub.req.prompt[span.clone()];
            spec.record_prefill(&mut self.state, span.start, tokens, hidden);
        }
    }

    /// A prompt chunk `span` went through the trunk with these logits rows
    /// (every row's, when the request asks for prompt log-probabilities):
    /// each row scores the prompt token after it. Sent as
    /// [`Event::Prompt`] when the prompt's last chunk has run.
    pub fn record_prompt_logprobs(&mut self, span: &Range<usize>, logits: &[f32], n_vocab: usize) {
        let Some(k) = self.sub.req.prompt_logprobs else {
            return;
        };
        let prompt = &self.sub.req.prompt;
        if span.start == 0 {
            self.prompt_info.push(TokenInfo {
                id: prompt[0],
                logprob: None,
                rank: None,
                top: Vec::new(),
            });
        }
        for (j, row) in logits.chunks_exact(n_vocab.max(1)).enumerate() {
            let Some(&id) = prompt.get(span.start + j + 1) else {
                break;
            };
            let lp = rill_sampler::logprobs(row, id, k);
            self.prompt_info.push(TokenInfo {
                id,
                logprob: Some(lp.chosen),
                rank: Some(lp.rank),
                top: lp.top,
            });
        }
        if span.end == prompt.len() {
            let tokens = std::mem::take(&mut self.prompt_info);
            let _ = self.sub.events.send(Event::Prompt { tokens });
        }
    }

    pub fn in_prefill(&self) -> bool {
        self.fed < self.sub.req.prompt.len()
    }

    /// The prompt tokens this sequence prefills this step. Chunk boundaries
    /// depend only on the prompt (and the cached prefix length), never on
    /// what else runs, so a request gets the same tokens alone or in a crowd.
    pub fn prefill_span(&self, chunk: usize, n_vocab: usize) -> Range<usize> {
        let chunk = match self.sub.req.prompt_logprobs {
            // Every row's logits come back: bounded per chunk.
            Some(_) => chunk.min(crate::request::PROMPT_LOGITS_BYTES / (4 * n_vocab.max(1))),
            None => chunk,
        }
        .max(1);
        let prompt = &self.sub.req.prompt;
        let mut end = ((self.fed / chunk + 1) * chunk).min(prompt.len());
        // Stop at a requested snapshot point inside this chunk.
        if let Some(&p) = self
            .sub
            .req
            .cache_points
            .iter()
            .filter(|&&p| p > self.fed && p < end)
            .min()
        {
            end = p;
        }
        self.fed..end
    }

    /// This sequence's part of the step: a prompt chunk (`span`) or the last
    /// sampled token, borrowed where they are.
    pub fn batch_item(&mut self, span: Option<&Range<usize>>) -> BatchItem<'_> {
        if let Some(k) = &mut self.constraint {
            // The grammar back at the last committed token: the verify rows
            // replay the drafts the target keeps.
            if k.drafts_in_grammar > 0 {
                let n = std::mem::take(&mut k.drafts_in_grammar);
                if k.grammar.rollback(n).is_err() {
                    k.broken = true;
                }
            }
        }
        let prompt = &self.sub.req.prompt;
        let speculating = self.spec.is_some();
        let (tokens, last) = match (span, &mut self.spec) {
            (Some(r), _) => (&prompt[r.clone()], r.end == prompt.len()),
            (None, Some(spec)) => (spec.verify_tokens(), true),
            (None, None) => (
                std::slice::from_ref(
                    self.next_input
                        .as_ref()
                        .expect("a generating sequence has a token to feed"),
                ),
                true,
            ),
        };
        let logits = match (
            last,
            span.is_some() && self.sub.req.prompt_logprobs.is_some(),
        ) {
            (_, true) => Rows::All,
            (true, false) => Rows::Last,
            (false, false) => Rows::None,
        };
        let outputs = match (span, speculating) {
            (_, false) => Outputs::logits(logits),
            // The head reads the trunk's hidden state of every row kept.
            (Some(_), true) => Outputs::logits(logits).with_hidden_rows(Rows::All),
            (None, true) => Outputs::logits(Rows::All).with_hidden(),
        };
        BatchItem {
            state: &mut self.state,
            rewindable: span.is_none() && tokens.len() > 1,
            tokens,
            outputs,
        }
    }

    /// The step fed prompt tokens up to `end`; true when the prompt is not
    /// done yet (no token to take this step).
    pub fn prefilled_to(&mut self, end: usize) -> bool {
        self.fed = end;
        self.report_progress();
        self.in_prefill()
    }

    /// [`Event::Progress`] up to the tokens fed, when the request asks.
    pub fn report_progress(&self) {
        if self.sub.req.report_progress {
            let _ = self.sub.events.send(Event::Progress(PromptProgress {
                total: self.sub.req.prompt.len(),
                cached: self.cached,
                processed: self.fed,
                elapsed: self.admitted_at.elapsed(),
            }));
        }
    }

    /// Prompt tokens in the state, the prompt's prefix a snapshot would hold.
    pub fn fed_prompt(&self) -> &[u32] {
        &self.sub.req.prompt[..self.fed]
    }

    /// Sample the next token from `row`, send its text, and say whether the
    /// sequence is done: `Ok` with its figures, or `Err` with why it failed
    /// (the worker then sends an error instead of `Done`).
    pub fn take_token(&mut self, row: &[f32], cx: &TokenContext) -> Option<Result<Done, Failure>> {
        self.take(row, cx).map(End::into_result)
    }

    /// A speculative step's rows came back (`logits` and `hidden` of the
    /// token fed and each draft): the target's sampler walks them, keeping
    /// the drafts it agrees with and one token of its own, each sent as it
    /// is taken; then the state is rewound to the rows kept.
    pub fn take_verified(
        &mut self,
        logits: &[f32],
        hidden: &[f32],
        cx: &TokenContext,
    ) -> Option<Result<Done, Failure>> {
        let v = cx.n_vocab.max(1);
        let rows = logits.len() / v;
        let start = self.state.position() - rows;
        let mut kept = 0;
        for (i, row) in logits.chunks_exact(v).enumerate() {
            let draft = self.spec.as_ref().and_then(|s| s.draft(i));
            self.sampler.forget_draw();
            let id = match (self.forced()).map_or_else(|| self.draw(row, draft, cx.tok), Ok) {
                Ok(id) => id,
                Err(why) => return Some(self.fail(why).into_result()),
            };
            kept = i + 1;
            if let Some(end) = self.commit(id, row, start + kept, cx) {
                return Some(end.into_result());
            }
            if draft != Some(id) {
                break;
            }
        }
        let spec = self.spec.as_mut().expect("a verify step speculates");
        if let Err(e) = spec.settle(&mut self.state, start, kept, hidden, cx.metrics) {
            return Some(Err(Failure::Internal(format!("speculation: {e}"))));
        }
        None
    }

    /// The token the engine writes next itself (closing a thinking block
    /// whose budget is spent), instead of sampling.
    fn forced(&self) -> Option<u32> {
        self.thinking.as_ref().and_then(Thinking::forced)
    }

    fn take(&mut self, row: &[f32], cx: &TokenContext) -> Option<End> {
        self.sampler.forget_draw();
        let id = match (self.forced()).map_or_else(|| self.draw(row, None, cx.tok), Ok) {
            Ok(id) => id,
            Err(why) => return Some(self.fail(why)),
        };
        let fed = self.state.position();
        self.commit(id, row, fed, cx)
    }

    /// The next token ([`Self::draw_under`]); before `min_tokens`, with the
    /// end-of-generation and stop tokens out of the row.
    fn draw(&mut self, row: &[f32], draft: Option<u32>, tok: &Tokenizer) -> Result<u32, Failure> {
        let req = &self.sub.req;
        let eog = if req.ignore_eos {
            &[][..]
        } else {
            tok.eog_ids()
        };
        if self.generated >= req.min_tokens || (eog.is_empty() && req.stop_token_ids.is_empty()) {
            return self.draw_under(row, draft);
        }
        let mut banned = std::mem::take(&mut self.banned);
        banned.clear();
        banned.extend_from_slice(row);
        for &id in eog.iter().chain(&req.stop_token_ids) {
            if let Some(l) = banned.get_mut(id as usize) {
                *l = f32::NEG_INFINITY;
            }
        }
        let got = self.draw_under(&banned, draft);
        self.banned = banned;
        got
    }

    /// The next token, sampled under the grammar's mask (verifying `draft`
    /// when there is one). A greedy sampler's pick over the whole row is
    /// kept when the grammar allows it: the masked row's pick is then the
    /// same token (masking only removes others), and the mask's pass over
    /// the vocabulary is spared.
    fn draw_under(&mut self, row: &[f32], draft: Option<u32>) -> Result<u32, Failure> {
        if let Some(k) = self.constraint.as_mut() {
            if k.active && !k.broken && self.sampler.is_greedy() {
                let id = self.sampler.sample(row, &self.history);
                if k.grammar.allows(id).map_err(|e| Failure::Grammar(e.0))? {
                    return Ok(id);
                }
                // The masked row's best, read through the mask in place.
                if self.sampler.takes_the_best_logit() {
                    return match k.grammar.best_allowed(row) {
                        Ok(Some(id)) => Ok(id),
                        Ok(None) => {
                            Err(Failure::Grammar("the grammar allows no next token".into()))
                        }
                        Err(e) => Err(Failure::Grammar(e.0)),
                    };
                }
            }
        }
        let under = masked(&mut self.constraint, row)?;
        Ok(match draft {
            Some(d) => self.sampler.verify(under, &self.history, d),
            None => self.sampler.sample(under, &self.history),
        })
    }

    /// Token `id`, drawn from `row` after `context` positions: end of
    /// generation, the grammar, logprobs, its text, the stop strings and
    /// the budgets. `Some` when the sequence ends with it.
    fn commit(&mut self, id: u32, row: &[f32], context: usize, cx: &TokenContext) -> Option<End> {
        let now = Instant::now();
        if let Some(last) = self.last_token_at.replace(now) {
            // (Tokens accepted from one speculative step count ~0 apart.)
            cx.metrics
                .inter_token
                .observe(now.saturating_duration_since(last));
        }
        if self.first_token_at.is_none() {
            self.first_token_at = Some(now);
            cx.metrics
                .ttft_us_sum
                .fetch_add((now - self.sub.at).as_micros() as u64, Relaxed);
            cx.metrics.ttft_count.fetch_add(1, Relaxed);
        }
        let req = &self.sub.req;
        if !req.ignore_eos && cx.tok.is_eog(id) {
            self.send_tail();
            return Some(End::Done(self.done(FinishReason::Stop)));
        }
        if let Some(t) = &mut self.thinking {
            t.taken(id);
        }
        if let Some(k) = &mut self.constraint {
            if k.active {
                if let Err(e) = k.grammar.commit(id) {
                    return Some(self.fail(Failure::Grammar(e.0)));
                }
            } else if k.after == Some(id) {
                k.active = true;
            }
        }
        self.generated += 1;
        self.history.push(id);
        cx.metrics.generated_tokens_total.fetch_add(1, Relaxed);
        let info = match req.logprobs {
            None => TokenInfo {
                id,
                logprob: None,
                rank: None,
                top: Vec::new(),
            },
            Some(_) if req.post_sampling_probs => {
                // A token the sampler did not draw (forced, or the grammar's
                // best) was certain.
                let drawn = self.sampler.last_draw().cloned().unwrap_or(Drawn {
                    chosen: 1.0,
                    top: vec![(id, 1.0)],
                });
                TokenInfo {
                    id,
                    logprob: Some(drawn.chosen.ln() as f32),
                    rank: None,
                    top: (drawn.top.iter())
                        .map(|&(t, p)| (t, p.ln() as f32))
                        .collect(),
                }
            }
            Some(k) => {
                let lp = rill_sampler::logprobs(row, id, k);
                TokenInfo {
                    id,
                    logprob: Some(lp.chosen),
                    rank: Some(lp.rank),
                    top: lp.top,
                }
            }
        };
        // Stop strings are looked for once `min_tokens` are out.
        let check_stops = self.generated >= self.sub.req.min_tokens;
        let mut fed = match self.out.push(cx.tok, id, check_stops) {
            Ok(f) => f,
            Err(e) => return Some(End::Failed(Failure::Internal(e.to_string()))),
        };
        // A line indented less than the limit: the text ends where its
        // content starts (what the stop strings still hold back comes after).
        let outdented = (self.indent.as_mut())
            .and_then(|limit| limit.feed(&fed.emit))
            .map(|at| fed.emit.truncate(at))
            .is_some();
        // Past the time limit, a line's end ends the generation.
        let timed_out = fed.emit.contains('\n')
            && (self.sub.req.generation_time_limit)
                .zip(self.first_token_at)
                .is_some_and(|(limit, first)| now.saturating_duration_since(first) > limit);
        let _ = self.sub.events.send(Event::Text {
            text: fed.emit,
            tokens: vec![info],
        });
        if outdented {
            return Some(End::Done(self.done(FinishReason::Length)));
        }
        if fed.stopped {
            self.stop_word = fed.word;
            return Some(End::Done(self.done(FinishReason::Stop)));
        }
        if self.sub.req.stop_token_ids.contains(&id) {
            self.send_tail();
            return Some(End::Done(self.done(FinishReason::Stop)));
        }
        // The context holds the prompt and every generated token; the last
        // one sampled is not fed yet.
        let out_of_room = context + 1 >= self.state.capacity();
        if self.generated >= self.sub.req.max_tokens || out_of_room || timed_out {
            let finish = if self.send_tail() {
                FinishReason::Stop
            } else {
                FinishReason::Length
            };
            return Some(End::Done(self.done(finish)));
        }
        self.next_input = Some(id);
        None
    }

    /// The grammar broke down: the held text goes out, then the error.
    fn fail(&mut self, why: Failure) -> End {
        self.send_tail();
        End::Failed(why)
    }

    /// The final figures, for a sequence ending now.
    pub fn done(&self, finish: FinishReason) -> Done {
        let now = Instant::now();
        let ms = |a: Instant, b: Instant| b.saturating_duration_since(a).as_secs_f64() * 1e3;
        let first = self.first_token_at.unwrap_or(now);
        Done {
            finish,
            stop_word: self.stop_word.clone(),
            prompt_tokens: self.sub.req.prompt.len(),
            cached_tokens: self.cached,
            completion_tokens: self.generated,
            ttft_ms: self.first_token_at.map_or(0.0, |t| ms(self.sub.at, t)),
            total_ms: ms(self.sub.at, now),
            queue_ms: ms(self.sub.at, self.admitted_at),
            prefill_ms: ms(self.admitted_at, first),
            decode_ms: ms(first, now),
            drafted_tokens: self.spec.as_ref().map_or(0, |s| s.drafted),
            accepted_tokens: self.spec.as_ref().map_or(0, |s| s.accepted),
        }
    }

    /// Release the text still held back; true when it completed a stop string.
    fn send_tail(&mut self) -> bool {
        let tail = self.out.finish();
        if !tail.emit.is_empty() {
            let _ = self.sub.events.send(Event::Text {
                text: tail.emit,
                tokens: vec![],
            });
        }
        if tail.stopped {
            self.stop_word = tail.word;
        }
        tail.stopped
    }

    /// Cancelled: the text held back still goes out before `Done`.
    pub fn cancelled(mut self) -> Done {
        self.send_tail();
        self.done(FinishReason::Cancelled)
    }
}
