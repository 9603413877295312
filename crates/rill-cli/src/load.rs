//! The model every command opens, through the one loader.

use anyhow::Result;
use rill_kernels::{Isa, Precision};
use rill_load::{LoadOptions, Loaded, ModelSource, Prefault};
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
/// run with. Says on stderr what runs, on which CPU.
pub fn open(
    model: &Option<PathBuf>,
    kernels: Option<Isa>,
    precision: Option<Precision>,
    prefault: Prefault,
) -> Result<(Loaded, Isa, Precision)> {
    let options = LoadOptions { prefault };
    let loaded = rill_load::load(&source(model)?, &options)?;
    let kernels = kernels.unwrap_or_else(Isa::best);
    let precision = precision.unwrap_or_else(|| Precision::fastest(kernels));
    let integer = rill_kernels::q8::has_integer_kernels(kernels);
    eprintln!(
        "rill: {} ({}, {} parameters), {} kernels on {}, precision {}{}",
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
