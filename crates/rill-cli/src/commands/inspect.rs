//! `rill inspect`: what is in a model file.

use crate::load;
use anyhow::Result;
use rill_load::human_count;
use rill_model::LayerKind;
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Model file (GGUF; any file of a split set). Default: the demo model
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
            println!(
                "  decode reads {:.1} MiB of weights per token",
                info.decode_weight_bytes as f64 / 1048576.0
            );
        }
        Err(e) => println!("model:       cannot be run: {e}"),
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
