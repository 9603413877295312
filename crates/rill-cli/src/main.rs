//! `rill`: run Qwen3.5 / Qwen3-Next hybrid models from the command line.

mod chat_prompt;
mod commands;
mod compute_args;
mod demo;
mod drive;
mod kv_args;
mod llama_args;
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
    /// Re-encode a GGUF as one of llama-quantize's file types (q4_k_m, q6_k, …).
    Quantize(commands::quantize::Args),
    /// Print the token ids of a text.
    Tokenize(commands::tokenize::TokenizeArgs),
    /// Print the text of token ids.
    Detokenize(commands::tokenize::DetokenizeArgs),
    /// List the kernel classes (`--kernels`) and which this CPU runs.
    Kernels(commands::kernels::Args),
}

fn main() -> ExitCode {
    keep_step_buffers();
    let cli = Cli::parse_from(llama_args::expand_short_flags(std::env::args()));
    let result = match cli.command {
        Command::Logits(a) => commands::logits::run(a),
        Command::Inspect(a) => commands::inspect::run(a),
        Command::Run(a) => commands::run::run(a),
        Command::Bench(a) => commands::bench::run(a),
        Command::Chat(a) => commands::chat::run(a),
        Command::Serve(a) => commands::serve::run(*a),
        Command::Perplexity(a) => commands::perplexity::run(a),
        Command::Convert(a) => commands::convert::run(a),
        Command::Quantize(a) => commands::quantize::run(a),
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

/// Keep the large transient buffers of a forward step (a prefill's
/// activations, the experts' inputs and outputs: megabytes each) in malloc's
/// heap for the next step. With glibc's defaults, blocks above its (dynamic)
/// mmap threshold are mapped and unmapped around every step and their pages
/// faulted and zeroed again: the first prompts of a process ran up to ~10%
/// slower than later ones (Zen 1, 8-layer Q4_K_M, pp512 71.7 then 80-81
/// t/s). Blocks over 32 MiB (KV caches, weights copied at load) are still
/// mapped apart and given back when freed.
fn keep_step_buffers() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `mallopt` only sets allocator parameters, before any other
    // thread of this process runs.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
    }
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::parser::ValueSource;
    use clap::{ArgAction, CommandFactory};

    /// `--cache-type-k` → `RILL_CACHE_TYPE_K`.
    fn variable_of(long: &str) -> String {
        format!("RILL_{}", long.to_uppercase().replace('-', "_"))
    }

    fn serve() -> clap::Command {
        Cli::command()
            .find_subcommand("serve")
            .expect("a serve subcommand")
            .clone()
    }

    /// Containers configure `rill serve` from the environment only: every
    /// flag has its variable, named after the flag.
    #[test]
    fn every_serve_flag_has_its_rill_variable() {
        let mut seen = 0;
        for arg in serve().get_arguments() {
            if matches!(arg.get_action(), ArgAction::Help | ArgAction::Version) {
                continue;
            }
            let long = arg
                .get_long()
                .unwrap_or_else(|| panic!("{} has no long name", arg.get_id()));
            let env = arg.get_env().map(|e| e.to_string_lossy().into_owned());
            assert_eq!(env, Some(variable_of(long)), "--{long}");
            seen += 1;
        }
        assert!(seen > 30, "only {seen} serve flags");
    }

    /// A value that `--FLAG`'s parser takes.
    fn sample_value(arg: &clap::Arg) -> String {
        match arg.get_id().as_str() {
            "kernels" => return "scalar".into(),
            "precision" => return "q8".into(),
            "rope_scaling" => return "yarn".into(),
            "cache_type_k" | "cache_type_v" => return "q8_0".into(),
            "chat_template_kwargs" => return "{}".into(),
            _ => {}
        }
        if matches!(arg.get_action(), ArgAction::SetTrue) {
            return "true".into();
        }
        if let Some(v) = arg.get_possible_values().first() {
            return v.get_name().to_string();
        }
        match arg.get_default_values().first() {
            Some(v) if !v.is_empty() => v.to_string_lossy().into_owned(),
            _ => "1".into(),
        }
    }

    /// A llama-server command line runs as it is: its short flags, the
    /// flags that say what rill does anyway, and those that do not apply
    /// (named on stderr).
    #[test]
    fn a_llama_server_command_line_parses() {
        let line = "rill serve -m m.gguf -c 4096 -np 2 -ngl 99 --jinja -fa on -ub 256 -b 2048 \
                    -tb 4 --metrics -cb --host 0.0.0.0 --port 8081 -a my-model --no-mmap \
                    --mlock -ctk q8_0 --reasoning-format none --samplers top_k;temperature";
        let args = crate::llama_args::expand_short_flags(line.split_whitespace().map(String::from));
        let matches = Cli::command().try_get_matches_from(args).unwrap();
        let serve = matches.subcommand_matches("serve").unwrap();
        assert_eq!(serve.get_one::<usize>("parallel"), Some(&2));
        assert_eq!(serve.get_one::<usize>("step_tokens"), Some(&256));
        assert_eq!(serve.get_one::<usize>("ctx_size"), Some(&4096));
        let llama =
            <crate::llama_args::LlamaServerArgs as clap::FromArgMatches>::from_arg_matches(serve)
                .unwrap();
        let ignored = llama.ignored();
        assert_eq!(ignored.len(), 5, "{ignored:?}");
        assert!(ignored[0].starts_with("--n-gpu-layers"), "{ignored:?}");
    }

    /// And each variable is read: set alone, it gives its flag's value.
    /// (The only test here that touches the process environment.)
    #[test]
    fn every_serve_variable_sets_its_flag() {
        let command = serve();
        for arg in command.get_arguments() {
            let Some(env) = arg.get_env() else { continue };
            let value = sample_value(arg);
            std::env::set_var(env, &value);
            let parsed = Cli::command().try_get_matches_from(["rill", "serve"]);
            std::env::remove_var(env);
            let matches = parsed.unwrap_or_else(|e| panic!("{env:?}={value}: {e}"));
            let serve = matches.subcommand_matches("serve").expect("serve");
            assert_eq!(
                serve.value_source(arg.get_id().as_str()),
                Some(ValueSource::EnvVariable),
                "{env:?}={value} did not set --{}",
                arg.get_long().unwrap_or_default()
            );
        }
    }
}
