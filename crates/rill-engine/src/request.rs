//! What a client submits to the engine and what it gets back.

use crate::thinking::ThinkingBudget;
use rill_grammar::GrammarSpec;
use rill_sampler::SamplerConfig;

/// Why generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-generation token or a stop string.
    Stop,
    /// `max_tokens` reached, or the context is full.
    Length,
    /// The caller asked to stop (or went away).
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

/// One generation request, already tokenized.
#[derive(Clone, Debug)]
pub struct Request {
    pub prompt: Vec<u32>,
    pub max_tokens: usize,
    pub sampler: SamplerConfig,
    pub stop: Vec<String>,
    /// Return the log-probability of each token and this many alternatives
    /// (`None`: no log-probabilities).
    pub logprobs: Option<usize>,
    /// With `logprobs`: the probabilities after the sampling chain instead
    /// of the model's (llama-server's `post_sampling_probs`; what the draw
    /// really chose from: tokens the cuts removed have none, a greedy pick
    /// is 1). The [`TokenInfo`] then holds their logarithms and no rank.
    pub post_sampling_probs: bool,
    /// Also return the log-probability of every prompt token given those
    /// before it, with this many alternatives ([`Event::Prompt`]; the first
    /// token has none). The prompt then runs whole: every row's logits are
    /// needed, so it is not resumed from the prompt cache, and its chunks
    /// are cut to [`PROMPT_LOGITS_BYTES`] of logits.
    pub prompt_logprobs: Option<usize>,
    /// Resume from the prompt cache where it holds a prefix (llama-server's
    /// `cache_prompt`; false: the prompt runs whole, as a benchmark of
    /// prompt processing wants).
    pub cache_prompt: bool,
    /// Send [`Event::Progress`] as the prompt runs (llama-server's
    /// `return_progress`).
    pub report_progress: bool,
    /// Keep going past end-of-generation tokens.
    pub ignore_eos: bool,
    /// Generate at least this many tokens: until then the end-of-generation
    /// and stop tokens are not drawn and stop strings are not looked for
    /// (vLLM's `min_tokens`).
    pub min_tokens: usize,
    /// Tokens that end the generation when drawn, kept in the text unless
    /// special (vLLM's `stop_token_ids`).
    pub stop_token_ids: Vec<u32>,
    /// The stop string that ends the text is part of it (vLLM's
    /// `include_stop_str_in_output`).
    pub include_stop_str: bool,
    /// Stop (as at the length limit) at the first token that brings a
    /// newline once generation has run this long (llama-server's
    /// `t_max_predict_ms`, for code completion: a whole line, in bounded
    /// time).
    pub generation_time_limit: Option<std::time::Duration>,
    /// Stop (as at the length limit) where a generated line after the first
    /// starts its content with less indentation than this many spaces or
    /// tabs, the text cut there (llama-server's `n_indent`, for code
    /// completion; 0: no limit).
    pub min_indent: usize,
    /// Prompt positions worth a prompt-cache snapshot besides the end, e.g.
    /// where a chat's history ends and the generation prompt begins (the next
    /// turn re-renders the history the same way, but not the generation
    /// prompt). Prefill chunks are cut there.
    pub cache_points: Vec<usize>,
    /// Structured output: a grammar the generated text must follow.
    pub constraint: Option<ConstraintRequest>,
    /// Most tokens the MTP head drafts per step for this request (`None`:
    /// the engine's setting; `Some(0)`: no speculation), capped by the
    /// engine's own maximum.
    pub draft_max: Option<usize>,
    /// A budget for the thinking block the prompt opens (`None`: the model
    /// thinks as long as it likes).
    pub thinking_budget: Option<ThinkingBudget>,
}

/// A grammar for the generated text, and where it starts.
#[derive(Clone, Debug, PartialEq)]
pub struct ConstraintRequest {
    pub grammar: GrammarSpec,
    /// Constrain only the text after this token (a thinking block's end,
    /// `</think>`, when the prompt opens one: the model thinks freely, then
    /// answers in the grammar); `None`: from the first token.
    pub after: Option<u32>,
}

impl Request {
    /// A request for `prompt` with `sampler`: up to 256 tokens, no stop
    /// strings, no log-probabilities, no extra cache points.
    pub fn new(prompt: Vec<u32>, sampler: SamplerConfig) -> Request {
        Request {
            prompt,
            max_tokens: 256,
            sampler,
            stop: Vec::new(),
            logprobs: None,
            post_sampling_probs: false,
            prompt_logprobs: None,
            cache_prompt: true,
            report_progress: false,
            ignore_eos: false,
            min_tokens: 0,
            stop_token_ids: Vec::new(),
            include_stop_str: false,
            generation_time_limit: None,
            min_indent: 0,
            cache_points: Vec::new(),
            constraint: None,
            draft_max: None,
            thinking_budget: None,
        }
    }
}

/// A generated token, with its log-probabilities when asked for.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenInfo {
    pub id: u32,
    pub logprob: Option<f32>,
    /// Its rank among the row's tokens (1: the most likely), with the
    /// log-probability.
    pub rank: Option<u32>,
    /// The most likely alternatives at this position, best first.
    pub top: Vec<(u32, f32)>,
}

/// Final figures of a request.
#[derive(Clone, Debug, PartialEq)]
pub struct Done {
    pub finish: FinishReason,
    /// The stop string that ended it, if one did.
    pub stop_word: Option<String>,
    pub prompt_tokens: usize,
    /// Prompt tokens served from the prompt cache.
    pub cached_tokens: usize,
    pub completion_tokens: usize,
    /// Submission to the first generated token.
    pub ttft_ms: f64,
    /// Submission to the end.
    pub total_ms: f64,
    /// Submission to admission into a slot.
    pub queue_ms: f64,
    /// Admission to the first generated token: the prompt's prefill (of
    /// the `prompt_tokens - cached_tokens` not served by the cache).
    pub prefill_ms: f64,
    /// First generated token to the end.
    pub decode_ms: f64,
    /// Tokens the MTP head drafted for this request, and of those, how many
    /// the target accepted.
    pub drafted_tokens: usize,
    pub accepted_tokens: usize,
}

impl Done {
    /// Prompt tokens per second of prefill (those computed, not cached).
    pub fn prefill_tok_s(&self) -> f64 {
        per_second(self.prompt_tokens - self.cached_tokens, self.prefill_ms)
    }

    /// Generated tokens per second after the first.
    pub fn decode_tok_s(&self) -> f64 {
        per_second(self.completion_tokens.saturating_sub(1), self.decode_ms)
    }
}

fn per_second(n: usize, ms: f64) -> f64 {
    if ms > 0.0 {
        n as f64 * 1000.0 / ms
    } else {
        0.0
    }
}

/// Most bytes of logits one sequence's prompt chunk returns when its
/// request asks for prompt log-probabilities (32 rows of a 248k vocabulary).
pub const PROMPT_LOGITS_BYTES: usize = 32 << 20;

/// What the engine sends back, in order: `Prompt` once when the request
/// asked for prompt log-probabilities, zero or more `Text`, then exactly
/// one `Done` or `Error`.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// New final text and the tokens that produced it (text may be empty when
    /// a token ends inside a character or a possible stop string).
    Text {
        text: String,
        tokens: Vec<TokenInfo>,
    },
    /// The prompt's tokens with their log-probabilities (requests with
    /// `prompt_logprobs`), once the prompt has run, before any text.
    Prompt {
        tokens: Vec<TokenInfo>,
    },
    /// How far the prompt has run (requests with `report_progress`): when
    /// the sequence starts, then after each of its chunks.
    Progress(PromptProgress),
    Done(Done),
    Error(Failure),
}

/// How far a prompt has run ([`Event::Progress`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PromptProgress {
    /// Tokens of the prompt.
    pub total: usize,
    /// Of those, resumed from the prompt cache.
    pub cached: usize,
    /// Of those, in the sequence's state now (the cached ones included).
    pub processed: usize,
    /// Since the sequence was admitted.
    pub elapsed: std::time::Duration,
}

/// Why an accepted request failed while it ran.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Failure {
    /// Its own constraint came to a state no text can continue (a schema
    /// that recurses without end, bounds no value meets): the request's
    /// fault, not the engine's.
    #[error("structured output: {0}")]
    Grammar(String),
    /// The engine's.
    #[error("internal error: {0}")]
    Internal(String),
}

/// Why a request was not accepted.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SubmitError {
    #[error("the request queue is full ({0} waiting); retry later")]
    QueueFull(usize),
    #[error("the prompt has {tokens} tokens but the context holds {ctx} (prompt + at least one generated token)")]
    PromptTooLong { tokens: usize, ctx: usize },
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error("{0}")]
    Invalid(String),
    #[error("the server is shutting down")]
    ShuttingDown,
    /// The request's worst case (its state at prompt + `max_tokens`
    /// positions) exceeds the whole memory budget: it could never run.
    #[error(
        "the request needs up to {need_mib} MiB of sequence state ({positions} positions: the \
         prompt plus max_tokens, capped by the context) but the memory budget is {budget_mib} \
         MiB; lower max_tokens, shorten the prompt or raise --mem-budget"
    )]
    OverBudget {
        need_mib: f64,
        budget_mib: f64,
        positions: usize,
    },
}
