//! `rill serve`: the OpenAI-compatible HTTP server.
//!
//! Loads the model, starts the engine, and serves `/v1/chat/completions`,
//! `/v1/completions`, `/v1/messages`, `/v1/models`, the utility endpoints,
//! `/health`, `/metrics` and the chat page at `/` until Ctrl-C or SIGTERM;
//! then it stops accepting connections, finishes the requests in flight, and
//! stops the engine. A second Ctrl-C exits at once.

use super::tokenize::load_tokenizer;
use crate::load;
use anyhow::{Context, Result};
use rill_engine::{Engine, EngineConfig};
use rill_kernels::Precision;
use rill_server::{template_from_gguf, AppState, ServerConfig};
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(clap::Args)]
pub struct Args {
    /// Model file (GGUF).
    #[arg(short, long)]
    model: PathBuf,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on (0 = any free port).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Sequences generated together.
    #[arg(long, default_value_t = 4)]
    parallel: usize,
    /// Positions per sequence (prompt + generated tokens).
    #[arg(short = 'c', long, default_value_t = 8192)]
    ctx_size: usize,
    /// Require `Authorization: Bearer KEY` on /v1/*.
    #[arg(long)]
    api_key: Option<String>,
    /// Prompt-cache budget in MiB (0 = off).
    #[arg(long, default_value_t = 2048)]
    cache_ram: usize,
    /// Requests that may wait for a slot before new ones get 429.
    #[arg(long, default_value_t = 64)]
    queue: usize,
    /// Prompt tokens per sequence per engine step.
    #[arg(long, default_value_t = 256)]
    prefill_chunk: usize,
    /// Worker threads for the model (0 = all cores).
    #[arg(short, long, default_value_t = 0)]
    threads: usize,
    /// Matrix-product numerics: `exact` (f32 activations, the reference
    /// results) or `q8` (8-bit activations as llama.cpp uses: faster,
    /// results within the activations' rounding).
    #[arg(long, default_value = "exact")]
    precision: Precision,
    /// Name of the model in the API (default: the file name without
    /// extension); repeat to accept several names.
    #[arg(long)]
    alias: Vec<String>,
    /// Do not serve the chat page at `/`.
    #[arg(long)]
    no_webui: bool,
    /// Origins allowed to call the API from a browser (CORS): `*`, or a
    /// comma-separated list such as `http://localhost:3000`. Default: none.
    #[arg(long, default_value = "")]
    cors_origins: String,
}

/// The model's API id: the file name without `.gguf` and split suffix.
fn model_id(path: &Path) -> String {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into());
    // name-00001-of-00003 → name
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

pub fn run(a: Args) -> Result<()> {
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_writer(rill_server::logging::LogSink::stderr())
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    anyhow::ensure!(a.parallel >= 1, "--parallel must be at least 1");
    anyhow::ensure!(a.ctx_size >= 2, "--ctx-size must be at least 2");
    let cors_origins =
        rill_server::wire::CorsOrigins::parse(&a.cors_origins).map_err(anyhow::Error::msg)?;
    let model = Arc::new(load::open_model(&a.model, a.precision)?);
    let tok = Arc::new(load_tokenizer(&a.model)?);
    let template = match template_from_gguf(model.file(), &tok) {
        Ok(Some(t)) => Some(t),
        Ok(None) => {
            tracing::warn!("the model has no chat template: /v1/chat/completions is off");
            None
        }
        Err(e) => {
            tracing::warn!(
                "the model's chat template does not compile ({e}): /v1/chat/completions is off"
            );
            None
        }
    };
    let template_text = rill_server::template_source(model.file());
    let prefill_chunk = a.prefill_chunk.max(1);
    let engine_config = EngineConfig {
        max_parallel: a.parallel,
        max_queue: a.queue,
        ctx_size: a.ctx_size,
        prefill_chunk,
        cache_bytes: a.cache_ram << 20,
        cache_interval: prefill_chunk * 4,
        threads: a.threads,
    };
    let engine = Arc::new(Engine::start(model, tok.clone(), engine_config));
    let mut aliases = a.alias.clone();
    let file_id = model_id(&a.model);
    let id = if aliases.is_empty() {
        file_id.clone()
    } else {
        aliases.remove(0)
    };
    if id != file_id {
        aliases.push(file_id);
    }
    let config = ServerConfig {
        model_id: id.clone(),
        aliases,
        api_key: a.api_key.clone().filter(|k| !k.is_empty()),
        webui: !a.no_webui,
        cors_origins,
        model_path: Some(a.model.display().to_string()),
        chat_template: template_text,
        ..ServerConfig::new(id.clone())
    };
    let state = AppState::new(engine, tok, template, config);

    let io_threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .clamp(1, 4);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(io_threads)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(async move {
        let addr = format!("{}:{}", a.host, a.port);
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"))?;
        let local = listener.local_addr()?;
        tracing::info!(
            "serving {id} on http://{local} (parallel {}, context {})",
            a.parallel,
            a.ctx_size
        );
        for line in rill_server::urls::describe(local, !a.no_webui) {
            tracing::info!("{line}");
        }
        let shutdown = async {
            rill_server::shutdown_signal().await;
            // A second signal exits at once.
            tokio::spawn(async {
                rill_server::shutdown_signal().await;
                eprintln!("second signal: exiting now");
                std::process::exit(130);
            });
        };
        rill_server::serve(listener, state, shutdown)
            .await
            .context("the server failed")
    })
}

#[cfg(test)]
mod tests {
    use super::model_id;
    use std::path::Path;

    #[test]
    fn model_ids() {
        assert_eq!(
            model_id(Path::new("/m/Qwen3.5-35B-A3B-Q4_K_M.gguf")),
            "Qwen3.5-35B-A3B-Q4_K_M"
        );
        assert_eq!(model_id(Path::new("big-00001-of-00003.gguf")), "big");
        assert_eq!(model_id(Path::new("x.gguf")), "x");
    }
}
