//! `rill tokenize` / `rill detokenize`: the model's tokenizer on its own.

use super::logits::parse_tokens;
use crate::load;
use anyhow::{Context, Result};
use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct TokenizeArgs {
    /// Model (GGUF file or Hugging Face folder) whose tokenizer to use.
    /// Default: the demo model.
    #[arg(short, long)]
    model: Option<PathBuf>,
    /// Text to tokenize.
    #[arg(long, conflicts_with = "file")]
    text: Option<String>,
    /// File whose contents to tokenize (UTF-8).
    #[arg(long)]
    file: Option<PathBuf>,
    /// Print a JSON array.
    #[arg(long)]
    json: bool,
    /// Treat special-token text (e.g. `<|im_start|>`) as plain text.
    #[arg(long)]
    no_parse_special: bool,
}

#[derive(clap::Args)]
pub struct DetokenizeArgs {
    /// Model (GGUF file or Hugging Face folder) whose tokenizer to use.
    /// Default: the demo model.
    #[arg(short, long)]
    model: Option<PathBuf>,
    /// Comma-separated token ids.
    #[arg(long)]
    tokens: String,
}

pub fn run_tokenize(a: TokenizeArgs) -> Result<()> {
    let text = match (&a.text, &a.file) {
        (Some(t), _) => t.clone(),
        (None, Some(f)) => {
            std::fs::read_to_string(f).with_context(|| format!("cannot read {}", f.display()))?
        }
        (None, None) => anyhow::bail!("give --text TEXT or --file FILE"),
    };
    let tok = load::open_for_tokenizer(&a.model)?.tokenizer;
    let ids = tok.encode(&text, !a.no_parse_special);
    let mut out = std::io::stdout().lock();
    if a.json {
        writeln!(out, "{}", serde_json::to_string(&ids)?)?;
    } else {
        let s: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
        writeln!(out, "{}", s.join(" "))?;
    }
    Ok(())
}

pub fn run_detokenize(a: DetokenizeArgs) -> Result<()> {
    let ids = parse_tokens(&a.tokens)?;
    let tok = load::open_for_tokenizer(&a.model)?.tokenizer;
    let text = tok.decode(&ids)?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")?;
    Ok(())
}
