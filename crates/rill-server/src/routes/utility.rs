//! llama-server's utility endpoints: `POST /tokenize`, `POST /detokenize`,
//! `POST /apply-template`, `GET /props`, `GET /slots` (with vLLM's names
//! accepted and returned beside llama-server's where they differ), and
//! vLLM's renderer endpoints (`POST /v1/chat/completions/render`,
//! `POST /v1/completions/render`).

use crate::errors::{parse_json, ApiError};
use crate::openai::types::{ChatCompletionRequest, CompletionRequest};
use crate::routes::chat::prepare;
use crate::routes::completions::prompt_list;
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::Json;
use rill_chat::{ChatRequest, Message};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

#[derive(Debug, Deserialize)]
struct TokenizeRequest {
    /// llama-server's name for the text.
    #[serde(default)]
    content: Option<String>,
    /// vLLM's.
    #[serde(default)]
    prompt: Option<String>,
    /// llama-server: add BOS (when the model wants one); default false.
    #[serde(default)]
    add_special: Option<bool>,
    /// vLLM's name for it.
    #[serde(default)]
    add_special_tokens: Option<bool>,
    /// Read special-token text (`<|im_start|>`) as those tokens; default true.
    #[serde(default)]
    parse_special: Option<bool>,
    /// Return `[{id, piece}]` instead of ids.
    #[serde(default)]
    with_pieces: Option<bool>,
}

/// A token's text: a string when its bytes are UTF-8, else the bytes
/// (llama-server does the same).
fn piece(state: &AppState, id: u32) -> Value {
    match state.tok.token_to_piece(id) {
        Ok(bytes) => match std::str::from_utf8(bytes) {
            Ok(s) => json!(s),
            Err(_) => json!(bytes),
        },
        Err(_) => Value::Null,
    }
}

/// `POST /tokenize`: `{content}` (or vLLM's `{prompt}`; or `{messages, …}`
/// rendered with the chat template, as vLLM accepts) →
/// `{tokens, count, max_model_len}`.
pub async fn tokenize(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let body = body?;
    let raw: Value = parse_json(&body)?;
    let with_pieces = raw.get("with_pieces").and_then(Value::as_bool) == Some(true);
    let ids = if raw.get("messages").is_some() {
        let req: ChatCompletionRequest = parse_json(&body)?;
        prepare(&state, req).await?.request.prompt
    } else {
        let req: TokenizeRequest = parse_json(&body)?;
        let text = match (req.content, req.prompt) {
            (Some(t), _) | (None, Some(t)) => t,
            (None, None) => {
                return Err(ApiError::bad_param(
                    "content",
                    "give the text as `content` (or `prompt`), or a chat as `messages`",
                ))
            }
        };
        let add_special = req.add_special.or(req.add_special_tokens).unwrap_or(false);
        let parse_special = req.parse_special.unwrap_or(true);
        let _ = req.with_pieces;
        let st = state.clone();
        tokio::task::spawn_blocking(move || {
            let mut ids = Vec::new();
            if add_special && st.tok.add_bos_token() {
                ids.extend(st.tok.bos_id());
            }
            ids.extend(st.tok.encode(&text, parse_special));
            ids
        })
        .await
        .map_err(|e| ApiError::internal(format!("tokenization failed: {e}")))?
    };
    let tokens: Value = if with_pieces {
        ids.iter()
            .map(|&id| json!({"id": id, "piece": piece(&state, id)}))
            .collect()
    } else {
        json!(ids)
    };
    Ok(Json(json!({
        "tokens": tokens,
        "count": ids.len(),
        "max_model_len": state.ctx_size(),
    })))
}

#[derive(Debug, Deserialize)]
struct DetokenizeRequest {
    tokens: Vec<i64>,
}

/// `POST /detokenize`: `{tokens}` → `{content}` (and vLLM's `prompt`, the same text).
pub async fn detokenize(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let req: DetokenizeRequest = parse_json(&body?)?;
    let vocab = state.tok.vocab_size();
    let mut ids = Vec::with_capacity(req.tokens.len());
    for (i, &t) in req.tokens.iter().enumerate() {
        match u32::try_from(t) {
            Ok(id) if (id as usize) < vocab => ids.push(id),
            _ => {
                return Err(ApiError::bad_param(
                    &format!("tokens[{i}]"),
                    format!("token id {t} is not in the vocabulary (0..{vocab})"),
                ))
            }
        }
    }
    let text = state
        .tok
        .decode(&ids)
        .map_err(|e| ApiError::invalid(e.to_string()).with_param("tokens"))?;
    Ok(Json(json!({"content": text, "prompt": text})))
}

/// `POST /apply-template`: a chat-completions body → `{prompt}`, the text the
/// model would be given (the same rendering as `/v1/chat/completions`).
pub async fn apply_template(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let req: ChatCompletionRequest = parse_json(&body?)?;
    let p = prepare(&state, req).await?;
    Ok(Json(json!({"prompt": p.prompt_text})))
}

/// `POST /v1/chat/completions/render` (vLLM's renderer API): a
/// chat-completions body → `{token_ids, prompt, model}`, the tokens the model
/// would be given, without generating (what a router's token producer asks
/// for exact prefix hashes).
pub async fn render_chat(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let req: ChatCompletionRequest = parse_json(&body?)?;
    let p = prepare(&state, req).await?;
    Ok(Json(json!({
        "token_ids": p.request.prompt,
        "prompt": p.prompt_text,
        "model": state.config.model_id,
    })))
}

/// `POST /v1/completions/render`: a completions body → `{token_ids, model}`
/// for its prompt (a list of those for a batch of prompts, one per prompt),
/// tokenized as `/v1/completions` tokenizes it.
pub async fn render_completion(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let req: CompletionRequest = parse_json(&body?)?;
    state.check_model(req.model.as_deref())?;
    let batch = req.prompt.is_batch();
    let mut out: Vec<Value> = prompt_list(&state, req.prompt)
        .await?
        .into_iter()
        .map(|ids| json!({"token_ids": ids, "model": state.config.model_id}))
        .collect();
    Ok(Json(match batch {
        true => Value::Array(out),
        false => out.remove(0),
    }))
}

/// The sampling the server uses for a parameter a request leaves out (its
/// defaults over `openai::params::build_request`'s), in llama-server's names.
fn default_params(state: &AppState) -> Value {
    let d = &state.config.sampling;
    json!({
        "n_predict": state.config.n_predict.map_or(-1, |n| n as i64),
        "temperature": d.temperature.unwrap_or(1.0),
        "top_k": d.top_k.unwrap_or(0),
        "top_p": d.top_p.unwrap_or(1.0),
        "min_p": d.min_p.unwrap_or(0.0),
        "presence_penalty": d.presence_penalty.unwrap_or(0.0),
        "frequency_penalty": d.frequency_penalty.unwrap_or(0.0),
        "repeat_penalty": d.repetition_penalty.unwrap_or(1.0),
        "samplers": rill_sampler::order_names(
            d.samplers.as_ref().and_then(|s| s.stages().ok()).as_deref()
        ),
        "stop": [],
        "ignore_eos": false,
        "n_ctx": state.ctx_size(),
        "stream": false,
    })
}

/// What the template does, found by rendering small probes (as llama.cpp's
/// template code does): whether a system message, tools, tool calls and two
/// parallel calls show up in the text.
fn template_caps(state: &AppState) -> Value {
    let Some(t) = &state.template else {
        return json!({});
    };
    let renders = |chat: &ChatRequest, needles: &[&str]| {
        t.render(chat)
            .map(|s| needles.iter().all(|n| s.contains(n)))
            .unwrap_or(false)
    };
    let user = || Message::user("probe question");
    let system = ChatRequest::new(vec![Message::system("rill_probe_system"), user()]);
    let mut tools = ChatRequest::new(vec![user()]);
    tools.tools = Some(vec![json!({"type": "function", "function": {
        "name": "rill_probe_tool", "description": "d",
        "parameters": {"type": "object", "properties": {}}}})]);
    let call = |name: &str| {
        json!({"id": format!("call_{name}"), "type": "function",
               "function": {"name": name, "arguments": {"a": 1}}})
    };
    let with_calls = |calls: Vec<Value>| {
        let mut a = Message::assistant("");
        a.tool_calls = Some(calls);
        let mut r = ChatRequest::new(vec![user(), a]);
        r.tools = tools.tools.clone();
        r
    };
    json!({
        "supports_system_role": renders(&system, &["rill_probe_system"]),
        "supports_tools": renders(&tools, &["rill_probe_tool"]),
        "supports_tool_calls": renders(&with_calls(vec![call("rill_probe_call")]), &["rill_probe_call"]),
        "supports_parallel_tool_calls": renders(
            &with_calls(vec![call("rill_probe_one"), call("rill_probe_two")]),
            &["rill_probe_one", "rill_probe_two"],
        ),
    })
}

/// `GET /props`: llama-server's server properties.
pub async fn props(State(state): State<Arc<AppState>>) -> Json<Value> {
    let running = state.engine.metrics().requests_running.load(Relaxed);
    let caps = template_caps(&state);
    let template = state.template.as_deref();
    Json(json!({
        "default_generation_settings": {
            "id": 0,
            "n_ctx": state.ctx_size(),
            "speculative": false,
            "is_processing": running > 0,
            "params": default_params(&state),
        },
        "total_slots": state.engine.config().max_parallel,
        "model_alias": state.config.model_id,
        "model_path": state.config.model_path,
        "modalities": {"vision": false, "audio": false},
        "chat_template": state.config.chat_template.clone().unwrap_or_default(),
        "chat_template_caps": caps,
        "bos_token": template.and_then(|t| t.bos_token()),
        "eos_token": template.and_then(|t| t.eos_token()),
        "build_info": format!("rill {}", env!("CARGO_PKG_VERSION")),
        "is_sleeping": false,
    }))
}

/// `GET /slots`: one entry per sequence the engine runs together. The engine
/// reports how many are busy, not which: the first `requests_running` slots
/// are shown as processing. `?fail_on_no_slot=1` answers 503 when all are.
pub async fn slots(
    State(state): State<Arc<AppState>>,
    q: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = q.map_err(|e| ApiError::invalid(format!("bad query string: {e}")))?;
    let total = state.engine.config().max_parallel;
    let running = (state.engine.metrics().requests_running.load(Relaxed) as usize).min(total);
    let fail = q
        .get("fail_on_no_slot")
        .is_some_and(|v| v == "1" || v == "true");
    if fail && running >= total {
        return Err(ApiError::unavailable("no slot available").with_code("no_slot_available"));
    }
    let params = default_params(&state);
    let slots: Vec<Value> = (0..total)
        .map(|i| {
            json!({
                "id": i,
                "n_ctx": state.ctx_size(),
                "speculative": false,
                "is_processing": i < running,
                "params": params,
            })
        })
        .collect();
    Ok(Json(Value::Array(slots)))
}
