//! A Hugging Face `config.json` as rill's [`ModelConfig`] (research/wave2.md
//! §B.6): Qwen3.5 / 3.6 nest the text model's settings in `text_config`
//! (the folder is a vision-language model), Qwen3-Next keeps them flat.

use crate::config::{
    interval_layer_kinds, Arch, GateActivation, HeadOrder, IndexerConfig, LayerKind, ModelConfig,
    PleConfig, Qwen4ExpConfig,
};
use crate::error::ModelError;
use crate::rope::{RopeScaling, RopeScalingType};
use serde_json::Value;

/// What `config.json` says, beyond the hyperparameters.
#[derive(Clone, Debug)]
pub struct HfConfig {
    /// `n_nextn` is 0 here: the source sets it once it knows whether the
    /// folder holds the head's weights ([`HfConfig::mtp_layers`]).
    pub model: ModelConfig,
    /// `architectures[0]` (`Qwen3_5MoeForConditionalGeneration`).
    pub architecture: String,
    /// `mtp_num_hidden_layers`: MTP layers the checkpoint declares.
    pub mtp_layers: usize,
    /// `tie_word_embeddings`: the LM head is the embedding.
    pub tied: bool,
    /// `quantization_config` (top level or in `text_config`), as written.
    pub quantization: Option<Value>,
    /// `vocab_size`: rows of the embedding.
    pub vocab_size: usize,
}

/// Reads typed fields of one JSON object, errors naming the file and key.
struct Fields<'a> {
    obj: &'a Value,
    file: &'a str,
}

impl Fields<'_> {
    fn err(&self, why: String) -> ModelError {
        ModelError::Checkpoint {
            file: self.file.to_string(),
            why,
        }
    }

    /// Field `key` read by `read` (absent or null: `None`); a value it
    /// cannot read is an error saying what the field `must` be.
    fn opt<T>(
        &self,
        key: &str,
        must: &str,
        read: impl Fn(&Value) -> Option<T>,
    ) -> Result<Option<T>, ModelError> {
        match self.obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => read(v)
                .map(Some)
                .ok_or_else(|| self.err(format!("`{key}` must be {must}, not {v}"))),
        }
    }

    fn opt_usize(&self, key: &str) -> Result<Option<usize>, ModelError> {
        self.opt(key, "a non-negative integer", |v| {
            v.as_u64().map(|x| x as usize)
        })
    }

    fn usize(&self, key: &str) -> Result<usize, ModelError> {
        self.opt_usize(key)?
            .ok_or_else(|| self.err(format!("`{key}` is missing")))
    }

    fn opt_f64(&self, key: &str) -> Result<Option<f64>, ModelError> {
        self.opt(key, "a number", Value::as_f64)
    }

    fn opt_bool(&self, key: &str) -> Result<Option<bool>, ModelError> {
        self.opt(key, "true or false", Value::as_bool)
    }

    fn opt_str(&self, key: &str) -> Option<&str> {
        self.obj.get(key).and_then(Value::as_str)
    }
}

/// qwen4exp's settings (transformers' `Qwen4ExpTextConfig`): the
/// hyper-connections, the QSA indexer on every attention layer, and the
/// PLE layer, whose hash constants are derived as transformers derives them
/// (the checkpoint's int64 copies are not read).
fn qwen4exp(t: &Fields, m: &ModelConfig) -> Result<Qwen4ExpConfig, ModelError> {
    let ratio = t.opt_usize("indexer_compress_ratio")?.unwrap_or(0);
    let indexer = IndexerConfig {
        n_head: t.opt_usize("indexer_n_heads")?.unwrap_or(0),
        head_dim: t.opt_usize("indexer_head_dim")?.unwrap_or(0),
        budget: t.opt_usize("indexer_budget")?.unwrap_or(0),
        ratios: (m.layer_kinds.iter())
            .map(|k| if *k == LayerKind::Attention { ratio } else { 0 })
            .collect(),
    };
    if t.opt_usize("indexer_kv_heads")?.is_some_and(|h| h != 1) {
        return Err(t.err("`indexer_kv_heads` must be 1".into()));
    }
    let ple_ids: Vec<usize> = match t.obj.get("ple_layer_ids") {
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_u64)
            .map(|x| x as usize)
            .collect(),
        _ => Vec::new(),
    };
    let ple = match ple_ids[..] {
        [] => None,
        [id] if id >= 1 => {
            let ngram = t.opt_usize("ngram_size")?.unwrap_or(3);
            let heads_per_ngram = t.opt_usize("heads_per_ngram")?.unwrap_or(8);
            let heads = ngram.saturating_sub(1) * heads_per_ngram;
            let embed = t.opt_usize("ple_embed_dim")?.unwrap_or(m.n_embd);
            if heads == 0 || !embed.is_multiple_of(heads) {
                return Err(t.err(format!("`ple_embed_dim` {embed} over {heads} n-gram heads")));
            }
            let eos = match t.obj.get("eos_token_id") {
                Some(Value::Array(a)) => a.first().and_then(Value::as_u64),
                Some(v) => v.as_u64(),
                None => None,
            }
            .ok_or_else(|| t.err("`eos_token_id` is needed: the PLE window resets on it".into()))?;
            let base = t.opt_usize("ngram_vocab_size_base")?.unwrap_or(20_000_000) as u64;
            let seed = t.opt_usize("seed")?.unwrap_or(1234) as u64;
            let (offsets, sizes) = ngram_head_sizes(base, heads);
            Some(PleConfig {
                layer: id - 1,
                ngram,
                heads_per_ngram,
                conv_kernel: t.opt_usize("ple_conv_kernel_size")?.unwrap_or(4),
                multipliers: ngram_multipliers(m.n_vocab as u64, ngram, 0, seed),
                offsets,
                sizes,
                eos: eos as u32,
                row_dim: embed / heads,
            })
        }
        _ => {
            return Err(t.err(format!(
                "`ple_layer_ids` {ple_ids:?}: rill runs one PLE layer"
            )))
        }
    };
    Ok(Qwen4ExpConfig {
        streams: t.opt_usize("hc_count")?.unwrap_or(4),
        hc_rank: t.opt_usize("hc_lowrank")?.unwrap_or(320),
        indexer,
        ple,
    })
}

/// splitmix64's output function.
fn splitmix64(x: u64) -> u64 {
    let x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The odd multiplier of each n-gram position: transformers'
/// `_build_layer_multipliers` (below `i64::MAX / vocab`, so products of a
/// token id and a multiplier never overflow).
fn ngram_multipliers(vocab: u64, ngram: usize, ple_index: u64, seed: u64) -> Vec<u64> {
    let bound = (i64::MAX as u64 / vocab.max(1)) / 2;
    let half = bound.max(1);
    let base = seed.wrapping_add(10007 * ple_index);
    (0..ngram as u64)
        .map(|i| {
            let v = base.wrapping_add(0x9E37_79B9_7F4A_7C15u64.wrapping_mul(i + 1));
            2 * (splitmix64(v) % half) + 1
        })
        .collect()
}

/// Each head's (offset, prime row count): the successive primes above
/// `base − 1`, rows laid end to end.
fn ngram_head_sizes(base: u64, heads: usize) -> (Vec<u64>, Vec<u64>) {
    let is_prime = |v: u64| {
        if v < 2 || v.is_multiple_of(2) {
            return v == 2;
        }
        let mut d = 3;
        while d * d <= v {
            if v.is_multiple_of(d) {
                return false;
            }
            d += 2;
        }
        true
    };
    let (mut offsets, mut sizes, mut total, mut p) = (Vec::new(), Vec::new(), 0, base - 1);
    for _ in 0..heads {
        p += 1;
        while !is_prime(p) {
            p += 1;
        }
        offsets.push(total);
        sizes.push(p);
        total += p;
    }
    (offsets, sizes)
}

/// The architecture a `model_type` names.
fn arch_of(model_type: &str) -> Option<Arch> {
    match model_type {
        "qwen3_5_moe" | "qwen3_5_moe_text" => Some(Arch::Qwen35Moe),
        "qwen3_5" | "qwen3_5_text" => Some(Arch::Qwen35),
        "qwen3_next" => Some(Arch::Qwen3Next),
        "qwen4_exp" | "qwen4_exp_text" => Some(Arch::Qwen4Exp),
        _ => None,
    }
}

/// Parse `config.json` (`file` names it in messages).
pub fn parse(text: &str, file: &str) -> Result<HfConfig, ModelError> {
    let root: Value = serde_json::from_str(text).map_err(|e| ModelError::Checkpoint {
        file: file.to_string(),
        why: format!("not valid JSON: {e}"),
    })?;
    let top = Fields { obj: &root, file };
    let text_cfg = root.get("text_config").filter(|v| v.is_object());
    let t = Fields {
        obj: text_cfg.unwrap_or(&root),
        file,
    };
    let model_type = t
        .opt_str("model_type")
        .or_else(|| top.opt_str("model_type"))
        .unwrap_or("?");
    let arch = arch_of(model_type)
        .or_else(|| top.opt_str("model_type").and_then(arch_of))
        .ok_or_else(|| {
            ModelError::UnsupportedArch(format!("Hugging Face model_type {model_type}"))
        })?;
    let architecture = root
        .get("architectures")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
        .and_then(Value::as_str)
        .unwrap_or("?")
        .to_string();

    let n_layer = t.usize("num_hidden_layers")?;
    let n_embd = t.usize("hidden_size")?;
    let n_head = t.usize("num_attention_heads")?;
    let n_head_kv = t.opt_usize("num_key_value_heads")?.unwrap_or(n_head);
    let head_dim = match t.opt_usize("head_dim")? {
        Some(d) => d,
        None => n_embd / n_head.max(1),
    };
    if t.opt_bool("attn_output_gate")? == Some(false) {
        return Err(t.err(
            "`attn_output_gate: false`: rill runs the gated attention of this family only".into(),
        ));
    }

    // RoPE: `rope_parameters` (transformers 5) or the older top-level keys
    // with `rope_scaling`.
    let rope = t
        .obj
        .get("rope_parameters")
        .filter(|v| v.is_object())
        .or_else(|| t.obj.get("rope_scaling").filter(|v| v.is_object()));
    let rope_f = rope.map(|r| Fields { obj: r, file });
    let rope_key = |k: &str| -> Result<Option<f64>, ModelError> {
        if let Some(r) = &rope_f {
            if let Some(v) = r.opt_f64(k)? {
                return Ok(Some(v));
            }
        }
        t.opt_f64(k)
    };
    let rope_theta = rope_key("rope_theta")?.unwrap_or(10000.0);
    // The family's default (transformers' config classes), when the file is silent.
    let partial = rope_key("partial_rotary_factor")?.unwrap_or(0.25);
    let n_ctx_train = t.opt_usize("max_position_embeddings")?.unwrap_or(0);
    let rope_scaling = match &rope_f {
        None => RopeScaling::default(),
        Some(r) => hf_rope_scaling(&t, r, n_ctx_train)?,
    };
    let n_rot = (head_dim as f64 * partial).round() as usize;

    let layer_kinds = match t.obj.get("layer_types") {
        Some(Value::Array(a)) => {
            if a.len() < n_layer {
                return Err(t.err(format!(
                    "`layer_types` has {} entries for {n_layer} layers",
                    a.len()
                )));
            }
            a[..n_layer]
                .iter()
                .map(|v| match v.as_str() {
                    Some("linear_attention") => Ok(LayerKind::Recurrent),
                    // qwen4exp: transformers' name for its QSA layers.
                    Some("full_attention" | "indexed_attention") => Ok(LayerKind::Attention),
                    _ => Err(t.err(format!(
                        "`layer_types` entry {v} is neither linear_attention nor full_attention"
                    ))),
                })
                .collect::<Result<Vec<_>, _>>()?
        }
        _ => {
            let interval = t.opt_usize("full_attention_interval")?.unwrap_or(4);
            if interval == 0 {
                return Err(t.err("`full_attention_interval` must be positive".into()));
            }
            interval_layer_kinds(n_layer, interval)
        }
    };

    let dk = t.opt_usize("linear_key_head_dim")?.unwrap_or(0);
    let dv = t.opt_usize("linear_value_head_dim")?.unwrap_or(dk);
    if dk != dv {
        return Err(t.err(format!(
            "GDN key head dim {dk} != value head dim {dv} (rill needs them equal)"
        )));
    }
    let (n_expert, n_expert_used) = match arch {
        Arch::Qwen35 => (0, 0),
        _ => (t.usize("num_experts")?, t.usize("num_experts_per_tok")?),
    };
    if arch == Arch::Qwen3Next {
        // rill renormalises the top-k router weights, as Qwen3.5 always does.
        if t.opt_bool("norm_topk_prob")? == Some(false) {
            return Err(t.err(
                "`norm_topk_prob: false`: rill always renormalises the top-k experts".into(),
            ));
        }
        if t.opt_usize("decoder_sparse_step")?.unwrap_or(1) != 1 {
            return Err(t.err(
                "`decoder_sparse_step` other than 1: rill runs experts in every layer".into(),
            ));
        }
        let dense_layers = t.obj.get("mlp_only_layers").and_then(Value::as_array);
        if dense_layers.is_some_and(|a| !a.is_empty()) {
            return Err(t.err("`mlp_only_layers`: rill runs experts in every layer".into()));
        }
    }
    let vocab_size = t.usize("vocab_size")?;
    let tied = t
        .opt_bool("tie_word_embeddings")?
        .or(top.opt_bool("tie_word_embeddings")?)
        .unwrap_or(false);
    let quantization = t
        .obj
        .get("quantization_config")
        .or_else(|| root.get("quantization_config"))
        .filter(|v| !v.is_null())
        .cloned();

    let model = ModelConfig {
        arch,
        n_layer,
        n_nextn: 0,
        n_embd,
        n_vocab: vocab_size,
        n_ctx_train,
        rms_eps: t.opt_f64("rms_norm_eps")?.unwrap_or(1e-6) as f32,
        layer_kinds,
        n_head,
        n_head_kv,
        head_dim,
        rope_theta: rope_theta as f32,
        n_rot,
        rope_scaling,
        conv_kernel: t.opt_usize("linear_conv_kernel_dim")?.unwrap_or(4),
        ssm_head_dim: dk,
        ssm_n_k_heads: t.opt_usize("linear_num_key_heads")?.unwrap_or(0),
        ssm_n_v_heads: t.opt_usize("linear_num_value_heads")?.unwrap_or(0),
        n_expert,
        n_expert_used,
        value_head_order: HeadOrder::Grouped,
        gdn_gate: GateActivation::Silu,
        qwen4exp: None,
    };
    let mut model = model;
    if arch == Arch::Qwen4Exp {
        let gate = t.opt_str("output_gate_type").or(t.opt_str("hidden_act"));
        model.gdn_gate = match gate {
            Some("sigmoid") => GateActivation::Sigmoid,
            Some("silu") | None => GateActivation::Silu,
            Some(other) => {
                return Err(t.err(format!(
                    "`output_gate_type` {other}: rill runs sigmoid or silu"
                )))
            }
        };
        model.qwen4exp = Some(Box::new(qwen4exp(&t, &model)?));
    }
    model.validate(None)?;
    Ok(HfConfig {
        model,
        architecture,
        mtp_layers: t.opt_usize("mtp_num_hidden_layers")?.unwrap_or(0),
        tied,
        quantization,
        vocab_size,
    })
}

/// The scaling of `rope_parameters` / `rope_scaling` (`rope_type` or the
/// older `type`): default, linear or YaRN, with transformers' defaults
/// (`_compute_yarn_parameters`: a missing factor is
/// `max_position_embeddings / original_max_position_embeddings`, a missing
/// `attention_factor` comes from `mscale` / `mscale_all_dim` when both are
/// given, else `0.1·ln(factor) + 1`).
fn hf_rope_scaling(t: &Fields, r: &Fields, n_ctx_train: usize) -> Result<RopeScaling, ModelError> {
    let kind = r.opt_str("rope_type").or_else(|| r.opt_str("type"));
    let kind = match kind.unwrap_or("default") {
        "default" => RopeScalingType::None,
        "linear" => RopeScalingType::Linear,
        "yarn" => RopeScalingType::Yarn,
        other => {
            return Err(t.err(format!(
                "RoPE type `{other}`: rill runs the default, linear and yarn rotary embeddings"
            )))
        }
    };
    if kind == RopeScalingType::None {
        return Ok(RopeScaling::default());
    }
    let orig = r.opt_usize("original_max_position_embeddings")?;
    let factor = match r.opt_f64("factor")? {
        Some(f) => f,
        None => match (kind, orig) {
            (RopeScalingType::Yarn, Some(o)) if o > 0 && n_ctx_train > 0 => {
                n_ctx_train as f64 / o as f64
            }
            _ => return Err(t.err("RoPE scaling without a `factor`".into())),
        },
    };
    if r.opt_bool("truncate")? == Some(false) {
        return Err(t.err(
            "YaRN with `truncate: false`: rill (as llama.cpp) rounds the correction range".into(),
        ));
    }
    let mscale = |scale: f64, m: f64| {
        if scale <= 1.0 {
            1.0
        } else {
            0.1 * m * scale.ln() + 1.0
        }
    };
    let attn_factor = match r.opt_f64("attention_factor")? {
        Some(a) => Some(a),
        None => match (r.opt_f64("mscale")?, r.opt_f64("mscale_all_dim")?) {
            (Some(m), Some(all)) if m != 0.0 && all != 0.0 => {
                Some(mscale(factor, m) / mscale(factor, all))
            }
            _ => None,
        },
    };
    let d = RopeScaling::default();
    let s = RopeScaling {
        kind,
        factor: factor as f32,
        // transformers requires it for YaRN; older configs leave it to
        // `max_position_embeddings`.
        orig_ctx: orig.or((n_ctx_train > 0).then_some(n_ctx_train)),
        ext_factor: None,
        attn_factor: attn_factor.map(|a| a as f32),
        attn_scale: 1.0,
        beta_fast: r.opt_f64("beta_fast")?.map_or(d.beta_fast, |b| b as f32),
        beta_slow: r.opt_f64("beta_slow")?.map_or(d.beta_slow, |b| b as f32),
    };
    s.validate()?;
    Ok(s)
}
