//! The bound model: configuration plus typed weights for every layer.
//!
//! Weights are immutable and shared (`&self`) by every sequence; per-sequence
//! state lives in [`crate::SequenceState`].

use crate::config::{Arch, LayerKind, ModelConfig};
use crate::error::ModelError;
use crate::layers::attention::AttentionWeights;
use crate::layers::ffn::{DenseWeights, Ffn, MoeWeights};
use crate::layers::gdn::GdnWeights;
use crate::layers::hyper::HyperMix;
use crate::layers::ple::PleWeights;
use crate::layers::qsa::IndexerWeights;
use crate::rope::{Rope, RopeOverride};
use crate::source::{GgufSource, WeightSource};
use crate::weights::{Binder, LoadLayout, Matrix};
use rill_gguf::GgufFile;
use std::path::Path;
use std::sync::Arc;

pub(crate) enum Mixer {
    Attention(AttentionWeights),
    Recurrent(GdnWeights),
}

pub(crate) struct Layer {
    /// The pre-norms (empty in a hyper-connection model, whose mixes
    /// take their place: `hyper`).
    pub attn_norm: Vec<f32>,
    pub post_attention_norm: Vec<f32>,
    pub mixer: Mixer,
    pub ffn: Ffn,
    /// qwen4exp: the mixes into the mixer and into the FFN.
    pub hyper: Option<Box<[HyperMix; 2]>>,
    /// qwen4exp: the PLE n-gram memory, added before the mixer (one layer).
    pub ple: Option<Box<PleWeights>>,
}

/// The multi-token-prediction head (`blk.{n_layer}.nextn.*` plus an
/// ordinary full-attention + FFN block at `blk.{n_layer}.*`), DESIGN.md
/// §2.4: `z = eh_proj · [enorm(embed(x_p)); hnorm(h_{p−1})]`, the block,
/// `shared_head_norm`, the LM head.
pub(crate) struct MtpHead {
    /// `[n_embd × 2·n_embd]`: the embedding half first, then the hidden half.
    pub eh_proj: Matrix,
    pub enorm: Vec<f32>,
    pub hnorm: Vec<f32>,
    pub shared_head_norm: Vec<f32>,
    /// The block: attention mixer (never GDN) and the trunk's kind of FFN.
    pub layer: Layer,
    /// `nextn.embed_tokens`, when the file has the head's own embedding.
    pub embed: Option<Matrix>,
    /// `nextn.shared_head_head`, when the file has the head's own LM head.
    pub head: Option<Matrix>,
}

/// A loaded model of the Qwen3.5 / Qwen3-Next family.
pub struct Model {
    pub config: ModelConfig,
    pub(crate) token_embd: Matrix,
    pub(crate) output_norm: Vec<f32>,
    /// `None` when the output projection is tied to the token embedding.
    pub(crate) output: Option<Matrix>,
    pub(crate) layers: Vec<Layer>,
    /// The MTP head, when the file has one (`{arch}.nextn_predict_layers`).
    pub(crate) mtp: Option<MtpHead>,
    /// The rotary embedding of every attention layer (scaled as
    /// `config.rope_scaling` says).
    pub(crate) rope: Rope,
    /// qwen4exp: the final mix of the residual streams, in place of the
    /// final norm (`output_norm` is then empty).
    pub(crate) output_hyper: Option<HyperMix>,
    // Keep the bytes alive for every `Bytes` above: the matrices rewritten
    // at load ([`LoadLayout`]) and the source. Declared last so they are
    // dropped after the views.
    rewritten: Vec<memmap2::MmapMut>,
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

    /// Bind the hyperparameters and tensors of a weight source, every
    /// matrix as the source stores it.
    pub fn from_source(source: Arc<dyn WeightSource>) -> Result<Model, ModelError> {
        Model::from_source_with(source, LoadLayout::default())
    }

    /// Bind the hyperparameters and tensors of a weight source, the
    /// matrices in the layouts `layout` chooses for the run's kernels.
    pub fn from_source_with(
        source: Arc<dyn WeightSource>,
        layout: LoadLayout,
    ) -> Result<Model, ModelError> {
        let mut config = source.config()?;
        let b = Binder {
            source: &*source,
            layout,
            rewritten: Default::default(),
        };
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
        let output = if b.has("output.weight")? {
            Some(b.matrix("output.weight", v, h)?)
        } else {
            None
        };
        // A table of rows looked up, unless it is the LM head too.
        let token_embd = match output {
            Some(_) => b.table("token_embd.weight", v, h)?,
            None => b.matrix("token_embd.weight", v, h)?,
        };
        let (output_norm, output_hyper) = match &config.qwen4exp {
            None => (b.vector("output_norm.weight", h)?, None),
            Some(q) => (
                Vec::new(),
                Some(HyperMix::bind(
                    &b,
                    "output_hc",
                    q.streams,
                    q.hc_rank,
                    h,
                    config.rms_eps,
                    false,
                )?),
            ),
        };

        let mut layers = Vec::with_capacity(config.n_layer);
        for il in 0..config.n_layer {
            layers.push(bind_layer(&b, &config, il, config.layer_kinds[il])?);
        }
        let mtp = match config.n_nextn {
            0 => None,
            1 => Some(bind_mtp(&b, &config)?),
            n => {
                return Err(ModelError::Inconsistent(format!(
                    "{n} MTP layers (rill runs a single MTP head)"
                )))
            }
        };

        config.rope_scaling.validate()?;
        let rope = Rope::of(&config);

        Ok(Model {
            config,
            token_embd,
            output_norm,
            output,
            layers,
            mtp,
            rope,
            output_hyper,
            rewritten: b.rewritten.into_inner(),
            source,
        })
    }

    /// Replace the file's RoPE scaling by `o`'s settings (the command
    /// line's `--rope-scaling`, `--rope-scale`, `--yarn-*`). When it
    /// rescales YaRN, the trained context becomes the original context
    /// times the factor (what `-c 0` then gives), as llama.cpp adjusts its
    /// `n_ctx_train`.
    pub fn override_rope(&mut self, o: &RopeOverride) -> Result<(), ModelError> {
        if o.is_empty() {
            return Ok(());
        }
        let before = self.config.rope_scaling;
        let after = before.with(o);
        after.validate()?;
        if after.kind == crate::rope::RopeScalingType::Yarn && after.factor != before.factor {
            self.config.n_ctx_train = after.scaled_context(self.config.n_ctx_train);
        }
        self.config.rope_scaling = after;
        self.rope = Rope::of(&self.config);
        Ok(())
    }

    /// Bytes of the matrices held in another layout than their file's
    /// ([`LoadLayout`]): memory the model owns besides the mapped file.
    pub fn rewritten_bytes(&self) -> usize {
        self.rewritten.iter().map(|b| b.len()).sum()
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
        total += self.output_hyper.as_ref().map_or(0, HyperMix::weight_bytes);
        for l in &self.layers {
            total += l.decode_weight_bytes(c.n_expert_used);
        }
        total
    }

    /// Whether the file has an MTP head ([`Model::forward_mtp_into`] runs it).
    pub fn has_mtp(&self) -> bool {
        self.mtp.is_some()
    }

    /// Weight bytes one MTP row reads, counted like
    /// [`decode_weight_bytes`](Self::decode_weight_bytes): `eh_proj`, the
    /// norms, the block (`n_expert_used` routed experts), one embedding row
    /// and the LM head. Zero without a head.
    /// Bytes of the LM head the MTP head projects with (0 without a head).
    pub fn mtp_head_bytes(&self) -> u64 {
        self.mtp
            .as_ref()
            .map_or(0, |m| self.mtp_head_matrix(m).byte_len() as u64)
    }

    pub fn mtp_decode_weight_bytes(&self) -> u64 {
        let Some(m) = &self.mtp else { return 0 };
        let c = &self.config;
        let f32s = |v: &[f32]| (v.len() * 4) as u64;
        let embd = m.embed.as_ref().unwrap_or(&self.token_embd);
        let head = self.mtp_head_matrix(m);
        let row = if std::ptr::eq(embd, head) {
            0
        } else {
            embd.byte_len() / c.n_vocab.max(1)
        };
        (m.eh_proj.byte_len() + row + head.byte_len()) as u64
            + f32s(&m.enorm)
            + f32s(&m.hnorm)
            + f32s(&m.shared_head_norm)
            + m.layer.decode_weight_bytes(c.n_expert_used)
    }

    /// Whether the output projection has its own matrix (not tied to the embedding).
    pub fn has_output_matrix(&self) -> bool {
        self.output.is_some()
    }

    pub(crate) fn output_matrix(&self) -> &Matrix {
        self.output.as_ref().unwrap_or(&self.token_embd)
    }

    /// The LM head the MTP head projects with: its own, else the trunk's.
    pub(crate) fn mtp_head_matrix<'a>(&'a self, m: &'a MtpHead) -> &'a Matrix {
        m.head.as_ref().unwrap_or_else(|| self.output_matrix())
    }
}

impl Layer {
    fn decode_weight_bytes(&self, n_expert_used: usize) -> u64 {
        let f32s = |v: &[f32]| (v.len() * 4) as u64;
        f32s(&self.attn_norm)
            + f32s(&self.post_attention_norm)
            + match &self.mixer {
                Mixer::Attention(w) => w.weight_bytes(),
                Mixer::Recurrent(w) => w.weight_bytes(),
            }
            + self.ffn.decode_weight_bytes(n_expert_used)
            + (self.hyper.iter().flat_map(|h| h.iter()))
                .map(HyperMix::weight_bytes)
                .sum::<u64>()
            + self.ple.as_ref().map_or(0, |p| p.decode_weight_bytes())
    }
}

/// Block `il`: its norms, its mixer of `kind` and the architecture's FFN.
fn bind_layer(
    b: &Binder,
    config: &ModelConfig,
    il: usize,
    kind: LayerKind,
) -> Result<Layer, ModelError> {
    let (p, h) = (format!("blk.{il}"), config.n_embd);
    let mixer = match kind {
        LayerKind::Attention => {
            let mut w = AttentionWeights::bind(b, config, &p)?;
            let ratio = (config.qwen4exp.as_ref()).map_or(0, |q| q.indexer.ratios[il]);
            if ratio > 0 {
                w.indexer = Some(IndexerWeights::bind(b, config, &p, ratio)?);
            }
            Mixer::Attention(w)
        }
        LayerKind::Recurrent => Mixer::Recurrent(GdnWeights::bind(b, config, &p)?),
    };
    let ffn = match config.arch {
        Arch::Qwen35 => Ffn::Dense(Box::new(DenseWeights::bind(b, config, &p)?)),
        Arch::Qwen35Moe | Arch::Qwen3Next | Arch::Qwen4Exp => {
            Ffn::Moe(Box::new(MoeWeights::bind(b, config, &p)?))
        }
    };
    let Some(q) = &config.qwen4exp else {
        return Ok(Layer {
            attn_norm: b.vector(&format!("{p}.attn_norm.weight"), h)?,
            post_attention_norm: b.vector(&format!("{p}.post_attention_norm.weight"), h)?,
            mixer,
            ffn,
            hyper: None,
            ple: None,
        });
    };
    let mix = |name: &str| {
        HyperMix::bind(
            b,
            &format!("{p}.{name}"),
            q.streams,
            q.hc_rank,
            h,
            config.rms_eps,
            true,
        )
    };
    let ple = match &q.ple {
        Some(pc) if pc.layer == il => Some(Box::new(PleWeights::bind(b, config, &p)?)),
        _ => None,
    };
    Ok(Layer {
        attn_norm: Vec::new(),
        post_attention_norm: Vec::new(),
        mixer,
        ffn,
        hyper: Some(Box::new([mix("hc_attn")?, mix("hc_ffn")?])),
        ple,
    })
}

/// The MTP head stored after the trunk, at `blk.{n_layer}` (wave2.md A.2):
/// its `nextn.*` tensors and a full-attention block. The optional
/// `nextn.embed_tokens` / `nextn.shared_head_head` replace the trunk's
/// embedding / LM head when present.
fn bind_mtp(b: &Binder, config: &ModelConfig) -> Result<MtpHead, ModelError> {
    let (il, h, v) = (config.n_layer, config.n_embd, config.n_vocab);
    let p = format!("blk.{il}.nextn");
    let optional = |name: String, products: bool| -> Result<Option<Matrix>, ModelError> {
        match (b.has(&name)?, products) {
            (true, true) => Ok(Some(b.matrix(&name, v, h)?)),
            (true, false) => Ok(Some(b.table(&name, v, h)?)),
            (false, _) => Ok(None),
        }
    };
    Ok(MtpHead {
        eh_proj: b.matrix(&format!("{p}.eh_proj.weight"), h, 2 * h)?,
        enorm: b.vector(&format!("{p}.enorm.weight"), h)?,
        hnorm: b.vector(&format!("{p}.hnorm.weight"), h)?,
        shared_head_norm: b.vector(&format!("{p}.shared_head_norm.weight"), h)?,
        layer: bind_layer(b, config, il, LayerKind::Attention)?,
        embed: optional(format!("{p}.embed_tokens.weight"), false)?,
        head: optional(format!("{p}.shared_head_head.weight"), true)?,
    })
}
