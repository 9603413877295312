//! `rill chat`: an interactive conversation in the terminal.
//!
//! The conversation is re-rendered with the chat template every turn; when
//! the new prompt extends what the sequence state already holds, only the
//! new tokens are prefilled (the state cannot be rewound, so otherwise it is
//! rebuilt). Ctrl-C stops a reply; Ctrl-C at the prompt or Ctrl-D leaves.

use super::run::{print_timings, SamplingArgs};
use super::tokenize::load_tokenizer;
use crate::chat_prompt::{load_template, render, Piece, ThinkSplitter};
use crate::load;
use anyhow::{Context, Result};
use rill_chat::Message;
use rill_engine::{generate, GenerateParams};
use rill_kernels::Precision;
use rill_kernels::Threads;
use rill_model::SequenceState;
use rill_sampler::Sampler;
use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[derive(clap::Args)]
pub struct Args {
    /// Model file (GGUF).
    #[arg(short, long)]
    model: PathBuf,
    /// System prompt.
    #[arg(long)]
    system: Option<String>,
    /// Answer without thinking first.
    #[arg(long)]
    no_think: bool,
    /// Most tokens per reply.
    #[arg(short = 'n', long, default_value_t = 2048)]
    n_predict: usize,
    /// Context size in tokens.
    #[arg(short = 'c', long, default_value_t = 8192)]
    ctx_size: usize,
    #[command(flatten)]
    sampling: SamplingArgs,
    /// Worker threads (0 = all cores).
    #[arg(short, long, default_value_t = 0)]
    threads: usize,
    /// Matrix-product numerics: `exact` (f32 activations, the reference
    /// results) or `q8` (8-bit activations as llama.cpp uses: faster,
    /// results within the activations' rounding).
    #[arg(long, default_value = "exact")]
    precision: Precision,
    /// Print speed figures after each reply.
    #[arg(long)]
    timings: bool,
}

/// Tokens of `new` after the common prefix with `old`, if `old` is a prefix.
fn extension<'a>(old: &[u32], new: &'a [u32]) -> Option<&'a [u32]> {
    new.strip_prefix(old)
}

pub fn run(a: Args) -> Result<()> {
    let model = load::open_model(&a.model, a.precision)?;
    let tok = load_tokenizer(&a.model)?;
    let tmpl = load_template(model.file(), &tok)?;
    let threads = Threads::new(a.threads);
    let mut sampler = Sampler::new(a.sampling.config()).context("bad sampling parameters")?;

    let cancel = Arc::new(AtomicBool::new(false));
    let generating = Arc::new(AtomicBool::new(false));
    {
        let (cancel, generating) = (cancel.clone(), generating.clone());
        ctrlc::set_handler(move || {
            if generating.load(Ordering::Relaxed) {
                cancel.store(true, Ordering::Relaxed);
            } else {
                eprintln!();
                std::process::exit(0);
            }
        })
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
    let mut state = SequenceState::new(&model, a.ctx_size);
    let mut in_state: Vec<u32> = Vec::new();
    eprintln!(
        "rill chat — {} ({}). Ctrl-C stops a reply, Ctrl-D or Ctrl-C at the prompt leaves.",
        a.model.display(),
        model.config.arch.name()
    );

    let stdin = std::io::stdin();
    let mut line = String::new();
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
        let prompt_text = render(&tmpl, &messages, a.no_think.then_some(false))?;
        let prompt = tok.encode(&prompt_text, true);
        if prompt.len() + 1 >= a.ctx_size {
            eprintln!("the conversation ({} tokens) no longer fits the context ({}); start again with a larger -c", prompt.len(), a.ctx_size);
            messages.pop();
            continue;
        }
        let feed: Vec<u32> = match extension(&in_state, &prompt) {
            Some(rest) if !rest.is_empty() => rest.to_vec(),
            _ => {
                state = SequenceState::new(&model, a.ctx_size);
                prompt.clone()
            }
        };
        let params = GenerateParams {
            max_tokens: a.n_predict.min(a.ctx_size - prompt.len()),
            ..GenerateParams::default()
        };
        let mut split = ThinkSplitter::new(&prompt_text);
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
        cancel.store(false, Ordering::Relaxed);
        generating.store(true, Ordering::Relaxed);
        let result = generate(
            &model,
            &tok,
            &threads,
            &mut state,
            &feed,
            &params,
            &mut sampler,
            &cancel,
            |s| show(split.feed(s)),
        );
        generating.store(false, Ordering::Relaxed);
        let g = result?;
        show(split.finish());
        println!();
        if g.finish == rill_engine::FinishReason::Cancelled {
            eprintln!("[stopped]");
        }
        in_state = prompt;
        in_state.extend_from_slice(&g.tokens[..g.in_state]);
        let mut reply = Message::assistant(split.answer.trim_start_matches('\n'));
        if !split.thinking.is_empty() {
            reply.reasoning_content = Some(split.thinking.trim().to_string());
        }
        messages.push(reply);
        if a.timings {
            print_timings(&g.timings);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn extension_requires_a_prefix() {
        assert_eq!(super::extension(&[1, 2], &[1, 2, 3]), Some(&[3u32][..]));
        assert_eq!(super::extension(&[1, 9], &[1, 2, 3]), None);
        assert_eq!(super::extension(&[], &[5]), Some(&[5u32][..]));
    }
}
