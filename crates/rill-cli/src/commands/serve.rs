//! `rill serve`: the OpenAI-compatible HTTP server.
//!
//! Loads the model, starts the engine, and serves `/v1/chat/completions`,
//! `/v1/completions`, `/v1/messages`, `/v1/models`, the utility endpoints,
//! `/health`, `/metrics` and the chat page at `/` until Ctrl-C or SIGTERM;
//! then it stops accepting connections, finishes the requests in flight, and
//! stops the engine. A second Ctrl-C exits at once.

use crate::load;
use anyhow::{Context, Result};
use rill_engine::{Engine, EngineConfig};
use rill_kernels::Precision;
use rill_load::Prefault;
use rill_sampler::SamplingPrefs;
use rill_server::{AppState, ServerConfig};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(clap::Args)]
pub struct Args {
    /// Model: a GGUF file (any file of a split set) or a Hugging Face
    /// folder (config.json + safetensors). Default: the demo model
    /// inside the binary.
    #[arg(short, long, env = "RILL_MODEL")]
    model: Option<PathBuf>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1", env = "RILL_HOST")]
    host: String,
    /// Port to listen on (0 = any free port).
    #[arg(long, default_value_t = 8080, env = "RILL_PORT")]
    port: u16,
    /// Sequences generated together.
    #[arg(long, default_value_t = 4, env = "RILL_PARALLEL")]
    parallel: usize,
    /// Positions per sequence (prompt + generated tokens; 0 = the model's
    /// trained context).
    #[arg(short = 'c', long, default_value_t = 8192, env = "RILL_CTX_SIZE")]
    ctx_size: usize,
    /// Require `Authorization: Bearer KEY` on /v1/*.
    #[arg(long, env = "RILL_API_KEY")]
    api_key: Option<String>,
    /// Prompt-cache budget in MiB (0 = off), within --mem-budget.
    #[arg(long, default_value_t = 2048, env = "RILL_CACHE_RAM")]
    cache_ram: usize,
    /// One memory budget in MiB for sequence states (KV + GDN, MTP caches)
    /// and the prompt cache: requests are admitted against it (0 = none).
    /// Default: the available memory minus the weights.
    #[arg(long, env = "RILL_MEM_BUDGET")]
    mem_budget: Option<usize>,
    /// Keep the prompt cache in this folder too: entries written as memory
    /// evicts them and at shutdown, read when memory misses and after a
    /// restart (files of another model, or damaged, are
    /// ignored with a warning).
    #[arg(long, env = "RILL_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
    /// Most MiB the --cache-dir files take (the oldest go first).
    #[arg(long, default_value_t = 4096, env = "RILL_CACHE_DIR_SIZE")]
    cache_dir_size: u64,
    /// Requests that may wait for a slot before new ones get 429.
    #[arg(long, default_value_t = 64, env = "RILL_QUEUE")]
    queue: usize,
    /// Prompt tokens per sequence per engine step (at most --step-tokens).
    #[arg(long, default_value_t = 256, env = "RILL_PREFILL_CHUNK")]
    prefill_chunk: usize,
    /// Most rows one engine step runs, all sequences together (llama.cpp's
    /// `--ubatch-size`, vLLM's `--max-num-batched-tokens`): bounds the
    /// step's working memory under concurrent prefills. Decode rows always
    /// run; prompt chunks beyond it wait for the next step, oldest first.
    #[arg(
        long,
        default_value_t = 512,
        env = "RILL_STEP_TOKENS",
        visible_alias = "ubatch-size",
        visible_alias = "max-num-batched-tokens"
    )]
    step_tokens: usize,
    /// Worker threads for the model (0 = all cores).
    #[arg(short, long, default_value_t = 0, env = "RILL_THREADS")]
    threads: usize,
    /// Matrix-product numerics: `q8` (8-bit activations, llama.cpp's own
    /// numerics, integer kernels: fast) or `exact` (f32 activations, the
    /// reference results). Default: q8 where this CPU has the integer
    /// kernels (AVX2 on x86-64, the dot-product extension on aarch64), else
    /// exact.
    #[arg(long, env = "RILL_PRECISION")]
    precision: Option<Precision>,
    /// Kernel class: avx2, avx-vnni, avx512, amx (x86-64), neon (aarch64)
    /// or scalar (the portable reference). Default: the fastest this CPU
    /// runs; a class it lacks is refused.
    #[arg(long, env = "RILL_KERNELS", value_parser = crate::load::parse_kernels)]
    kernels: Option<rill_kernels::Isa>,
    /// Keep every weight matrix in the file's layout: none is rewritten at
    /// load for the kernels (llama-server's `--no-repack`).
    #[arg(long = "no-repack", env = "RILL_NO_REPACK")]
    no_repack: bool,
    #[command(flatten)]
    kv: crate::kv_args::KvArgs,
    /// Name of the model in the API (default: the file name without
    /// extension); repeat to accept several names.
    #[arg(short = 'a', long, env = "RILL_ALIAS")]
    alias: Vec<String>,
    /// Do not serve the chat page at `/`.
    #[arg(long, env = "RILL_NO_WEBUI")]
    no_webui: bool,
    /// Origins allowed to call the API from a browser (CORS): `*`, or a
    /// comma-separated list such as `http://localhost:3000`. Default: none.
    #[arg(long, default_value = "", env = "RILL_CORS_ORIGINS")]
    cors_origins: String,
    /// Temperature for requests that give none. A request's own value wins,
    /// then this flag, then the model file's recommendation
    /// (`general.sampling.*`), then OpenAI's default (1).
    #[arg(long, env = "RILL_TEMP")]
    temp: Option<f64>,
    /// Top-k for requests that give none (same priority as --temp).
    #[arg(long, env = "RILL_TOP_K")]
    top_k: Option<i64>,
    /// Top-p for requests that give none.
    #[arg(long, env = "RILL_TOP_P")]
    top_p: Option<f64>,
    /// Min-p for requests that give none.
    #[arg(long, env = "RILL_MIN_P")]
    min_p: Option<f64>,
    /// Presence penalty for requests that give none.
    #[arg(long, env = "RILL_PRESENCE_PENALTY")]
    presence_penalty: Option<f64>,
    /// Frequency penalty for requests that give none.
    #[arg(long, env = "RILL_FREQUENCY_PENALTY")]
    frequency_penalty: Option<f64>,
    /// Repetition penalty for requests that give none.
    #[arg(long, env = "RILL_REPEAT_PENALTY")]
    repeat_penalty: Option<f64>,
    /// Top-n-σ for requests that give none (0 = off).
    #[arg(long = "top-nsigma", env = "RILL_TOP_NSIGMA")]
    top_n_sigma: Option<f64>,
    /// Typical-p for requests that give none (1 = off).
    #[arg(long = "typical", env = "RILL_TYPICAL")]
    typical_p: Option<f64>,
    /// XTC probability for requests that give none (0 = off).
    #[arg(long, env = "RILL_XTC_PROBABILITY")]
    xtc_probability: Option<f64>,
    /// XTC threshold for requests that give none.
    #[arg(long, env = "RILL_XTC_THRESHOLD")]
    xtc_threshold: Option<f64>,
    /// The penalties' window, dynamic temperature, DRY and Mirostat for
    /// requests that give none.
    #[command(flatten)]
    extra: super::run::ExtraSamplerArgs,
    /// A chat template (Jinja) to use instead of the model file's.
    #[arg(long, env = "RILL_CHAT_TEMPLATE_FILE")]
    chat_template_file: Option<PathBuf>,
    /// Chat-template kwargs for every chat request, as a JSON object (a
    /// request's own kwargs win), e.g. '{"preserve_thinking": true}'.
    #[arg(long, env = "RILL_CHAT_TEMPLATE_KWARGS")]
    chat_template_kwargs: Option<String>,
    /// Most tokens a thinking block may take before the server closes it
    /// (writes `</think>`) and the model answers: -1 no limit, 0 at once.
    /// A request's `thinking_budget_tokens` (Anthropic's
    /// `thinking.budget_tokens`) wins.
    #[arg(long, default_value_t = -1, allow_negative_numbers = true,
          value_parser = clap::value_parser!(i64).range(-1..), env = "RILL_REASONING_BUDGET")]
    reasoning_budget: i64,
    /// Text written before `</think>` when the budget closes a thinking
    /// block, e.g. "Time is up, I answer now."
    #[arg(long, env = "RILL_REASONING_BUDGET_MESSAGE")]
    reasoning_budget_message: Option<String>,
    /// Where chat replies put the model's thinking: `auto` / `deepseek` in
    /// `reasoning_content`, `deepseek-legacy` there and in the content with
    /// its tags, `none` left in the content as written. A request's
    /// `reasoning_format` wins.
    #[arg(long, default_value = "auto", env = "RILL_REASONING_FORMAT",
          value_parser = ["auto", "deepseek", "deepseek-legacy", "none"])]
    reasoning_format: String,
    /// Most tokens a request that names no `max_tokens` generates: -1 up
    /// to the context (llama-server's `-n`). With a memory budget, such a
    /// request reserves its prompt and these tokens, not the whole context.
    #[arg(short = 'n', long, default_value_t = -1, allow_negative_numbers = true,
          value_parser = clap::value_parser!(i64).range(-1..), env = "RILL_N_PREDICT")]
    n_predict: i64,
    #[command(flatten)]
    spec: crate::spec_args::SpecArgs,
    #[command(flatten)]
    llama: crate::llama_args::LlamaServerArgs,
}

/// The model's API id: the file name without `.gguf` and split suffix.
pub fn run(a: Args) -> Result<()> {
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_writer(rill_server::logging::LogSink::stderr())
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    anyhow::ensure!(a.parallel >= 1, "--parallel must be at least 1");
    for line in a.llama.ignored() {
        eprintln!("rill: {line}");
    }
    let cors_origins =
        rill_server::wire::CorsOrigins::parse(&a.cors_origins).map_err(anyhow::Error::msg)?;
    let (loaded, kernels, precision, kv) = crate::compute_args::open(
        &a.model,
        Some(&a.spec),
        a.kernels,
        a.precision,
        !a.no_repack,
        &a.kv,
        Prefault::Background,
    )?;
    let ctx_size = load::context(a.ctx_size, &loaded.model)?;
    anyhow::ensure!(ctx_size >= 2, "--ctx-size must be at least 2");
    if loaded.template.is_none() {
        match &loaded.info.template_problem {
            Some(p) => tracing::warn!("{p}: /v1/chat/completions is off"),
            None => tracing::warn!("the model has no chat template: /v1/chat/completions is off"),
        }
    }
    let mut template_text = loaded.info.chat_template.clone();
    let mut template = loaded.template;
    if let Some(path) = &a.chat_template_file {
        let source = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the chat template {}", path.display()))?;
        let tok = &loaded.tokenizer;
        let text = |id: Option<u32>| id.and_then(|i| tok.token_text(i)).map(str::to_string);
        template = Some(
            rill_chat::ChatTemplate::new(&source, text(tok.bos_id()), text(tok.eos_id()))
                .with_context(|| {
                    format!("the chat template {} does not compile", path.display())
                })?,
        );
        template_text = Some(source);
    }
    let chat_template_kwargs = match &a.chat_template_kwargs {
        None => Default::default(),
        Some(j) => match serde_json::from_str::<serde_json::Value>(j) {
            Ok(serde_json::Value::Object(m)) => m,
            _ => anyhow::bail!("--chat-template-kwargs must be a JSON object, got {j}"),
        },
    };
    let from_flags = SamplingPrefs {
        temperature: a.temp,
        top_k: a.top_k,
        top_p: a.top_p,
        min_p: a.min_p,
        presence_penalty: a.presence_penalty,
        frequency_penalty: a.frequency_penalty,
        repetition_penalty: a.repeat_penalty,
        top_n_sigma: a.top_n_sigma,
        typical_p: a.typical_p,
        xtc_probability: a.xtc_probability,
        xtc_threshold: a.xtc_threshold,
        ..a.extra.prefs()
    };
    let sampling = from_flags.or(&loaded.info.sampling);
    // A bad flag fails at startup, not in every request.
    super::run::apply_extras(&sampling, &mut rill_sampler::SamplerConfig::default())?;
    let model_label = loaded.info.label.clone();
    let mem_budget = crate::mem_budget::resolve(a.mem_budget, loaded.info.weight_bytes());
    let (model, tok) = (Arc::new(loaded.model), Arc::new(loaded.tokenizer));
    let step_tokens = a.step_tokens.max(1);
    let prefill_chunk = a.prefill_chunk.clamp(1, step_tokens);
    let threads = match a.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let spec = a.spec.config()?;
    let engine_config = EngineConfig {
        max_parallel: a.parallel,
        max_queue: a.queue,
        ctx_size,
        prefill_chunk,
        step_tokens,
        cache_bytes: a.cache_ram << 20,
        mem_budget,
        cache_dir: a.cache_dir.clone(),
        cache_dir_bytes: a.cache_dir_size << 20,
        cache_interval: prefill_chunk * 4,
        threads: a.threads,
        kernels,
        precision,
        kv,
        spec,
    };
    let engine = Arc::new(Engine::start(model, tok.clone(), engine_config));
    let spec_line = engine.speculation();
    let mut aliases = a.alias.clone();
    let file_id = loaded.info.id.clone();
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
        model_path: Some(model_label),
        chat_template: template_text,
        sampling,
        chat_template_kwargs,
        reasoning_budget: usize::try_from(a.reasoning_budget).ok(),
        n_predict: usize::try_from(a.n_predict).ok(),
        reasoning_budget_message: a.reasoning_budget_message.clone(),
        reasoning_format: rill_chat::reply::ReasoningFormat::from_name(&a.reasoning_format)
            .unwrap_or_default(),
        ..ServerConfig::new(id.clone())
    };
    let sampling_line = config
        .sampling
        .describe()
        .unwrap_or_else(|| "none (OpenAI's: temperature 1, no top-k/top-p/min-p)".into());
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
            "serving {id} on http://{local} (slots {}, context {} per slot, {} threads, {} kernels on {}, precision {}{})",
            a.parallel,
            ctx_size,
            threads,
            kernels,
            rill_kernels::simd::cpu_name(),
            precision.name(),
            if precision == Precision::Q8 && rill_kernels::q8::has_integer_kernels(kernels) {
                ", integer kernels"
            } else {
                ""
            }
        );
        tracing::info!("default sampling: {}", sampling_line);
        if a.n_predict >= 0 {
            tracing::info!("default max_tokens: {} (--n-predict)", a.n_predict);
        }
        if a.reasoning_budget >= 0 {
            tracing::info!("reasoning budget: {} tokens", a.reasoning_budget);
        }
        tracing::info!("speculative decoding: {spec_line}");
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
