//! `rill`: run Qwen3.5 / Qwen3-Next hybrid models from the command line.

mod chat_prompt;
mod commands;
mod compute_args;
mod demo;
mod drive;
mod kv_args;
mod load;
mod mem_budget;
mod npy;
mod ppl;
mod rope_args;
mod spec_args;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "rill",
    version,
    about = "Inference engine for hybrid Gated-DeltaNet + attention models"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write the logits of every position of a token sequence as a .npy file.
    Logits(commands::logits::Args),
    /// Print a model file's architecture, hyperparameters and tensor summary.
    Inspect(commands::inspect::Args),
    /// Generate text from a prompt, streamed as it comes.
    Run(commands::run::Args),
    /// Chat with the model in the terminal.
    Chat(commands::chat::Args),
    /// Measure prompt processing and generation speed (like llama-bench).
    Bench(commands::bench::Args),
    /// Serve the model over an OpenAI-compatible HTTP API.
    Serve(Box<commands::serve::Args>),
    /// Perplexity of a text (llama-perplexity's method), or KL divergence
    /// against a saved base run.
    Perplexity(commands::perplexity::Args),
    /// Write a Hugging Face folder as a GGUF file (F32, F16, BF16 or quantized).
    Convert(commands::convert::Args),
    /// Print the token ids of a text.
    Tokenize(commands::tokenize::TokenizeArgs),
    /// Print the text of token ids.
    Detokenize(commands::tokenize::DetokenizeArgs),
    /// List the kernel classes (`--kernels`) and which this CPU runs.
    Kernels(commands::kernels::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse_from(kv_args::expand_short_flags(std::env::args()));
    let result = match cli.command {
        Command::Logits(a) => commands::logits::run(a),
        Command::Inspect(a) => commands::inspect::run(a),
        Command::Run(a) => commands::run::run(a),
        Command::Bench(a) => commands::bench::run(a),
        Command::Chat(a) => commands::chat::run(a),
        Command::Serve(a) => commands::serve::run(*a),
        Command::Perplexity(a) => commands::perplexity::run(a),
        Command::Convert(a) => commands::convert::run(a),
        Command::Tokenize(a) => commands::tokenize::run_tokenize(a),
        Command::Detokenize(a) => commands::tokenize::run_detokenize(a),
        Command::Kernels(a) => commands::kernels::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
