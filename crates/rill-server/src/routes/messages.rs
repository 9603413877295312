//! `POST /v1/messages` and `POST /v1/messages/count_tokens` (Anthropic's
//! Messages API). The body is converted to the chat-completions request
//! (`anthropic::to_chat`) and goes the same way as `/v1/chat/completions`:
//! `routes::chat::prepare` renders and tokenizes it, the engine runs it, and
//! the reply is split into thinking, text and tool calls by [`ChatOutput`],
//! here as Anthropic content blocks.

use crate::anthropic::{matched_stop, to_chat, AnthropicError, MessagesRequest};
use crate::openai::params::random_id;
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
use rill_chat::reply::ToolCall;
use rill_chat::reply::{argument_piece, close_arguments, Part};
use rill_engine::{Done, Event, FinishReason, TokenInfo};
use rill_tokenizer::Tokenizer;
use serde_json::{json, Value as Json};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

pub async fn messages(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, AnthropicError> {
    let body = body?;
    let req = MessagesRequest::parse(&body)?;
    let chat = to_chat(&req, false)?;
    let prepared = prepare(&state, chat).await?;
    let input_tokens = prepared.request.prompt.len();
    let output = prepared.output();
    let handle = state.engine.submit(prepared.request)?;
    let mut reply = Reply {
        id: format!("msg_{}", random_id(24)),
        model: state.config.model_id.clone(),
        tok: state.tok.clone(),
        output,
        stops: req.stop_sequences.clone().unwrap_or_default(),
        input_tokens,
        built: Built::default(),
    };
    if prepared.stream {
        let events = sse::payloads(handle, reply, state.clone()).filter_map(|p| async move {
            let (name, data) = p.split_once('\n')?;
            Some(Ok::<_, Infallible>(
                SseEvent::default().event(name).data(data),
            ))
        });
        let ping = SseEvent::default()
            .event("ping")
            .data(r#"{"type": "ping"}"#);
        return Ok(Sse::new(events)
            .keep_alive(
                KeepAlive::new()
                    .interval(Duration::from_secs(5))
                    .event(ping),
            )
            .into_response());
    }
    let mut handle = handle;
    let done = loop {
        match handle.events.recv().await {
            Some(Event::Text { text, tokens }) => {
                reply.built.ids.extend(tokens.iter().map(|t| t.id));
                let parts = reply.output.feed(&text);
                reply.gather(parts);
            }
            Some(Event::Done(d)) => {
                state.observe_done(&d);
                break d;
            }
            // (Never asked for here.)
            Some(Event::Prompt { .. } | Event::Progress(_)) => {}
            Some(Event::Error(f)) => return Err(crate::ApiError::failed(f).into()),
            None => return Err(crate::ApiError::internal("the engine stopped").into()),
        }
    };
    let parts = reply.output.finish();
    reply.gather(parts);
    let (stop_reason, stop_sequence) = reply.stop_reason(&done);
    Ok(JsonBody(json!({
        "id": reply.id,
        "type": "message",
        "role": "assistant",
        "model": reply.model,
        "content": reply.built.blocks,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": usage(&done),
    }))
    .into_response())
}

/// `POST /v1/messages/count_tokens` → `{"input_tokens": N}`: the prompt the
/// same body would give `/v1/messages`.
pub async fn count_tokens(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<JsonBody<Json>, AnthropicError> {
    let req = MessagesRequest::parse(&body?)?;
    let mut chat = to_chat(&req, true)?;
    chat.streaming.stream = Some(false);
    let prepared = prepare(&state, chat).await?;
    Ok(JsonBody(
        json!({"input_tokens": prepared.request.prompt.len()}),
    ))
}

/// Anthropic counts cache reads apart from `input_tokens`.
fn usage(d: &Done) -> Json {
    json!({
        "input_tokens": d.prompt_tokens.saturating_sub(d.cached_tokens),
        "output_tokens": d.completion_tokens,
        "cache_read_input_tokens": d.cached_tokens,
        "cache_creation_input_tokens": 0,
    })
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Block {
    Thinking,
    Text,
    ToolUse,
}

/// A reply being built: whole (`blocks`) or as stream events.
struct Reply {
    id: String,
    model: String,
    tok: Arc<Tokenizer>,
    output: crate::tool_choice::ReplyOutput,
    stops: Vec<String>,
    input_tokens: usize,
    built: Built,
}

/// What a reply has produced so far.
#[derive(Default)]
struct Built {
    /// Every generated token (to tell which stop sequence ended the reply).
    ids: Vec<u32>,
    blocks: Vec<Json>,
    /// The content block a stream has open.
    open: Option<Block>,
    index: usize,
    n_calls: usize,
    /// Arguments sent of the tool call streaming now (`None`: none open).
    args_sent: Option<usize>,
}

fn tool_use(call: ToolCall) -> Json {
    let input: Json = serde_json::from_str(&call.arguments)
        .ok()
        .filter(Json::is_object)
        .unwrap_or_else(|| json!({}));
    json!({"type": "tool_use", "id": format!("toolu_{}", random_id(24)), "name": call.name, "input": input})
}

fn event(name: &str, data: Json) -> String {
    format!("{name}\n{data}")
}

impl Reply {
    /// Whole reply: consecutive pieces of one kind make one block.
    fn gather(&mut self, parts: Vec<Part>) {
        for p in parts {
            match p {
                Part::Reasoning(s) => match self.built.blocks.last_mut() {
                    Some(b) if b["type"] == "thinking" => {
                        let t = format!("{}{s}", b["thinking"].as_str().unwrap_or(""));
                        b["thinking"] = json!(t);
                    }
                    _ => self
                        .built
                        .blocks
                        .push(json!({"type": "thinking", "thinking": s, "signature": ""})),
                },
                Part::Content(s) => match self.built.blocks.last_mut() {
                    Some(b) if b["type"] == "text" => {
                        let t = format!("{}{s}", b["text"].as_str().unwrap_or(""));
                        b["text"] = json!(t);
                    }
                    _ => self.built.blocks.push(json!({"type": "text", "text": s})),
                },
                Part::Call(c) => {
                    self.built.n_calls += 1;
                    self.built.blocks.push(tool_use(c));
                }
                Part::CallStart(_) | Part::CallArgument(..) => {}
            }
        }
    }

    /// `stop_reason` and `stop_sequence`.
    fn stop_reason(&self, done: &Done) -> (&'static str, Option<String>) {
        match done.finish {
            FinishReason::Length => ("max_tokens", None),
            _ if self.built.n_calls > 0 => ("tool_use", None),
            _ if !self.stops.is_empty() => {
                let text = self.tok.decode(&self.built.ids).unwrap_or_default();
                match matched_stop(&text, &self.stops) {
                    Some(s) => ("stop_sequence", Some(s.to_string())),
                    None => ("end_turn", None),
                }
            }
            _ => ("end_turn", None),
        }
    }

    fn close(&mut self, out: &mut Vec<String>) {
        if self.built.open.take().is_some() {
            out.push(event(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": self.built.index}),
            ));
            self.built.index += 1;
        }
    }

    fn delta(&mut self, kind: Block, text: String, out: &mut Vec<String>) {
        let (block, delta) = match kind {
            Block::Thinking => (
                json!({"type": "thinking", "thinking": "", "signature": ""}),
                json!({"type": "thinking_delta", "thinking": text}),
            ),
            Block::Text => (
                json!({"type": "text", "text": ""}),
                json!({"type": "text_delta", "text": text}),
            ),
            // A tool call's input streams through `input_delta`.
            Block::ToolUse => return,
        };
        if self.built.open != Some(kind) {
            self.close(out);
            out.push(event(
                "content_block_start",
                json!({"type": "content_block_start", "index": self.built.index, "content_block": block}),
            ));
            self.built.open = Some(kind);
        }
        out.push(event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": self.built.index, "delta": delta}),
        ));
    }

    /// Opens a `tool_use` block (its `input` starts empty; pieces follow).
    fn open_tool_use(&mut self, block: Json, out: &mut Vec<String>) {
        out.push(event(
            "content_block_start",
            json!({"type": "content_block_start", "index": self.built.index, "content_block": block}),
        ));
        self.built.open = Some(Block::ToolUse);
    }

    /// A piece of the open `tool_use` block's `input` JSON.
    fn input_delta(&self, piece: String) -> String {
        event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": self.built.index,
                   "delta": {"type": "input_json_delta", "partial_json": piece}}),
        )
    }

    fn events(&mut self, parts: Vec<Part>) -> Vec<String> {
        let mut out = Vec::new();
        for p in parts {
            match p {
                Part::Reasoning(s) => self.delta(Block::Thinking, s, &mut out),
                Part::Content(s) => self.delta(Block::Text, s, &mut out),
                // A streamed call: its block opens with the name, each
                // argument goes out as a piece of `input`'s JSON.
                Part::CallStart(name) => {
                    self.close(&mut out);
                    self.built.n_calls += 1;
                    let block = tool_use(ToolCall {
                        name,
                        arguments: "{}".into(),
                    });
                    self.open_tool_use(block, &mut out);
                    self.built.args_sent = Some(0);
                }
                Part::CallArgument(k, v) => {
                    if let Some(sent) = self.built.args_sent.as_mut() {
                        let piece = argument_piece(*sent == 0, &k, &v);
                        *sent += 1;
                        out.push(self.input_delta(piece));
                    }
                }
                Part::Call(c) => {
                    if let Some(sent) = self.built.args_sent.take() {
                        out.push(self.input_delta(close_arguments(sent == 0).into()));
                        self.close(&mut out);
                        continue;
                    }
                    self.close(&mut out);
                    self.built.n_calls += 1;
                    let mut block = tool_use(c);
                    let input = std::mem::replace(&mut block["input"], json!({}));
                    self.open_tool_use(block, &mut out);
                    out.push(self.input_delta(input.to_string()));
                    self.close(&mut out);
                }
            }
        }
        out
    }
}

impl ChunkBuilder for Reply {
    fn start(&mut self) -> Vec<String> {
        vec![event(
            "message_start",
            json!({"type": "message_start", "message": {
                "id": self.id, "type": "message", "role": "assistant", "model": self.model,
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": self.input_tokens, "output_tokens": 0},
            }}),
        )]
    }

    fn text(&mut self, text: String, tokens: Vec<TokenInfo>) -> Vec<String> {
        self.built.ids.extend(tokens.iter().map(|t| t.id));
        let parts = self.output.feed(&text);
        self.events(parts)
    }

    fn done(&mut self, done: Done) -> Vec<String> {
        let parts = self.output.finish();
        let mut out = self.events(parts);
        self.close(&mut out);
        let (stop_reason, stop_sequence) = self.stop_reason(&done);
        out.push(event(
            "message_delta",
            json!({"type": "message_delta",
                   "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
                   "usage": usage(&done)}),
        ));
        out.push(event("message_stop", json!({"type": "message_stop"})));
        out
    }

    fn error(&mut self, e: crate::ApiError) -> String {
        event("error", crate::anthropic::AnthropicError(e).body())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(tools: bool) -> Reply {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures/models/qwen35moe.f32.gguf");
        let output = crate::tool_choice::ReplyOutput::new(
            "<|im_start|>assistant\n<think>\n",
            tools.then_some(&[][..]),
            true,
        );
        Reply {
            id: "msg_test".into(),
            model: "m".into(),
            tok: Arc::new(Tokenizer::from_gguf_path(&path).unwrap()),
            output,
            stops: Vec::new(),
            input_tokens: 7,
            built: Built::default(),
        }
    }

    fn done() -> Done {
        crate::routes::test_done(FinishReason::Stop, 7, 3)
    }

    const PIECES: &[&str] = &[
        "I need the wea",
        "ther.\n</think>\n\nChecking.\n\n<tool_",
        "call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n",
        "</function>\n</tool_call>",
    ];

    #[test]
    fn a_streamed_reply_is_blocks_of_events() {
        let mut r = reply(true);
        let mut out = r.start();
        for p in PIECES {
            out.extend(r.text(p.to_string(), Vec::new()));
        }
        out.extend(r.done(done()));
        let ev: Vec<(String, Json)> = out
            .iter()
            .map(|e| {
                let (n, d) = e.split_once('\n').unwrap();
                (n.to_string(), serde_json::from_str(d).unwrap())
            })
            .collect();
        let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names[0], "message_start");
        assert_eq!(ev[0].1["message"]["usage"]["input_tokens"], 7);
        // Three blocks in order, each opened and closed once.
        let starts: Vec<&Json> = ev
            .iter()
            .filter(|(n, _)| n == "content_block_start")
            .map(|(_, d)| d)
            .collect();
        let kinds: Vec<&str> = starts
            .iter()
            .map(|d| d["content_block"]["type"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["thinking", "text", "tool_use"]);
        for (i, s) in starts.iter().enumerate() {
            assert_eq!(s["index"], i);
        }
        assert_eq!(
            names.iter().filter(|n| **n == "content_block_stop").count(),
            3
        );
        let delta = |kind: &str, field: &str| -> String {
            ev.iter()
                .filter(|(n, d)| n == "content_block_delta" && d["delta"]["type"] == kind)
                .map(|(_, d)| d["delta"][field].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(delta("thinking_delta", "thinking"), "I need the weather.");
        assert_eq!(delta("text_delta", "text"), "Checking.");
        assert_eq!(
            delta("input_json_delta", "partial_json"),
            "{\"city\":\"Paris\"}"
        );
        // The input streamed: the argument as it completed, then the close.
        let pieces = ev
            .iter()
            .filter(|(_, d)| d["delta"]["type"] == "input_json_delta")
            .count();
        assert_eq!(pieces, 2);
        let tool = &starts[2]["content_block"];
        assert_eq!(tool["name"], "get_weather");
        assert_eq!(tool["input"], json!({}));
        assert!(tool["id"].as_str().unwrap().starts_with("toolu_"));
        let md = &ev[ev.len() - 2].1;
        assert_eq!(md["delta"]["stop_reason"], "tool_use");
        assert_eq!(md["usage"]["input_tokens"], 4);
        assert_eq!(md["usage"]["cache_read_input_tokens"], 3);
        assert_eq!(md["usage"]["output_tokens"], 20);
        assert_eq!(names[names.len() - 1], "message_stop");
    }

    #[test]
    fn a_whole_reply_gathers_the_same_blocks() {
        let mut r = reply(true);
        for p in PIECES {
            let parts = r.output.feed(p);
            r.gather(parts);
        }
        let parts = r.output.finish();
        r.gather(parts);
        assert_eq!(r.built.blocks.len(), 3, "{:?}", r.built.blocks);
        assert_eq!(
            r.built.blocks[0],
            json!({"type": "thinking", "thinking": "I need the weather.", "signature": ""})
        );
        assert_eq!(
            r.built.blocks[1],
            json!({"type": "text", "text": "Checking."})
        );
        assert_eq!(r.built.blocks[2]["type"], "tool_use");
        assert_eq!(r.built.blocks[2]["input"], json!({"city": "Paris"}));
        assert_eq!(r.stop_reason(&done()), ("tool_use", None));
        // Without tools the markup is text, and a plain stop is end_turn.
        let mut r = reply(false);
        let parts = r.output.feed("x</think>\n\n<tool_call>{}</tool_call>");
        r.gather(parts);
        assert_eq!(r.built.blocks[1]["type"], "text");
        assert_eq!(r.stop_reason(&done()), ("end_turn", None));
    }
}
