//! `rill quantize IN.gguf OUT.gguf TYPE`: a GGUF re-encoded as one of
//! llama-quantize's file types (`q4_k_m`, `q5_k_s`, `q6_k`, `q8_0`, …), with
//! llama.cpp's per-tensor mix ([`rill_gguf::quant_mix`]) — the step after
//! `rill convert … --type bf16`, or `rill convert` does both at once.
//!
//! The encoders are ggml's reference quantizers without an importance matrix
//! (`rill_kernels::quant::encode`), rows encoded on every core.

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use rill_dtype::DType;
use rill_gguf::quant_mix::{self, FileType, MixModel};
use rill_gguf::writer::GgufWriter;
use rill_gguf::{ggml_id_of, GgufFile, MetaValue};
use rill_kernels::quant::encode::{can_encode, encode_row};
use rill_kernels::quant::{dequantize_with, is_supported};
use rill_kernels::Isa;
use std::borrow::Cow;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct Args {
    /// The GGUF to read (F32, F16 or BF16 weights; quantized ones with
    /// `--allow-requantize`).
    input: PathBuf,
    /// The GGUF to write.
    output: PathBuf,
    /// The file type, as llama-quantize names it: q4_k_m, q4_k_s, q5_k_m,
    /// q5_k_s, q6_k, iq4_xs, iq4_nl, q8_0, q4_0, q4_1, q5_0, q5_1, f16,
    /// bf16, f32.
    #[arg(value_parser = parse_file_type)]
    file_type: FileType,
    /// Re-encode tensors that are already quantized (their decoded values
    /// are quantized again, losing what the first quantization lost).
    #[arg(long)]
    allow_requantize: bool,
    /// Encoding threads (default: every core).
    #[arg(short = 't', long)]
    threads: Option<usize>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

pub(crate) fn parse_file_type(s: &str) -> Result<FileType, String> {
    FileType::parse(s).ok_or_else(|| {
        let names: Vec<&str> = FileType::ALL.iter().map(|t| t.name()).collect();
        format!("unknown file type {s:?}; rill writes {}", names.join(", "))
    })
}

/// `{arch}.block_count` and `{arch}.expert_count` of a file's metadata.
pub(crate) fn mix_model<'a>(arch: &str, get: impl Fn(&str) -> Option<&'a MetaValue>) -> MixModel {
    // a scalar, or one value per layer (layer 0's is llama.cpp's n_gqa())
    let int = |key: &str| match get(&format!("{arch}.{key}")) {
        Some(MetaValue::Array(a)) => a.first().and_then(MetaValue::as_u64),
        Some(v) => v.as_u64(),
        None => None,
    };
    let heads = int("attention.head_count").unwrap_or(0);
    let kv_heads = int("attention.head_count_kv").unwrap_or(heads);
    MixModel {
        n_layer: int("block_count").unwrap_or(1).max(1) as usize,
        n_expert: int("expert_count").unwrap_or(0) as usize,
        n_gqa: heads.checked_div(kv_heads).unwrap_or(0) as usize,
    }
}

/// `values` (rows of `row` values) encoded as `ty`, rows split over
/// `threads` workers.
pub(crate) fn encode_rows(ty: DType, values: &[f32], row: usize, threads: usize) -> Vec<u8> {
    let n_rows = values.len() / row;
    let per = n_rows.div_ceil(threads.max(1)).max(1);
    let parts: Vec<Vec<u8>> = std::thread::scope(|s| {
        let jobs: Vec<_> = values
            .chunks(per * row)
            .map(|chunk| {
                s.spawn(move || {
                    let mut out = Vec::new();
                    for r in chunk.chunks_exact(row) {
                        encode_row(ty, r, &mut out);
                    }
                    out
                })
            })
            .collect();
        jobs.into_iter()
            .map(|j| j.join().expect("an encoding thread panicked"))
            .collect()
    });
    parts.concat()
}

/// Writes the file `w` declares (tensor `k` named `names[k]`, `sizes[k]`
/// bytes, its data from `data(k)`) with a progress bar. A file left half
/// written (a full disk, a tensor that fails) is removed, so no truncated
/// GGUF stays behind — a regular file only, never a device or a link the
/// user named as the output.
pub(crate) fn write_file<'a>(
    w: &GgufWriter,
    path: &Path,
    sizes: Vec<u64>,
    quiet: bool,
    names: &[&str],
    mut data: impl FnMut(usize) -> Result<Cow<'a, [u8]>>,
) -> Result<()> {
    let bar = progress(sizes.iter().sum(), quiet);
    let mut file = w.stream_to(path, sizes)?;
    let mut write = || -> Result<()> {
        for (k, name) in names.iter().enumerate() {
            bar.set_message(name.to_string());
            let bytes = data(k)?;
            file.write_tensor(&bytes)?;
            bar.inc(bytes.len() as u64);
        }
        Ok(())
    };
    let written = write().and_then(|()| Ok(file.finish()?));
    if written.is_err() && std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file()) {
        std::fs::remove_file(path).ok();
    }
    bar.finish_and_clear();
    written
}

pub(crate) fn threads(t: Option<usize>) -> usize {
    t.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

fn progress(total: u64, quiet: bool) -> ProgressBar {
    let bar = match quiet {
        true => ProgressBar::hidden(),
        false => ProgressBar::new(total),
    };
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

pub fn run(a: Args) -> Result<()> {
    if a.input == a.output {
        bail!("the output must be another file than the input");
    }
    let src = GgufFile::open(&a.input).with_context(|| a.input.display().to_string())?;
    let tensors = src.tensors();
    let mut types = Vec::with_capacity(tensors.len());
    for t in tensors {
        let ty = t
            .dtype()
            .with_context(|| format!("{}", a.input.display()))?;
        types.push(ty);
    }
    let arch = match src.get("general.architecture") {
        Some(MetaValue::Str(a)) => a.as_str(),
        _ => "",
    };
    let shapes = tensors
        .iter()
        .map(|t| (t.name.as_str(), t.shape.as_slice()));
    let plan = quant_mix::plan(a.file_type, mix_model(arch, |k| src.get(k)), shapes);
    // what each tensor becomes: re-encoded, or copied as it is
    let mut out_types = Vec::with_capacity(tensors.len());
    for ((t, &from), to) in tensors.iter().zip(&types).zip(&plan) {
        let to = to.unwrap_or(from);
        if to != from {
            if !is_supported(from) {
                bail!("{}: rill cannot decode {}", t.name, from.name());
            }
            if !can_encode(to) {
                bail!("{}: rill cannot encode {}", t.name, to.name());
            }
            if !matches!(from, DType::F32 | DType::F16 | DType::BF16) && !a.allow_requantize {
                bail!(
                    "{} is already {}: re-quantizing it loses precision twice; pass \
                     --allow-requantize to do it anyway, or quantize from the F32/F16/BF16 file",
                    t.name,
                    from.name()
                );
            }
        }
        out_types.push(to);
    }

    let mut w = GgufWriter::new();
    w.alignment(src.alignment());
    for (k, v) in src.metadata() {
        if matches!(
            k,
            "general.file_type" | "general.quantization_version" | "general.alignment"
        ) || k.starts_with("split.")
        {
            continue;
        }
        w.kv(k, v.clone());
    }
    w.kv("general.quantization_version", MetaValue::U32(2));
    w.kv("general.file_type", MetaValue::U32(a.file_type.id()));
    // llama-quantize's order and shapes (trailing 1s dropped), so that the
    // file is the one it writes
    let names: Vec<&str> = tensors.iter().map(|t| t.name.as_str()).collect();
    let order = quant_mix::file_order(&names);
    let mut sizes = Vec::with_capacity(tensors.len());
    for &i in &order {
        let (t, ty) = (&tensors[i], out_types[i]);
        let id = ggml_id_of(ty).context("no ggml id")?;
        w.tensor(
            t.name.clone(),
            &t.shape[..quant_mix::n_dims(&t.shape)],
            id,
            Vec::new(),
        );
        sizes.push(ty.bytes_for(t.n_elements()).context("tensor too large")?);
    }
    let total: u64 = sizes.iter().sum();
    let in_total: u64 = tensors
        .iter()
        .map(|t| src.tensor_data(t).len() as u64)
        .sum();
    let threads = threads(a.threads);
    let mut values = Vec::new();
    let write_names: Vec<&str> = order.iter().map(|&i| names[i]).collect();
    write_file(&w, &a.output, sizes, a.quiet, &write_names, |k| {
        let i = order[k];
        let (t, from, to) = (&tensors[i], types[i], out_types[i]);
        let data = src.try_tensor_data(t)?;
        if from == to {
            return Ok(Cow::Borrowed(data));
        }
        values.resize(t.n_elements() as usize, 0.0);
        dequantize_with(Isa::best(), from, data, &mut values);
        Ok(Cow::Owned(encode_rows(
            to,
            &values,
            t.shape[0] as usize,
            threads,
        )))
    })?;
    if !a.quiet {
        eprintln!(
            "wrote {} ({}, {} tensors): {:.1} MiB -> {:.1} MiB",
            a.output.display(),
            a.file_type.name(),
            tensors.len(),
            in_total as f64 / 1048576.0,
            total as f64 / 1048576.0,
        );
    }
    Ok(())
}
