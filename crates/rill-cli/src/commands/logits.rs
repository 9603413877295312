//! `rill logits`: the reference-comparison entry point.

use crate::{load, npy};
use anyhow::{bail, Context, Result};
use rill_kernels::Precision;
use rill_kernels::Threads;
use rill_model::{Rows, Runner, SequenceState};
use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Model: a GGUF file (any file of a split set) or a Hugging Face
    /// folder (config.json + safetensors). Default: the demo model
    /// inside the binary.
    #[arg(short, long)]
    model: Option<PathBuf>,
    /// Comma-separated token ids.
    #[arg(long)]
    tokens: String,
    /// Output .npy file, float32 [n_tokens, n_vocab].
    #[arg(long)]
    out: PathBuf,
    /// Worker threads (0 = all cores).
    #[arg(short, long, default_value_t = 0)]
    threads: usize,
    /// Matrix-product numerics: `exact` (f32 activations, the reference
    /// results: the default here, where logits are compared with the
    /// references) or `q8` (8-bit activations, llama.cpp's numerics).
    #[arg(long, default_value = "exact")]
    precision: Precision,
    /// Kernel class: avx2, avx-vnni, avx512, amx (x86-64), neon (aarch64)
    /// or scalar (the portable reference). Default: the fastest this CPU
    /// runs; a class it lacks is refused.
    #[arg(long, env = "RILL_KERNELS", value_parser = crate::load::parse_kernels)]
    kernels: Option<rill_kernels::Isa>,
    #[command(flatten)]
    kv: crate::kv_args::KvArgs,
    /// Feed the tokens one at a time instead of as one batch (checks the
    /// decode path: state and KV cache).
    #[arg(long)]
    one_by_one: bool,
}

pub fn parse_tokens(s: &str) -> Result<Vec<u32>> {
    let ids = s
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            p.parse::<u32>()
                .with_context(|| format!("bad token id '{p}'"))
        })
        .collect::<Result<Vec<_>>>()?;
    if ids.is_empty() {
        bail!("no token ids given");
    }
    Ok(ids)
}

pub fn run(a: Args) -> Result<()> {
    let tokens = parse_tokens(&a.tokens)?;
    let (mut loaded, kernels, precision) = load::open(
        &a.model,
        a.kernels,
        Some(a.precision),
        true,
        rill_load::Prefault::Lazy,
    )?;
    let kv = a.kv.resolve(precision, &mut loaded.model)?;
    let model = loaded.model;
    let run = Runner::new(Threads::new(a.threads), kernels, precision);
    let mut state = SequenceState::with_kv(&model, tokens.len(), kv)?;
    let logits = if a.one_by_one {
        let mut all = Vec::with_capacity(tokens.len() * model.config.n_vocab);
        for &t in &tokens {
            all.extend(model.forward(&run, &mut state, &[t], Rows::Last)?);
        }
        all
    } else {
        model.forward(&run, &mut state, &tokens, Rows::All)?
    };
    let f = File::create(&a.out).with_context(|| format!("cannot create {}", a.out.display()))?;
    npy::write_f32(
        BufWriter::new(f),
        &[tokens.len(), model.config.n_vocab],
        &logits,
    )
    .with_context(|| format!("cannot write {}", a.out.display()))?;
    Ok(())
}
