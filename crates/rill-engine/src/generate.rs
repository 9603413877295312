//! One sequence from prompt to finished text.

use crate::output::TextOutput;
use rill_kernels::Threads;
use rill_model::{ForwardError, Logits, Model, SequenceState, StepLogits};
use rill_sampler::Sampler;
use rill_tokenizer::{Tokenizer, TokenizerError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Forward(#[from] ForwardError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error("the prompt is empty")]
    EmptyPrompt,
}

/// Why generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-generation token or a stop string.
    Stop,
    /// `max_tokens` reached (or the context is full).
    Length,
    /// The caller asked to stop.
    Cancelled,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Cancelled => "cancelled",
        }
    }
}

#[derive(Clone, Debug)]
pub struct GenerateParams {
    pub max_tokens: usize,
    pub stop: Vec<String>,
    /// Keep going past end-of-generation tokens (benchmarks).
    pub ignore_eos: bool,
    /// Prompt tokens per forward call during prefill.
    pub prefill_chunk: usize,
}

impl Default for GenerateParams {
    fn default() -> Self {
        GenerateParams {
            max_tokens: 256,
            stop: Vec::new(),
            ignore_eos: false,
            prefill_chunk: 512,
        }
    }
}

/// Wall-clock figures of one generation, as llama.cpp reports them.
#[derive(Clone, Copy, Debug, Default)]
pub struct Timings {
    pub prompt_tokens: usize,
    pub prompt_ms: f64,
    pub gen_tokens: usize,
    pub gen_ms: f64,
}

impl Timings {
    pub fn prompt_tok_s(&self) -> f64 {
        per_second(self.prompt_tokens, self.prompt_ms)
    }
    pub fn gen_tok_s(&self) -> f64 {
        per_second(self.gen_tokens, self.gen_ms)
    }
}

fn per_second(n: usize, ms: f64) -> f64 {
    if ms > 0.0 {
        n as f64 * 1000.0 / ms
    } else {
        0.0
    }
}

#[derive(Clone, Debug)]
pub struct Generation {
    pub tokens: Vec<u32>,
    /// How many of `tokens` went through the model, i.e. are in the state
    /// (the last sampled token is never fed back).
    pub in_state: usize,
    pub text: String,
    pub finish: FinishReason,
    pub timings: Timings,
}

/// The end-of-generation ids of a tokenizer: its EOS and the chat turn ends.
pub fn end_of_generation_ids(tok: &Tokenizer) -> Vec<u32> {
    let mut ids: Vec<u32> = tok.eos_id().into_iter().collect();
    for t in ["<|im_end|>", "<|endoftext|>"] {
        if let Some(id) = tok.token_to_id(t) {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
    }
    ids
}

/// Prefill `prompt` into `state` (which may already hold earlier tokens),
/// then sample up to `max_tokens`, calling `on_text` with each piece of text
/// that becomes final. `cancel` is polled between tokens.
#[allow(clippy::too_many_arguments)]
pub fn generate(
    model: &Model,
    tok: &Tokenizer,
    threads: &Threads,
    state: &mut SequenceState,
    prompt: &[u32],
    params: &GenerateParams,
    sampler: &mut Sampler,
    cancel: &AtomicBool,
    mut on_text: impl FnMut(&str),
) -> Result<Generation, EngineError> {
    if prompt.is_empty() {
        return Err(EngineError::EmptyPrompt);
    }
    let eog = end_of_generation_ids(tok);
    let t0 = Instant::now();
    let chunk = params.prefill_chunk.max(1);
    // Kept from step to step: decoding allocates nothing for the logits.
    let mut logits = StepLogits::new();
    for (i, part) in prompt.chunks(chunk).enumerate() {
        let last = (i + 1) * chunk >= prompt.len();
        let want = if last { Logits::Last } else { Logits::None };
        model.forward_into(threads, state, part, want, &mut logits)?;
    }
    let prompt_ms = t0.elapsed().as_secs_f64() * 1e3;

    let mut history: Vec<u32> = prompt.to_vec();
    let mut tokens = Vec::new();
    let mut text = String::new();
    let mut out = TextOutput::new(&params.stop);
    let mut hit_stop = false;
    let t1 = Instant::now();
    let mut finish = FinishReason::Length;
    let mut in_state = 0;
    let mut emit = |s: &str, text: &mut String| {
        if !s.is_empty() {
            on_text(s);
            text.push_str(s);
        }
    };
    while tokens.len() < params.max_tokens {
        if cancel.load(Ordering::Relaxed) {
            finish = FinishReason::Cancelled;
            break;
        }
        let next = sampler.sample(logits.get(0), &history);
        if !params.ignore_eos && eog.contains(&next) {
            finish = FinishReason::Stop;
            break;
        }
        tokens.push(next);
        history.push(next);
        let fed = out.push(tok, next)?;
        emit(&fed.emit, &mut text);
        if fed.stopped {
            finish = FinishReason::Stop;
            hit_stop = true;
            break;
        }
        if tokens.len() == params.max_tokens || state.position() >= state.capacity() {
            break;
        }
        model.forward_into(threads, state, &[next], Logits::Last, &mut logits)?;
        in_state += 1;
    }
    if !hit_stop {
        // Also after an end-of-generation token: text held back as a
        // possible stop-string prefix is released, not lost.
        let tail = out.finish();
        emit(&tail.emit, &mut text);
        if tail.stopped {
            finish = FinishReason::Stop;
        }
    }
    let gen_ms = t1.elapsed().as_secs_f64() * 1e3;
    Ok(Generation {
        timings: Timings {
            prompt_tokens: prompt.len(),
            prompt_ms,
            gen_tokens: tokens.len(),
            gen_ms,
        },
        tokens,
        in_state,
        text,
        finish,
    })
}
