//! Starting a server on the fixture model, and small client helpers.

use rill_engine::{Engine, EngineConfig};
use rill_load::{LoadOptions, ModelSource};
use rill_model::Model;
use rill_server::{AppState, ServerConfig};
use rill_tokenizer::Tokenizer;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub const MODEL_ID: &str = "fixture";
pub const ALIAS: &str = "fixture-alias";

/// The trained demo model (its vocabulary has the thinking tags).
/// `base` (a JSON object) with `extra`'s fields set over it.
pub fn merged(mut base: Value, extra: Value) -> Value {
    if let (Some(b), Value::Object(e)) = (base.as_object_mut(), extra) {
        b.extend(e);
    }
    base
}

pub fn demo_model() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../assets/demo/rill-demo.gguf")
}

pub fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/models/qwen35moe.f32.gguf")
}

/// The model and tokenizer, loaded once per test binary.
pub fn loaded() -> (Arc<Model>, Arc<Tokenizer>) {
    static M: OnceLock<(Arc<Model>, Arc<Tokenizer>)> = OnceLock::new();
    M.get_or_init(|| {
        let l = rill_load::load(&ModelSource::File(fixture()), &LoadOptions::default())
            .expect("load fixture");
        (Arc::new(l.model), Arc::new(l.tokenizer))
    })
    .clone()
}

pub struct Opts {
    pub parallel: usize,
    pub queue: usize,
    pub ctx: usize,
    pub api_key: Option<String>,
    pub body_limit: usize,
    pub webui: bool,
    pub cors: rill_server::wire::CorsOrigins,
    pub sampling: rill_sampler::SamplingPrefs,
    pub chat_template_kwargs: serde_json::Map<String, Value>,
    /// The engine's memory budget in bytes (`None`: none).
    pub mem_budget: Option<usize>,
    /// `--reasoning-budget` (`None`: no limit).
    pub reasoning_budget: Option<usize>,
    /// `--n-predict`.
    pub n_predict: Option<usize>,
    /// Another model than the fixture (the trained demo model, say).
    pub model: Option<PathBuf>,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            parallel: 2,
            queue: 8,
            ctx: 4096,
            api_key: None,
            body_limit: rill_server::state::DEFAULT_BODY_LIMIT,
            webui: true,
            cors: rill_server::wire::CorsOrigins::None,
            sampling: Default::default(),
            chat_template_kwargs: Default::default(),
            mem_budget: None,
            reasoning_budget: None,
            n_predict: None,
            model: None,
        }
    }
}

impl Opts {
    /// The defaults with one sequence slot.
    pub fn one_slot() -> Opts {
        Opts {
            parallel: 1,
            ..Opts::default()
        }
    }

    /// The defaults, behind an API key.
    pub fn keyed(key: &str) -> Opts {
        Opts {
            api_key: Some(key.into()),
            ..Opts::default()
        }
    }
}

pub struct TestServer {
    pub base: String,
    pub state: Arc<AppState>,
    pub client: reqwest::Client,
    shutdown: Option<oneshot::Sender<()>>,
    join: Option<JoinHandle<std::io::Result<()>>>,
}

pub async fn start(o: Opts) -> TestServer {
    let path = o.model.clone().unwrap_or_else(fixture);
    let file = rill_load::load(&ModelSource::File(path), &LoadOptions::default()).expect("load");
    let template_text = file.info.chat_template.clone();
    let template = file.template.expect("the model has a template");
    let (model, tok) = match o.model {
        None => loaded(),
        Some(_) => (Arc::new(file.model), Arc::new(file.tokenizer)),
    };
    let engine = Arc::new(Engine::start(
        model,
        tok.clone(),
        EngineConfig {
            max_parallel: o.parallel,
            max_queue: o.queue,
            ctx_size: o.ctx,
            prefill_chunk: 64,
            cache_bytes: 16 << 20,
            cache_interval: 256,
            threads: 1,
            mem_budget: o.mem_budget,
            ..EngineConfig::default()
        },
    ));
    let config = ServerConfig {
        aliases: vec![ALIAS.to_string()],
        api_key: o.api_key,
        body_limit: o.body_limit,
        webui: o.webui,
        cors_origins: o.cors,
        chat_template: template_text,
        sampling: o.sampling,
        chat_template_kwargs: o.chat_template_kwargs,
        reasoning_budget: o.reasoning_budget,
        n_predict: o.n_predict,
        ..ServerConfig::new(MODEL_ID)
    };
    let state = AppState::new(engine, tok, Some(template), config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = oneshot::channel::<()>();
    let join = tokio::spawn(rill_server::serve(listener, state.clone(), async {
        let _ = rx.await;
    }));
    TestServer {
        base,
        state,
        client: reqwest::Client::new(),
        shutdown: Some(tx),
        join: Some(join),
    }
}

impl TestServer {
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let r = self.client.post(self.url(path)).json(body).send().await;
        json_reply(r.unwrap()).await
    }

    pub async fn post_raw(&self, path: &str, body: impl Into<reqwest::Body>) -> (u16, Value) {
        let r = self
            .client
            .post(self.url(path))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await;
        json_reply(r.unwrap()).await
    }

    /// POST `body`, asserting a 200, and hand back the response unread (a
    /// stream the test reads, or drops, itself).
    pub async fn open(&self, path: &str, body: &Value) -> reqwest::Response {
        let r = self.client.post(self.url(path)).json(body).send().await;
        let r = r.unwrap();
        assert_eq!(r.status().as_u16(), 200, "{path}");
        r
    }

    /// GET `path`'s body as text, whatever the status.
    pub async fn get_text(&self, path: &str) -> String {
        let r = self.client.get(self.url(path)).send().await.unwrap();
        r.text().await.unwrap()
    }

    /// A streamed response's `data:` payloads, in order.
    pub async fn stream(&self, path: &str, body: &Value) -> Vec<String> {
        let r = self.open(path, body).await;
        assert!(r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream"));
        sse_data(&r.text().await.unwrap())
    }

    pub async fn metric(&self, name: &str) -> f64 {
        let text = self.get_text("/metrics").await;
        metric_value(&text, name).unwrap_or_else(|| panic!("no metric {name}"))
    }

    /// Wait until `name` equals `want` (or panic after a while).
    pub async fn wait_metric(&self, name: &str, want: f64) {
        let t0 = Instant::now();
        loop {
            let v = self.metric(name).await;
            if v == want {
                return;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "{name} stayed at {v}, expected {want}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stop the server as a signal would, and wait for it (engine included).
    pub async fn stop(mut self) {
        self.begin_stop();
        self.join().await;
    }

    pub fn begin_stop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }

    pub async fn join(&mut self) {
        if let Some(j) = self.join.take() {
            tokio::time::timeout(Duration::from_secs(60), j)
                .await
                .expect("server stops")
                .unwrap()
                .unwrap();
        }
    }
}

/// The status and JSON body of a reply (a body that is not JSON fails the test).
pub async fn json_reply(r: reqwest::Response) -> (u16, Value) {
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    let v = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"));
    (status, v)
}

pub fn metric_value(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// The `data:` payloads of an SSE body.
pub fn sse_data(body: &str) -> Vec<String> {
    body.split("\n\n")
        .flat_map(|ev| ev.lines())
        .filter_map(|l| l.strip_prefix("data: ").or_else(|| l.strip_prefix("data:")))
        .map(str::to_string)
        .collect()
}

/// The JSON chunks of a stream that ended with `[DONE]`.
pub fn chunks(data: &[String]) -> Vec<Value> {
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"), "{data:?}");
    data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

/// The OpenAI error body of a failed request.
pub fn assert_error(status: u16, body: &Value, want_status: u16, param: Option<&str>) {
    assert_eq!(status, want_status, "{body}");
    let e = &body["error"];
    assert!(
        e["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    assert!(e["type"].is_string(), "{body}");
    if let Some(p) = param {
        assert_eq!(e["param"], p, "{body}");
    }
}

/// An OpenAI error body whose message says `text`.
pub fn assert_error_says(status: u16, body: &Value, want_status: u16, text: &str) {
    assert_error(status, body, want_status, None);
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains(text), "{body}");
}

/// A reply that is an OpenAI error with this status and `code`.
pub async fn assert_error_code(r: reqwest::Response, want_status: u16, code: &str) {
    let (status, body) = json_reply(r).await;
    assert_error(status, &body, want_status, None);
    assert_eq!(body["error"]["code"], code, "{body}");
}

/// The tool calls of a chat stream, joined as a client joins them: per
/// `index`, the first piece gives the id, type and name, and the
/// arguments are the pieces in order. Also how many pieces there were.
pub fn joined_tool_calls(chunks: &[Value]) -> (Vec<Value>, usize) {
    let mut calls: Vec<Value> = Vec::new();
    let mut pieces = 0;
    let deltas = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"].as_array())
        .flatten();
    for d in deltas {
        pieces += 1;
        let i = d["index"].as_u64().unwrap() as usize;
        if i == calls.len() {
            assert!(
                d["id"].is_string() && d["function"]["name"].is_string(),
                "{d}"
            );
            calls.push(d.clone());
        } else {
            let args = format!(
                "{}{}",
                calls[i]["function"]["arguments"].as_str().unwrap(),
                d["function"]["arguments"].as_str().unwrap()
            );
            calls[i]["function"]["arguments"] = Value::String(args);
        }
    }
    (calls, pieces)
}
