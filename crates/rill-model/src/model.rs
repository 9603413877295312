//! The bound model: configuration plus typed weights for every layer.
//!
//! Weights are immutable and shared (`&self`) by every sequence; per-sequence
//! state lives in [`crate::SequenceState`].

use crate::config::{Arch, LayerKind, ModelConfig};
use crate::error::ModelError;
use crate::layers::attention::AttentionWeights;
use crate::layers::ffn::{DenseWeights, Ffn, MoeWeights};
use crate::layers::gdn::GdnWeights;
use crate::source::{GgufSource, WeightSource};
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
    // Keeps the bytes alive for every `Bytes` above. Declared last so it is
    // dropped after the views.
    source: Arc<dyn WeightSource>,
}

impl Model {
    /// Open and bind a GGUF file (the first of a split set, or a single file).
    pub fn open(path: &Path) -> Result<Model, ModelError> {
        let file = Arc::new(GgufFile::open(path)?);
        Model::from_source(Arc::new(GgufSource::new(file, path.display().to_string())))
    }

    /// Bind the tensors of an open GGUF file.
    pub fn from_gguf(file: Arc<GgufFile>) -> Result<Model, ModelError> {
        Model::from_source(Arc::new(GgufSource::new(file, "(in memory)")))
    }

    /// Bind the hyperparameters and tensors of a weight source.
    pub fn from_source(source: Arc<dyn WeightSource>) -> Result<Model, ModelError> {
        let mut config = source.config()?;
        let b = Binder { source: &*source };
        let h = config.n_embd;

        let embd_shape = b
            .shape("token_embd.weight")?
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
        let output = if b.has("output.weight")? {
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
            source,
        })
    }

    /// Where the weights come from.
    pub fn source(&self) -> &dyn WeightSource {
        &*self.source
    }

    /// Weight bytes one decoded token reads: every bound matrix and vector
    /// in full, except the embedding (one row, unless it is also the output
    /// projection) and the routed experts (`n_expert_used` of them per
    /// layer). Heads the trunk does not run are not counted.
    pub fn decode_weight_bytes(&self) -> u64 {
        let c = &self.config;
        let f32s = |v: &[f32]| (v.len() * 4) as u64;
        let mut total = match &self.output {
            Some(out) => (self.token_embd.byte_len() / c.n_vocab.max(1) + out.byte_len()) as u64,
            None => self.token_embd.byte_len() as u64,
        };
        total += f32s(&self.output_norm);
        for l in &self.layers {
            total += f32s(&l.attn_norm) + f32s(&l.post_attention_norm);
            total += match &l.mixer {
                Mixer::Attention(w) => w.weight_bytes(),
                Mixer::Recurrent(w) => w.weight_bytes(),
            };
            total += l.ffn.decode_weight_bytes(c.n_expert_used);
        }
        total
    }

    /// Whether the output projection has its own matrix (not tied to the embedding).
    pub fn has_output_matrix(&self) -> bool {
        self.output.is_some()
    }

    pub(crate) fn output_matrix(&self) -> &Matrix {
        self.output.as_ref().unwrap_or(&self.token_embd)
    }
}
