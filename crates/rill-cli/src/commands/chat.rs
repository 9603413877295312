//! `rill chat`: an interactive conversation in the terminal.
//!
//! The conversation is re-rendered with the chat template every turn and
//! submitted whole to the engine, like a chat request to the server: the
//! engine's prompt cache resumes it from the snapshot where the previous
//! turn's history ended, so only the new turn is prefilled. Ctrl-C stops a
//! reply; Ctrl-C at the prompt or Ctrl-D leaves.

use super::run::SamplingArgs;
use crate::chat_prompt::{render, template};
use crate::compute_args::engine_config;
use crate::drive::{self, InFlight};
use crate::load;
use anyhow::{Context, Result};
use rill_chat::reply::{Piece, ThinkSplitter};
use rill_chat::Message;
use rill_engine::{Engine, EngineConfig, FinishReason, Request};
use rill_load::Prefault;
use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

#[derive(clap::Args)]
pub struct Args {
    /// Model: a GGUF file (any file of a split set) or a Hugging Face
    /// folder (config.json + safetensors). Default: the demo model
    /// inside the binary.
    #[arg(short, long)]
    model: Option<PathBuf>,
    /// System prompt.
    #[arg(long)]
    system: Option<String>,
    /// Answer without thinking first.
    #[arg(long)]
    no_think: bool,
    /// Most tokens per reply.
    #[arg(short = 'n', long, default_value_t = 2048)]
    n_predict: usize,
    /// Context size in tokens (0 = the model's trained context).
    #[arg(short = 'c', long, default_value_t = 8192)]
    ctx_size: usize,
    #[command(flatten)]
    sampling: SamplingArgs,
    #[command(flatten)]
    compute: crate::compute_args::ComputeArgs,
    /// Print speed figures after each reply.
    #[arg(long)]
    timings: bool,
    /// Prompt-cache size in MiB (0 = off: every turn prefills the whole
    /// conversation).
    #[arg(long, default_value_t = 1024)]
    cache_ram: usize,
    #[command(flatten)]
    spec: crate::spec_args::SpecArgs,
}

pub fn run(a: Args) -> Result<()> {
    let (loaded, kernels, precision, kv) =
        a.compute
            .open(&a.model, Some(&a.spec), Prefault::Background)?;
    let ctx_size = load::context(a.ctx_size, &loaded.model)?;
    let tmpl = template(&loaded.template, &loaded.info)?;
    let tok = Arc::new(loaded.tokenizer);
    SamplingArgs::note_model_defaults(&loaded.info.sampling);
    let sampler = a.sampling.config(&loaded.info.sampling)?;
    sampler.validate().context("bad sampling parameters")?;
    let arch = loaded.model.config.arch.name();
    let engine = Engine::start(
        Arc::new(loaded.model),
        tok.clone(),
        EngineConfig {
            max_parallel: 1,
            ctx_size,
            cache_bytes: a.cache_ram << 20,
            ..engine_config(a.compute.threads, (kernels, precision, kv), &a.spec)?
        },
    );

    let in_flight: InFlight = Default::default();
    {
        let in_flight = in_flight.clone();
        ctrlc::set_handler(
            move || match in_flight.lock().ok().and_then(|f| f.clone()) {
                Some(c) => c.store(true, Ordering::Relaxed),
                None => {
                    eprintln!();
                    std::process::exit(0);
                }
            },
        )
        .context("cannot install the Ctrl-C handler")?;
    }

    let color = std::io::stdout().is_terminal();
    let (dim, reset) = if color {
        ("\x1b[2m", "\x1b[0m")
    } else {
        ("", "")
    };
    let mut messages: Vec<Message> = a
        .system
        .iter()
        .map(|s| Message::system(s.as_str()))
        .collect();
    eprintln!(
        "rill chat — {} ({arch}). Ctrl-C stops a reply, Ctrl-D or Ctrl-C at the prompt leaves.",
        loaded.info.label,
    );

    let stdin = std::io::stdin();
    let mut line = String::new();
    // Each reply's sampler gets its own seed, from the one given.
    let mut turn = 0u64;
    loop {
        print!("\n> ");
        std::io::stdout().flush()?;
        line.clear();
        if stdin.lock().read_line(&mut line)? == 0 {
            println!();
            return Ok(());
        }
        let user = line.trim_end_matches(['\n', '\r']);
        if user.trim().is_empty() {
            continue;
        }
        messages.push(Message::user(user));
        let prompt = render(tmpl, &tok, &messages, a.no_think.then_some(false))?;
        if prompt.tokens.len() + 1 >= ctx_size {
            eprintln!(
                "the conversation ({} tokens) no longer fits the context ({}); start again with a larger -c",
                prompt.tokens.len(),
                ctx_size
            );
            messages.pop();
            continue;
        }
        let mut sampler = sampler.clone();
        sampler.seed = sampler.seed.wrapping_add(turn);
        turn += 1;
        let req = Request {
            max_tokens: a.n_predict.min(ctx_size - prompt.tokens.len()),
            cache_points: prompt.history_end.into_iter().collect(),
            ..Request::new(prompt.tokens.clone(), sampler)
        };
        let mut split = ThinkSplitter::new(&prompt.text);
        let mut stdout = std::io::stdout().lock();
        let mut show = |pieces: Vec<Piece>| {
            for p in pieces {
                let _ = match p {
                    Piece::Thinking(t) => write!(stdout, "{dim}{t}{reset}"),
                    Piece::Answer(t) => write!(stdout, "{t}"),
                };
            }
            let _ = stdout.flush();
        };
        let f = drive::stream(&engine, req, &in_flight, |s| show(split.feed(s)))?;
        show(split.finish());
        drop(stdout);
        println!();
        if f.done.finish == FinishReason::Cancelled {
            eprintln!("[stopped]");
        }
        let mut reply = Message::assistant(split.answer.trim_start_matches('\n'));
        if !split.thinking.is_empty() {
            reply.reasoning_content = Some(split.thinking.trim().to_string());
        }
        messages.push(reply);
        if a.timings {
            drive::print_timings(&f.done);
        }
    }
}
