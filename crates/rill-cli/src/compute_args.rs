//! The flags of every command that runs the model (`run`, `chat`, `bench`,
//! `perplexity`): its threads, numerics, kernel class and KV cache, and the
//! one way those commands open the model with them.

use anyhow::Result;
use rill_kernels::{Isa, Precision};
use rill_load::{Loaded, Prefault};
use rill_model::KvConfig;
use std::path::PathBuf;

use crate::kv_args::KvArgs;
use crate::spec_args::SpecArgs;

#[derive(clap::Args, Clone, Debug)]
pub struct ComputeArgs {
    /// Worker threads (0 = all cores).
    #[arg(short, long, default_value_t = 0)]
    pub threads: usize,
    /// Matrix-product numerics: `q8` (8-bit activations, llama.cpp's own
    /// numerics, integer kernels: fast) or `exact` (f32 activations, the
    /// reference results). Default: q8 where this CPU has the integer
    /// kernels (AVX2 on x86-64, the dot-product extension on aarch64), else
    /// exact.
    #[arg(long)]
    pub precision: Option<Precision>,
    /// Kernel class: avx2, avx-vnni, avx512, amx (x86-64), neon (aarch64)
    /// or scalar (the portable reference). Default: the fastest this CPU
    /// runs; a class it lacks is refused.
    #[arg(long, env = "RILL_KERNELS", value_parser = crate::load::parse_kernels)]
    pub kernels: Option<Isa>,
    /// Keep every weight matrix in the file's layout: none is rewritten at
    /// load for the kernels (as llama.cpp's `--no-repack`).
    #[arg(long = "no-repack", env = "RILL_NO_REPACK")]
    pub no_repack: bool,
    #[command(flatten)]
    pub kv: KvArgs,
}

/// A model opened to run: what was loaded, and the kernel class,
/// precision and KV cache it runs with.
pub type Opened = (Loaded, Isa, Precision, KvConfig);

/// Open the model of `-m` (with the MTP head `spec` names, for a command
/// that decodes) for `kernels` / `precision` (defaults as
/// [`crate::load::open`]), and resolve the KV flags against it.
pub fn open(
    model: &Option<PathBuf>,
    spec: Option<&SpecArgs>,
    kernels: Option<Isa>,
    precision: Option<Precision>,
    repack: bool,
    kv: &KvArgs,
    prefault: Prefault,
) -> Result<Opened> {
    let (mut loaded, kernels, precision) = match spec {
        Some(spec) => {
            crate::load::open_to_decode(model, spec, kernels, precision, repack, prefault)?
        }
        None => crate::load::open(model, kernels, precision, repack, prefault)?,
    };
    let kv = kv.resolve(precision, &mut loaded.model)?;
    Ok((loaded, kernels, precision, kv))
}

impl ComputeArgs {
    /// [`open`] with these flags.
    pub fn open(
        &self,
        model: &Option<PathBuf>,
        spec: Option<&SpecArgs>,
        prefault: Prefault,
    ) -> Result<Opened> {
        open(
            model,
            spec,
            self.kernels,
            self.precision,
            !self.no_repack,
            &self.kv,
            prefault,
        )
    }
}

/// The engine settings the commands that decode share: `threads`, the
/// kernel class, precision and KV cache they opened the model with, and
/// the speculation `spec` asks for; the rest as [`EngineConfig::default`].
pub fn engine_config(
    threads: usize,
    (kernels, precision, kv): (Isa, Precision, KvConfig),
    spec: &SpecArgs,
) -> Result<rill_engine::EngineConfig> {
    Ok(rill_engine::EngineConfig {
        threads,
        kernels,
        precision,
        kv,
        spec: spec.config()?,
        ..Default::default()
    })
}
