//! Hugging Face tensor names → rill's canonical (GGUF) names, with the
//! load-time transform each needs (research/wave2.md §B.5).
//!
//! Only renames and small-vector transforms live here. Layouts the layers
//! read as they are stored need none: Qwen3.5's `in_proj_qkv` is already
//! `[q | k | v]` with value heads grouped (the model is told the order),
//! Qwen3-Next's `in_proj_qkvz` / `in_proj_ba` are the interleaved `ssm_in` /
//! `ssm_ba` the GDN layer splits per key head, `q_proj` is per head
//! `[query ‖ gate]` like `attn_q`, and fused experts are `[E, 2I, H]` with
//! the gate rows first like `ffn_gate_up_exps`.

/// What to do to a tensor's values on the way to the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transform {
    /// Used as stored.
    None,
    /// A zero-centred RMSNorm weight, applied as `1 + w`.
    PlusOne,
    /// `A_log`, used as `−exp(A_log)`.
    NegExp,
    /// `conv1d.weight [C, 1, K]`, read as `[C, K]`.
    Squeeze,
}

/// Where a Hugging Face tensor goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// The canonical tensor `name`.
    Tensor { name: String, transform: Transform },
    /// Expert `expert` of the stacked canonical tensor `name`.
    Expert { name: String, expert: usize },
    /// Not used; the reason, for `rill inspect`.
    Skip(&'static str),
    /// A name rill does not know.
    Unknown,
}

/// The prefix of the language model's tensors.
const PREFIXES: [&str; 2] = ["model.language_model.", "model."];

/// Map one HF name. `n_layer` places the MTP block after the trunk;
/// `tied` drops a stored `lm_head` (the embedding is the head).
pub fn map(hf: &str, n_layer: usize, tied: bool) -> Target {
    if hf.starts_with("model.visual.") || hf.starts_with("visual.") {
        return Target::Skip("vision tower (rill runs the language model only)");
    }
    if hf == "lm_head.weight" {
        if tied {
            return Target::Skip("tie_word_embeddings: the embedding is the LM head");
        }
        return tensor("output.weight", Transform::None);
    }
    if let Some(rest) = hf.strip_prefix("mtp.") {
        return map_mtp(rest, n_layer);
    }
    let Some(rest) = PREFIXES.iter().find_map(|p| hf.strip_prefix(p)) else {
        return Target::Unknown;
    };
    match rest {
        "embed_tokens.weight" => return tensor("token_embd.weight", Transform::None),
        "norm.weight" => return tensor("output_norm.weight", Transform::PlusOne),
        // qwen4exp's final mix of the residual streams.
        "hyper_connection_mixer.hc_norm.weight" => {
            return tensor("output_hc_norm.weight", Transform::PlusOne)
        }
        "hyper_connection_mixer.input_mix_weight_down.weight" => {
            return tensor("output_hc_down.weight", Transform::None)
        }
        "hyper_connection_mixer.input_mix_weight_up.weight" => {
            return tensor("output_hc_up.weight", Transform::None)
        }
        _ => {}
    }
    let Some(rest) = rest.strip_prefix("layers.") else {
        return Target::Unknown;
    };
    let Some((il, inner)) = rest.split_once('.') else {
        return Target::Unknown;
    };
    let Ok(il) = il.parse::<usize>() else {
        return Target::Unknown;
    };
    if il >= n_layer {
        return Target::Skip("a layer past num_hidden_layers");
    }
    map_layer(&format!("blk.{il}"), inner)
}

fn tensor(name: &str, transform: Transform) -> Target {
    Target::Tensor {
        name: name.to_string(),
        transform,
    }
}

/// `mtp.*`: the head's own tensors, and its one decoder layer as block
/// `blk.{n_layer}` (what llama.cpp's converter writes as `nextn`).
fn map_mtp(rest: &str, n_layer: usize) -> Target {
    let p = format!("blk.{n_layer}");
    let own = |leaf: &str, t| tensor(&format!("{p}.nextn.{leaf}"), t);
    match rest {
        "fc.weight" => own("eh_proj.weight", Transform::None),
        "pre_fc_norm_embedding.weight" => own("enorm.weight", Transform::PlusOne),
        "pre_fc_norm_hidden.weight" => own("hnorm.weight", Transform::PlusOne),
        "norm.weight" => own("shared_head_norm.weight", Transform::PlusOne),
        "embed_tokens.weight" => own("embed_tokens.weight", Transform::None),
        _ => match rest.strip_prefix("layers.0.") {
            Some(inner) => map_layer(&p, inner),
            None if rest.starts_with("layers.") => {
                Target::Skip("an MTP layer past the first (rill runs one MTP head)")
            }
            None => Target::Unknown,
        },
    }
}

/// The tensors of one decoder layer (`inner` after `layers.N.`).
fn map_layer(p: &str, inner: &str) -> Target {
    use Transform::*;
    let to = |leaf: &str, t: Transform| tensor(&format!("{p}.{leaf}"), t);
    let (name, t) = match inner {
        "input_layernorm.weight" => ("attn_norm.weight", PlusOne),
        "post_attention_layernorm.weight" => ("post_attention_norm.weight", PlusOne),
        "self_attn.q_proj.weight" => ("attn_q.weight", None),
        "self_attn.k_proj.weight" => ("attn_k.weight", None),
        "self_attn.v_proj.weight" => ("attn_v.weight", None),
        "self_attn.o_proj.weight" => ("attn_output.weight", None),
        "self_attn.q_norm.weight" => ("attn_q_norm.weight", PlusOne),
        "self_attn.k_norm.weight" => ("attn_k_norm.weight", PlusOne),
        "linear_attn.in_proj_qkv.weight" => ("attn_qkv.weight", None),
        "linear_attn.in_proj_z.weight" => ("attn_gate.weight", None),
        "linear_attn.in_proj_b.weight" => ("ssm_beta.weight", None),
        "linear_attn.in_proj_a.weight" => ("ssm_alpha.weight", None),
        "linear_attn.in_proj_qkvz.weight" => ("ssm_in.weight", None),
        "linear_attn.in_proj_ba.weight" => ("ssm_ba.weight", None),
        "linear_attn.conv1d.weight" => ("ssm_conv1d.weight", Squeeze),
        "linear_attn.dt_bias" => ("ssm_dt.bias", None),
        "linear_attn.A_log" => ("ssm_a", NegExp),
        // the gated norm multiplies by w itself: no +1
        "linear_attn.norm.weight" => ("ssm_norm.weight", None),
        "linear_attn.out_proj.weight" => ("ssm_out.weight", None),
        "mlp.gate.weight" => ("ffn_gate_inp.weight", None),
        "mlp.experts.gate_up_proj" => ("ffn_gate_up_exps.weight", None),
        "mlp.experts.down_proj" => ("ffn_down_exps.weight", None),
        "mlp.shared_expert.gate_proj.weight" => ("ffn_gate_shexp.weight", None),
        "mlp.shared_expert.up_proj.weight" => ("ffn_up_shexp.weight", None),
        "mlp.shared_expert.down_proj.weight" => ("ffn_down_shexp.weight", None),
        "mlp.shared_expert_gate.weight" => ("ffn_gate_inp_shexp.weight", None),
        "mlp.gate_proj.weight" => ("ffn_gate.weight", None),
        "mlp.up_proj.weight" => ("ffn_up.weight", None),
        "mlp.down_proj.weight" => ("ffn_down.weight", None),
        // qwen4exp: hyper-connections, the QSA indexer, PLE.
        "attn_hyper_connection.hc_norm.weight" => ("hc_attn_norm.weight", PlusOne),
        "attn_hyper_connection.input_mix_weight_down.weight" => ("hc_attn_down.weight", None),
        "attn_hyper_connection.input_mix_weight_up.weight" => ("hc_attn_up.weight", None),
        "attn_hyper_connection.block_inject_weight.weight" => ("hc_attn_inject.weight", None),
        "mlp_hyper_connection.hc_norm.weight" => ("hc_ffn_norm.weight", PlusOne),
        "mlp_hyper_connection.input_mix_weight_down.weight" => ("hc_ffn_down.weight", None),
        "mlp_hyper_connection.input_mix_weight_up.weight" => ("hc_ffn_up.weight", None),
        "mlp_hyper_connection.block_inject_weight.weight" => ("hc_ffn_inject.weight", None),
        // One projection for the index queries and the key: the layer splits its rows.
        "self_attn.indexer.index_qk_proj.weight" => ("indexer.qk_proj.weight", None),
        "self_attn.indexer.q_layernorm.weight" => ("indexer.q_norm.weight", PlusOne),
        "self_attn.indexer.k_layernorm.weight" => ("indexer.k_norm.weight", PlusOne),
        "ple.key_proj.weight" => ("ple_key.weight", None),
        "ple.value_proj.weight" => ("ple_value.weight", None),
        "ple.norm_key.weight" => ("ple_norm_key.weight", PlusOne),
        "ple.norm_query.weight" => ("ple_norm_query.weight", PlusOne),
        "ple.norm_conv.weight" => ("ple_norm_conv.weight", PlusOne),
        "ple.conv1d.weight" => ("ple_conv1d.weight", Squeeze),
        "ple.ple_embedding.layer_multipliers"
        | "ple.ple_embedding.ngram_heads_offsets"
        | "ple.ple_embedding.ngram_heads_vocab_sizes" => {
            return Target::Skip("PLE hash constants: rill derives them from config.json")
        }
        _ => {
            // The n-gram table in shards of equal rows, read as one table.
            if let Some(k) = inner
                .strip_prefix("ple.ple_embedding.ngram_embedding.shard_")
                .and_then(|r| r.strip_suffix(".weight"))
                .and_then(|k| k.parse::<usize>().ok())
            {
                return Target::Expert {
                    name: "per_layer_token_embd.weight".into(),
                    expert: k,
                };
            }
            return map_expert(p, inner);
        }
    };
    to(name, t)
}

/// `mlp.experts.{e}.{gate,up,down}_proj.weight`: one expert of a stack.
fn map_expert(p: &str, inner: &str) -> Target {
    let Some(rest) = inner.strip_prefix("mlp.experts.") else {
        return Target::Unknown;
    };
    let Some((e, leaf)) = rest.split_once('.') else {
        return Target::Unknown;
    };
    let Ok(expert) = e.parse::<usize>() else {
        return Target::Unknown;
    };
    let stack = match leaf {
        "gate_proj.weight" => "ffn_gate_exps.weight",
        "up_proj.weight" => "ffn_up_exps.weight",
        "down_proj.weight" => "ffn_down_exps.weight",
        _ => return Target::Unknown,
    };
    Target::Expert {
        name: format!("{p}.{stack}"),
        expert,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(t: Target) -> String {
        match t {
            Target::Tensor { name, .. } | Target::Expert { name, .. } => name,
            other => format!("{other:?}"),
        }
    }

    #[test]
    fn release_and_text_prefixes_map_alike() {
        for p in ["model.language_model.", "model."] {
            let m = |s: &str| map(&format!("{p}{s}"), 4, false);
            assert_eq!(
                name(m("layers.3.self_attn.q_proj.weight")),
                "blk.3.attn_q.weight"
            );
            assert_eq!(
                m("layers.0.linear_attn.A_log"),
                tensor("blk.0.ssm_a", Transform::NegExp)
            );
            assert_eq!(
                m("layers.0.linear_attn.norm.weight"),
                tensor("blk.0.ssm_norm.weight", Transform::None)
            );
            assert_eq!(
                m("layers.1.input_layernorm.weight"),
                tensor("blk.1.attn_norm.weight", Transform::PlusOne)
            );
            assert_eq!(
                m("layers.2.mlp.experts.7.up_proj.weight"),
                Target::Expert {
                    name: "blk.2.ffn_up_exps.weight".into(),
                    expert: 7
                }
            );
        }
    }

    #[test]
    fn the_head_goes_after_the_trunk_and_vision_is_skipped() {
        assert_eq!(
            name(map("mtp.fc.weight", 40, false)),
            "blk.40.nextn.eh_proj.weight"
        );
        assert_eq!(
            name(map("mtp.layers.0.mlp.experts.down_proj", 40, false)),
            "blk.40.ffn_down_exps.weight"
        );
        assert!(matches!(
            map("mtp.layers.1.mlp.gate.weight", 40, false),
            Target::Skip(_)
        ));
        assert!(matches!(
            map("model.visual.blocks.0.attn.qkv.weight", 40, false),
            Target::Skip(_)
        ));
        assert!(matches!(map("lm_head.weight", 40, true), Target::Skip(_)));
        assert_eq!(name(map("lm_head.weight", 40, false)), "output.weight");
        assert_eq!(map("model.layers.0.foo.weight", 40, false), Target::Unknown);
    }
}
