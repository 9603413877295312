//! What a client submits to the engine and what it gets back.

use crate::generate::FinishReason;
use rill_sampler::SamplerConfig;

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
    /// Keep going past end-of-generation tokens.
    pub ignore_eos: bool,
    /// Prompt positions worth a prompt-cache snapshot besides the end, e.g.
    /// where a chat's history ends and the generation prompt begins (the next
    /// turn re-renders the history the same way, but not the generation
    /// prompt). Prefill chunks are cut there.
    pub cache_points: Vec<usize>,
}

/// A generated token, with its log-probabilities when asked for.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenInfo {
    pub id: u32,
    pub logprob: Option<f32>,
    /// The most likely alternatives at this position, best first.
    pub top: Vec<(u32, f32)>,
}

/// Final figures of a request.
#[derive(Clone, Debug, PartialEq)]
pub struct Done {
    pub finish: FinishReason,
    pub prompt_tokens: usize,
    /// Prompt tokens served from the prompt cache.
    pub cached_tokens: usize,
    pub completion_tokens: usize,
    pub ttft_ms: f64,
    pub total_ms: f64,
}

/// What the engine sends back, in order: zero or more `Text`, then exactly
/// one `Done` or `Error`.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// New final text and the tokens that produced it (text may be empty when
    /// a token ends inside a character or a possible stop string).
    Text {
        text: String,
        tokens: Vec<TokenInfo>,
    },
    Done(Done),
    Error(String),
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
}
