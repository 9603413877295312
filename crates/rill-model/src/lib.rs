//! Model binding and forward pass for the hybrid Gated-DeltaNet + gated
//! attention family: Qwen3.5 / 3.6 (`qwen35moe`, `qwen35`) and Qwen3-Next
//! (`qwen3next`). See DESIGN.md §2–3 for the math.
//!
//! - [`config`]: hyperparameters read from the file.
//! - [`Model`]: immutable, shared weights; [`SequenceState`]: what one sequence carries.
//! - `layers`: one file per block type; `forward`: the pass over all layers.

pub mod config;
mod error;
mod forward;
mod forward_hyper;
pub mod kv;
mod layers;
mod model;
mod pages;
pub mod rope;
mod scratch;
pub mod source;
mod state;
mod state_io;
mod weights;

pub use config::{
    Arch, GateActivation, IndexerConfig, LayerKind, ModelConfig, PleConfig, Qwen4ExpConfig,
};
pub use error::{ForwardError, ModelError};
pub use forward::{BatchItem, MtpItem, MtpOptions, Outputs, Rows, StepOutputs};
pub use kv::{KvConfig, KvType};
pub use model::Model;
pub use pages::SharedPages;
pub use rope::{Rope, RopeOverride, RopeScaling, RopeScalingType};
pub use scratch::Runner;
pub use source::{GgufSource, HfSource, TensorRef, WeightSource, WithMtpHead};
pub use state::{RewindError, SequenceState, StateSize, MAX_REWIND_ROWS};
pub use state_io::STATE_FORMAT_VERSION;
pub use weights::LoadLayout;
