//! The engine: turns a model, a tokenizer and a sampler into generated text.
//!
//! - [`generate`]: one sequence, prompt in, streamed text out, with stop
//!   conditions and timings (used by `rill run` and `rill chat`).
//! - [`stop`]: stop strings that may span token boundaries.

pub mod generate;
pub mod stop;

pub use generate::{generate, EngineError, FinishReason, GenerateParams, Generation, Timings};
