//! `POST /v1/responses` (OpenAI's Responses API, what Codex speaks). The
//! body is converted to a chat-completions request — instructions → system,
//! input items → messages, function tools → tools, `text.format` → the
//! structured-output constraint — and goes the same way as
//! `/v1/chat/completions` (`routes::chat::prepare`, the engine). The reply
//! comes back as output items: reasoning, a message, function calls.
//! Tool types other than `function` (web search, file search, …) are
//! skipped, not rejected, as Codex expects.

use crate::errors::{parse_json, ApiError};
use crate::openai::params::random_id;
use crate::openai::responses::now;
use crate::openai::types::ChatCompletionRequest;
use crate::routes::chat::prepare;
use crate::sse::{self, ChunkBuilder};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json as JsonBody;
use futures_util::StreamExt;
use rill_chat::reply::{argument_piece, close_arguments};
use rill_chat::reply::{Part, ToolCall};
use rill_engine::{Done, Event, FinishReason, TokenInfo};
use serde_json::{json, Map, Value as Json};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

fn bad(param: &str, message: impl Into<String>) -> ApiError {
    ApiError::bad_param(param, message)
}

/// The text of a message's content: a string, or its text parts.
fn content_text(c: &Json, param: &str) -> Result<String, ApiError> {
    match c {
        Json::String(s) => Ok(s.clone()),
        Json::Array(parts) => {
            let mut out = String::new();
            for p in parts {
                match p.get("type").and_then(Json::as_str) {
                    Some("input_text" | "output_text" | "text") => {
                        out.push_str(p.get("text").and_then(Json::as_str).unwrap_or(""))
                    }
                    Some(other) => {
                        return Err(bad(
                            param,
                            format!(
                                "content parts of type {other:?} are not supported (text only)"
                            ),
                        ))
                    }
                    None => return Err(bad(param, "a content part needs a \"type\"")),
                }
            }
            Ok(out)
        }
        _ => Err(bad(param, "content must be a string or a list of parts")),
    }
}

/// The chat-completions body of a Responses request.
pub fn to_chat(body: &Json) -> Result<Json, ApiError> {
    let o = body
        .as_object()
        .ok_or_else(|| ApiError::invalid("the body must be a JSON object"))?;
    let mut messages: Vec<Json> = Vec::new();
    if let Some(i) = o.get("instructions").and_then(Json::as_str) {
        if !i.is_empty() {
            messages.push(json!({"role": "system", "content": i}));
        }
    }
    match o.get("input") {
        Some(Json::String(s)) => messages.push(json!({"role": "user", "content": s})),
        Some(Json::Array(items)) => {
            for (n, item) in items.iter().enumerate() {
                let p = format!("input[{n}]");
                let kind = item.get("type").and_then(Json::as_str).unwrap_or("message");
                match kind {
                    "message" => {
                        let role = item
                            .get("role")
                            .and_then(Json::as_str)
                            .ok_or_else(|| bad(&p, "a message needs a role"))?;
                        let role = if role == "developer" { "system" } else { role };
                        if !["system", "user", "assistant"].contains(&role) {
                            return Err(bad(&p, format!("unknown role {role:?}")));
                        }
                        let text = content_text(item.get("content").unwrap_or(&Json::Null), &p)?;
                        messages.push(json!({"role": role, "content": text}));
                    }
                    "function_call" => {
                        let call = json!({
                            "id": item.get("call_id").cloned().unwrap_or(json!("call")),
                            "type": "function",
                            "function": {
                                "name": item.get("name").cloned().unwrap_or(json!("")),
                                "arguments": item.get("arguments").cloned().unwrap_or(json!("{}")),
                            }
                        });
                        // Consecutive calls belong to one assistant turn.
                        match messages.last_mut() {
                            Some(m)
                                if m["role"] == "assistant" && m.get("tool_calls").is_some() =>
                            {
                                if let Some(a) = m["tool_calls"].as_array_mut() {
                                    a.push(call);
                                }
                            }
                            _ => messages.push(
                                json!({"role": "assistant", "content": "", "tool_calls": [call]}),
                            ),
                        }
                    }
                    "function_call_output" => {
                        let out = match item.get("output") {
                            Some(Json::String(s)) => s.clone(),
                            Some(other) => {
                                content_text(other, &p).unwrap_or_else(|_| other.to_string())
                            }
                            None => String::new(),
                        };
                        messages.push(json!({
                            "role": "tool",
                            "tool_call_id": item.get("call_id").cloned().unwrap_or(json!("")),
                            "content": out,
                        }));
                    }
                    // Earlier reasoning is the template's to drop or keep.
                    "reasoning" => {}
                    other => {
                        return Err(bad(
                            &p,
                            format!("input items of type {other:?} are not supported"),
                        ))
                    }
                }
            }
        }
        Some(_) => return Err(bad("input", "input must be a string or a list of items")),
        None => return Err(bad("input", "input is required")),
    }
    let mut chat = Map::new();
    chat.insert("messages".into(), Json::Array(messages));
    for (from, to) in [
        ("model", "model"),
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("max_output_tokens", "max_tokens"),
        ("stream", "stream"),
        ("seed", "seed"),
        ("top_k", "top_k"),
        ("min_p", "min_p"),
    ] {
        if let Some(v) = o.get(from) {
            if !v.is_null() {
                chat.insert(to.into(), v.clone());
            }
        }
    }
    if let Some(Json::Array(tools)) = o.get("tools") {
        let fns: Vec<Json> = tools
            .iter()
            .filter(|t| t.get("type").and_then(Json::as_str) == Some("function"))
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.get("name").cloned().unwrap_or(json!("")),
                    "description": t.get("description").cloned().unwrap_or(json!("")),
                    "parameters": t.get("parameters").cloned().unwrap_or(json!({"type": "object"})),
                }})
            })
            .collect();
        if !fns.is_empty() {
            chat.insert("tools".into(), Json::Array(fns));
        }
    }
    // Forced calls as in chat; choices of other tool types (skipped
    // above) are left to the default.
    match o.get("tool_choice") {
        Some(Json::String(c)) if ["none", "auto", "required"].contains(&c.as_str()) => {
            chat.insert("tool_choice".into(), json!(c));
        }
        Some(c) if c.get("type").and_then(Json::as_str) == Some("function") => {
            let name = c.get("name").cloned().unwrap_or(json!(""));
            chat.insert(
                "tool_choice".into(),
                json!({"type": "function", "function": {"name": name}}),
            );
        }
        _ => {}
    }
    if let Some(p @ Json::Bool(_)) = o.get("parallel_tool_calls") {
        chat.insert("parallel_tool_calls".into(), p.clone());
    }
    if let Some(effort) = o.get("reasoning").and_then(|r| r.get("effort")) {
        if !effort.is_null() {
            chat.insert("reasoning_effort".into(), effort.clone());
        }
    }
    if let Some(f) = o.get("text").and_then(|t| t.get("format")) {
        match f.get("type").and_then(Json::as_str) {
            None | Some("text") => {}
            Some("json_object") => {
                chat.insert("response_format".into(), json!({"type": "json_object"}));
            }
            Some("json_schema") => {
                let schema = f.get("schema").cloned().ok_or_else(|| {
                    bad("text.format.schema", "a json_schema format needs a schema")
                })?;
                chat.insert(
                    "response_format".into(),
                    json!({"type": "json_schema", "json_schema": {"name": f.get("name").cloned().unwrap_or(json!("schema")), "schema": schema}}),
                );
            }
            Some(other) => {
                return Err(bad(
                    "text.format.type",
                    format!("unknown text format {other:?}"),
                ))
            }
        }
    }
    Ok(Json::Object(chat))
}

pub async fn responses(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body: Json = parse_json(&body?)?;
    let chat: ChatCompletionRequest = serde_json::from_value(to_chat(&body)?)
        .map_err(|e| ApiError::invalid(format!("invalid request: {e}")))?;
    let prepared = prepare(&state, chat).await?;
    let input_tokens = prepared.request.prompt.len();
    let output = prepared.output();
    let handle = state.engine.submit(prepared.request)?;
    let mut reply = Reply {
        id: format!("resp_{}", random_id(24)),
        created: now(),
        model: state.config.model_id.clone(),
        output,
        input_tokens,
        items: Vec::new(),
        open: None,
        call: None,
        seq: 0,
    };
    if prepared.stream {
        let events = sse::payloads(handle, reply, state.clone()).filter_map(|p| async move {
            let (name, data) = p.split_once('\n')?;
            Some(Ok::<_, Infallible>(
                SseEvent::default().event(name).data(data),
            ))
        });
        return Ok(Sse::new(events)
            .keep_alive(KeepAlive::new().interval(Duration::from_secs(5)))
            .into_response());
    }
    let mut handle = handle;
    let done = loop {
        match handle.events.recv().await {
            Some(Event::Text { text, .. }) => {
                let parts = reply.output.feed(&text);
                reply.gather(parts);
            }
            Some(Event::Done(d)) => {
                state.observe_done(&d);
                break d;
            }
            // (Never asked for here.)
            Some(Event::Prompt { .. } | Event::Progress(_)) => {}
            Some(Event::Error(f)) => return Err(ApiError::failed(f)),
            None => return Err(ApiError::internal("the engine stopped")),
        }
    };
    let parts = reply.output.finish();
    reply.gather(parts);
    Ok(JsonBody(reply.response(Some(&done))).into_response())
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Open {
    Reasoning,
    Message,
}

/// A reply being built as output items, whole or as stream events.
struct Reply {
    id: String,
    created: u64,
    model: String,
    output: crate::tool_choice::ReplyOutput,
    input_tokens: usize,
    items: Vec<Json>,
    /// The item a stream is writing into.
    open: Option<Open>,
    /// The function call streaming now: its output index and how many of
    /// its arguments went out (`None`: none open).
    call: Option<(usize, usize)>,
    seq: u64,
}

fn item_id(prefix: &str) -> String {
    format!("{prefix}_{}", random_id(24))
}

fn function_call(c: ToolCall) -> Json {
    json!({"type": "function_call", "id": item_id("fc"), "call_id": item_id("call"),
           "name": c.name, "arguments": c.arguments, "status": "completed"})
}

impl Reply {
    fn gather(&mut self, parts: Vec<Part>) {
        for p in parts {
            match p {
                Part::Reasoning(s) => match self.items.last_mut() {
                    Some(i) if i["type"] == "reasoning" => {
                        let t = format!("{}{s}", i["content"][0]["text"].as_str().unwrap_or(""));
                        i["content"][0]["text"] = json!(t);
                    }
                    _ => self.items.push(
                        json!({"type": "reasoning", "id": item_id("rs"), "summary": [],
                        "content": [{"type": "reasoning_text", "text": s}]}),
                    ),
                },
                Part::Content(s) => match self.items.last_mut() {
                    Some(i) if i["type"] == "message" => {
                        let t = format!("{}{s}", i["content"][0]["text"].as_str().unwrap_or(""));
                        i["content"][0]["text"] = json!(t);
                    }
                    _ => self
                        .items
                        .push(json!({"type": "message", "id": item_id("msg"),
                        "status": "completed", "role": "assistant",
                        "content": [{"type": "output_text", "text": s, "annotations": []}]})),
                },
                Part::Call(c) => self.items.push(function_call(c)),
                Part::CallStart(_) | Part::CallArgument(..) => {}
            }
        }
    }

    /// The response object: in progress (`done: None`) or final.
    fn response(&self, done: Option<&Done>) -> Json {
        let (status, incomplete) = match done.map(|d| d.finish) {
            None => ("in_progress", Json::Null),
            Some(FinishReason::Length) => ("incomplete", json!({"reason": "max_output_tokens"})),
            Some(_) => ("completed", Json::Null),
        };
        let usage = done.map(|d| {
            json!({
                "input_tokens": d.prompt_tokens,
                "input_tokens_details": {"cached_tokens": d.cached_tokens},
                "output_tokens": d.completion_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": d.prompt_tokens + d.completion_tokens,
            })
        });
        json!({
            "id": self.id, "object": "response", "created_at": self.created, "status": status,
            "model": self.model, "output": if done.is_some() { Json::Array(self.items.clone()) } else { json!([]) },
            "incomplete_details": incomplete, "error": null, "instructions": null,
            "metadata": {}, "parallel_tool_calls": false, "tool_choice": "auto", "tools": [],
            "temperature": null, "top_p": null, "usage": usage,
        })
    }

    fn event(&mut self, kind: &str, mut data: Json) -> String {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.seq);
        self.seq += 1;
        format!("{kind}\n{data}")
    }

    /// Finish the item being streamed.
    fn close(&mut self, out: &mut Vec<String>) {
        let Some(open) = self.open.take() else {
            return;
        };
        let index = self.items.len() - 1;
        let item = self.items[index].clone();
        let id = item["id"].clone();
        match open {
            Open::Message => {
                let text = item["content"][0]["text"].clone();
                let e = self.event(
                    "response.output_text.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "text": text}),
                );
                out.push(e);
                let e = self.event("response.content_part.done", json!({"item_id": id, "output_index": index, "content_index": 0, "part": item["content"][0]}));
                out.push(e);
            }
            Open::Reasoning => {
                let text = item["content"][0]["text"].clone();
                let e = self.event(
                    "response.reasoning_text.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "text": text}),
                );
                out.push(e);
            }
        }
        let e = self.event(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        );
        out.push(e);
    }

    /// Adds a function-call item for `name` with no arguments yet (in
    /// progress) and announces it; its output index.
    fn open_call(&mut self, name: String, out: &mut Vec<String>) -> usize {
        let mut item = function_call(ToolCall {
            name,
            arguments: String::new(),
        });
        item["status"] = json!("in_progress");
        let index = self.items.len();
        self.items.push(item.clone());
        let e = self.event(
            "response.output_item.added",
            json!({"output_index": index, "item": item}),
        );
        out.push(e);
        index
    }

    /// A piece of call `index`'s arguments.
    fn arguments_delta(&mut self, index: usize, piece: &str) -> String {
        let id = self.items[index]["id"].clone();
        self.event(
            "response.function_call_arguments.delta",
            json!({"item_id": id, "output_index": index, "delta": piece}),
        )
    }

    fn stream(&mut self, parts: Vec<Part>) -> Vec<String> {
        let mut out = Vec::new();
        for p in parts {
            let (kind, text) = match p {
                Part::Reasoning(s) => (Open::Reasoning, s),
                Part::Content(s) => (Open::Message, s),
                // A streamed call: the item with its name and no arguments,
                // then each argument as a delta, then the whole item.
                Part::CallStart(name) => {
                    self.close(&mut out);
                    let index = self.open_call(name, &mut out);
                    self.call = Some((index, 0));
                    continue;
                }
                Part::CallArgument(k, v) => {
                    if let Some((index, sent)) = self.call.take() {
                        let piece = argument_piece(sent == 0, &k, &v);
                        out.push(self.arguments_delta(index, &piece));
                        self.call = Some((index, sent + 1));
                    }
                    continue;
                }
                Part::Call(c) => {
                    let index = match self.call.take() {
                        Some((index, sent)) => {
                            let piece = close_arguments(sent == 0);
                            out.push(self.arguments_delta(index, piece));
                            index
                        }
                        None => {
                            self.close(&mut out);
                            let index = self.open_call(c.name.clone(), &mut out);
                            out.push(self.arguments_delta(index, &c.arguments));
                            index
                        }
                    };
                    let item = &mut self.items[index];
                    item["arguments"] = json!(c.arguments);
                    item["status"] = json!("completed");
                    let item = item.clone();
                    let e = self.event("response.function_call_arguments.done", json!({"item_id": item["id"], "output_index": index, "arguments": item["arguments"]}));
                    out.push(e);
                    let e = self.event(
                        "response.output_item.done",
                        json!({"output_index": index, "item": item}),
                    );
                    out.push(e);
                    continue;
                }
            };
            if self.open != Some(kind) {
                self.close(&mut out);
                let index = self.items.len();
                let item = match kind {
                    Open::Reasoning => {
                        json!({"type": "reasoning", "id": item_id("rs"), "summary": [], "content": [{"type": "reasoning_text", "text": ""}]})
                    }
                    Open::Message => {
                        json!({"type": "message", "id": item_id("msg"), "status": "in_progress", "role": "assistant", "content": [{"type": "output_text", "text": "", "annotations": []}]})
                    }
                };
                self.items.push(item.clone());
                let e = self.event(
                    "response.output_item.added",
                    json!({"output_index": index, "item": item}),
                );
                out.push(e);
                if kind == Open::Message {
                    let e = self.event("response.content_part.added", json!({"item_id": item["id"], "output_index": index, "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}));
                    out.push(e);
                }
                self.open = Some(kind);
            }
            let index = self.items.len() - 1;
            let t = format!(
                "{}{text}",
                self.items[index]["content"][0]["text"]
                    .as_str()
                    .unwrap_or("")
            );
            self.items[index]["content"][0]["text"] = json!(t);
            if kind == Open::Message {
                self.items[index]["status"] = json!("completed");
            }
            let id = self.items[index]["id"].clone();
            let name = match kind {
                Open::Reasoning => "response.reasoning_text.delta",
                Open::Message => "response.output_text.delta",
            };
            let e = self.event(
                name,
                json!({"item_id": id, "output_index": index, "content_index": 0, "delta": text}),
            );
            out.push(e);
        }
        out
    }
}

impl ChunkBuilder for Reply {
    fn start(&mut self) -> Vec<String> {
        let r = self.response(None);
        let created = self.event("response.created", json!({"response": r}));
        let r = self.response(None);
        let progress = self.event("response.in_progress", json!({"response": r}));
        vec![created, progress]
    }

    fn text(&mut self, text: String, _tokens: Vec<TokenInfo>) -> Vec<String> {
        let parts = self.output.feed(&text);
        self.stream(parts)
    }

    fn done(&mut self, done: Done) -> Vec<String> {
        let parts = self.output.finish();
        let mut out = self.stream(parts);
        self.close(&mut out);
        let r = self.response(Some(&done));
        let kind = if r["status"] == "incomplete" {
            "response.incomplete"
        } else {
            "response.completed"
        };
        let e = self.event(kind, json!({"response": r}));
        out.push(e);
        let _ = self.input_tokens;
        out
    }

    fn error(&mut self, e: ApiError) -> String {
        let code = e.code.unwrap_or(e.kind);
        self.event(
            "error",
            json!({"code": code, "message": e.message, "param": e.param}),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_become_chat_messages() {
        let c = to_chat(&json!({
            "model": "m", "instructions": "be brief", "max_output_tokens": 9,
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "weather?"}]},
                {"type": "function_call", "call_id": "c1", "name": "get", "arguments": "{\"city\":\"Oslo\"}"},
                {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {"role": "developer", "content": "answer in French"}
            ],
            "tools": [{"type": "function", "name": "get", "parameters": {"type": "object"}},
                      {"type": "web_search"}],
            "reasoning": {"effort": "none"},
            "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}}
        }))
        .unwrap();
        let m = c["messages"].as_array().unwrap();
        assert_eq!(m[0], json!({"role": "system", "content": "be brief"}));
        assert_eq!(m[1], json!({"role": "user", "content": "weather?"}));
        assert_eq!(m[2]["tool_calls"][0]["function"]["name"], "get");
        assert_eq!(m[3]["role"], "tool");
        assert_eq!(
            m[4],
            json!({"role": "system", "content": "answer in French"})
        );
        assert_eq!(c["max_tokens"], 9);
        assert_eq!(
            c["tools"].as_array().unwrap().len(),
            1,
            "unknown tool types are skipped"
        );
        assert_eq!(c["reasoning_effort"], "none");
        assert_eq!(c["response_format"]["type"], "json_schema");
        for bad in [
            json!({"input": 3}),
            json!({}),
            json!({"input": [{"type": "message"}]}),
            json!({"input": [{"role": "wizard", "content": "x"}]}),
            json!({"input": "hi", "text": {"format": {"type": "xml"}}}),
        ] {
            assert!(to_chat(&bad).is_err(), "{bad}");
        }
    }
}
