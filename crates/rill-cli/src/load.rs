//! The model every command opens, through the one loader.

use anyhow::Result;
use rill_kernels::{Isa, Precision};
use rill_load::{LoadOptions, Loaded, ModelSource, Prefault};
use rill_model::LoadLayout;
use std::path::PathBuf;

/// The source a command's `-m` names: a file, or without one the demo
/// model inside the binary (said on stderr).
pub fn source(model: &Option<PathBuf>) -> Result<ModelSource> {
    match model {
        Some(p) => Ok(ModelSource::File(p.clone())),
        None => {
            eprintln!("{}", crate::demo::notice());
            Ok(crate::demo::source())
        }
    }
}

/// Load the model of `-m` for a command that runs it, its pages read as
/// `prefault` says, to run on kernel class `kernels` (default:
/// [`Isa::best`]; a class the user names was checked when the flag was
/// parsed) with `precision` for its products (default:
/// [`Precision::fastest`] on that class), both returned for the engine to
/// run with; with `repack`, the matrices those kernels read faster in
/// another layout are rewritten into it (`LoadLayout`). Says on stderr
/// what runs, on which CPU.
pub fn open(
    model: &Option<PathBuf>,
    kernels: Option<Isa>,
    precision: Option<Precision>,
    repack: bool,
    prefault: Prefault,
) -> Result<(Loaded, Isa, Precision)> {
    open_with_head(model, None, kernels, precision, repack, prefault)
}

/// [`open`] for a command that decodes: with the MTP head from a separate
/// MTP-only file when `spec` names one (`--mtp-model`).
pub fn open_to_decode(
    model: &Option<PathBuf>,
    spec: &crate::spec_args::SpecArgs,
    kernels: Option<Isa>,
    precision: Option<Precision>,
    repack: bool,
    prefault: Prefault,
) -> Result<(Loaded, Isa, Precision)> {
    open_with_head(
        model,
        spec.mtp_model.as_deref(),
        kernels,
        precision,
        repack,
        prefault,
    )
}

fn open_with_head(
    model: &Option<PathBuf>,
    mtp_model: Option<&std::path::Path>,
    kernels: Option<Isa>,
    precision: Option<Precision>,
    repack: bool,
    prefault: Prefault,
) -> Result<(Loaded, Isa, Precision)> {
    let kernels = kernels.unwrap_or_else(Isa::best);
    let precision = precision.unwrap_or_else(|| Precision::fastest(kernels));
    let options = LoadOptions {
        prefault,
        mtp_model: mtp_model.map(|p| ModelSource::File(p.to_path_buf())),
        layout: match repack {
            true => LoadLayout::for_run(kernels, precision),
            false => LoadLayout::default(),
        },
    };
    let loaded = rill_load::load(&source(model)?, &options)?;
    let integer = rill_kernels::q8::has_integer_kernels(kernels);
    let rewritten = loaded.model.rewritten_bytes();
    eprintln!(
        "rill: {} ({}, {} parameters), {} kernels on {}, precision {}{}{}",
        loaded.info.label,
        loaded.model.config.arch.name(),
        rill_load::human_count(loaded.info.n_params()),
        kernels,
        rill_kernels::simd::cpu_name(),
        precision.name(),
        if precision == Precision::Q8 && integer {
            " (integer kernels)"
        } else {
            ""
        },
        if rewritten > 0 {
            format!(
                ", {} MiB of weights in the kernels' layout",
                rewritten >> 20
            )
        } else {
            String::new()
        }
    );
    if precision == Precision::Q8 && !integer {
        eprintln!(
            "warning: no integer kernels in the {kernels} class (they need AVX2 on x86-64 or the \
             dot-product extension on aarch64): --precision q8 runs the scalar reference and is \
             slower than exact"
        );
    }
    Ok((loaded, kernels, precision))
}

/// The `--kernels` value: a class this CPU runs, or an error that says
/// what the CPU lacks and which classes it runs.
pub fn parse_kernels(s: &str) -> Result<Isa, String> {
    s.parse()
}

/// Load only what the tokenizer commands need (no weight pages read).
pub fn open_for_tokenizer(model: &Option<PathBuf>) -> Result<Loaded> {
    Ok(rill_load::load(&source(model)?, &LoadOptions::default())?)
}

/// The context a command runs with: `requested`, or with 0 the model's
/// trained context (`{arch}.context_length`, as llama.cpp's `-c 0`).
pub fn context(requested: usize, model: &rill_model::Model) -> Result<usize> {
    if requested > 0 {
        return Ok(requested);
    }
    let trained = model.config.n_ctx_train;
    anyhow::ensure!(
        trained > 0,
        "-c 0 asks for the model's trained context, but the file does not give one \
         (context_length): give -c N"
    );
    eprintln!("rill: context {trained} (the model's trained context)");
    Ok(trained)
}
