//! The engine: the one generation driver behind every front end.
//!
//! `rill run`, `rill chat`, `rill bench` and the server all submit
//! [`Request`]s to an [`Engine`] and read [`Event`]s back, so a prompt, its
//! parameters and a seed give the same tokens whichever front end asks.
//!
//! - [`scheduler`]: the engine thread — queue, continuous batching, the
//!   prompt cache.
//! - `sequence`: one sequence's state machine (prefill chunks, sampling,
//!   logprobs, end of generation, stop strings, finish reasons, the context
//!   limit, cancellation).
//! - [`speculation`]: speculative decoding with the model's MTP head
//!   (draft, verify in the shared step, accept and rewind).
//! - [`prefix_cache`]: snapshots of sequence state looked up by token prefix.
//! - [`stop`]: stop strings that may span token boundaries.
//! - `thinking`: a budget for the thinking block, closed for the model
//!   once it is spent.

mod budget;
mod disk_cache;
mod indent;
pub mod metrics;
mod output;
pub mod prefix_cache;
pub mod request;
pub mod scheduler;
mod sequence;
pub mod speculation;
pub mod stop;
mod thinking;

pub use metrics::Metrics;
pub use request::{
    ConstraintRequest, Done, Event, Failure, FinishReason, PromptProgress, Request, SubmitError,
    TokenInfo, PROMPT_LOGITS_BYTES,
};
pub use rill_grammar::GrammarSpec;
pub use scheduler::{Engine, EngineConfig, Handle};
pub use speculation::SpecConfig;
pub use thinking::ThinkingBudget;
