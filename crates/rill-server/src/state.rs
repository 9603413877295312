//! What every handler shares: the engine, the tokenizer, the chat template,
//! the served model's names and the server's own counters.

use crate::errors::ApiError;
use crate::fleet::FleetMetrics;
use crate::metrics::HttpMetrics;
use rill_chat::ChatTemplate;
use rill_engine::Engine;
use rill_tokenizer::Tokenizer;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// Default request body limit (16 MiB).
pub const DEFAULT_BODY_LIMIT: usize = 16 << 20;

/// How the HTTP side behaves.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// The id `/v1/models` reports.
    pub model_id: String,
    /// Other names accepted in a request's `model`.
    pub aliases: Vec<String>,
    /// Required as `Authorization: Bearer KEY` on `/v1/*` when set.
    pub api_key: Option<String>,
    pub body_limit: usize,
    /// Serve the chat page at `/` and `/index.html` (`rill serve --no-webui`
    /// turns it off; then `/` is a 404 like any unknown path).
    pub webui: bool,
    /// Origins that may call the API from a browser (`--cors-origins`).
    pub cors_origins: crate::wire::CorsOrigins,
    /// Reported by `/props`: the model file, and its chat template source.
    pub model_path: Option<String>,
    pub chat_template: Option<String>,
    /// Sampling for what a request leaves out (flags over the file's).
    pub sampling: rill_sampler::SamplingPrefs,
    /// Chat-template kwargs every chat request starts from (its own win),
    /// e.g. `{"preserve_thinking": true}` (`--chat-template-kwargs`).
    pub chat_template_kwargs: serde_json::Map<String, serde_json::Value>,
    /// Most tokens a thinking block may take before the server closes it
    /// (`--reasoning-budget`; `None`: no limit). A request's
    /// `thinking_budget_tokens` wins.
    pub reasoning_budget: Option<usize>,
    /// Most tokens a request that names no `max_tokens` generates
    /// (`--n-predict`, llama-server's `-n`; `None`: up to the context).
    pub n_predict: Option<usize>,
    /// Written before `</think>` when the server closes a block
    /// (`--reasoning-budget-message`).
    pub reasoning_budget_message: Option<String>,
    /// Where chat replies put the thinking (`--reasoning-format`); a
    /// request's `reasoning_format` wins.
    pub reasoning_format: rill_chat::reply::ReasoningFormat,
}

impl ServerConfig {
    pub fn new(model_id: impl Into<String>) -> ServerConfig {
        ServerConfig {
            model_id: model_id.into(),
            aliases: Vec::new(),
            api_key: None,
            body_limit: DEFAULT_BODY_LIMIT,
            webui: true,
            cors_origins: crate::wire::CorsOrigins::None,
            model_path: None,
            chat_template: None,
            sampling: Default::default(),
            chat_template_kwargs: Default::default(),
            reasoning_budget: None,
            n_predict: None,
            reasoning_budget_message: None,
            reasoning_format: Default::default(),
        }
    }
}

pub struct AppState {
    pub engine: Arc<Engine>,
    pub tok: Arc<Tokenizer>,
    /// `None` when the model file has none (chat completions are refused).
    pub template: Option<Arc<ChatTemplate>>,
    pub config: ServerConfig,
    pub http: HttpMetrics,
    /// The vLLM-named series (`/metrics`).
    pub fleet: FleetMetrics,
    /// Set once shutdown begins (`/health` then answers 503).
    pub shutting_down: AtomicBool,
}

impl AppState {
    pub fn new(
        engine: Arc<Engine>,
        tok: Arc<Tokenizer>,
        template: Option<ChatTemplate>,
        config: ServerConfig,
    ) -> Arc<AppState> {
        let ctx_size = engine.config().ctx_size;
        Arc::new(AppState {
            engine,
            tok,
            template: template.map(Arc::new),
            config,
            http: HttpMetrics::default(),
            fleet: FleetMetrics::new(ctx_size),
            shutting_down: AtomicBool::new(false),
        })
    }

    /// Count a finished request in the per-request series.
    pub fn observe_done(&self, done: &rill_engine::Done) {
        self.fleet.observe(done);
    }

    /// Positions per sequence.
    pub fn ctx_size(&self) -> usize {
        self.engine.config().ctx_size
    }

    /// A request's `model`, if given, must name the served model.
    pub fn check_model(&self, requested: Option<&str>) -> Result<(), ApiError> {
        match requested {
            None | Some("") => Ok(()),
            Some(m) if m == self.config.model_id || self.config.aliases.iter().any(|a| a == m) => {
                Ok(())
            }
            Some(m) => Err(ApiError::model_not_found(m)),
        }
    }

    /// Tokens of a prompt text, as every front end encodes prompts
    /// ([`Tokenizer::encode_prompt`]).
    pub fn encode_prompt(&self, text: &str) -> Vec<u32> {
        self.tok.encode_prompt(text)
    }
}
