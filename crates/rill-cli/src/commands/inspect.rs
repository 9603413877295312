//! `rill inspect`: what is in a model file.

use anyhow::{Context, Result};
use rill_gguf::{GgufFile, MetaValue};
use rill_model::{LayerKind, Model};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(clap::Args)]
pub struct Args {
    /// Model file (GGUF).
    model: PathBuf,
    /// Also list every metadata key and tensor.
    #[arg(long)]
    verbose: bool,
}

fn short(v: &MetaValue) -> String {
    match v {
        MetaValue::Str(s) if s.len() > 80 => {
            format!("{:?}… ({} bytes)", &s[..s.floor_char_boundary(60)], s.len())
        }
        MetaValue::Str(s) => format!("{s:?}"),
        MetaValue::Array(a) if a.len() > 8 => format!("[{} values]", a.len()),
        MetaValue::Array(a) => format!("[{}]", a.iter().map(short).collect::<Vec<_>>().join(", ")),
        other => format!("{other:?}"),
    }
}

pub fn run(a: Args) -> Result<()> {
    let file = Arc::new(
        GgufFile::open(&a.model).with_context(|| format!("cannot open {}", a.model.display()))?,
    );
    println!("file:        {}", a.model.display());
    println!("gguf:        v{}", file.version());
    let arch = file
        .get("general.architecture")
        .and_then(MetaValue::as_str)
        .unwrap_or("?");
    println!("arch:        {arch}");
    if let Some(name) = file.get("general.name").and_then(MetaValue::as_str) {
        println!("name:        {name}");
    }

    let mut by_type: BTreeMap<String, (usize, u64, u64)> = BTreeMap::new();
    for t in file.tensors() {
        let key = t
            .dtype()
            .map(|d| d.name().to_string())
            .unwrap_or_else(|_| format!("type#{}", t.ggml_type));
        let e = by_type.entry(key).or_default();
        e.0 += 1;
        e.1 += t.n_elements();
        e.2 += file.try_tensor_data(t).map(|d| d.len() as u64).unwrap_or(0);
    }
    let total: u64 = by_type.values().map(|v| v.2).sum();
    let params: u64 = by_type.values().map(|v| v.1).sum();
    println!(
        "tensors:     {} ({:.3} B parameters, {:.1} MiB)",
        file.tensors().len(),
        params as f64 / 1e9,
        total as f64 / 1048576.0
    );
    for (ty, (n, elems, bytes)) in &by_type {
        println!(
            "  {ty:<8} {n:>5} tensors {:>12} params {:>10.1} MiB  {:.2} bits/weight",
            elems,
            *bytes as f64 / 1048576.0,
            *bytes as f64 * 8.0 / (*elems).max(1) as f64
        );
    }

    match Model::from_gguf(file.clone()) {
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
            println!(
                "  GDN          {} key / {} value heads × {}, conv {}",
                c.ssm_n_k_heads, c.ssm_n_v_heads, c.ssm_head_dim, c.conv_kernel
            );
            if c.n_expert > 0 {
                println!("  experts      {} (top {})", c.n_expert, c.n_expert_used);
            }
            println!("  rms eps      {:e}", c.rms_eps);
            let kinds: String = c
                .layer_kinds
                .iter()
                .map(|k| if *k == LayerKind::Attention { 'A' } else { 'g' })
                .collect();
            println!("  layer map    {kinds}  (g = GDN, A = attention)");
        }
        Err(e) => println!("model:       cannot be run: {e}"),
    }

    if a.verbose {
        println!("metadata:");
        for (k, v) in file.metadata() {
            println!("  {k} = {}", short(v));
        }
        println!("tensor list:");
        for t in file.tensors() {
            let ty = t
                .dtype()
                .map(|d| d.name().to_string())
                .unwrap_or_else(|_| format!("type#{}", t.ggml_type));
            println!("  {:<40} {:<8} {:?}", t.name, ty, t.shape);
        }
    }
    Ok(())
}
