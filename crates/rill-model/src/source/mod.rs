//! Where a model's hyperparameters and weights come from.
//!
//! The binder (`crate::weights`) asks a [`WeightSource`] for tensors by
//! rill's canonical names — llama.cpp's GGUF names (`token_embd.weight`,
//! `blk.3.attn_q.weight`, `blk.0.ffn_gate_exps.weight`, …) with GGUF's
//! conventions (ggml shape order, norms stored as the multiplier, `ssm_a` as
//! `-exp(A_log)`, GDN value heads in the architecture's GGUF order). A source
//! maps its own names and layout onto these and applies its load-time
//! transforms, so the layers never see a file format:
//!
//! - [`GgufSource`]: a GGUF file already is in that form (identity map).
//! - [`WithMtpHead`]: a trunk source with the MTP head's block from another
//!   (an MTP-only GGUF, `--mtp-model`).
//! - [`HfSource`]: a Hugging Face folder (config.json + safetensors) renames,
//!   adds the +1 to norms, takes `-exp(A_log)`, squeezes the conv, and hands
//!   per-expert tensors out as a list ([`WeightSource::expert_tensors`]).

mod gguf;
pub mod hf;
mod with_mtp;

pub use gguf::GgufSource;
pub use hf::HfSource;
pub use with_mtp::WithMtpHead;

use crate::config::ModelConfig;
use crate::error::ModelError;
use rill_dtype::DType;

/// Separate scale tensors a matrix is decoded with (FP8 checkpoints'
/// block scales, NVFP4's per-16 scales), carried to the kernels by
/// [`rill_kernels::MatRef`].
pub use rill_kernels::Scales;

/// One tensor of a source, in its stored encoding, borrowed from the
/// source (which keeps the bytes at a fixed address for its lifetime).
#[derive(Clone, Copy, Debug)]
pub struct TensorRef<'a> {
    pub name: &'a str,
    pub dtype: DType,
    /// ggml order: `shape[0]` is the contiguous (row) dimension.
    pub shape: &'a [u64],
    pub data: &'a [u8],
    pub scales: Scales<'a>,
}

/// A model's hyperparameters and weights, from whatever holds them.
///
/// Implementations must keep every byte slice they hand out valid and at
/// the same address for as long as the source lives: the bound model keeps
/// the source (`Arc<dyn WeightSource>`) and reads weights in place.
pub trait WeightSource: Send + Sync {
    /// What this is, for messages (`GGUF file model.gguf`).
    fn describe(&self) -> String;

    /// The hyperparameters.
    fn config(&self) -> Result<ModelConfig, ModelError>;

    /// The tensor with canonical name `name`; `Ok(None)` when the source
    /// has none, an error when it has one rill cannot read (unknown type,
    /// data outside the file).
    fn tensor(&self, name: &str) -> Result<Option<TensorRef<'_>>, ModelError>;

    /// A stack of expert matrices (`blk.N.ffn_gate_exps.weight`) that the
    /// source holds one tensor per expert, in expert order; `Ok(None)` when
    /// it holds no such list (a stacked tensor comes from [`Self::tensor`]).
    fn expert_tensors(&self, _name: &str) -> Result<Option<Vec<TensorRef<'_>>>, ModelError> {
        Ok(None)
    }

    /// A 1-D tensor of `n` values decoded to f32, with the source's
    /// transforms applied. The default decodes the stored values as they
    /// are; a source whose vectors need a transform overrides it.
    /// The caller has copied `bytes` (a tensor's data, or part of it, handed
    /// out by this source) and will not read them again: a mapped source
    /// lets their pages go, so the model does not hold two copies. A hint;
    /// the default keeps them.
    fn release(&self, _bytes: &[u8]) {}

    fn vector(&self, name: &str, n: usize) -> Result<Vec<f32>, ModelError> {
        let t = self
            .tensor(name)?
            .ok_or_else(|| ModelError::MissingTensor(name.to_string()))?;
        crate::weights::decode_vector(&t, n)
    }
}
