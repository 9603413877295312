//! `rill convert DIR OUT.gguf [--type …]`: a Hugging Face folder (BF16,
//! F16, F32, FP8 or NVFP4 weights) to the GGUF llama.cpp's converter writes
//! from it, with the tokenizer and the chat template, encoded as `--type`.

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use rill_dtype::DType;
use rill_gguf::writer::GgufWriter;
use rill_gguf::{ggml_id_of, MetaValue};
use rill_kernels::quant::encode::encode_row;
use rill_model::HfSource;
use rill_tokenizer::Tokenizer;
use serde_json::Value;
use std::path::{Path, PathBuf};

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum OutType {
    F32,
    F16,
    Bf16,
    #[value(name = "q8_0")]
    Q8_0,
    #[value(name = "q4_0")]
    Q4_0,
    #[value(name = "q4_1")]
    Q4_1,
    #[value(name = "q5_0")]
    Q5_0,
    #[value(name = "q5_1")]
    Q5_1,
}

impl OutType {
    fn dtype(self) -> DType {
        match self {
            OutType::F32 => DType::F32,
            OutType::F16 => DType::F16,
            OutType::Bf16 => DType::BF16,
            OutType::Q8_0 => DType::Q8_0,
            OutType::Q4_0 => DType::Q4_0,
            OutType::Q4_1 => DType::Q4_1,
            OutType::Q5_0 => DType::Q5_0,
            OutType::Q5_1 => DType::Q5_1,
        }
    }

    /// `general.file_type` (llama.cpp's `LLAMA_FTYPE_*`).
    fn file_type(self) -> u32 {
        match self {
            OutType::F32 => 0,
            OutType::F16 => 1,
            OutType::Q4_0 => 2,
            OutType::Q4_1 => 3,
            OutType::Q8_0 => 7,
            OutType::Q5_0 => 8,
            OutType::Q5_1 => 9,
            OutType::Bf16 => 32,
        }
    }
}

#[derive(clap::Args)]
pub struct Args {
    /// A Hugging Face model folder (config.json + safetensors).
    input: PathBuf,
    /// The GGUF file to write.
    output: PathBuf,
    /// The encoding of the weight matrices (norms, the conv and the
    /// routers stay F32, as llama.cpp's converter keeps them).
    #[arg(long = "type", value_enum, default_value = "bf16")]
    out_type: OutType,
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
    for (k, v) in src.gguf_metadata()? {
        w.kv(k, v);
    }
    w.kv("general.file_type", MetaValue::U32(a.out_type.file_type()));
    w.kv("general.quantization_version", MetaValue::U32(2));
    tokenizer_metadata(&a.input, src.hf_config().vocab_size, &mut w)?;

    let want = a.out_type.dtype();
    let mut types = Vec::with_capacity(tensors.len());
    let mut sizes = Vec::with_capacity(tensors.len());
    for t in &tensors {
        let n: u64 = t.shape.iter().product();
        let mut ty = if t.keep_f32 { DType::F32 } else { want };
        // the converter falls back to F16 for rows that are not whole blocks
        if t.shape[0] % ty.block_len() as u64 != 0 {
            ty = DType::F16;
        }
        let id = ggml_id_of(ty).context("no ggml id")?;
        w.tensor(t.name.clone(), &t.shape, id, Vec::new());
        sizes.push(ty.bytes_for(n).context("tensor too large")?);
        types.push(ty);
    }
    let total: u64 = sizes.iter().sum();
    let mut file = w.stream_to(&a.output, sizes)?;
    let bar = match a.quiet {
        true => ProgressBar::hidden(),
        false => ProgressBar::new(total),
    };
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut bytes = Vec::new();
    for (t, ty) in tensors.iter().zip(&types) {
        bar.set_message(t.name.clone());
        let v = src.gguf_values(t)?;
        bytes.clear();
        for row in v.chunks_exact(t.shape[0] as usize) {
            encode_row(*ty, row, &mut bytes);
        }
        file.write_tensor(&bytes)?;
        bar.inc(bytes.len() as u64);
    }
    file.finish()?;
    bar.finish_and_clear();
    if !a.quiet {
        eprintln!(
            "wrote {} ({} tensors, {:.1} MiB, {})",
            a.output.display(),
            tensors.len(),
            total as f64 / 1048576.0,
            want.name()
        );
    }
    Ok(())
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
