//! The bound model: configuration plus typed weights for every layer.
//!
//! Weights are immutable and shared (`&self`) by every sequence; per-sequence
//! state lives in [`crate::SequenceState`].

use crate::config::{Arch, LayerKind, ModelConfig};
use crate::error::ModelError;
use crate::layers::attention::AttentionWeights;
use crate::layers::ffn::{DenseWeights, Ffn, MoeWeights};
use crate::layers::gdn::GdnWeights;
use crate::weights::{Binder, Matrix};
use rill_gguf::GgufFile;
use std::path::Path;
use std::sync::Arc;

pub(crate) enum Mixer {
    Attention(AttentionWeights),
    Recurrent(GdnWeights),
}

pub(crate) struct Layer {
    pub attn_norm: Vec<f32>,
    pub post_attention_norm: Vec<f32>,
    pub mixer: Mixer,
    pub ffn: Ffn,
}

/// A loaded model of the Qwen3.5 / Qwen3-Next family.
pub struct Model {
    pub config: ModelConfig,
    pub(crate) token_embd: Matrix,
    pub(crate) output_norm: Vec<f32>,
    /// `None` when the output projection is tied to the token embedding.
    pub(crate) output: Option<Matrix>,
    pub(crate) layers: Vec<Layer>,
    /// RoPE inverse frequencies, one per rotated pair.
    pub(crate) rope_inv_freq: Vec<f32>,
    // Keeps the mapping alive for every `Bytes` above. Declared last so it is
    // dropped after the views.
    file: Arc<GgufFile>,
}

impl Model {
    /// Open and bind a GGUF file (the first of a split set, or a single file).
    pub fn open(path: &Path) -> Result<Model, ModelError> {
        Model::from_gguf(Arc::new(GgufFile::open(path)?))
    }

    /// Bind the tensors of an open file.
    pub fn from_gguf(file: Arc<GgufFile>) -> Result<Model, ModelError> {
        let mut config = ModelConfig::from_gguf(&file)?;
        let b = Binder { file: &file };
        let h = config.n_embd;

        let embd_shape = b
            .shape("token_embd.weight")
            .ok_or_else(|| ModelError::MissingTensor("token_embd.weight".into()))?;
        if embd_shape.len() != 2 || embd_shape[0] != h as u64 {
            return Err(ModelError::BadShape {
                name: "token_embd.weight".into(),
                got: embd_shape,
                want: vec![h as u64, 0],
            });
        }
        config.n_vocab = embd_shape[1] as usize;
        let v = config.n_vocab;
        let token_embd = b.matrix("token_embd.weight", v, h)?;
        let output = if b.has("output.weight") {
            Some(b.matrix("output.weight", v, h)?)
        } else {
            None
        };
        let output_norm = b.vector("output_norm.weight", h)?;

        let mut layers = Vec::with_capacity(config.n_layer);
        for il in 0..config.n_layer {
            let p = format!("blk.{il}");
            let mixer = match config.layer_kinds[il] {
                LayerKind::Attention => Mixer::Attention(AttentionWeights::bind(&b, &config, &p)?),
                LayerKind::Recurrent => Mixer::Recurrent(GdnWeights::bind(&b, &config, &p)?),
            };
            let ffn = match config.arch {
                Arch::Qwen35 => Ffn::Dense(DenseWeights::bind(&b, &config, &p)?),
                Arch::Qwen35Moe | Arch::Qwen3Next => {
                    Ffn::Moe(Box::new(MoeWeights::bind(&b, &config, &p)?))
                }
            };
            layers.push(Layer {
                attn_norm: b.vector(&format!("{p}.attn_norm.weight"), h)?,
                post_attention_norm: b.vector(&format!("{p}.post_attention_norm.weight"), h)?,
                mixer,
                ffn,
            });
        }

        let half = config.n_rot / 2;
        let rope_inv_freq = (0..half)
            .map(|i| 1.0 / config.rope_theta.powf((2 * i) as f32 / config.n_rot as f32))
            .collect();

        Ok(Model {
            config,
            token_embd,
            output_norm,
            output,
            layers,
            rope_inv_freq,
            file,
        })
    }

    /// The file the weights live in (metadata, tokenizer, ...).
    /// Run the matrix products with `precision` from now on (exact by
    /// default; [`Precision::Q8`] quantizes activations to 8 bits, as
    /// llama.cpp does, for speed).
    pub fn set_precision(&mut self, precision: rill_kernels::Precision) {
        self.config.precision = precision;
    }

    pub fn file(&self) -> &GgufFile {
        &self.file
    }

    /// Whether the output projection has its own matrix (not tied to the embedding).
    pub fn has_output_matrix(&self) -> bool {
        self.output.is_some()
    }

    pub(crate) fn output_matrix(&self) -> &Matrix {
        self.output.as_ref().unwrap_or(&self.token_embd)
    }
}
