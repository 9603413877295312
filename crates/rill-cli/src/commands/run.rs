//! `rill run`: generate text from a prompt, streamed as it comes, through
//! the same engine the server runs (so the same prompt, parameters and seed
//! give the same tokens from both).

use crate::compute_args::engine_config;
use crate::drive::{self, InFlight};
use crate::load;
use anyhow::{Context, Result};
use rill_engine::{Engine, EngineConfig, Request};
use rill_load::Prefault;
use rill_sampler::{SamplerConfig, SamplerSeq, SamplingPrefs};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Sampling options shared by `run` and `chat`. One left out takes the
/// model's own default (`general.sampling.*` in a GGUF, a folder's
/// `generation_config.json`), else the one shown, as llama.cpp does.
#[derive(clap::Args, Clone)]
pub struct SamplingArgs {
    /// Temperature (0 = greedy) [default: the model's, else 0.8].
    #[arg(long)]
    pub temp: Option<f32>,
    /// Keep the K most likely tokens (0 = off) [default: the model's, else 40].
    #[arg(long)]
    pub top_k: Option<usize>,
    /// Nucleus sampling threshold (1 = off) [default: the model's, else 0.95].
    #[arg(long)]
    pub top_p: Option<f32>,
    /// Drop tokens below this fraction of the best one's probability (0 =
    /// off) [default: the model's, else 0.05].
    #[arg(long)]
    pub min_p: Option<f32>,
    /// Repetition penalty (1 = off) [default: the model's, else 1].
    #[arg(long)]
    pub repeat_penalty: Option<f32>,
    /// Presence penalty (0 = off) [default: the model's, else 0].
    #[arg(long)]
    pub presence_penalty: Option<f32>,
    /// Frequency penalty (0 = off) [default: the model's, else 0].
    #[arg(long)]
    pub frequency_penalty: Option<f32>,
    /// Top-n-σ: keep the logits within N standard deviations of the best
    /// (0 = off) [default: the model's, else 0].
    #[arg(long = "top-nsigma")]
    pub top_n_sigma: Option<f32>,
    /// Locally typical sampling mass (1 = off) [default: the model's, else 1].
    #[arg(long = "typical")]
    pub typical_p: Option<f32>,
    /// XTC: the chance per token of dropping the likeliest tokens (0 = off)
    /// [default: the model's, else 0].
    #[arg(long)]
    pub xtc_probability: Option<f32>,
    /// XTC: the probability from which tokens are dropped [default: the
    /// model's, else 0.1].
    #[arg(long)]
    pub xtc_threshold: Option<f32>,
    /// The penalty window, dynamic temperature, DRY and Mirostat flags:
    /// see [`ExtraSamplerArgs`].
    #[command(flatten)]
    pub extra: ExtraSamplerArgs,
    /// Random seed (default: from the clock).
    #[arg(long)]
    pub seed: Option<u64>,
}

impl SamplingArgs {
    /// Say on stderr which of the model's own sampling defaults apply.
    pub fn note_model_defaults(model: &SamplingPrefs) {
        if let Some(d) = model.describe() {
            eprintln!("sampling defaults from the model file: {d} (flags override them)");
        }
    }

    /// The sampler these options ask for (checked by the engine): each
    /// value from its flag, else from `model` (the file's defaults), else
    /// the built-in one.
    pub fn config(&self, model: &SamplingPrefs) -> Result<SamplerConfig> {
        let seed = self.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0)
        });
        let pick = |flag: Option<f32>, file: Option<f64>, builtin: f32| {
            flag.or(file.map(|v| v as f32)).unwrap_or(builtin)
        };
        let mut config = SamplerConfig {
            temperature: pick(self.temp, model.temperature, 0.8),
            // A negative top-k in a file means off, as 0 does here.
            top_k: (self.top_k)
                .or(model.top_k.map(|k| k.max(0) as usize))
                .unwrap_or(40),
            top_p: pick(self.top_p, model.top_p, 0.95),
            min_p: pick(self.min_p, model.min_p, 0.05),
            repetition_penalty: pick(self.repeat_penalty, model.repetition_penalty, 1.0),
            presence_penalty: pick(self.presence_penalty, model.presence_penalty, 0.0),
            frequency_penalty: pick(self.frequency_penalty, model.frequency_penalty, 0.0),
            top_n_sigma: pick(self.top_n_sigma, model.top_n_sigma, 0.0),
            typical_p: pick(self.typical_p, model.typical_p, 1.0),
            xtc_probability: pick(self.xtc_probability, model.xtc_probability, 0.0),
            xtc_threshold: pick(self.xtc_threshold, model.xtc_threshold, 0.1),
            seed,
            ..SamplerConfig::default()
        };
        self.extra.apply(model, &mut config)?;
        Ok(config)
    }
}

/// llama.cpp's flags of its other samplers (`rill run`, `chat` and
/// `serve`): the penalties' window, dynamic temperature, DRY, Mirostat.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct ExtraSamplerArgs {
    /// The penalties' window in tokens (0 = penalties off, -1 = the whole
    /// context) [default: 64].
    #[arg(long, env = "RILL_REPEAT_LAST_N", allow_negative_numbers = true)]
    pub repeat_last_n: Option<i64>,
    /// The fewest tokens top-p, min-p, typical and XTC may leave (0 = no
    /// floor but one token) [default: 0].
    #[arg(long, env = "RILL_MIN_KEEP")]
    pub min_keep: Option<i64>,
    /// Dynamic temperature: the temperature moves within ± this with the
    /// entropy of the candidates (0 = off) [default: 0].
    #[arg(long, env = "RILL_DYNATEMP_RANGE")]
    pub dynatemp_range: Option<f64>,
    /// Dynamic temperature's exponent [default: 1].
    #[arg(long = "dynatemp-exp", env = "RILL_DYNATEMP_EXP")]
    pub dynatemp_exponent: Option<f64>,
    /// DRY: penalty multiplier on tokens that extend a repetition (0 = off)
    /// [default: 0].
    #[arg(long, env = "RILL_DRY_MULTIPLIER")]
    pub dry_multiplier: Option<f64>,
    /// DRY: base of the penalty's growth with the repetition's length
    /// [default: 1.75].
    #[arg(long, env = "RILL_DRY_BASE")]
    pub dry_base: Option<f64>,
    /// DRY: repetitions up to this length are free [default: 2].
    #[arg(long, env = "RILL_DRY_ALLOWED_LENGTH")]
    pub dry_allowed_length: Option<i64>,
    /// DRY: how many of the latest tokens are scanned (0 = off, -1 = the
    /// whole context) [default: 64].
    #[arg(long, env = "RILL_DRY_PENALTY_LAST_N", allow_negative_numbers = true)]
    pub dry_penalty_last_n: Option<i64>,
    /// DRY: a sequence breaker (repeat the flag for several; they replace
    /// the defaults "\n", ":", "\"", "*"; "none" for none).
    #[arg(long = "dry-sequence-breaker", env = "RILL_DRY_SEQUENCE_BREAKER")]
    pub dry_sequence_breakers: Vec<String>,
    /// Mirostat: 0 = off, 1 = Mirostat, 2 = Mirostat 2.0 (top-k, top-p,
    /// min-p, typical, XTC, the penalties and DRY are then not used)
    /// [default: 0].
    #[arg(long, env = "RILL_MIROSTAT")]
    pub mirostat: Option<i64>,
    /// Mirostat learning rate, eta [default: 0.1].
    #[arg(long, env = "RILL_MIROSTAT_LR")]
    pub mirostat_lr: Option<f64>,
    /// Mirostat target entropy, tau [default: 5].
    #[arg(long, env = "RILL_MIROSTAT_ENT")]
    pub mirostat_ent: Option<f64>,
    /// The samplers after the logit bias, in order, separated by ';' (one
    /// left out is not applied) [default:
    /// penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature].
    #[arg(long, env = "RILL_SAMPLERS", conflicts_with = "sampler_seq")]
    pub samplers: Option<String>,
    /// `--samplers` as one letter each (e penalties, d dry, s top-n-σ,
    /// k top-k, y typical, p top-p, m min-p, x XTC, t temperature)
    /// [default: edskypmxt].
    #[arg(long, alias = "sampling-seq", env = "RILL_SAMPLER_SEQ")]
    pub sampler_seq: Option<String>,
}

impl ExtraSamplerArgs {
    /// These flags as request-style values ("none": one empty breaker,
    /// which stands for none, as llama.cpp skips empty ones).
    pub fn prefs(&self) -> SamplingPrefs {
        let breakers = match self.dry_sequence_breakers.as_slice() {
            [none] if none == "none" => vec![String::new()],
            list => list.to_vec(),
        };
        SamplingPrefs {
            repeat_last_n: self.repeat_last_n,
            min_keep: self.min_keep,
            dynatemp_range: self.dynatemp_range,
            dynatemp_exponent: self.dynatemp_exponent,
            dry_multiplier: self.dry_multiplier,
            dry_base: self.dry_base,
            dry_allowed_length: self.dry_allowed_length,
            dry_penalty_last_n: self.dry_penalty_last_n,
            dry_sequence_breakers: (!breakers.is_empty()).then_some(breakers),
            mirostat: self.mirostat,
            mirostat_tau: self.mirostat_ent,
            mirostat_eta: self.mirostat_lr,
            samplers: match (&self.samplers, &self.sampler_seq) {
                (Some(names), _) => Some(SamplerSeq::Names(
                    (names.split(';').map(str::trim))
                        .filter(|n| !n.is_empty())
                        .map(String::from)
                        .collect(),
                )),
                (None, Some(letters)) => Some(SamplerSeq::Letters(letters.clone())),
                (None, None) => None,
            },
            ..SamplingPrefs::default()
        }
    }

    /// Set these samplers in `config`: each flag, else the file's value,
    /// else the default.
    pub fn apply(&self, model: &SamplingPrefs, config: &mut SamplerConfig) -> Result<()> {
        apply_extras(&self.prefs().or(model), config)
    }
}

/// [`SamplingPrefs::apply_extras`], its error named by the flag.
pub fn apply_extras(prefs: &SamplingPrefs, config: &mut SamplerConfig) -> Result<()> {
    (prefs.apply_extras(config))
        .map_err(|e| anyhow::anyhow!("--{}: {}", e.param.replace('_', "-"), e.message))
}

#[derive(clap::Args)]
pub struct Args {
    /// Model: a GGUF file (any file of a split set) or a Hugging Face
    /// folder (config.json + safetensors). Default: the demo model
    /// inside the binary.
    #[arg(short, long)]
    model: Option<PathBuf>,
    /// The prompt.
    #[arg(short, long)]
    prompt: String,
    /// Tokens to generate.
    #[arg(short = 'n', long, default_value_t = 256)]
    n_predict: usize,
    #[command(flatten)]
    sampling: SamplingArgs,
    /// Stop when this text is generated (repeatable).
    #[arg(long)]
    stop: Vec<String>,
    #[command(flatten)]
    compute: crate::compute_args::ComputeArgs,
    /// Context size in tokens (default: prompt + n_predict; 0 = the
    /// model's trained context).
    #[arg(short = 'c', long)]
    ctx_size: Option<usize>,
    /// Print one JSON object (prompt_tokens, tokens, text, timings) instead of streaming.
    #[arg(long)]
    json: bool,
    /// Wrap the prompt in the model's chat template (as a user message).
    #[arg(long)]
    chat: bool,
    /// With --chat: answer without thinking first.
    #[arg(long, requires = "chat")]
    no_think: bool,
    /// With --chat: a system prompt.
    #[arg(long, requires = "chat")]
    system: Option<String>,
    /// Keep generating past end-of-generation tokens.
    #[arg(long)]
    ignore_eos: bool,
    #[command(flatten)]
    spec: crate::spec_args::SpecArgs,
}

pub fn run(a: Args) -> Result<()> {
    let (loaded, kernels, precision, kv) =
        a.compute.open(&a.model, Some(&a.spec), Prefault::Lazy)?;
    let tok = Arc::new(loaded.tokenizer);
    let prompt = if a.chat {
        let tmpl = crate::chat_prompt::template(&loaded.template, &loaded.info)?;
        let mut messages: Vec<rill_chat::Message> = a
            .system
            .iter()
            .map(|s| rill_chat::Message::system(s.as_str()))
            .collect();
        messages.push(rill_chat::Message::user(a.prompt.as_str()));
        crate::chat_prompt::render(tmpl, &tok, &messages, a.no_think.then_some(false))?.tokens
    } else {
        tok.encode_prompt(&a.prompt)
    };
    let ctx = match a.ctx_size {
        Some(c) => load::context(c, &loaded.model)?,
        None => prompt.len() + a.n_predict,
    };
    anyhow::ensure!(
        prompt.len() < ctx,
        "the prompt has {} tokens, more than the context size {ctx}",
        prompt.len()
    );
    SamplingArgs::note_model_defaults(&loaded.info.sampling);
    let sampler = a.sampling.config(&loaded.info.sampling)?;
    sampler.validate().context("bad sampling parameters")?;
    // The server's engine settings but one slot and no prompt cache: the
    // same prefill chunks, so the same tokens.
    let engine = Engine::start(
        Arc::new(loaded.model),
        tok,
        EngineConfig {
            max_parallel: 1,
            ctx_size: ctx,
            cache_bytes: 0,
            ..engine_config(a.compute.threads, (kernels, precision, kv), &a.spec)?
        },
    );
    let req = Request {
        max_tokens: a.n_predict.min(ctx - prompt.len()),
        stop: a.stop.clone(),
        ignore_eos: a.ignore_eos,
        ..Request::new(prompt.clone(), sampler)
    };
    let in_flight: InFlight = Default::default();
    {
        // Ctrl-C stops generation cleanly (the timings still print).
        let in_flight = in_flight.clone();
        let _ = ctrlc::set_handler(move || {
            if let Some(c) = in_flight.lock().ok().and_then(|f| f.clone()) {
                c.store(true, Ordering::Relaxed);
            }
        });
    }
    let json = a.json;
    let mut stdout = std::io::stdout().lock();
    let f = drive::stream(&engine, req, &in_flight, |s| {
        if !json {
            let _ = stdout.write_all(s.as_bytes());
            let _ = stdout.flush();
        }
    })?;
    let d = &f.done;
    if json {
        let obj = serde_json::json!({
            "prompt_tokens": prompt,
            "tokens": f.tokens,
            "text": f.text,
            "finish_reason": d.finish.as_str(),
            "timings": {
                "prompt_n": d.prompt_tokens - d.cached_tokens,
                "prompt_ms": d.prefill_ms,
                "prompt_per_second": d.prefill_tok_s(),
                "predicted_n": d.completion_tokens,
                "predicted_ms": d.decode_ms,
                "predicted_per_second": d.decode_tok_s(),
                "draft_n": d.drafted_tokens,
                "draft_n_accepted": d.accepted_tokens,
            }
        });
        writeln!(stdout, "{obj}")?;
    } else {
        writeln!(stdout)?;
        drive::print_timings(d);
    }
    Ok(())
}
