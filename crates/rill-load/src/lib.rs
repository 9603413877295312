//! One call from a model source to everything a front end needs.
//!
//! [`load`] opens a [`ModelSource`] once and returns a [`Loaded`]: the bound
//! [`Model`], its [`Tokenizer`], its [`ChatTemplate`] and a [`ModelInfo`]
//! describing it. Front ends (the CLI, the server) never touch the file
//! format: a new format is a new [`ModelSource`] variant and a
//! [`rill_model::WeightSource`] implementation, and nothing above changes.

mod folder;
mod info;

pub use info::{human_count, ModelInfo, TensorSummary};
pub use rill_sampler::SamplingPrefs;

use indicatif::{ProgressBar, ProgressStyle};
use rill_chat::ChatTemplate;
use rill_gguf::{GgufFile, MetaValue};
use rill_model::{GgufSource, HfSource, LoadLayout, Model, ModelError, WeightSource, WithMtpHead};
use rill_tokenizer::{Tokenizer, TokenizerError};
use std::path::PathBuf;
use std::sync::Arc;

/// Where a model comes from.
#[derive(Clone, Debug)]
pub enum ModelSource {
    /// A path on disk, memory-mapped: a GGUF file (any file of a split
    /// set), or a Hugging Face model folder (`config.json`, safetensors,
    /// `tokenizer.json`).
    File(PathBuf),
    /// A GGUF file inside the program (`include_bytes!`), read in place.
    Static {
        /// How messages name it.
        label: &'static str,
        bytes: &'static [u8],
    },
}

impl ModelSource {
    /// How messages name the source.
    pub fn label(&self) -> String {
        match self {
            ModelSource::File(p) => p.display().to_string(),
            ModelSource::Static { label, .. } => label.to_string(),
        }
    }
}

/// How to load.
#[derive(Clone, Debug, Default)]
pub struct LoadOptions {
    pub prefault: Prefault,
    /// The MTP head from a separate MTP-only GGUF (llama.cpp's converter
    /// with `--mtp`), for a model file without one (`--mtp-model`).
    pub mtp_model: Option<ModelSource>,
    /// The layouts the matrices are held in for the run's kernels (by
    /// default, as the file stores them).
    pub layout: LoadLayout,
}

/// When the weights' pages are read from disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Prefault {
    /// When a forward pass first touches them (what one token of a MoE
    /// reads is a fraction of the file: the fastest first token from a
    /// cold disk).
    #[default]
    Lazy,
    /// All of them now, with a progress bar on stderr (benchmarks: no disk
    /// reads in the measured passes).
    Now,
    /// All of them on a background thread while the caller goes on (a
    /// server: it answers at once, and later requests find the pages in).
    Background,
}

/// Why a model could not be loaded. Every message names the source.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{}", open_message(.source_label, .error))]
    Open {
        source_label: String,
        error: rill_gguf::GgufError,
    },
    #[error("cannot load the model in {source_label}: {error}")]
    Model {
        source_label: String,
        error: ModelError,
    },
    #[error("cannot load the tokenizer of {source_label}: {error}")]
    Tokenizer {
        source_label: String,
        error: TokenizerError,
    },
}

/// A file's errors name the file already; say it once.
fn open_message(label: &str, error: &rill_gguf::GgufError) -> String {
    let text = error.to_string();
    if text.contains(label) {
        text
    } else {
        format!("cannot open {label}: {text}")
    }
}

/// A loaded model and what comes with it.
pub struct Loaded {
    pub model: Model,
    pub tokenizer: Tokenizer,
    /// The model's chat template; `None` when it has none or it does not
    /// compile (see [`ModelInfo::template_problem`]).
    pub template: Option<ChatTemplate>,
    pub info: ModelInfo,
}

/// Open `source`, parse it once, and bind the model, the tokenizer and the
/// chat template.
pub fn load(source: &ModelSource, options: &LoadOptions) -> Result<Loaded, LoadError> {
    if let Some(dir) = folder_of(source) {
        return load_folder(source, dir, options);
    }
    let label = source.label();
    let file = open_gguf(source)?;
    start_prefault(options.prefault, file.clone(), gguf_regions, options.layout);
    let tokenizer = Tokenizer::from_gguf(&file).map_err(|error| LoadError::Tokenizer {
        source_label: label.clone(),
        error,
    })?;
    let (template, template_problem) = match chat_template(&file, &tokenizer) {
        Ok(t) => (t, None),
        Err(e) => (
            None,
            Some(format!("the chat template does not compile: {e}")),
        ),
    };
    let info = ModelInfo::of_gguf(source, &file, template_problem);
    let gguf: Arc<dyn WeightSource> = Arc::new(GgufSource::new(file, label.clone()));
    bind(gguf, &label, options, tokenizer, template, info)
}

/// Bind the model of `weights` (joined with `--mtp-model`'s head when the
/// options name one) and put the load together.
fn bind(
    weights: Arc<dyn WeightSource>,
    label: &str,
    options: &LoadOptions,
    tokenizer: Tokenizer,
    template: Option<ChatTemplate>,
    info: ModelInfo,
) -> Result<Loaded, LoadError> {
    let weights = match &options.mtp_model {
        None => weights,
        Some(head_source) => {
            let head_file = open_gguf(head_source)?;
            start_prefault(
                options.prefault,
                head_file.clone(),
                gguf_regions,
                options.layout,
            );
            let head = Arc::new(GgufSource::new(head_file, head_source.label()));
            let joined = WithMtpHead::new(weights, head).map_err(|error| LoadError::Model {
                source_label: head_source.label(),
                error,
            })?;
            Arc::new(joined)
        }
    };
    let model =
        Model::from_source_with(weights, options.layout).map_err(|error| LoadError::Model {
            source_label: label.to_string(),
            error,
        })?;
    let info = info.with_model(&model);
    Ok(Loaded {
        model,
        tokenizer,
        template,
        info,
    })
}

/// The folder a source names, when it is a Hugging Face folder.
fn folder_of(source: &ModelSource) -> Option<&std::path::Path> {
    match source {
        ModelSource::File(p) if p.is_dir() => Some(p),
        _ => None,
    }
}

fn load_folder(
    source: &ModelSource,
    dir: &std::path::Path,
    options: &LoadOptions,
) -> Result<Loaded, LoadError> {
    let src = Arc::new(folder::open_source(dir)?);
    start_prefault(
        options.prefault,
        src.clone(),
        folder_regions,
        options.layout,
    );
    let tokenizer = folder::tokenizer(dir, &src)?;
    let t = folder::template(dir, &tokenizer)?;
    let template = t.template;
    let info = folder::info(source, dir, &src, t.problem, t.source)?;
    bind(src, &source.label(), options, tokenizer, template, info)
}

/// A source described whether or not it binds (`rill inspect` shows files
/// rill cannot run, and why): its description, and the bound model's
/// hyperparameters or the reason it does not bind.
pub fn inspect(source: &ModelSource) -> Result<(ModelInfo, Result<Model, LoadError>), LoadError> {
    if let Some(dir) = folder_of(source) {
        let src = Arc::new(folder::open_source(dir)?);
        let t = match folder::tokenizer(dir, &src) {
            Ok(tok) => folder::template(dir, &tok)?,
            Err(e) => folder::FolderTemplate {
                problem: Some(e.to_string()),
                ..Default::default()
            },
        };
        let info = folder::info(source, dir, &src, t.problem, t.source)?;
        let model = Model::from_source(src).map_err(|error| LoadError::Model {
            source_label: source.label(),
            error,
        });
        let info = match &model {
            Ok(m) => info.with_model(m),
            Err(_) => info,
        };
        return Ok((info, model));
    }
    let label = source.label();
    let file = open_gguf(source)?;
    let info = ModelInfo::of_gguf(source, &file, None);
    let model =
        Model::from_source(Arc::new(GgufSource::new(file, label.clone()))).map_err(|error| {
            LoadError::Model {
                source_label: label,
                error,
            }
        });
    let info = match &model {
        Ok(m) => info.with_model(m),
        Err(_) => info,
    };
    Ok((info, model))
}

/// The GGUF file of a source, parsed (tensor data stays where it is).
fn open_gguf(source: &ModelSource) -> Result<Arc<GgufFile>, LoadError> {
    let file = match source {
        ModelSource::File(path) => GgufFile::open(path),
        ModelSource::Static { bytes, .. } => GgufFile::from_static(bytes),
    };
    file.map(Arc::new).map_err(|error| LoadError::Open {
        source_label: source.label(),
        error,
    })
}

/// The file's chat template, with its BOS/EOS strings as transformers
/// passes them. `Ok(None)` when the file has none.
fn chat_template(
    file: &GgufFile,
    tok: &Tokenizer,
) -> Result<Option<ChatTemplate>, rill_chat::TemplateError> {
    let Some(source) = file
        .get("tokenizer.chat_template")
        .and_then(MetaValue::as_str)
    else {
        return Ok(None);
    };
    let text = |id: Option<u32>| id.and_then(|i| tok.token_text(i)).map(str::to_string);
    ChatTemplate::new(source, text(tok.bos_id()), text(tok.eos_id())).map(Some)
}

/// Read the weights' pages as `when` says: not now, now with a progress
/// bar, or on a background thread that holds `owner` (the mapping) while
/// it reads. `regions` lists the bytes of `owner`.
fn start_prefault<S: Send + Sync + 'static>(
    when: Prefault,
    owner: Arc<S>,
    regions: fn(&S, LoadLayout) -> Vec<&[u8]>,
    layout: LoadLayout,
) {
    match when {
        Prefault::Lazy => {}
        Prefault::Now => prefault(&regions(&owner, layout), true),
        Prefault::Background => {
            // Detached: it only reads, and owns an `Arc` of the mapping.
            let _ = std::thread::Builder::new()
                .name("rill-prefault".into())
                .spawn(move || prefault(&regions(&owner, layout), false));
        }
    }
}

/// The tensor bytes of a GGUF file, but those of the encodings `layout`
/// rewrites: binding copies them and lets their pages go, and the
/// prefault would map them in again. (Interleaved layouts are taken as
/// made, for whole groups of 8 rows: a lookup table of such an encoding,
/// left as it is, is read a few rows a token and needs no prefault.)
fn gguf_regions(file: &GgufFile, layout: LoadLayout) -> Vec<&[u8]> {
    file.tensors()
        .iter()
        .filter(|t| t.dtype().is_ok_and(|d| layout.target(d, 8).is_none()))
        .filter_map(|t| file.try_tensor_data(t).ok())
        .collect()
}

/// The mapped files of a folder (no encoding of a checkpoint is rewritten).
fn folder_regions(src: &HfSource, _layout: LoadLayout) -> Vec<&[u8]> {
    src.mapped().collect()
}

/// Touch every page of `regions` once (with a progress bar if `show`).
fn prefault(regions: &[&[u8]], show: bool) {
    let total: u64 = regions.iter().map(|d| d.len() as u64).sum();
    let bar = if show {
        ProgressBar::new(total)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template(
            "loading {bar:40} {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut sink = 0u8;
    for data in regions {
        for chunk in data.chunks(1 << 20) {
            for page in chunk.iter().step_by(4096) {
                // SAFETY: reading a valid reference; volatile keeps the read.
                sink ^= unsafe { std::ptr::read_volatile(page) };
            }
            bar.inc(chunk.len() as u64);
        }
    }
    std::hint::black_box(sink);
    bar.finish_and_clear();
}
