//! The server end to end on the fixture model (a tiny random qwen35moe with
//! the Qwen3.5 chat template): every endpoint, errors, and the lifecycle
//! (queue full, disconnects, shutdown).

mod api;
mod choices;
mod common;
mod defaults;
mod errors;
mod fleet;
mod fuzz;
mod lifecycle;
mod memory;
mod messages;
mod native;
mod stopping;
mod utility;
mod webui;
mod wire;
