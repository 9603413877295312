//! `rill inspect`: what is in a model file or folder: the architecture, the
//! encoding per tensor class, what is skipped and why, the hyperparameters.

use crate::load;
use anyhow::Result;
use rill_load::human_count;
use rill_model::LayerKind;
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Model: a GGUF file (any file of a split set) or a Hugging Face
    /// folder (config.json + safetensors). Default: the demo model
    /// inside the binary.
    model: Option<PathBuf>,
    /// Also list every metadata key and tensor.
    #[arg(long)]
    verbose: bool,
}

pub fn run(a: Args) -> Result<()> {
    let (info, model) = rill_load::inspect(&load::source(&a.model)?)?;
    println!("file:        {}", info.label);
    println!("format:      {}", info.format);
    println!("arch:        {}", info.arch_name);
    if let Some(name) = &info.name {
        println!("name:        {name}");
    }

    let mut by_type: BTreeMap<&str, (usize, u64, u64)> = BTreeMap::new();
    for t in &info.tensors {
        let e = by_type.entry(&t.encoding).or_default();
        e.0 += 1;
        e.1 += t.n_elements;
        e.2 += t.bytes;
    }
    println!(
        "tensors:     {} ({} parameters, {:.1} MiB)",
        info.tensors.len(),
        human_count(info.n_params()),
        info.weight_bytes() as f64 / 1048576.0
    );
    for (ty, (n, elems, bytes)) in &by_type {
        println!(
            "  {ty:<8} {n:>5} tensors {:>12} params {:>10.1} MiB  {:.2} bits/weight",
            elems,
            *bytes as f64 / 1048576.0,
            *bytes as f64 * 8.0 / (*elems).max(1) as f64
        );
    }

    print_classes(&info);
    print_skipped(&info);

    match model {
        Ok(model) => {
            let c = &model.config;
            let n_attn = c
                .layer_kinds
                .iter()
                .filter(|k| **k == LayerKind::Attention)
                .count();
            println!("hyperparameters:");
            println!(
                "  layers       {} ({} GDN, {} full attention){}",
                c.n_layer,
                c.n_layer - n_attn,
                n_attn,
                if c.n_nextn > 0 {
                    format!(" + {} MTP", c.n_nextn)
                } else {
                    String::new()
                }
            );
            println!("  hidden       {}", c.n_embd);
            println!("  vocab        {}", c.n_vocab);
            println!("  context      {}", c.n_ctx_train);
            println!(
                "  attention    {} heads / {} KV heads × {} (RoPE {} dims, θ {})",
                c.n_head, c.n_head_kv, c.head_dim, c.n_rot, c.rope_theta
            );
            if c.rope_scaling.kind != rill_model::RopeScalingType::None {
                println!("  RoPE scaling {}", c.rope_scaling.describe(c.n_ctx_train));
            }
            println!(
                "  GDN          {} key / {} value heads × {}, conv {}",
                c.ssm_n_k_heads, c.ssm_n_v_heads, c.ssm_head_dim, c.conv_kernel
            );
            if c.n_expert > 0 {
                println!("  experts      {} (top {})", c.n_expert, c.n_expert_used);
            }
            println!("  rms eps      {:e}", c.rms_eps);
            if let Some(q) = &c.qwen4exp {
                print_qwen4exp(q, c.gdn_gate, &info);
            }
            let sparse =
                |il: usize| (c.qwen4exp.as_ref()).is_some_and(|q| q.indexer.ratios[il] > 0);
            let ple_layer = c
                .qwen4exp
                .as_ref()
                .and_then(|q| q.ple.as_ref())
                .map(|p| p.layer);
            let kinds: String = (c.layer_kinds.iter().enumerate())
                .map(|(il, k)| match k {
                    LayerKind::Attention if sparse(il) => 'Q',
                    LayerKind::Attention => 'A',
                    LayerKind::Recurrent if ple_layer == Some(il) => 'p',
                    LayerKind::Recurrent => 'g',
                })
                .collect();
            let legend = match c.qwen4exp {
                Some(_) => "g = GDN, p = GDN + PLE, A = dense attention, Q = QSA sparse attention",
                None => "g = GDN, A = attention",
            };
            println!("  layer map    {kinds}  ({legend})");
            println!(
                "  decode reads {:.1} MiB of weights per token",
                info.decode_weight_bytes as f64 / 1048576.0
            );
        }
        Err(e) => println!("model:       cannot be run: {e}"),
    }

    if let Some(q) = info
        .metadata
        .iter()
        .find(|(k, _)| k.contains("quantization_config"))
    {
        println!("quantization: {} = {}", q.0, q.1);
    }

    if a.verbose {
        println!("metadata:");
        for (k, v) in &info.metadata {
            println!("  {k} = {v}");
        }
        println!("tensor list:");
        for t in &info.tensors {
            println!("  {:<40} {:<8} {:?}", t.name, t.encoding, t.shape);
        }
    }
    Ok(())
}

/// qwen4exp's residual streams, QSA indexer and PLE table.
fn print_qwen4exp(
    q: &rill_model::Qwen4ExpConfig,
    gate: rill_model::GateActivation,
    info: &rill_load::ModelInfo,
) {
    println!(
        "  streams      {} residual streams (hyper-connections of rank {})",
        q.streams, q.hc_rank
    );
    println!("  GDN gate     {gate:?} of z");
    let ix = &q.indexer;
    let qsa: Vec<String> = (ix.ratios.iter().enumerate())
        .filter(|(_, r)| **r > 0)
        .map(|(il, r)| format!("{il} (blocks of {r})"))
        .collect();
    if qsa.is_empty() {
        println!(
            "  indexer      none: every attention layer is dense (compress ratios 0 — a converter \
             that read the layers as `indexed_attention` drops them)"
        );
    } else {
        println!(
            "  indexer      {} heads × {}, budget {} tokens; sparse layers {}",
            ix.n_head,
            ix.head_dim,
            ix.budget,
            qsa.join(", ")
        );
    }
    if let Some(p) = &q.ple {
        // GGUF: one table; a Hugging Face folder: its shards laid end to end.
        let shards: Vec<_> = (info.tensors.iter())
            .filter(|t| {
                t.name == "per_layer_token_embd.weight" || t.name.contains("ngram_embedding.shard_")
            })
            .collect();
        let values: u64 = shards.iter().map(|t| t.shape.iter().product::<u64>()).sum();
        let rows = values / p.row_dim.max(1) as u64;
        let bytes: u64 = shards.iter().map(|t| t.bytes).sum();
        let enc = shards.first().map_or("?", |t| t.encoding.as_str());
        println!(
            "  PLE          layer {}: {}-grams, {} heads of {} values, conv {} taps (dilation {}); \
             table {rows} rows, {enc}, {:.1} MiB read in place",
            p.layer,
            p.ngram,
            p.heads(),
            p.row_dim,
            p.conv_kernel,
            p.ngram,
            bytes as f64 / 1048576.0
        );
    }
}

/// A tensor's class: its name with every numeric part (layer, expert) as
/// `N` and a folder's language-model prefix dropped
/// (`layers.N.mlp.experts.N.up_proj.weight`, `blk.N.attn_q.weight`).
fn tensor_class(name: &str) -> String {
    let name = name
        .strip_prefix("model.language_model.")
        .or_else(|| name.strip_prefix("model."))
        .unwrap_or(name);
    name.split('.')
        .map(|p| {
            if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) {
                "N"
            } else {
                p
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// The encoding of each tensor class (what a quantized release keeps in
/// which precision).
fn print_classes(info: &rill_load::ModelInfo) {
    let skipped: std::collections::HashSet<&str> =
        info.skipped.iter().map(|(n, _)| n.as_str()).collect();
    let mut classes: BTreeMap<String, BTreeMap<&str, usize>> = BTreeMap::new();
    for t in info
        .tensors
        .iter()
        .filter(|t| !skipped.contains(t.name.as_str()))
    {
        *classes
            .entry(tensor_class(&t.name))
            .or_default()
            .entry(&t.encoding)
            .or_default() += 1;
    }
    println!("encoding per tensor class:");
    for (class, types) in &classes {
        let list: Vec<String> = types.iter().map(|(t, n)| format!("{t} ×{n}")).collect();
        println!("  {class:<48} {}", list.join(", "));
    }
}

/// What the model does not use, grouped by reason.
fn print_skipped(info: &rill_load::ModelInfo) {
    if info.skipped.is_empty() {
        return;
    }
    let mut by_reason: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (name, why) in &info.skipped {
        by_reason.entry(why).or_default().push(name);
    }
    println!("skipped:     {} tensors", info.skipped.len());
    for (why, names) in &by_reason {
        let shown: Vec<&str> = names.iter().take(3).copied().collect();
        let more = names.len().saturating_sub(shown.len());
        println!(
            "  {} ({why}): {}{}",
            names.len(),
            shown.join(", "),
            if more > 0 {
                format!(", … {more} more")
            } else {
                String::new()
            }
        );
    }
}

#[cfg(test)]
mod tests {
    use super::tensor_class;

    #[test]
    fn classes_fold_layers_and_experts() {
        assert_eq!(
            tensor_class("model.language_model.layers.12.mlp.experts.7.up_proj.weight"),
            "layers.N.mlp.experts.N.up_proj.weight"
        );
        assert_eq!(tensor_class("blk.3.attn_q.weight"), "blk.N.attn_q.weight");
        assert_eq!(tensor_class("mtp.fc.weight"), "mtp.fc.weight");
    }
}
