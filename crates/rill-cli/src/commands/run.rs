//! `rill run`: generate text from a prompt, streamed as it comes.

use super::tokenize::load_tokenizer;
use crate::load;
use anyhow::{Context, Result};
use rill_engine::{generate, GenerateParams};
use rill_kernels::Precision;
use rill_kernels::Threads;
use rill_model::SequenceState;
use rill_sampler::{Sampler, SamplerConfig};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Sampling options shared by `run` and `chat`.
#[derive(clap::Args, Clone)]
pub struct SamplingArgs {
    /// Temperature (0 = greedy).
    #[arg(long, default_value_t = 0.8)]
    pub temp: f32,
    /// Keep the K most likely tokens (0 = off).
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    /// Nucleus sampling threshold (1 = off).
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    /// Drop tokens below this fraction of the best one's probability (0 = off).
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f32,
    /// Repetition penalty (1 = off).
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// Presence penalty (0 = off).
    #[arg(long, default_value_t = 0.0)]
    pub presence_penalty: f32,
    /// Frequency penalty (0 = off).
    #[arg(long, default_value_t = 0.0)]
    pub frequency_penalty: f32,
    /// Random seed (default: from the clock).
    #[arg(long)]
    pub seed: Option<u64>,
}

impl SamplingArgs {
    pub fn config(&self) -> SamplerConfig {
        let seed = self.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0)
        });
        SamplerConfig {
            temperature: self.temp,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repetition_penalty: self.repeat_penalty,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            seed,
            ..SamplerConfig::default()
        }
    }
}

#[derive(clap::Args)]
pub struct Args {
    /// Model file (GGUF).
    #[arg(short, long)]
    model: PathBuf,
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
    /// Worker threads (0 = all cores).
    #[arg(short, long, default_value_t = 0)]
    threads: usize,
    /// Matrix-product numerics: `exact` (f32 activations, the reference
    /// results) or `q8` (8-bit activations as llama.cpp uses: faster,
    /// results within the activations' rounding).
    #[arg(long, default_value = "exact")]
    precision: Precision,
    /// Context size in tokens (default: prompt + n_predict).
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
}

pub fn run(a: Args) -> Result<()> {
    let model = load::open_model(&a.model, a.precision)?;
    let tok = load_tokenizer(&a.model)?;
    let text = if a.chat {
        let tmpl = crate::chat_prompt::load_template(model.file(), &tok)?;
        let mut messages: Vec<rill_chat::Message> = a
            .system
            .iter()
            .map(|s| rill_chat::Message::system(s.as_str()))
            .collect();
        messages.push(rill_chat::Message::user(a.prompt.as_str()));
        crate::chat_prompt::render(&tmpl, &messages, a.no_think.then_some(false))?
    } else {
        a.prompt.clone()
    };
    let prompt = tok.encode(&text, true);
    let threads = Threads::new(a.threads);
    let ctx = a.ctx_size.unwrap_or(prompt.len() + a.n_predict);
    anyhow::ensure!(
        prompt.len() < ctx,
        "the prompt has {} tokens, more than the context size {ctx}",
        prompt.len()
    );
    let mut state = SequenceState::new(&model, ctx);
    let mut sampler = Sampler::new(a.sampling.config()).context("bad sampling parameters")?;
    let params = GenerateParams {
        max_tokens: a.n_predict.min(ctx - prompt.len()),
        stop: a.stop.clone(),
        ignore_eos: a.ignore_eos,
        ..GenerateParams::default()
    };
    let cancel = Arc::new(AtomicBool::new(false));
    let c2 = cancel.clone();
    // Ctrl-C stops generation cleanly (the timings still print).
    let _ = ctrlc::set_handler(move || c2.store(true, Ordering::Relaxed));

    let mut stdout = std::io::stdout().lock();
    let json = a.json;
    let g = generate(
        &model,
        &tok,
        &threads,
        &mut state,
        &prompt,
        &params,
        &mut sampler,
        &cancel,
        |s| {
            if !json {
                let _ = stdout.write_all(s.as_bytes());
                let _ = stdout.flush();
            }
        },
    )?;
    let t = g.timings;
    if json {
        let obj = serde_json::json!({
            "prompt_tokens": prompt,
            "tokens": g.tokens,
            "text": g.text,
            "finish_reason": g.finish.as_str(),
            "timings": {
                "prompt_n": t.prompt_tokens,
                "prompt_ms": t.prompt_ms,
                "prompt_per_second": t.prompt_tok_s(),
                "predicted_n": t.gen_tokens,
                "predicted_ms": t.gen_ms,
                "predicted_per_second": t.gen_tok_s(),
            }
        });
        writeln!(stdout, "{obj}")?;
    } else {
        writeln!(stdout)?;
        print_timings(&t);
    }
    Ok(())
}

/// The speed report llama.cpp users know, on stderr.
pub fn print_timings(t: &rill_engine::Timings) {
    eprintln!(
        "prompt eval: {:>8.2} ms / {:>5} tokens ({:>8.2} ms per token, {:>8.2} tokens per second)",
        t.prompt_ms,
        t.prompt_tokens,
        t.prompt_ms / t.prompt_tokens.max(1) as f64,
        t.prompt_tok_s()
    );
    eprintln!(
        "       eval: {:>8.2} ms / {:>5} tokens ({:>8.2} ms per token, {:>8.2} tokens per second)",
        t.gen_ms,
        t.gen_tokens,
        t.gen_ms / t.gen_tokens.max(1) as f64,
        t.gen_tok_s()
    );
}
