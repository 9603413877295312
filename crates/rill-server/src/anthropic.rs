//! Anthropic's Messages API on top of the chat path: a `/v1/messages` body
//! becomes the chat-completions request `/v1/chat/completions` would get
//! (same template rendering, same engine submit), and failures become
//! Anthropic's error shape `{"type": "error", "error": {"type", "message"}}`.
//!
//! The handlers and the reply shapes are in `routes::messages`.

use crate::errors::{parse_json, ApiError};
use crate::openai::types::ChatCompletionRequest;
use crate::state::AppState;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Request, State};
use axum::http::header::{HeaderValue, AUTHORIZATION, RETRY_AFTER};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rill_engine::SubmitError;
use rill_sampler::SamplingPrefs;
use serde::Deserialize;
use serde_json::{json, Map, Value as Json};
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// An [`ApiError`] in Anthropic's shape.
#[derive(Debug)]
pub struct AnthropicError(pub ApiError);

impl AnthropicError {
    /// Anthropic's error `type` for a status.
    pub fn kind(&self) -> &'static str {
        match self.0.status.as_u16() {
            400 | 405 | 422 => "invalid_request_error",
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            413 => "request_too_large",
            429 => "rate_limit_error",
            503 => "overloaded_error",
            _ => "api_error",
        }
    }

    pub fn body(&self) -> Json {
        let mut error = json!({"type": self.kind(), "message": self.0.message});
        if let Some(p) = &self.0.param {
            error["param"] = json!(p);
        }
        json!({"type": "error", "error": error})
    }
}

impl IntoResponse for AnthropicError {
    fn into_response(self) -> Response {
        let mut resp = (self.0.status, axum::Json(self.body())).into_response();
        if let Some(s) = self.0.retry_after {
            resp.headers_mut().insert(RETRY_AFTER, HeaderValue::from(s));
        }
        resp
    }
}

impl From<ApiError> for AnthropicError {
    fn from(e: ApiError) -> Self {
        AnthropicError(e)
    }
}

impl From<BytesRejection> for AnthropicError {
    fn from(e: BytesRejection) -> Self {
        AnthropicError(e.into())
    }
}

impl From<SubmitError> for AnthropicError {
    fn from(e: SubmitError) -> Self {
        AnthropicError(e.into())
    }
}

/// With `--api-key`: `x-api-key: KEY` (Anthropic's header) or
/// `Authorization: Bearer KEY`.
pub async fn require_key(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    if let Some(key) = &state.config.api_key {
        let x = req
            .headers()
            .get("x-api-key")
            .map(|v| bool::from(v.as_bytes().trim_ascii().ct_eq(key.as_bytes())))
            .unwrap_or(false);
        let bearer =
            crate::auth::authorized(req.headers().get(AUTHORIZATION).map(|v| v.as_bytes()), key);
        if !(x || bearer) {
            let e = ApiError::unauthorized();
            return AnthropicError(ApiError {
                message: "invalid or missing API key (send `x-api-key: KEY`)".into(),
                ..e
            })
            .into_response();
        }
    }
    next.run(req).await
}

/// `system`: a string or text blocks.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum System {
    Text(String),
    Blocks(Vec<Json>),
}

/// A message's `content`: a string or blocks.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Blocks(Vec<Json>),
}

#[derive(Debug, Clone, Deserialize)]
pub struct InMessage {
    pub role: String,
    pub content: Content,
}

/// `POST /v1/messages` (and `/v1/messages/count_tokens`, which has no
/// `max_tokens`). Unknown keys (`metadata`, `service_tier`, …) are ignored.
#[derive(Debug, Clone, Deserialize)]
pub struct MessagesRequest {
    pub model: Option<String>,
    pub max_tokens: Option<i64>,
    pub messages: Vec<InMessage>,
    pub system: Option<System>,
    pub stop_sequences: Option<Vec<String>>,
    pub stream: Option<bool>,
    /// `temperature`, `top_p`, `top_k`; and as extensions shared with the
    /// OpenAI endpoints, `min_p` and the penalties.
    #[serde(flatten)]
    pub sampling: SamplingPrefs,
    pub tools: Option<Vec<Json>>,
    pub tool_choice: Option<Json>,
    pub thinking: Option<Json>,
    /// Extensions shared with the OpenAI endpoints.
    pub seed: Option<i64>,
    pub ignore_eos: Option<bool>,
}

impl MessagesRequest {
    pub fn parse(body: &[u8]) -> Result<MessagesRequest, ApiError> {
        parse_json(body)
    }
}

fn bad(param: &str, message: impl Into<String>) -> ApiError {
    ApiError::bad_param(param, message)
}

/// The text of text blocks (`system`, `tool_result` content).
fn text_blocks(blocks: &[Json], param: &str) -> Result<String, ApiError> {
    let mut out = Vec::new();
    for (i, b) in blocks.iter().enumerate() {
        match (
            b.get("type").and_then(Json::as_str),
            b.get("text").and_then(Json::as_str),
        ) {
            (Some("text"), Some(t)) => out.push(t),
            _ => {
                return Err(bad(
                    &format!("{param}[{i}]"),
                    "only text blocks ({\"type\": \"text\", \"text\": ...}) are supported here",
                ))
            }
        }
    }
    Ok(out.join("\n"))
}

/// Messages in the chat-completions shape, from one Anthropic message.
fn convert_message(i: usize, m: &InMessage, out: &mut Vec<Json>) -> Result<(), ApiError> {
    let role = m.role.as_str();
    if role != "user" && role != "assistant" {
        return Err(bad(
            &format!("messages[{i}].role"),
            format!("unknown role {role:?} (expected user or assistant; the system prompt goes in `system`)"),
        ));
    }
    let blocks = match &m.content {
        Content::Text(t) => {
            out.push(json!({"role": role, "content": t}));
            return Ok(());
        }
        Content::Blocks(b) => b,
    };
    let mut text = String::new();
    let mut reasoning = String::new();
    let mut calls = Vec::new();
    let flush_user = |text: &mut String, out: &mut Vec<Json>| {
        if !text.is_empty() {
            out.push(json!({"role": "user", "content": std::mem::take(text)}));
        }
    };
    for (j, b) in blocks.iter().enumerate() {
        let param = format!("messages[{i}].content[{j}]");
        let kind = b.get("type").and_then(Json::as_str).unwrap_or("");
        let str_field = |name: &str| -> Result<&str, ApiError> {
            b.get(name).and_then(Json::as_str).ok_or_else(|| {
                bad(
                    &format!("{param}.{name}"),
                    format!("a {kind} block needs a string `{name}`"),
                )
            })
        };
        match (role, kind) {
            (_, "text") => {
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push_str(str_field("text")?);
            }
            ("assistant", "thinking") => reasoning.push_str(str_field("thinking")?),
            ("assistant", "redacted_thinking") => {}
            ("assistant", "tool_use") => {
                let id = str_field("id")?;
                let name = str_field("name")?;
                let input = b.get("input").cloned().unwrap_or_else(|| json!({}));
                if !input.is_object() {
                    return Err(bad(
                        &format!("{param}.input"),
                        "a tool_use block's input must be an object",
                    ));
                }
                calls.push(json!({"id": id, "type": "function",
                                  "function": {"name": name, "arguments": input.to_string()}}));
            }
            ("user", "tool_result") => {
                // Text before a result stays before it.
                flush_user(&mut text, out);
                let id = str_field("tool_use_id")?;
                let content = match b.get("content") {
                    None | Some(Json::Null) => String::new(),
                    Some(Json::String(s)) => s.clone(),
                    Some(Json::Array(parts)) => text_blocks(parts, &format!("{param}.content"))?,
                    Some(_) => {
                        return Err(bad(
                            &format!("{param}.content"),
                            "a tool_result's content is a string or text blocks",
                        ))
                    }
                };
                let content = if b.get("is_error").and_then(Json::as_bool) == Some(true) {
                    format!("Error: {content}")
                } else {
                    content
                };
                out.push(json!({"role": "tool", "tool_call_id": id, "content": content}));
            }
            (_, "image" | "document") => {
                return Err(bad(
                    &format!("{param}.type"),
                    format!("{kind} blocks are not supported (text-only model)"),
                ))
            }
            _ => {
                return Err(bad(
                    &format!("{param}.type"),
                    format!("a {role} message cannot hold a {kind:?} block (user: text, tool_result; assistant: text, thinking, tool_use)"),
                ))
            }
        }
    }
    if role == "user" {
        flush_user(&mut text, out);
    } else {
        let mut a = Map::new();
        a.insert("role".into(), json!("assistant"));
        a.insert(
            "content".into(),
            if text.is_empty() && !calls.is_empty() {
                Json::Null
            } else {
                json!(text)
            },
        );
        if !reasoning.is_empty() {
            a.insert("reasoning_content".into(), json!(reasoning));
        }
        if !calls.is_empty() {
            a.insert("tool_calls".into(), json!(calls));
        }
        out.push(Json::Object(a));
    }
    Ok(())
}

/// Anthropic tools (`{name, description, input_schema}`) as functions.
fn convert_tools(tools: &[Json]) -> Result<Vec<Json>, ApiError> {
    let mut out = Vec::new();
    for (i, t) in tools.iter().enumerate() {
        let kind = t.get("type").and_then(Json::as_str);
        if !matches!(kind, None | Some("custom")) {
            return Err(bad(
                &format!("tools[{i}].type"),
                format!("server tools ({}) are not supported; give client tools as {{name, description, input_schema}}", kind.unwrap_or("")),
            ));
        }
        let name = t
            .get("name")
            .and_then(Json::as_str)
            .filter(|n| !n.is_empty());
        let Some(name) = name else {
            return Err(bad(&format!("tools[{i}].name"), "a tool needs a name"));
        };
        let schema = t.get("input_schema").cloned().unwrap_or(Json::Null);
        if !schema.is_object() {
            return Err(bad(
                &format!("tools[{i}].input_schema"),
                "a tool needs an input_schema object (JSON Schema)",
            ));
        }
        // In the order OpenAI clients write them (the template prints them).
        let mut f = Map::new();
        f.insert("name".into(), json!(name));
        if let Some(d) = t.get("description").and_then(Json::as_str) {
            f.insert("description".into(), json!(d));
        }
        f.insert("parameters".into(), schema);
        out.push(json!({"type": "function", "function": f}));
    }
    Ok(out)
}

/// The chat-completions request a Messages body stands for. `max_tokens` is
/// required unless `counting` (`count_tokens`).
pub fn to_chat(req: &MessagesRequest, counting: bool) -> Result<ChatCompletionRequest, ApiError> {
    let max_tokens = match req.max_tokens {
        Some(m) => m,
        None if counting => 1,
        None => return Err(bad("max_tokens", "max_tokens is required")),
    };
    if req.messages.is_empty() {
        return Err(bad("messages", "messages must not be empty"));
    }
    let mut messages = Vec::new();
    match &req.system {
        None => {}
        Some(System::Text(s)) if s.is_empty() => {}
        Some(System::Text(s)) => messages.push(json!({"role": "system", "content": s})),
        Some(System::Blocks(b)) => {
            let s = text_blocks(b, "system")?;
            if !s.is_empty() {
                messages.push(json!({"role": "system", "content": s}));
            }
        }
    }
    for (i, m) in req.messages.iter().enumerate() {
        convert_message(i, m, &mut messages)?;
    }
    // A final assistant message is a prefill: the reply continues it.
    let tools = match &req.tools {
        Some(t) if !t.is_empty() => Some(convert_tools(t)?),
        _ => None,
    };
    // `any` and `tool` force a call (constrained to the tool's schema in
    // the model's tool-call syntax); `disable_parallel_tool_use`: one call.
    let mut parallel = None;
    let tool_choice = match &req.tool_choice {
        None => None,
        Some(c) => {
            if c.get("disable_parallel_tool_use").and_then(Json::as_bool) == Some(true) {
                parallel = Some(false);
            }
            match c.get("type").and_then(Json::as_str) {
                Some("auto") => Some(json!("auto")),
                Some("any") => Some(json!("required")),
                Some("none") => Some(json!("none")),
                Some("tool") => {
                    let name = c.get("name").and_then(Json::as_str).unwrap_or("");
                    let found = tools
                        .as_ref()
                        .is_some_and(|ts| ts.iter().any(|t| t["function"]["name"] == name));
                    if !found {
                        return Err(bad(
                            "tool_choice.name",
                            format!("tool_choice names {name:?}, which is not among the tools"),
                        ));
                    }
                    Some(json!({"type": "function", "function": {"name": name}}))
                }
                _ => {
                    return Err(bad(
                        "tool_choice",
                        "tool_choice.type must be auto, any, tool or none",
                    ))
                }
            }
        }
    };
    let enable_thinking = match &req.thinking {
        None => None,
        Some(t) => match t.get("type").and_then(Json::as_str) {
            Some("enabled") => Some(true),
            Some("disabled") => Some(false),
            Some("adaptive") => None,
            _ => {
                return Err(bad(
                    "thinking.type",
                    "thinking.type must be enabled, disabled or adaptive",
                ))
            }
        },
    };
    let mut body = json!({
        "model": req.model,
        "messages": messages,
        "max_tokens": max_tokens,
        "stream": req.stream.unwrap_or(false),
    });
    let mut set = |k: &str, v: Json| {
        if !v.is_null() {
            body[k] = v;
        }
    };
    if let Ok(Json::Object(prefs)) = serde_json::to_value(&req.sampling) {
        for (k, v) in prefs {
            set(&k, v);
        }
    }
    set("seed", json!(req.seed));
    set("ignore_eos", json!(req.ignore_eos));
    set("stop", json!(req.stop_sequences));
    set("tools", json!(tools));
    set("tool_choice", json!(tool_choice));
    set("parallel_tool_calls", json!(parallel));
    set("enable_thinking", json!(enable_thinking));
    // `thinking.budget_tokens`: the thinking block is closed after that many.
    if enable_thinking == Some(true) {
        let budget = req.thinking.as_ref().and_then(|t| t.get("budget_tokens"));
        match budget {
            None | Some(Json::Null) => {}
            Some(b) if b.as_u64().is_some() => set("thinking_budget_tokens", b.clone()),
            Some(_) => {
                return Err(bad(
                    "thinking.budget_tokens",
                    "thinking.budget_tokens must be a whole number >= 0",
                ))
            }
        }
    }
    serde_json::from_value(body).map_err(|e| ApiError::invalid(format!("invalid request: {e}")))
}

/// The stop sequence a reply ended on: the one whose first occurrence in
/// the generated text ends first (the engine stops there).
pub fn matched_stop<'a>(generated: &str, stops: &'a [String]) -> Option<&'a str> {
    stops
        .iter()
        .filter(|s| !s.is_empty())
        .filter_map(|s| generated.find(s.as_str()).map(|at| (at + s.len(), s)))
        .min_by_key(|(end, _)| *end)
        .map(|(_, s)| s.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;

    fn req(v: Json) -> MessagesRequest {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn blocks_become_chat_messages() {
        let r = req(json!({
            "max_tokens": 10,
            "system": [{"type": "text", "text": "Be brief."}],
            "messages": [
                {"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "need a tool", "signature": "x"},
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "sunny"}]},
                    {"type": "text", "text": "Thanks"}
                ]}
            ],
            "tools": [{"name": "get_weather", "description": "d", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "any"},
            "stop_sequences": ["END"],
            "thinking": {"type": "disabled"},
            "temperature": 0.5
        }));
        let c = to_chat(&r, false).unwrap();
        let m = serde_json::to_value(&c.messages).unwrap();
        assert_eq!(m[0]["role"], "system");
        assert_eq!(m[0]["content"], "Be brief.");
        assert_eq!(m[2]["reasoning_content"], "need a tool");
        assert_eq!(m[2]["content"], "Checking.");
        assert_eq!(m[2]["tool_calls"][0]["function"]["name"], "get_weather");
        assert_eq!(
            m[2]["tool_calls"][0]["function"]["arguments"],
            "{\"city\":\"Paris\"}"
        );
        assert_eq!(m[3]["role"], "tool");
        assert_eq!(m[3]["tool_call_id"], "toolu_1");
        assert_eq!(m[3]["content"], "sunny");
        assert_eq!(m[4]["role"], "user");
        assert_eq!(m[4]["content"], "Thanks");
        assert_eq!(c.tool_choice, Some(json!("required")));
        assert_eq!(
            c.tools.unwrap()[0]["function"]["parameters"],
            json!({"type": "object"})
        );
        assert_eq!(c.enable_thinking, Some(false));
        assert_eq!(c.sampling.prefs.temperature, Some(0.5));
        assert_eq!(c.sampling.max_tokens, Some(10));
    }

    #[test]
    fn bad_requests_name_the_field() {
        let cases = [
            (
                json!({"messages": [{"role": "user", "content": "x"}]}),
                "max_tokens",
            ),
            (json!({"max_tokens": 1, "messages": []}), "messages"),
            (
                json!({"max_tokens": 1, "messages": [{"role": "system", "content": "x"}]}),
                "messages[0].role",
            ),
            (
                json!({"max_tokens": 1, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}),
                "messages[0].content[0].type",
            ),
            (
                json!({"max_tokens": 1, "messages": [{"role": "user", "content": [{"type": "tool_use", "id": "a", "name": "b", "input": {}}]}]}),
                "messages[0].content[0].type",
            ),
            (
                json!({"max_tokens": 1, "messages": [{"role": "user", "content": [{"type": "text"}]}]}),
                "messages[0].content[0].text",
            ),
            (
                json!({"max_tokens": 1, "messages": [{"role": "user", "content": "x"}], "tools": [{"name": "t"}]}),
                "tools[0].input_schema",
            ),
            (
                json!({"max_tokens": 1, "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "web_search_20250305", "name": "web_search"}]}),
                "tools[0].type",
            ),
            (
                json!({"max_tokens": 1, "messages": [{"role": "user", "content": "x"}], "tools": [{"name": "t", "input_schema": {}}], "tool_choice": {"type": "tool", "name": "u"}}),
                "tool_choice.name",
            ),
            (
                json!({"max_tokens": 1, "messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "maybe"}}),
                "tool_choice",
            ),
            (
                json!({"max_tokens": 1, "messages": [{"role": "user", "content": "x"}], "thinking": {"type": "on"}}),
                "thinking.type",
            ),
        ];
        for (body, param) in cases {
            let r = req(body.clone());
            let e = to_chat(&r, false).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{body}");
            assert_eq!(e.param.as_deref(), Some(param), "{body}: {}", e.message);
        }
        // count_tokens needs no max_tokens.
        let r = req(json!({"messages": [{"role": "user", "content": "x"}]}));
        assert!(to_chat(&r, true).is_ok());
    }

    #[test]
    fn any_and_tool_force_a_call() {
        let tools = json!([{"name": "a", "input_schema": {}}, {"name": "b", "input_schema": {}}]);
        let with = |choice: Json| {
            let r = req(
                json!({"max_tokens": 1, "messages": [{"role": "user", "content": "x"}],
                "tools": tools, "tool_choice": choice}),
            );
            to_chat(&r, false).unwrap()
        };
        let c = with(json!({"type": "tool", "name": "b"}));
        assert_eq!(c.tools.unwrap().len(), 2);
        assert_eq!(
            c.tool_choice,
            Some(json!({"type": "function", "function": {"name": "b"}}))
        );
        assert_eq!(c.parallel_tool_calls, None);
        let c = with(json!({"type": "any", "disable_parallel_tool_use": true}));
        assert_eq!(c.tool_choice, Some(json!("required")));
        assert_eq!(c.parallel_tool_calls, Some(false));
    }

    #[test]
    fn which_stop_sequence() {
        let stops = vec!["cd".to_string(), "b".to_string(), "zz".to_string()];
        assert_eq!(matched_stop("abcd", &stops), Some("b"));
        assert_eq!(matched_stop("xcdb", &stops), Some("cd"));
        assert_eq!(matched_stop("none", &stops), None);
    }

    #[test]
    fn error_shape() {
        let e = AnthropicError(ApiError::bad_param("max_tokens", "required"));
        assert_eq!(
            e.body(),
            json!({"type": "error", "error": {"type": "invalid_request_error", "message": "required", "param": "max_tokens"}})
        );
        let e = AnthropicError(ApiError::from(SubmitError::QueueFull(1)));
        assert_eq!(e.kind(), "rate_limit_error");
    }
}
