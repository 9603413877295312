//! A Hugging Face model folder: the weights through [`HfSource`], the
//! tokenizer from `tokenizer.json`, the chat template from
//! `chat_template.jinja` or `tokenizer_config.json`, the default sampling
//! and extra end-of-generation ids from `generation_config.json`.

use crate::info::{ModelInfo, TensorSummary};
use crate::{LoadError, ModelSource};
use rill_chat::ChatTemplate;
use rill_model::{HfSource, ModelError};
use rill_sampler::SamplingPrefs;
use rill_tokenizer::{Tokenizer, TokenizerError};
use serde_json::Value;
use std::path::Path;

fn model_err(dir: &Path, error: ModelError) -> LoadError {
    LoadError::Model {
        source_label: dir.display().to_string(),
        error,
    }
}

fn tok_err(dir: &Path, error: TokenizerError) -> LoadError {
    LoadError::Tokenizer {
        source_label: dir.display().to_string(),
        error,
    }
}

/// A JSON file of the folder, `None` when absent.
fn json_file(dir: &Path, name: &str) -> Result<Option<Value>, LoadError> {
    let path = dir.join(name);
    if !path.is_file() {
        return Ok(None);
    }
    let bad = |why: String| {
        model_err(
            dir,
            ModelError::Checkpoint {
                file: path.display().to_string(),
                why,
            },
        )
    };
    let text = std::fs::read_to_string(&path).map_err(|e| bad(format!("cannot read: {e}")))?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| bad(format!("not valid JSON: {e}")))
}

/// Open the folder's weights.
pub(crate) fn open_source(dir: &Path) -> Result<HfSource, LoadError> {
    HfSource::open(dir).map_err(|e| model_err(dir, e))
}

/// The tokenizer, with `generation_config.json`'s eos ids added to the
/// ids that end a generation.
pub(crate) fn tokenizer(dir: &Path, src: &HfSource) -> Result<Tokenizer, LoadError> {
    let path = dir.join("tokenizer.json");
    let text = std::fs::read_to_string(&path).map_err(|e| {
        tok_err(
            dir,
            TokenizerError::Json(format!("{}: cannot read: {e}", path.display())),
        )
    })?;
    let config = std::fs::read_to_string(dir.join("tokenizer_config.json")).ok();
    let mut tok =
        Tokenizer::from_hf_json(&text, config.as_deref(), Some(src.hf_config().vocab_size))
            .map_err(|e| tok_err(dir, e))?;
    if let Some(gen) = json_file(dir, "generation_config.json")? {
        let ids: Vec<u32> = match gen.get("eos_token_id") {
            Some(Value::Number(n)) => n.as_u64().map(|x| x as u32).into_iter().collect(),
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(|v| v.as_u64())
                .map(|x| x as u32)
                .collect(),
            _ => Vec::new(),
        };
        tok.add_eog(&ids).map_err(|e| tok_err(dir, e))?;
    }
    Ok(tok)
}

/// The template's source: `chat_template.jinja`, else `tokenizer_config.json`'s
/// `chat_template` (a string, or a list of named templates: `default`).
fn template_source(dir: &Path) -> Result<Option<String>, LoadError> {
    if let Ok(t) = std::fs::read_to_string(dir.join("chat_template.jinja")) {
        return Ok(Some(t));
    }
    let Some(tc) = json_file(dir, "tokenizer_config.json")? else {
        return Ok(None);
    };
    Ok(match tc.get("chat_template") {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Array(list)) => list
            .iter()
            .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
            .or_else(|| list.first())
            .and_then(|t| t.get("template"))
            .and_then(Value::as_str)
            .map(str::to_string),
        _ => None,
    })
}

/// A folder's chat template.
#[derive(Default)]
pub(crate) struct FolderTemplate {
    pub template: Option<ChatTemplate>,
    /// Why there is none although the folder has a source.
    pub problem: Option<String>,
    pub source: Option<String>,
}

/// The chat template (or why it does not compile) and its source text.
pub(crate) fn template(dir: &Path, tok: &Tokenizer) -> Result<FolderTemplate, LoadError> {
    let Some(source) = template_source(dir)? else {
        return Ok(FolderTemplate::default());
    };
    let text = |id: Option<u32>| id.and_then(|i| tok.token_text(i)).map(str::to_string);
    let (template, problem) =
        match ChatTemplate::new(&source, text(tok.bos_id()), text(tok.eos_id())) {
            Ok(t) => (Some(t), None),
            Err(e) => (
                None,
                Some(format!("the chat template does not compile: {e}")),
            ),
        };
    Ok(FolderTemplate {
        template,
        problem,
        source: Some(source),
    })
}

/// `generation_config.json` as sampling defaults; `do_sample: false` is greedy.
fn sampling(dir: &Path) -> Result<SamplingPrefs, LoadError> {
    let Some(g) = json_file(dir, "generation_config.json")? else {
        return Ok(SamplingPrefs::default());
    };
    let num = |k: &str| g.get(k).and_then(Value::as_f64).filter(|v| v.is_finite());
    let greedy = g.get("do_sample").and_then(Value::as_bool) == Some(false);
    Ok(SamplingPrefs {
        temperature: if greedy {
            Some(0.0)
        } else {
            num("temperature")
        },
        top_k: g.get("top_k").and_then(Value::as_i64),
        top_p: num("top_p"),
        min_p: num("min_p"),
        repetition_penalty: num("repetition_penalty"),
        ..SamplingPrefs::default()
    })
}

/// Flatten a JSON object into `key = value` lines (`text_config.hidden_size`).
fn flatten(prefix: &str, v: &Value, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        Value::Array(a) if a.len() > 8 => {
            out.push((prefix.to_string(), format!("[{} values]", a.len())))
        }
        other => {
            let s = other.to_string();
            let s = if s.len() > 80 {
                format!("{}… ({} bytes)", &s[..s.floor_char_boundary(60)], s.len())
            } else {
                s
            };
            out.push((prefix.to_string(), s));
        }
    }
}

/// The description of a folder.
pub(crate) fn info(
    source: &ModelSource,
    dir: &Path,
    src: &HfSource,
    template_problem: Option<String>,
    chat_template: Option<String>,
) -> Result<ModelInfo, LoadError> {
    let cfg = src.hf_config();
    let tensors = src
        .tensors()
        .iter()
        .map(|t| TensorSummary {
            name: t.name.clone(),
            encoding: t.dtype.clone(),
            shape: t.shape.iter().rev().copied().collect(),
            n_elements: t.shape.iter().product(),
            bytes: t.bytes,
        })
        .collect();
    let skipped = src
        .tensors()
        .iter()
        .filter_map(|t| {
            t.used_as
                .as_ref()
                .err()
                .map(|why| (t.name.clone(), why.clone()))
        })
        .collect();
    let mut metadata = Vec::new();
    if let Some(c) = json_file(dir, "config.json")? {
        flatten("", &c, &mut metadata);
    }
    let n_files = src.files().count();
    Ok(ModelInfo {
        id: dir
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model".into()),
        label: source.label(),
        format: format!(
            "Hugging Face folder, safetensors ({n_files} file{})",
            if n_files == 1 { "" } else { "s" }
        ),
        n_files,
        arch_name: cfg.model.arch.name().to_string(),
        name: Some(cfg.architecture.clone()),
        tensors,
        metadata,
        chat_template,
        template_problem,
        sampling: sampling(dir)?,
        skipped,
        arch: None,
        decode_weight_bytes: 0,
    })
}
