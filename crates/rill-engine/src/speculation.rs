//! Speculative decoding with the model's own MTP head (DESIGN.md §2.4).
//!
//! Each step, for every sequence that speculates:
//! 1. **draft** — the head proposes up to `k` tokens, one batched head step
//!    per draft position across all sequences. The first of those steps also
//!    feeds the head the rows it has not seen yet (token `x_p` with the
//!    trunk's post-norm hidden of `p − 1`), so its KV cache follows the
//!    trunk's positions; later ones chain the head's own output.
//! 2. **verify** — the trunk runs `[last token, drafts…]` as one rewindable
//!    item of the step all sequences share, with logits and hidden states
//!    of every row.
//! 3. **accept** — the target's sampler walks the rows
//!    ([`rill_sampler::Sampler::verify`]): it keeps the drafts it agrees
//!    with and one token of its own. The trunk is rewound to the kept rows
//!    (a swap of ring slots, no copy), the head's cache is cut back to the
//!    last row it saw with a true hidden state, and the kept rows it has
//!    not seen are queued for its next step.
//!
//! Greedy output is bit for bit that of plain decoding (a verify row is
//! computed exactly as a decode row), and sampled output is distributed
//! exactly as without speculation.

use crate::metrics::Metrics;
use rill_model::{Model, MtpItem, Outputs, RewindError, SequenceState, MAX_REWIND_ROWS};
use std::sync::atomic::Ordering::Relaxed;

/// Most tokens a step may draft for one sequence.
pub const MAX_DRAFT: usize = MAX_REWIND_ROWS - 1;

/// How speculation runs (llama.cpp's `--spec-draft-n-max`, `-n-min`,
/// `-p-min`).
#[derive(Clone, Debug, PartialEq)]
pub struct SpecConfig {
    /// Most tokens drafted per step (0: no speculation), at most [`MAX_DRAFT`].
    pub draft_max: usize,
    /// A draft shorter than this is dropped: the step decodes plainly.
    pub draft_min: usize,
    /// Drafting stops before a token the head gives less than this
    /// probability (0: never).
    pub p_min: f32,
    /// Adapt each sequence's draft length to its recent acceptance, and
    /// pause drafting while it stays low (the head is still fed, so drafting
    /// can resume).
    pub adaptive: bool,
    /// The head's LM product over only the first this many vocabulary
    /// entries (0: all of them). See [`rill_model::MtpOptions`].
    pub draft_vocab: usize,
    /// Draft only where it can pay ([`drafting_pays`]): the engine turns
    /// speculation off at start on a model and machine where it would not.
    pub auto: bool,
}

impl SpecConfig {
    /// No speculation.
    pub const OFF: SpecConfig = SpecConfig {
        draft_max: 0,
        draft_min: 0,
        p_min: 0.0,
        adaptive: true,
        draft_vocab: 0,
        auto: false,
    };

    pub fn is_on(&self) -> bool {
        self.draft_max > 0
    }
}

impl Default for SpecConfig {
    /// Three drafted tokens, as llama.cpp's default `--spec-draft-n-max`.
    fn default() -> Self {
        SpecConfig {
            draft_max: 3,
            ..SpecConfig::OFF
        }
    }
}

/// Whether drafting with the MTP head can make decoding faster on this
/// model and machine; `Err` says why not.
///
/// A verify step pays when decoding is bound by reading the weights: the
/// `k + 1` positions then share one read. A model whose decode step reads
/// little more than the last-level cache holds is bound by arithmetic
/// instead, which a verify step multiplies (the trained demo model: a
/// two-position verify costs 1.95 decode steps there, against 1.24 on the
/// 8-layer real-geometry model). And a draft step must be cheap beside a
/// decode step: it reads the head's block and its LM head (of `draft_vocab`
/// rows when narrowed), which on a shallow model with a large vocabulary is
/// most of a step.
pub fn drafting_pays(model: &Model, config: &SpecConfig) -> Result<(), String> {
    if !model.has_mtp() {
        return Err("the model has no MTP head (--mtp-model FILE adds one)".into());
    }
    let step = model.decode_weight_bytes() as f64;
    let mut draft = model.mtp_decode_weight_bytes() as f64;
    let (vocab, n_vocab) = (config.draft_vocab, model.config.n_vocab);
    if vocab > 0 && vocab < n_vocab {
        let head = model.mtp_head_bytes() as f64;
        draft -= head * (1.0 - vocab as f64 / n_vocab as f64);
    }
    let mib = |b: f64| b / (1u64 << 20) as f64;
    let cache = last_level_cache_bytes() as f64;
    if step < 2.0 * cache {
        return Err(format!(
            "a decode step reads {:.0} MiB of weights, within reach of the {:.0} MiB \
             last-level cache: decoding is bound by arithmetic, which verifying drafts multiplies",
            mib(step),
            mib(cache)
        ));
    }
    if draft > MAX_DRAFT_SHARE * step {
        return Err(format!(
            "a draft step reads {:.0}% of what a decode step does ({:.0} of {:.0} MiB; \
             --draft-vocab narrows the head's LM product)",
            100.0 * draft / step,
            mib(draft),
            mib(step)
        ));
    }
    Ok(())
}

/// The most of a decode step's weight reads a draft step may take for
/// drafting to pay: with one draft accepted 70% of the time and a verify of
/// two positions at ~1.25 steps, a draft of a quarter step nets ~1.15×.
const MAX_DRAFT_SHARE: f64 = 0.25;

/// The last-level cache's size (Linux sysfs; 32 MiB where it cannot be read).
fn last_level_cache_bytes() -> u64 {
    let read = || -> Option<u64> {
        let base = std::path::Path::new("/sys/devices/system/cpu/cpu0/cache");
        let mut best = None;
        for entry in std::fs::read_dir(base).ok()? {
            let dir = entry.ok()?.path();
            let level: u32 = std::fs::read_to_string(dir.join("level"))
                .ok()?
                .trim()
                .parse()
                .ok()?;
            let size = std::fs::read_to_string(dir.join("size")).ok()?;
            let size = size.trim();
            let bytes = match size.strip_suffix('K') {
                Some(k) => k.parse::<u64>().ok()? << 10,
                None => match size.strip_suffix('M') {
                    Some(m) => m.parse::<u64>().ok()? << 20,
                    None => size.parse().ok()?,
                },
            };
            if best.is_none_or(|(l, _)| level > l) {
                best = Some((level, bytes));
            }
        }
        best.map(|(_, b)| b)
    };
    read().unwrap_or(32 << 20)
}

/// Below this running acceptance rate a draft costs more than it brings
/// (a head step and a wider verify for fewer than one token in four), so
/// drafting pauses.
const LOW_RATE: f32 = 0.25;
/// Steps of the first pause; each pause in a row doubles it, up to the last.
const PAUSE_FIRST: usize = 4;
const PAUSE_LONGEST: usize = 64;

/// One sequence's speculation.
pub(crate) struct Speculation {
    config: SpecConfig,
    n_embd: usize,
    /// Rows the head has not been fed, from its position on: token `x_p`
    /// and the trunk's hidden of `p − 1`.
    pending_tokens: Vec<u32>,
    pending_hidden: Vec<f32>,
    /// The head's rows this round (kept buffers).
    feed_tokens: Vec<u32>,
    feed_hidden: Vec<f32>,
    /// The head's own output for the last draft (what the next round chains).
    chain_hidden: Vec<f32>,
    /// `[token to verify, drafts…]`: the trunk's tokens this step.
    verify: Vec<u32>,
    /// Drafts wanted this step, and whether the next round extends them.
    limit: usize,
    extending: bool,
    /// Draft length now; steps left in a pause; the next pause's length.
    k: usize,
    pause: usize,
    next_pause: usize,
    /// Accepted / drafted, exponentially weighted.
    rate: f32,
    pub drafted: usize,
    pub accepted: usize,
}

impl Speculation {
    pub fn new(config: SpecConfig, n_embd: usize) -> Speculation {
        let k = config.draft_max.min(MAX_DRAFT);
        Speculation {
            config,
            n_embd,
            pending_tokens: Vec::new(),
            pending_hidden: Vec::new(),
            feed_tokens: Vec::new(),
            feed_hidden: Vec::with_capacity(n_embd),
            chain_hidden: Vec::with_capacity(n_embd),
            verify: Vec::with_capacity(MAX_REWIND_ROWS),
            limit: 0,
            extending: false,
            k,
            pause: 0,
            next_pause: PAUSE_FIRST,
            rate: 1.0,
            drafted: 0,
            accepted: 0,
        }
    }

    /// Start a decoding step whose token to verify is `next`, with room for
    /// `room` drafts (the context's and the token budget's): decide how many
    /// to draft and lay out the head's first rows.
    pub fn plan(&mut self, state: &SequenceState, next: u32, room: usize) {
        self.verify.clear();
        self.verify.push(next);
        self.limit = if self.pause > 0 {
            self.pause -= 1;
            0
        } else {
            self.k.min(room)
        };
        self.extending = self.limit > 0;
        self.lay_out_feed(state, self.extending.then_some(next));
    }

    /// Start a prefill step's catch-up: the head takes the rows the trunk
    /// just computed, and drafts nothing.
    pub fn plan_catch_up(&mut self, state: &SequenceState) {
        self.limit = 0;
        self.extending = false;
        self.lay_out_feed(state, None);
    }

    /// The head's rows: the pending ones, then `next` paired with the seed
    /// (the trunk's hidden of the position before it) when drafting.
    fn lay_out_feed(&mut self, state: &SequenceState, next: Option<u32>) {
        self.feed_tokens.clear();
        self.feed_tokens.extend_from_slice(&self.pending_tokens);
        self.feed_hidden.clear();
        self.feed_hidden.extend_from_slice(&self.pending_hidden);
        if let Some(t) = next {
            self.feed_tokens.push(t);
            push_seed(&mut self.feed_hidden, state, self.n_embd);
        }
    }

    /// The head's first step of the round (None: nothing to feed).
    pub fn first_item<'a>(&'a mut self, state: &'a mut SequenceState) -> Option<MtpItem<'a>> {
        if self.feed_tokens.is_empty() {
            return None;
        }
        let outputs = if self.extending {
            Outputs::last_logits().with_hidden()
        } else {
            Outputs::NONE
        };
        // Fed now: the pending rows are the head's from here on.
        self.pending_tokens.clear();
        self.pending_hidden.clear();
        Some(MtpItem {
            state,
            tokens: &self.feed_tokens,
            hidden: &self.feed_hidden,
            outputs,
        })
    }

    /// The head's next chained step: the last draft with the head's own
    /// output for it (None: drafting is over for this step).
    pub fn next_item<'a>(&'a mut self, state: &'a mut SequenceState) -> Option<MtpItem<'a>> {
        if !self.extending {
            return None;
        }
        let last = self.verify.len() - 1;
        Some(MtpItem {
            state,
            tokens: &self.verify[last..],
            hidden: &self.chain_hidden,
            outputs: Outputs::last_logits().with_hidden(),
        })
    }

    pub fn is_extending(&self) -> bool {
        self.extending
    }

    /// Draft no more this step.
    pub fn stop_drafting(&mut self) {
        self.extending = false;
    }

    /// Tokens drafted so far this step.
    pub fn drafted_now(&self) -> usize {
        self.verify.len().saturating_sub(1)
    }

    /// Take the head's proposal from its logits row (greedy: the top token)
    /// and its hidden row, or stop drafting when the head is unsure.
    pub fn take_draft(&mut self, logits: &[f32], hidden: &[f32]) {
        if !self.extending {
            return;
        }
        let (best, p) = top_token(logits, self.config.p_min > 0.0);
        if p < self.config.p_min {
            self.extending = false;
            return;
        }
        self.verify.push(best);
        self.chain_hidden.clear();
        self.chain_hidden.extend_from_slice(hidden);
        self.extending = self.verify.len() - 1 < self.limit;
    }

    /// The trunk's tokens this step: `[token, drafts…]` (a draft shorter
    /// than `draft_min` is dropped).
    pub fn verify_tokens(&mut self) -> &[u32] {
        if self.verify.len() - 1 < self.config.draft_min {
            self.verify.truncate(1);
        }
        &self.verify
    }

    /// Draft `i` of this step (0-based), if there is one.
    pub fn draft(&self, i: usize) -> Option<u32> {
        self.verify.get(i + 1).copied()
    }

    /// A prefill step kept `tokens` from position `start` with their hidden
    /// rows: queue them for the head.
    pub fn record_prefill(
        &mut self,
        state: &mut SequenceState,
        start: usize,
        tokens: &[u32],
        hidden: &[f32],
    ) {
        self.record(state, start, tokens, hidden);
    }

    /// After the target took `kept` rows of the verify step that began at
    /// `start` (the token and `kept − 1` drafts): rewind the trunk to them,
    /// cut the head's cache back to its true rows, queue the kept rows it
    /// has not seen, and adapt the draft length.
    pub fn settle(
        &mut self,
        state: &mut SequenceState,
        start: usize,
        kept: usize,
        hidden: &[f32],
        metrics: &Metrics,
    ) -> Result<(), RewindError> {
        let drafted = self.verify.len() - 1;
        let accepted = kept - 1;
        state.rewind(start + kept)?;
        // The head saw the token at `start` with the true seed; its later
        // draft rows carried its own outputs, not the trunk's.
        state.truncate_mtp(start + 1);
        let n = self.n_embd;
        let verify = std::mem::take(&mut self.verify);
        self.record(state, start, &verify[..kept], &hidden[..kept * n]);
        self.verify = verify;
        if drafted > 0 {
            self.drafted += drafted;
            self.accepted += accepted;
            metrics.spec_drafts_total.fetch_add(1, Relaxed);
            metrics
                .spec_draft_tokens_total
                .fetch_add(drafted as u64, Relaxed);
            metrics
                .spec_accepted_tokens_total
                .fetch_add(accepted as u64, Relaxed);
            for pos in &metrics.spec_accepted_per_position[..accepted] {
                pos.fetch_add(1, Relaxed);
            }
            self.adapt(drafted, accepted);
        }
        Ok(())
    }

    /// Queue the rows of `tokens` (from position `start`, hidden rows
    /// `hidden`) that the head has not seen, and keep the last hidden row as
    /// the seed of the next.
    fn record(&mut self, state: &mut SequenceState, start: usize, tokens: &[u32], hidden: &[f32]) {
        let n = self.n_embd;
        let head_at = state.mtp_position().unwrap_or(0);
        for (t, &token) in tokens.iter().enumerate() {
            if start + t < head_at {
                continue;
            }
            self.pending_tokens.push(token);
            if t == 0 {
                push_seed(&mut self.pending_hidden, state, n);
            } else {
                (self.pending_hidden).extend_from_slice(&hidden[(t - 1) * n..t * n]);
            }
        }
        if let Some(last) = hidden.len().checked_sub(n) {
            state.set_mtp_seed(&hidden[last..]);
        }
    }

    /// Longer drafts while they are taken whole, shorter after a rejection,
    /// and a pause while acceptance stays low.
    fn adapt(&mut self, drafted: usize, accepted: usize) {
        if !self.config.adaptive {
            return;
        }
        let max = self.config.draft_max.min(MAX_DRAFT);
        self.k = if accepted == drafted {
            (self.k + 1).min(max)
        } else {
            (accepted + 1).min(max)
        };
        self.rate = 0.7 * self.rate + 0.3 * accepted as f32 / drafted as f32;
        if self.rate < LOW_RATE {
            self.pause = self.next_pause;
            self.next_pause = (self.next_pause * 2).min(PAUSE_LONGEST);
            // After the pause, one more chance at the threshold.
            self.rate = LOW_RATE;
        } else if self.rate > 2.0 * LOW_RATE {
            self.next_pause = PAUSE_FIRST;
        }
    }
}

/// The seed hidden row of the head's next position (zeros when unset).
fn push_seed(out: &mut Vec<f32>, state: &SequenceState, n: usize) {
    match state.mtp_seed() {
        Some(seed) if seed.len() == n => out.extend_from_slice(seed),
        _ => out.resize(out.len() + n, 0.0),
    }
}

/// The top token of a logits row (ties to the lower id) and, when asked,
/// its softmax probability (1 otherwise).
fn top_token(row: &[f32], with_prob: bool) -> (u32, f32) {
    let best = rill_sampler::argmax(row);
    if !with_prob {
        return (best, 1.0);
    }
    let max = row[best as usize];
    let sum: f64 = row.iter().map(|&l| ((l - max) as f64).exp()).sum();
    (best, (1.0 / sum) as f32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_draft_length_follows_acceptance_and_pauses_when_low() {
        let mut s = Speculation::new(
            SpecConfig {
                draft_max: 4,
                ..SpecConfig::default()
            },
            8,
        );
        assert_eq!(s.k, 4);
        s.adapt(4, 1);
        assert_eq!(s.k, 2, "after one accepted of four, two");
        s.adapt(2, 2);
        assert_eq!(s.k, 3, "taken whole: one more");
        for _ in 0..6 {
            s.adapt(3, 0);
        }
        assert!(s.pause > 0, "a run of rejections pauses drafting");
        let first = s.pause;
        while s.pause > 0 {
            s.pause -= 1;
        }
        for _ in 0..3 {
            s.adapt(1, 0);
        }
        assert!(s.pause > first, "pauses in a row grow");
    }

    #[test]
    fn top_token_and_its_probability() {
        let (t, p) = top_token(&[0.0, 2f32.ln(), 0.0], true);
        assert_eq!(t, 1);
        assert!((p - 0.5).abs() < 1e-6);
    }
}
