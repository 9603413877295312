//! What a loaded model is, for front ends to print and report: its names,
//! its tensors by encoding, its metadata, and what decoding reads.

use crate::ModelSource;
use rill_gguf::{GgufFile, MetaValue};
use rill_model::{Arch, Model};
use rill_sampler::SamplingPrefs;

/// One tensor of the source.
#[derive(Clone, Debug)]
pub struct TensorSummary {
    pub name: String,
    /// The encoding's name (`Q4_K`), or `type#N` for one rill does not know.
    pub encoding: String,
    /// ggml order.
    pub shape: Vec<u64>,
    pub n_elements: u64,
    pub bytes: u64,
}

/// The sampling values a GGUF file recommends (`general.sampling.*`);
/// `None` where it says nothing.
fn gguf_sampling(file: &GgufFile) -> SamplingPrefs {
    let num = |k: &str| {
        file.get(k)
            .and_then(MetaValue::as_f64)
            .filter(|v| v.is_finite())
    };
    SamplingPrefs {
        temperature: num("general.sampling.temp"),
        top_k: file
            .get("general.sampling.top_k")
            .and_then(MetaValue::as_i64),
        top_p: num("general.sampling.top_p"),
        min_p: num("general.sampling.min_p"),
        repetition_penalty: num("general.sampling.penalty_repeat"),
        xtc_probability: num("general.sampling.xtc_probability"),
        xtc_threshold: num("general.sampling.xtc_threshold"),
        mirostat: file
            .get("general.sampling.mirostat")
            .and_then(MetaValue::as_i64),
        mirostat_tau: num("general.sampling.mirostat_tau"),
        mirostat_eta: num("general.sampling.mirostat_eta"),
        ..SamplingPrefs::default()
    }
}

/// A description of a model source.
#[derive(Clone, Debug)]
pub struct ModelInfo {
    /// The id a server reports: the file's name without extension and
    /// split suffix (`Qwen3.5-35B-A3B-Q4_K_M`), or the embedded model's label.
    pub id: String,
    /// How messages name the source (its path).
    pub label: String,
    /// `GGUF v3`.
    pub format: String,
    pub n_files: usize,
    /// `general.architecture`.
    pub arch_name: String,
    /// `general.name`, when the file has one.
    pub name: Option<String>,
    pub tensors: Vec<TensorSummary>,
    /// Every metadata key with its value shortened for display.
    pub metadata: Vec<(String, String)>,
    /// The chat template's source text, when the file has one.
    pub chat_template: Option<String>,
    /// Why there is no chat template although the file has one.
    pub template_problem: Option<String>,
    /// The model's recommended sampling (`general.sampling.*`, as llama.cpp's
    /// converter writes it from `generation_config.json`).
    pub sampling: SamplingPrefs,
    /// Tensors of the source the model does not use, with why (a Hugging
    /// Face folder's vision tower); empty for GGUF files.
    pub skipped: Vec<(String, String)>,
    /// The bound architecture (set once the model is bound).
    pub arch: Option<Arch>,
    /// Weight bytes one decoded token reads (set once the model is bound).
    pub decode_weight_bytes: u64,
}

impl ModelInfo {
    pub(crate) fn of_gguf(
        source: &ModelSource,
        file: &GgufFile,
        template_problem: Option<String>,
    ) -> ModelInfo {
        let tensors = file
            .tensors()
            .iter()
            .map(|t| TensorSummary {
                name: t.name.clone(),
                encoding: t
                    .dtype()
                    .map(|d| d.name().to_string())
                    .unwrap_or_else(|_| format!("type#{}", t.ggml_type)),
                shape: t.shape.clone(),
                n_elements: t.n_elements(),
                bytes: file.try_tensor_data(t).map(|d| d.len() as u64).unwrap_or(0),
            })
            .collect();
        let text = |k: &str| file.get(k).and_then(MetaValue::as_str).map(str::to_string);
        ModelInfo {
            id: match source {
                ModelSource::File(p) => id_of_path(p),
                ModelSource::Static { label, .. } => label.to_string(),
            },
            label: source.label(),
            format: format!("GGUF v{}", file.version()),
            n_files: file.n_splits(),
            arch_name: text("general.architecture").unwrap_or_else(|| "?".into()),
            name: text("general.name"),
            tensors,
            metadata: file
                .metadata()
                .map(|(k, v)| (k.to_string(), short(v)))
                .collect(),
            chat_template: text("tokenizer.chat_template"),
            sampling: gguf_sampling(file),
            template_problem,
            skipped: Vec::new(),
            arch: None,
            decode_weight_bytes: 0,
        }
    }

    /// Whether the source is a Hugging Face folder.
    pub fn is_folder(&self) -> bool {
        self.format.starts_with("Hugging Face")
    }

    pub(crate) fn with_model(mut self, model: &Model) -> ModelInfo {
        self.arch = Some(model.config.arch);
        self.decode_weight_bytes = model.decode_weight_bytes();
        self
    }

    /// Parameters: the elements of every tensor.
    pub fn n_params(&self) -> u64 {
        self.tensors.iter().map(|t| t.n_elements).sum()
    }

    /// Bytes of every tensor.
    pub fn weight_bytes(&self) -> u64 {
        self.tensors.iter().map(|t| t.bytes).sum()
    }
}

/// `1.2 M`, `35.0 B`: a count the way model cards say it.
pub fn human_count(n: u64) -> String {
    let n = n as f64;
    if n >= 1e9 {
        format!("{:.2} B", n / 1e9)
    } else if n >= 1e6 {
        format!("{:.2} M", n / 1e6)
    } else if n >= 1e3 {
        format!("{:.1} K", n / 1e3)
    } else {
        format!("{n}")
    }
}

/// A file's served id: `name-00001-of-00003.gguf` → `name`.
fn id_of_path(path: &std::path::Path) -> String {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into());
    let b = stem.as_bytes();
    let split = b.len() > 15
        && b[b.len() - 15] == b'-'
        && stem[stem.len() - 9..].starts_with("-of-")
        && stem[stem.len() - 14..stem.len() - 9]
            .bytes()
            .all(|c| c.is_ascii_digit())
        && stem[stem.len() - 5..].bytes().all(|c| c.is_ascii_digit());
    if split {
        stem[..stem.len() - 15].to_string()
    } else {
        stem
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_drop_the_split_suffix() {
        let id = |p: &str| id_of_path(std::path::Path::new(p));
        assert_eq!(
            id("/m/Qwen3.5-Q4_K_M-00001-of-00003.gguf"),
            "Qwen3.5-Q4_K_M"
        );
        assert_eq!(id("model.gguf"), "model");
        assert_eq!(id("x-1-of-2.gguf"), "x-1-of-2");
    }

    #[test]
    fn counts_read_like_model_cards() {
        assert_eq!(human_count(35_100_000_000), "35.10 B");
        assert_eq!(human_count(1_234_567), "1.23 M");
        assert_eq!(human_count(4_200), "4.2 K");
        assert_eq!(human_count(12), "12");
    }
}
