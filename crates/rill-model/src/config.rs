//! Hyperparameters, read from a GGUF's metadata (`{arch}.*` keys); a
//! Hugging Face folder's `config.json` is read by `source::hf`.
//!
//! Nothing here is tied to a model size: every dimension comes from the file,
//! and the binder cross-checks them against the tensor shapes.

use crate::error::ModelError;
use crate::rope::{RopeScaling, RopeScalingType};
use rill_gguf::{GgufFile, MetaValue};
use rill_kernels::conv::MAX_CONV_TAPS;

/// The architectures of the family rill runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// Qwen3.5 / 3.6 mixture of experts (`qwen35moe`).
    Qwen35Moe,
    /// Qwen3.5 dense (`qwen35`).
    Qwen35,
    /// Qwen3-Next (`qwen3next`).
    Qwen3Next,
    /// Qwen3.8-Flash-Next (`qwen4exp`): hyper-connections, QSA sparse
    /// attention, the PLE n-gram memory ([`Qwen4ExpConfig`]).
    Qwen4Exp,
}

impl Arch {
    pub fn from_name(name: &str) -> Option<Arch> {
        match name {
            "qwen35moe" => Some(Arch::Qwen35Moe),
            "qwen35" => Some(Arch::Qwen35),
            "qwen3next" => Some(Arch::Qwen3Next),
            "qwen4exp" => Some(Arch::Qwen4Exp),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Arch::Qwen35Moe => "qwen35moe",
            Arch::Qwen35 => "qwen35",
            Arch::Qwen3Next => "qwen3next",
            Arch::Qwen4Exp => "qwen4exp",
        }
    }

    /// How GDN value heads map to key heads in this architecture's GGUF files.
    /// llama.cpp's converter tiles the value heads of Qwen3.5 (`h % nk`) but
    /// keeps Qwen3-Next's grouped order (`h / (nv / nk)`).
    pub fn value_head_order(self) -> HeadOrder {
        match self {
            Arch::Qwen35Moe | Arch::Qwen35 | Arch::Qwen4Exp => HeadOrder::Tiled,
            Arch::Qwen3Next => HeadOrder::Grouped,
        }
    }
}

/// Which key head value head `h` reads, when there are more value heads than key heads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadOrder {
    /// `h % n_k_heads`
    Tiled,
    /// `h / (n_v_heads / n_k_heads)`
    Grouped,
}

impl HeadOrder {
    pub fn key_head(self, h: usize, n_k: usize, n_v: usize) -> usize {
        match self {
            HeadOrder::Tiled => h % n_k,
            HeadOrder::Grouped => h / (n_v / n_k),
        }
    }

    /// The `j`-th value head (of `n_v / n_k`) that reads key head `kh`.
    pub fn value_head(self, kh: usize, j: usize, n_k: usize, n_v: usize) -> usize {
        match self {
            HeadOrder::Tiled => kh + j * n_k,
            HeadOrder::Grouped => kh * (n_v / n_k) + j,
        }
    }
}

/// What gates the GDN's output norm: `norm(o) ⊙ act(z)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GateActivation {
    Silu,
    /// qwen4exp (`output_gate_type: "sigmoid"`).
    Sigmoid,
}

/// What qwen4exp adds to the Qwen3.5 layer (DESIGN.md §2.5, wave2.md §C).
#[derive(Clone, Debug, PartialEq)]
pub struct Qwen4ExpConfig {
    /// Residual streams (`hyper_connection.count`): the residual is
    /// `[T × streams·n_embd]`.
    pub streams: usize,
    /// Rank of the hyper-connections' low-rank mixer.
    pub hc_rank: usize,
    /// The QSA indexer of the attention layers.
    pub indexer: IndexerConfig,
    /// The PLE n-gram memory, when the file has one.
    pub ple: Option<PleConfig>,
}

/// The QSA indexer: which key blocks each query attends to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexerConfig {
    pub n_head: usize,
    pub head_dim: usize,
    /// Tokens of complete blocks a query attends to (`indexer.top_k`).
    pub budget: usize,
    /// Tokens per key block, per layer (`attention.compress_ratios`; 0:
    /// the layer attends densely, as llama.cpp does).
    pub ratios: Vec<usize>,
}

/// The PLE n-gram memory of one layer (hashes as transformers' `Qwen4ExpTextNGramEmbedding`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PleConfig {
    /// The (0-based) layer that adds it.
    pub layer: usize,
    /// Largest n-gram (3: 2- and 3-grams).
    pub ngram: usize,
    pub heads_per_ngram: usize,
    /// Taps of its dilated causal conv (dilation = `ngram`).
    pub conv_kernel: usize,
    /// One odd multiplier per n-gram position.
    pub multipliers: Vec<u64>,
    /// Per head: its first row in the table, and its (prime) row count.
    pub offsets: Vec<u64>,
    pub sizes: Vec<u64>,
    /// Resets the n-gram window (and stands for missing predecessors).
    pub eos: u32,
    /// Values per table row (`n_embd / heads`).
    pub row_dim: usize,
}

impl PleConfig {
    pub fn heads(&self) -> usize {
        (self.ngram - 1) * self.heads_per_ngram
    }

    /// History rows its conv keeps: `(taps − 1) · dilation`.
    pub fn conv_history(&self) -> usize {
        (self.conv_kernel - 1) * self.ngram
    }
}

/// The mixer of one layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerKind {
    /// Gated DeltaNet (linear attention with a recurrent state).
    Recurrent,
    /// Gated full attention with a KV cache.
    Attention,
}

/// Every hyperparameter the forward pass uses.
#[derive(Clone, Debug)]
pub struct ModelConfig {
    pub arch: Arch,
    /// Trunk layers (MTP layers excluded).
    pub n_layer: usize,
    /// MTP (`nextn`) layers stored after the trunk.
    pub n_nextn: usize,
    pub n_embd: usize,
    pub n_vocab: usize,
    pub n_ctx_train: usize,
    pub rms_eps: f32,
    pub layer_kinds: Vec<LayerKind>,
    // Full attention.
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub rope_theta: f32,
    pub n_rot: usize,
    /// How rotary positions are scaled past the trained context (YaRN).
    pub rope_scaling: RopeScaling,
    // Gated DeltaNet.
    pub conv_kernel: usize,
    pub ssm_head_dim: usize,
    pub ssm_n_k_heads: usize,
    pub ssm_n_v_heads: usize,
    // Mixture of experts (zero experts for dense models).
    pub n_expert: usize,
    pub n_expert_used: usize,
    /// How GDN value heads pair with key heads in this source's weights:
    /// GGUF files follow their converter ([`Arch::value_head_order`]),
    /// Hugging Face checkpoints keep the grouped order for every architecture.
    pub value_head_order: HeadOrder,
    /// What gates the GDN's output norm.
    pub gdn_gate: GateActivation,
    /// qwen4exp's additions; `None` for the other architectures.
    pub qwen4exp: Option<Box<Qwen4ExpConfig>>,
}

impl ModelConfig {
    /// Key/value channels of the GDN convolution: q, k and v.
    pub fn conv_dim(&self) -> usize {
        2 * self.ssm_n_k_heads * self.ssm_head_dim + self.ssm_n_v_heads * self.ssm_head_dim
    }

    pub fn ssm_value_dim(&self) -> usize {
        self.ssm_n_v_heads * self.ssm_head_dim
    }

    pub fn ssm_key_dim(&self) -> usize {
        self.ssm_n_k_heads * self.ssm_head_dim
    }

    /// Read the hyperparameters of `file`. `n_vocab` comes from the embedding
    /// tensor, since the token list may be padded differently.
    pub fn from_gguf(file: &GgufFile) -> Result<ModelConfig, ModelError> {
        let arch_name = file
            .get("general.architecture")
            .and_then(MetaValue::as_str)
            .ok_or_else(|| ModelError::MissingKey("general.architecture".into()))?;
        let arch = Arch::from_name(arch_name)
            .ok_or_else(|| ModelError::UnsupportedArch(arch_name.into()))?;
        let m = Meta {
            file,
            arch: arch_name,
        };

        let n_block = m.usize("block_count")?;
        let n_nextn = m.opt_usize("nextn_predict_layers")?.unwrap_or(0);
        if n_nextn >= n_block {
            return Err(ModelError::Inconsistent(format!(
                "{n_nextn} MTP layers but only {n_block} blocks"
            )));
        }
        let n_layer = n_block - n_nextn;
        let n_embd = m.usize("embedding_length")?;
        let n_head = m.per_layer_max("attention.head_count")?;
        let n_head_kv = m.per_layer_max("attention.head_count_kv")?;
        let head_dim = match m.opt_usize("attention.key_length")? {
            Some(d) => d,
            None => n_embd / n_head.max(1),
        };
        if let Some(v) = m.opt_usize("attention.value_length")? {
            if v != head_dim {
                return Err(ModelError::Inconsistent(format!(
                    "attention key length {head_dim} != value length {v}"
                )));
            }
        }
        let n_rot = m.opt_usize("rope.dimension_count")?.unwrap_or(head_dim);
        let layer_kinds = layer_kinds(&m, n_layer)?;

        let cfg = ModelConfig {
            arch,
            n_layer,
            n_nextn,
            n_embd,
            n_vocab: 0,
            n_ctx_train: m.opt_usize("context_length")?.unwrap_or(0),
            rms_eps: m.f32("attention.layer_norm_rms_epsilon")?,
            layer_kinds,
            n_head,
            n_head_kv,
            head_dim,
            rope_theta: m.opt_f32("rope.freq_base")?.unwrap_or(10000.0),
            n_rot,
            rope_scaling: rope_scaling(&m)?,
            conv_kernel: m.usize("ssm.conv_kernel")?,
            ssm_head_dim: m.usize("ssm.state_size")?,
            ssm_n_k_heads: m.usize("ssm.group_count")?,
            ssm_n_v_heads: m.usize("ssm.time_step_rank")?,
            n_expert: m.opt_usize("expert_count")?.unwrap_or(0),
            n_expert_used: m.opt_usize("expert_used_count")?.unwrap_or(0),
            value_head_order: arch.value_head_order(),
            gdn_gate: match arch {
                Arch::Qwen4Exp => GateActivation::Sigmoid,
                _ => GateActivation::Silu,
            },
            qwen4exp: match arch {
                Arch::Qwen4Exp => Some(Box::new(qwen4exp_config(&m, n_layer, n_embd)?)),
                _ => None,
            },
        };
        cfg.validate(m.opt_usize("ssm.inner_size")?)?;
        Ok(cfg)
    }

    /// Check the hyperparameters against each other; `ssm_inner`, when the
    /// source states it, must be the GDN value width.
    pub(crate) fn validate(&self, ssm_inner: Option<usize>) -> Result<(), ModelError> {
        let bad = |s: String| Err(ModelError::Inconsistent(s));
        if self.n_embd == 0 || self.n_layer == 0 {
            return bad("zero embedding length or layer count".into());
        }
        // The MTP block is a full-attention layer too.
        if self.layer_kinds.contains(&LayerKind::Attention) || self.n_nextn > 0 {
            if self.n_head == 0
                || self.n_head_kv == 0
                || !self.n_head.is_multiple_of(self.n_head_kv)
            {
                return bad(format!(
                    "{} attention heads over {} KV heads",
                    self.n_head, self.n_head_kv
                ));
            }
            if self.n_rot > self.head_dim || !self.n_rot.is_multiple_of(2) {
                return bad(format!(
                    "rotary dims {} for head dim {}",
                    self.n_rot, self.head_dim
                ));
            }
        }
        if self.layer_kinds.contains(&LayerKind::Recurrent) {
            let (nk, nv) = (self.ssm_n_k_heads, self.ssm_n_v_heads);
            if nk == 0
                || nv == 0
                || !nv.is_multiple_of(nk)
                || self.ssm_head_dim == 0
                || self.conv_kernel == 0
            {
                return bad(format!("GDN with {nk} key heads, {nv} value heads"));
            }
            if self.conv_kernel > MAX_CONV_TAPS {
                return bad(format!(
                    "GDN conv kernel of {} taps (at most {MAX_CONV_TAPS})",
                    self.conv_kernel
                ));
            }
            if let Some(inner) = ssm_inner {
                if inner != self.ssm_value_dim() {
                    return bad(format!(
                        "GDN inner size {inner} != {nv} value heads × {}",
                        self.ssm_head_dim
                    ));
                }
            }
        }
        if let Some(q) = &self.qwen4exp {
            q.validate(self)?;
        }
        let experts_ok =
            self.n_expert > 0 && self.n_expert_used > 0 && self.n_expert_used <= self.n_expert;
        if self.arch != Arch::Qwen35 && !experts_ok {
            return bad(format!(
                "{} of {} experts per token",
                self.n_expert_used, self.n_expert
            ));
        }
        Ok(())
    }
}

impl Qwen4ExpConfig {
    fn validate(&self, c: &ModelConfig) -> Result<(), ModelError> {
        let bad = |s: String| Err(ModelError::Inconsistent(s));
        if self.streams < 2 || self.hc_rank == 0 {
            return bad(format!(
                "{} residual streams of rank {} (qwen4exp needs at least 2)",
                self.streams, self.hc_rank
            ));
        }
        let ix = &self.indexer;
        if ix.ratios.len() != c.n_layer {
            return bad(format!(
                "{} compress ratios for {} layers",
                ix.ratios.len(),
                c.n_layer
            ));
        }
        for (il, &r) in ix.ratios.iter().enumerate() {
            if r == 0 {
                continue;
            }
            if c.layer_kinds[il] != LayerKind::Attention {
                return bad(format!("compress ratio {r} on recurrent layer {il}"));
            }
            if ix.n_head == 0 || ix.head_dim == 0 || ix.budget == 0 || !ix.budget.is_multiple_of(r)
            {
                return bad(format!(
                    "indexer of {} heads × {}, budget {} in blocks of {r}",
                    ix.n_head, ix.head_dim, ix.budget
                ));
            }
            if c.n_rot > ix.head_dim {
                return bad(format!(
                    "rotary dims {} past the indexer head dim {}",
                    c.n_rot, ix.head_dim
                ));
            }
        }
        if let Some(p) = &self.ple {
            let heads = p.heads();
            if p.ngram < 2 || p.heads_per_ngram == 0 || p.conv_kernel == 0 {
                return bad(format!(
                    "PLE of {}-grams, {} heads each, {} conv taps",
                    p.ngram, p.heads_per_ngram, p.conv_kernel
                ));
            }
            if p.layer >= c.n_layer || c.layer_kinds[p.layer] != LayerKind::Recurrent {
                return bad(format!("PLE on layer {} (a GDN layer is needed)", p.layer));
            }
            if p.multipliers.len() != p.ngram
                || p.offsets.len() != heads
                || p.sizes.len() != heads
                || p.sizes.contains(&0)
            {
                return bad(format!(
                    "PLE hash constants: {} multipliers for {}-grams, {} offsets and {} sizes for {heads} heads",
                    p.multipliers.len(),
                    p.ngram,
                    p.offsets.len(),
                    p.sizes.len()
                ));
            }
            // Products of a token id and a multiplier stay below 2^63, as
            // transformers' int64 hashing assumes.
            let largest = p.multipliers.iter().max().copied().unwrap_or(0);
            if (c.n_vocab.max(1) as u128) * (largest as u128) > i64::MAX as u128 && c.n_vocab > 0 {
                return bad("PLE multipliers overflow 63 bits for this vocabulary".into());
            }
        }
        Ok(())
    }
}

/// qwen4exp's keys (wave2.md §C.3).
fn qwen4exp_config(m: &Meta, n_layer: usize, n_embd: usize) -> Result<Qwen4ExpConfig, ModelError> {
    let ratios = match m.file.get(&m.key("attention.compress_ratios")) {
        None => vec![0; n_layer],
        Some(_) => {
            let r = m.u64_array("attention.compress_ratios")?;
            r.iter().map(|&x| x as usize).collect()
        }
    };
    let indexer = IndexerConfig {
        n_head: m.opt_usize("attention.indexer.head_count")?.unwrap_or(0),
        head_dim: m.opt_usize("attention.indexer.key_length")?.unwrap_or(0),
        budget: m.opt_usize("attention.indexer.top_k")?.unwrap_or(0),
        ratios: ratios.into_iter().take(n_layer).collect(),
    };
    let ple = match m.file.get(&m.key("ple.layers")) {
        None => None,
        Some(_) => {
            let layers = m.u64_array("ple.layers")?;
            let [layer] = layers[..] else {
                return Err(ModelError::BadKey {
                    key: m.key("ple.layers"),
                    why: format!("{} PLE layers (rill runs exactly one)", layers.len()),
                });
            };
            let ngram = m.usize("ple.ngram_size")?;
            let heads_per_ngram = m.usize("ple.heads_per_ngram")?;
            let heads = ngram.saturating_sub(1) * heads_per_ngram;
            let eos = m.usize("ple.eos_token_id")?;
            Some(PleConfig {
                layer: layer as usize,
                ngram,
                heads_per_ngram,
                conv_kernel: m.usize("ple.conv_kernel")?,
                multipliers: m.u64_array("ple.layer_multipliers")?,
                offsets: m.u64_array("ple.head_offsets")?,
                sizes: m.u64_array("ple.head_vocab_sizes")?,
                eos: u32::try_from(eos).map_err(|_| ModelError::BadKey {
                    key: m.key("ple.eos_token_id"),
                    why: "out of range".into(),
                })?,
                row_dim: m
                    .opt_usize("embedding_length_per_layer_input")?
                    .unwrap_or(n_embd / heads.max(1)),
            })
        }
    };
    Ok(Qwen4ExpConfig {
        streams: m.usize("hyper_connection.count")?,
        hc_rank: m.usize("hyper_connection.low_rank")?,
        indexer,
        ple,
    })
}

/// `{arch}.rope.scaling.*`, the keys llama.cpp's converter writes from a
/// checkpoint's `rope_scaling` (absent: no scaling).
fn rope_scaling(m: &Meta) -> Result<RopeScaling, ModelError> {
    let key = m.key("rope.scaling.type");
    let kind = match m.file.get(&key) {
        None => None,
        Some(v) => Some(
            v.as_str()
                .ok_or_else(|| ModelError::BadKey {
                    key: key.clone(),
                    why: "not a string".into(),
                })?
                .parse::<RopeScalingType>()
                .map_err(|why| ModelError::BadKey { key, why })?,
        ),
    };
    let factor = match m.opt_f32("rope.scaling.factor")? {
        Some(f) => Some(f),
        None => m.opt_f32("rope.scale_linear")?,
    }
    .filter(|&f| f != 0.0);
    // llama.cpp reads a factor without a type as linear scaling.
    let kind = match (kind, factor) {
        (Some(k), _) => k,
        (None, Some(f)) if f != 1.0 => RopeScalingType::Linear,
        _ => RopeScalingType::None,
    };
    let d = RopeScaling::default();
    let s = RopeScaling {
        kind,
        factor: if kind == RopeScalingType::None {
            1.0
        } else {
            factor.unwrap_or(1.0)
        },
        orig_ctx: m.opt_usize("rope.scaling.original_context_length")?,
        ext_factor: m.opt_f32("rope.scaling.yarn_ext_factor")?,
        attn_factor: m.opt_f32("rope.scaling.yarn_attn_factor")?,
        attn_scale: m.opt_f32("rope.scaling.attn_factor")?.unwrap_or(1.0),
        beta_fast: m
            .opt_f32("rope.scaling.yarn_beta_fast")?
            .unwrap_or(d.beta_fast),
        beta_slow: m
            .opt_f32("rope.scaling.yarn_beta_slow")?
            .unwrap_or(d.beta_slow),
    };
    s.validate()?;
    Ok(s)
}

/// Layers `0..n_layer` with every `interval`-th one full attention.
pub(crate) fn interval_layer_kinds(n_layer: usize, interval: usize) -> Vec<LayerKind> {
    (0..n_layer)
        .map(|i| {
            if (i + 1) % interval == 0 {
                LayerKind::Attention
            } else {
                LayerKind::Recurrent
            }
        })
        .collect()
}

/// Layer kinds: an explicit per-layer list wins over the interval rule.
fn layer_kinds(m: &Meta, n_layer: usize) -> Result<Vec<LayerKind>, ModelError> {
    let key = m.key("attention.recurrent_layers");
    if let Some(v) = m.file.get(&key) {
        let arr = v.as_array().ok_or_else(|| ModelError::BadKey {
            key: key.clone(),
            why: "not an array".into(),
        })?;
        if arr.len() < n_layer {
            return Err(ModelError::BadKey {
                key,
                why: format!("{} entries for {n_layer} layers", arr.len()),
            });
        }
        return arr[..n_layer]
            .iter()
            .map(|v| {
                let rec = v
                    .as_bool()
                    .or_else(|| v.as_u64().map(|x| x != 0))
                    .ok_or_else(|| ModelError::BadKey {
                        key: key.clone(),
                        why: "entries must be booleans".into(),
                    })?;
                Ok(if rec {
                    LayerKind::Recurrent
                } else {
                    LayerKind::Attention
                })
            })
            .collect();
    }
    let interval = m.opt_usize("full_attention_interval")?.unwrap_or(4);
    if interval == 0 {
        return Err(ModelError::BadKey {
            key: m.key("full_attention_interval"),
            why: "must be positive".into(),
        });
    }
    Ok(interval_layer_kinds(n_layer, interval))
}

/// Typed access to `{arch}.*` metadata.
struct Meta<'a> {
    file: &'a GgufFile,
    arch: &'a str,
}

impl Meta<'_> {
    fn key(&self, k: &str) -> String {
        format!("{}.{k}", self.arch)
    }

    /// Key `k` of the architecture read by `read` (absent: `None`); a
    /// value it cannot read is an error saying what was `expected`.
    fn opt<T>(
        &self,
        k: &str,
        read: impl Fn(&MetaValue) -> Option<T>,
        expected: &str,
    ) -> Result<Option<T>, ModelError> {
        let key = self.key(k);
        match self.file.get(&key) {
            None => Ok(None),
            Some(v) => read(v).map(Some).ok_or(ModelError::BadKey {
                key,
                why: format!("expected {expected}, found {v:?}"),
            }),
        }
    }

    fn opt_usize(&self, k: &str) -> Result<Option<usize>, ModelError> {
        let read = |v: &MetaValue| v.as_u64().and_then(|x| usize::try_from(x).ok());
        self.opt(k, read, "a non-negative integer")
    }

    fn usize(&self, k: &str) -> Result<usize, ModelError> {
        self.opt_usize(k)?
            .ok_or_else(|| ModelError::MissingKey(self.key(k)))
    }

    /// A count that may be stored per layer (an array); the largest value is
    /// the one attention layers use (recurrent layers store 0 there).
    fn per_layer_max(&self, k: &str) -> Result<usize, ModelError> {
        let key = self.key(k);
        match self.file.get(&key) {
            None => Ok(0),
            Some(MetaValue::Array(a)) => {
                let mut best = 0;
                for v in a {
                    let x = v.as_u64().ok_or_else(|| ModelError::BadKey {
                        key: key.clone(),
                        why: "array entries must be integers".into(),
                    })?;
                    best = best.max(x as usize);
                }
                Ok(best)
            }
            Some(_) => self.usize(k),
        }
    }

    /// An array of non-negative integers.
    fn u64_array(&self, k: &str) -> Result<Vec<u64>, ModelError> {
        let key = self.key(k);
        let v = self
            .file
            .get(&key)
            .ok_or_else(|| ModelError::MissingKey(key.clone()))?;
        let arr = v.as_array().ok_or_else(|| ModelError::BadKey {
            key: key.clone(),
            why: "not an array".into(),
        })?;
        arr.iter()
            .map(|x| {
                x.as_u64().ok_or_else(|| ModelError::BadKey {
                    key: key.clone(),
                    why: format!("expected non-negative integers, found {x:?}"),
                })
            })
            .collect()
    }

    fn opt_f32(&self, k: &str) -> Result<Option<f32>, ModelError> {
        self.opt(k, |v| v.as_f64().map(|x| x as f32), "a number")
    }

    fn f32(&self, k: &str) -> Result<f32, ModelError> {
        self.opt_f32(k)?
            .ok_or_else(|| ModelError::MissingKey(self.key(k)))
    }
}
