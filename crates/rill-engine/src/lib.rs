//! The engine: turns a model, a tokenizer and a sampler into generated text.
//!
//! - [`generate`]: one sequence, prompt in, streamed text out, with stop
//!   conditions and timings (used by `rill run` and `rill chat`).
//! - [`scheduler`]: the serving engine — queue, continuous batching, prompt cache.
//! - [`prefix_cache`]: snapshots of sequence state looked up by token prefix.
//! - [`stop`]: stop strings that may span token boundaries.

pub mod generate;
pub mod metrics;
mod output;
pub mod prefix_cache;
pub mod request;
pub mod scheduler;
pub mod stop;

pub use generate::{generate, EngineError, FinishReason, GenerateParams, Generation, Timings};
pub use metrics::Metrics;
pub use request::{Done, Event, Request, SubmitError, TokenInfo};
pub use scheduler::{Engine, EngineConfig, Handle};
