//! The OpenAI API's shapes: request bodies, their checks, responses.

pub mod logprobs;
pub mod params;
pub mod prompt;
pub mod responses;
pub mod types;
