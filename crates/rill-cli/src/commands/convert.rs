//! `rill convert DIR OUT.gguf [--type …]`: a Hugging Face folder (BF16,
//! F16, F32, FP8 or NVFP4 weights) to the GGUF llama.cpp's converter writes
//! from it, with the tokenizer and the chat template, encoded as `--type`.
//! As that converter, the converter's own types keep an NVFP4 checkpoint's
//! NVFP4 matrices NVFP4 (its codes and scales, repacked; the global scales
//! as `X.scale` tensors); the llama-quantize mixes re-encode them.

use super::quantize::{encode_rows, mix_model, parse_file_type, threads, write_file};
use anyhow::{bail, Context, Result};
use rill_dtype::DType;
use rill_gguf::quant_mix::{self, FileType};
use rill_gguf::writer::GgufWriter;
use rill_gguf::{ggml_id_of, MetaValue};
use rill_model::source::hf::to_gguf::GgufTensor;
use rill_model::HfSource;
use rill_tokenizer::Tokenizer;
use serde_json::Value;
use std::borrow::Cow;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct Args {
    /// A Hugging Face model folder (config.json + safetensors).
    input: PathBuf,
    /// The GGUF file to write.
    output: PathBuf,
    /// The file type. f32, f16, bf16 and q8_0 are what llama.cpp's
    /// converter writes (norms, the conv and the routers stay F32); the
    /// others (q4_k_m, q4_k_s, q5_k_m, q5_k_s, q6_k, q4_0, q4_1, q5_0, q5_1)
    /// are what llama-quantize makes of the converter's BF16 file, with its
    /// per-tensor mix.
    #[arg(long = "type", value_parser = parse_file_type, default_value = "bf16")]
    out_type: FileType,
    /// Encoding threads (default: every core).
    #[arg(short = 't', long)]
    threads: Option<usize>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

pub fn run(a: Args) -> Result<()> {
    if !a.input.is_dir() {
        bail!(
            "{}: rill converts a Hugging Face model folder (config.json + safetensors)",
            a.input.display()
        );
    }
    let src = HfSource::open(&a.input)?;
    let tensors = src.gguf_tensors()?;
    let mut w = GgufWriter::new();
    let arch = src.hf_config().model.arch.name();
    w.kv("general.architecture", MetaValue::Str(arch.into()));
    w.kv("general.type", MetaValue::Str("model".into()));
    if let Some(name) = a.input.file_name().and_then(|n| n.to_str()) {
        w.kv("general.name", MetaValue::Str(name.into()));
    }
    let meta = src.gguf_metadata()?;
    let model = mix_model(arch, |k| meta.iter().find(|(m, _)| m == k).map(|(_, v)| v));
    for (k, v) in meta.iter().cloned() {
        w.kv(k, v);
    }
    w.kv("general.file_type", MetaValue::U32(a.out_type.id()));
    w.kv("general.quantization_version", MetaValue::U32(2));
    tokenizer_metadata(&a.input, src.hf_config().vocab_size, &mut w)?;

    let mut types = tensor_types(a.out_type, &tensors, model)?;
    // What is written: each tensor, and after an NVFP4 one its global
    // scales unless they are all 1 (`Out::Scales`, F32).
    let mut outs = Vec::with_capacity(tensors.len());
    for (k, t) in tensors.iter().enumerate() {
        outs.push(Out::Tensor(k));
        if !a.out_type.is_converter_type() {
            continue;
        }
        if let Some(globals) = src.gguf_nvfp4_globals(t)? {
            types[k] = DType::NVFP4;
            if globals.iter().any(|&g| g != 1.0) {
                outs.push(Out::Scales(k, globals));
            }
        }
    }
    let mut sizes = Vec::with_capacity(outs.len());
    let mut names = Vec::with_capacity(outs.len());
    for o in &outs {
        let (name, shape, ty) = match o {
            Out::Tensor(k) => (
                tensors[*k].name.clone(),
                tensors[*k].shape.clone(),
                types[*k],
            ),
            Out::Scales(k, g) => (
                scales_name(&tensors[*k].name),
                vec![g.len() as u64],
                DType::F32,
            ),
        };
        let n: u64 = shape.iter().product();
        let id = ggml_id_of(ty).context("no ggml id")?;
        w.tensor(name.clone(), &shape, id, Vec::new());
        sizes.push(ty.bytes_for(n).context("tensor too large")?);
        names.push(name);
    }
    let total: u64 = sizes.iter().sum();
    let threads = threads(a.threads);
    let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
    write_file(&w, &a.output, sizes, a.quiet, &name_refs, |i| {
        match &outs[i] {
            Out::Scales(_, g) => Ok(Cow::Owned(g.iter().flat_map(|v| v.to_le_bytes()).collect())),
            Out::Tensor(k) if types[*k] == DType::NVFP4 => {
                Ok(Cow::Owned(src.gguf_nvfp4(&tensors[*k])?))
            }
            Out::Tensor(k) => {
                let (t, ty) = (&tensors[*k], types[*k]);
                let v = src.gguf_values(t)?;
                Ok(Cow::Owned(encode_rows(
                    ty,
                    &v,
                    t.shape[0] as usize,
                    threads,
                )))
            }
        }
    })?;
    if !a.quiet {
        eprintln!(
            "wrote {} ({} tensors, {:.1} MiB, {})",
            a.output.display(),
            outs.len(),
            total as f64 / 1048576.0,
            a.out_type.name()
        );
    }
    Ok(())
}

/// One tensor of the output file.
enum Out {
    /// `tensors[k]`.
    Tensor(usize),
    /// The global scales of NVFP4 `tensors[k]` (one per tensor or expert).
    Scales(usize, Vec<f32>),
}

/// `X.scale` of `X.weight`: where llama.cpp's converter puts an NVFP4
/// matrix's global scales (its graph multiplies the products by them).
fn scales_name(weight: &str) -> String {
    format!("{}.scale", weight.strip_suffix(".weight").unwrap_or(weight))
}

/// The encoding of each tensor. The converter's own types keep its rules
/// (F32 for the tensors it keeps F32, F16 for rows that are not whole
/// blocks); the others are llama-quantize's mix over the converter's BF16
/// file.
fn tensor_types(
    ft: FileType,
    tensors: &[GgufTensor],
    model: rill_gguf::quant_mix::MixModel,
) -> Result<Vec<DType>> {
    if ft.is_converter_type() {
        return Ok(tensors
            .iter()
            .map(|t| {
                let ty = if t.keep_f32 { DType::F32 } else { ft.base() };
                // the converter falls back to F16 for rows that are not whole blocks
                if t.shape[0] % ty.block_len() as u64 != 0 {
                    DType::F16
                } else {
                    ty
                }
            })
            .collect());
    }
    let plan = quant_mix::plan(
        ft,
        model,
        tensors
            .iter()
            .map(|t| (t.name.as_str(), t.shape.as_slice())),
    );
    Ok(tensors
        .iter()
        .zip(plan)
        .map(|(t, ty)| match ty {
            Some(ty) => ty,
            None if t.keep_f32 => DType::F32,
            None => DType::BF16,
        })
        .collect())
}

/// `tokenizer.ggml.*` and `tokenizer.chat_template` from the folder's
/// `tokenizer.json`, `tokenizer_config.json` and `chat_template.jinja`.
fn tokenizer_metadata(dir: &Path, n_vocab: usize, w: &mut GgufWriter) -> Result<()> {
    let path = dir.join("tokenizer.json");
    let Ok(text) = std::fs::read_to_string(&path) else {
        eprintln!(
            "warning: {} not found: the GGUF has no tokenizer",
            path.display()
        );
        return Ok(());
    };
    let config = std::fs::read_to_string(dir.join("tokenizer_config.json")).ok();
    let tok = Tokenizer::from_hf_json(&text, config.as_deref(), Some(n_vocab))
        .with_context(|| format!("{}", path.display()))?;
    let tj: Value = serde_json::from_str(&text)?;
    let merges: Vec<MetaValue> = tj["model"]["merges"]
        .as_array()
        .map(|m| {
            m.iter()
                .filter_map(|m| match m {
                    Value::String(s) => Some(s.clone()),
                    Value::Array(p) => Some(format!("{} {}", p[0].as_str()?, p[1].as_str()?)),
                    _ => None,
                })
                .map(MetaValue::Str)
                .collect()
        })
        .unwrap_or_default();
    let n = tok.vocab_size() as u32;
    let tokens = (0..n)
        .map(|i| MetaValue::Str(tok.token_text(i).unwrap_or_default().to_string()))
        .collect();
    let types = (0..n)
        .map(|i| MetaValue::I32(tok.token_type(i).map_or(1, |t| t as i32)))
        .collect();
    w.kv("tokenizer.ggml.model", MetaValue::Str("gpt2".into()));
    w.kv("tokenizer.ggml.pre", MetaValue::Str(pre_name(&tok).into()));
    w.kv("tokenizer.ggml.tokens", MetaValue::Array(tokens));
    w.kv("tokenizer.ggml.token_type", MetaValue::Array(types));
    w.kv("tokenizer.ggml.merges", MetaValue::Array(merges));
    let s = tok.specials();
    for (key, id) in [
        ("tokenizer.ggml.bos_token_id", s.bos),
        ("tokenizer.ggml.eos_token_id", s.eos),
        ("tokenizer.ggml.padding_token_id", s.pad),
    ] {
        if let Some(id) = id {
            w.kv(key, MetaValue::U32(id));
        }
    }
    w.kv("tokenizer.ggml.add_bos_token", MetaValue::Bool(s.add_bos));
    if let Some(t) = chat_template(dir, config.as_deref()) {
        w.kv("tokenizer.chat_template", MetaValue::Str(t));
    }
    Ok(())
}

fn pre_name(tok: &Tokenizer) -> &'static str {
    match tok.pre_tokenizer() {
        rill_tokenizer::PreTokenizer::Qwen2 => "qwen2",
        _ => "qwen35",
    }
}

/// `chat_template.jinja`, else `tokenizer_config.json`'s `chat_template`.
fn chat_template(dir: &Path, config: Option<&str>) -> Option<String> {
    if let Ok(t) = std::fs::read_to_string(dir.join("chat_template.jinja")) {
        return Some(t);
    }
    let c: Value = serde_json::from_str(config?).ok()?;
    match c.get("chat_template")? {
        Value::String(s) => Some(s.clone()),
        Value::Array(list) => list
            .iter()
            .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
            .or_else(|| list.first())?
            .get("template")?
            .as_str()
            .map(str::to_string),
        _ => None,
    }
}
