//! Speculative-decoding options shared by `run`, `chat`, `serve` and
//! `bench`. The names follow llama.cpp's older `--draft-*` flags; its
//! current `--spec-draft-n-max`, `--spec-draft-n-min` and
//! `--spec-draft-p-min` are accepted as aliases, and `--spec off` is
//! llama.cpp without `--spec-type draft-mtp`.

use anyhow::{ensure, Result};
use rill_engine::speculation::MAX_DRAFT;
use rill_engine::SpecConfig;

/// Whether to speculate with the model's MTP head.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpecMode {
    /// Draft with the MTP head where it can pay: the model has one, a decode
    /// step reads well past the last-level cache (bound by memory, so a
    /// verify step's positions share one read) and a draft step reads a
    /// small part of what a decode step does.
    Auto,
    /// Draft with the MTP head whenever the model has one.
    Mtp,
    /// Plain decoding.
    Off,
}

#[derive(clap::Args, Clone, Debug)]
pub struct SpecArgs {
    /// Speculative decoding: `mtp` drafts with the model's own MTP head
    /// (when the file has one; greedy output is unchanged, sampled output
    /// keeps its distribution), `auto` does so where it can pay on this
    /// model and machine, `off` decodes one token per step.
    #[arg(long, value_enum, default_value = "auto", env = "RILL_SPEC")]
    pub spec: SpecMode,
    /// Most tokens drafted per step (llama.cpp `--spec-draft-n-max`).
    #[arg(
        long,
        alias = "spec-draft-n-max",
        default_value_t = 3,
        env = "RILL_DRAFT_MAX"
    )]
    pub draft_max: usize,
    /// Drafts shorter than this are dropped (llama.cpp `--spec-draft-n-min`).
    #[arg(
        long,
        alias = "spec-draft-n-min",
        default_value_t = 0,
        env = "RILL_DRAFT_MIN"
    )]
    pub draft_min: usize,
    /// Stop drafting before a token the head gives less than this
    /// probability (llama.cpp `--spec-draft-p-min`).
    #[arg(
        long,
        alias = "spec-draft-p-min",
        default_value_t = 0.0,
        env = "RILL_DRAFT_P_MIN"
    )]
    pub draft_p_min: f32,
    /// Keep the draft length at --draft-max instead of adapting it to each
    /// sequence's recent acceptance.
    #[arg(long, env = "RILL_DRAFT_FIXED")]
    pub draft_fixed: bool,
    /// Draft over only the first N vocabulary entries (the most frequent
    /// tokens of a BPE vocabulary; the target still verifies over all of
    /// them): on a 248k vocabulary the head's LM product is otherwise a
    /// large part of a draft step. 0 = the whole vocabulary.
    #[arg(long, default_value_t = 0, env = "RILL_DRAFT_VOCAB")]
    pub draft_vocab: usize,
    /// The MTP head from a separate MTP-only GGUF (llama.cpp's
    /// `convert_hf_to_gguf.py --mtp`), for a model file converted without it.
    #[arg(long, env = "RILL_MTP_MODEL")]
    pub mtp_model: Option<std::path::PathBuf>,
}

impl SpecArgs {
    /// The engine's speculation settings, checked.
    pub fn config(&self) -> Result<SpecConfig> {
        ensure!(
            self.draft_max <= MAX_DRAFT,
            "--draft-max {} is more than {MAX_DRAFT}",
            self.draft_max
        );
        ensure!(
            (0.0..=1.0).contains(&self.draft_p_min),
            "--draft-p-min {} is not a probability in [0, 1]",
            self.draft_p_min
        );
        Ok(match self.spec {
            SpecMode::Off => SpecConfig::OFF,
            SpecMode::Mtp | SpecMode::Auto => SpecConfig {
                draft_max: self.draft_max,
                draft_min: self.draft_min,
                p_min: self.draft_p_min,
                adaptive: !self.draft_fixed,
                draft_vocab: self.draft_vocab,
                auto: self.spec == SpecMode::Auto,
            },
        })
    }
}
