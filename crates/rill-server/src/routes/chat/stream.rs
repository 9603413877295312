//! A streamed chat reply: its chunks, each classified piece (reasoning,
//! content, a tool call's name and arguments) as a delta.

use super::tool_call_out;
use crate::choices::usage_of;
use crate::openai::logprobs::{chat_token, ChatLogprobs};
use crate::openai::responses::{
    ChatChunk, ChunkChoice, Delta, StreamClock, Timings, ToolCallDelta, Usage,
};
use crate::routes::finish_reason;
use crate::sse::ChunkBuilder;
use crate::tool_choice::ReplyOutput;
use rill_chat::reply::{argument_piece, close_arguments, Part, ToolCall};
use rill_engine::{Done, PromptProgress, TokenInfo};
use std::sync::Arc;

/// The chunks of a streamed reply.
pub(super) struct ChatStream {
    pub(super) id: String,
    /// The choice this stream writes (`n > 1`).
    pub(super) index: usize,
    pub(super) created: u64,
    pub(super) model: String,
    pub(super) tok: Arc<rill_tokenizer::Tokenizer>,
    pub(super) output: ReplyOutput,
    pub(super) logprobs: bool,
    /// Log-probabilities not yet attached to a chunk.
    pub(super) pending_logprobs: Vec<crate::openai::logprobs::ChatTokenLogprob>,
    pub(super) n_calls: usize,
    /// Arguments sent of the call streaming now (`None`: no call open).
    pub(super) args_sent: Option<usize>,
    pub(super) include_usage: bool,
    /// `timings_per_token`: every chunk carries the running timings.
    pub(super) clock: Option<StreamClock>,
}

/// A delta carrying one tool-call piece.
fn calls_delta(call: ToolCallDelta) -> Delta {
    Delta {
        tool_calls: vec![call],
        ..Delta::default()
    }
}

impl ChatStream {
    fn chunk(&mut self, delta: Delta, finish: Option<&'static str>) -> String {
        let c = self.chunk_value(delta, finish);
        serde_json::to_string(&c).unwrap_or_default()
    }

    fn chunk_value(&mut self, delta: Delta, finish: Option<&'static str>) -> ChatChunk {
        // Log-probabilities ride on the next chunk sent.
        let logprobs = (self.logprobs && !self.pending_logprobs.is_empty()).then(|| ChatLogprobs {
            content: std::mem::take(&mut self.pending_logprobs),
        });
        ChatChunk {
            id: self.id.clone(),
            object: "chat.completion.chunk",
            created: self.created,
            model: self.model.clone(),
            choices: vec![ChunkChoice {
                index: self.index,
                delta,
                logprobs,
                finish_reason: finish,
            }],
            usage: None,
            timings: self.clock.as_ref().map(StreamClock::timings),
            prompt_logprobs: None,
        }
    }

    /// The usage chunk of a stream (after every choice's finish).
    pub(super) fn usage_chunk(&mut self, dones: &[Done]) -> ChatChunk {
        let mut last = self.chunk_value(Delta::default(), None);
        last.choices.clear();
        last.usage = Some(usage_of(dones, dones.len()));
        last.timings = dones.first().map(Timings::from_done);
        last
    }

    fn parts(&mut self, parts: Vec<Part>) -> Vec<String> {
        let mut out = Vec::new();
        for p in parts {
            let delta = match p {
                Part::Reasoning(s) => Delta {
                    reasoning_content: Some(s),
                    ..Delta::default()
                },
                Part::Content(s) => Delta {
                    content: Some(s),
                    ..Delta::default()
                },
                // A streamed call: its name first (no arguments yet), then
                // each argument as it completes, then the object's close.
                Part::CallStart(name) => {
                    let index = self.n_calls;
                    self.n_calls += 1;
                    self.args_sent = Some(0);
                    let call = tool_call_out(ToolCall {
                        name,
                        arguments: String::new(),
                    });
                    calls_delta(ToolCallDelta::opening(index, call))
                }
                Part::CallArgument(k, v) => {
                    let Some(sent) = self.args_sent.as_mut() else {
                        continue;
                    };
                    let piece = argument_piece(*sent == 0, &k, &v);
                    *sent += 1;
                    calls_delta(ToolCallDelta::arguments(self.n_calls - 1, piece))
                }
                Part::Call(c) => match self.args_sent.take() {
                    Some(sent) => {
                        let piece = close_arguments(sent == 0).to_string();
                        calls_delta(ToolCallDelta::arguments(self.n_calls - 1, piece))
                    }
                    None => {
                        let index = self.n_calls;
                        self.n_calls += 1;
                        calls_delta(ToolCallDelta::opening(index, tool_call_out(c)))
                    }
                },
            };
            out.push(self.chunk(delta, None));
        }
        out
    }
}

impl ChunkBuilder for ChatStream {
    fn start(&mut self) -> Vec<String> {
        let delta = Delta {
            role: Some("assistant"),
            content: Some(String::new()),
            ..Delta::default()
        };
        vec![self.chunk(delta, None)]
    }

    /// llama-server's shape: a chunk with the role delta, the progress
    /// beside its choices.
    fn progress(&mut self, progress: PromptProgress) -> Vec<String> {
        let delta = Delta {
            role: Some("assistant"),
            ..Delta::default()
        };
        let chunk = self.chunk_value(delta, None);
        let mut v = serde_json::to_value(&chunk).unwrap_or_default();
        v["prompt_progress"] = crate::sse::progress_json(&progress);
        vec![v.to_string()]
    }

    fn text(&mut self, text: String, tokens: Vec<TokenInfo>) -> Vec<String> {
        if let Some(clock) = &mut self.clock {
            clock.tokens(tokens.len());
        }
        if self.logprobs {
            let tok = self.tok.clone();
            self.pending_logprobs
                .extend(tokens.iter().filter_map(|t| chat_token(&tok, t)));
        }
        let parts = self.output.feed(&text);
        self.parts(parts)
    }

    fn done(&mut self, done: Done) -> Vec<String> {
        let parts = self.output.finish();
        let mut out = self.parts(parts);
        let finish = finish_reason(&done, self.n_calls > 0);
        // The last chunk carries the timings (llama-server's shape).
        let mut last = self.chunk_value(Delta::default(), Some(finish));
        if self.include_usage {
            out.push(serde_json::to_string(&last).unwrap_or_default());
            last.choices.clear();
            last.usage = Some(Usage::from_done(&done));
        }
        last.timings = Some(Timings::from_done(&done));
        out.push(serde_json::to_string(&last).unwrap_or_default());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rill_engine::FinishReason;
    use serde_json::Value;

    fn builder(prompt: &str, tools: bool) -> ChatStream {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures/models/qwen35moe.f32.gguf");
        ChatStream {
            id: "chatcmpl-test".into(),
            index: 0,
            created: 0,
            model: "m".into(),
            tok: Arc::new(rill_tokenizer::Tokenizer::from_gguf_path(&path).unwrap()),
            output: ReplyOutput::new(prompt, tools.then_some(&[][..]), true),
            logprobs: false,
            pending_logprobs: Vec::new(),
            n_calls: 0,
            args_sent: None,
            include_usage: true,
            clock: None,
        }
    }

    fn done(finish: FinishReason) -> Done {
        crate::routes::test_done(finish, 10, 0)
    }

    fn run(b: &mut ChatStream, pieces: &[&str], finish: FinishReason) -> Vec<Value> {
        let mut out = b.start();
        for p in pieces {
            out.extend(b.text(p.to_string(), Vec::new()));
        }
        out.extend(b.done(done(finish)));
        out.iter()
            .map(|s| serde_json::from_str(s).unwrap())
            .collect()
    }

    fn field(chunks: &[Value], name: &str) -> String {
        chunks
            .iter()
            .filter_map(|c| c["choices"][0]["delta"][name].as_str())
            .collect()
    }

    #[test]
    fn streamed_tool_calls_are_deltas_and_finish_with_tool_calls() {
        let mut b = builder("<|im_start|>assistant\n<think>\n", true);
        let chunks = run(
            &mut b,
            &[
                "I need the weather.\n</th",
                "ink>\n\nChecking.\n\n<tool_",
                "call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n",
                "</function>\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}\n</tool_call>",
            ],
            FinishReason::Stop,
        );
        assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(field(&chunks, "reasoning_content"), "I need the weather.");
        assert_eq!(field(&chunks, "content"), "Checking.");
        let calls: Vec<&Value> = chunks
            .iter()
            .filter_map(|c| c["choices"][0]["delta"]["tool_calls"].as_array())
            .flatten()
            .collect();
        // As a client joins them: per index, the first piece names the
        // call, the arguments are the pieces joined.
        let mut joined: Vec<(Value, String, usize)> = Vec::new();
        for c in calls {
            let i = c["index"].as_u64().unwrap() as usize;
            if i == joined.len() {
                joined.push((c.clone(), String::new(), 0));
            } else {
                assert!(c.get("id").is_none() && c["function"].get("name").is_none());
            }
            joined[i]
                .1
                .push_str(c["function"]["arguments"].as_str().unwrap());
            joined[i].2 += 1;
        }
        assert_eq!(joined.len(), 2);
        for (i, ((first, args, _), name, want)) in joined
            .iter()
            .zip([
                ("get_weather", "{\"city\":\"Paris\"}"),
                ("get_time", "{\"tz\":\"CET\"}"),
            ])
            .map(|(j, (n, a))| (j, n, a))
            .enumerate()
        {
            assert_eq!(first["index"], i);
            assert_eq!(first["type"], "function");
            assert!(first["id"].as_str().unwrap().starts_with("call_"));
            assert_eq!(first["function"]["name"], name);
            assert_eq!(args, want);
        }
        // Both forms streamed: name, argument, close.
        assert_eq!((joined[0].2, joined[1].2), (3, 3));
        // No markup leaks into content.
        assert!(!field(&chunks, "content").contains('<'));
        let fin = &chunks[chunks.len() - 2];
        assert_eq!(fin["choices"][0]["finish_reason"], "tool_calls");
        let usage = chunks.last().unwrap();
        assert_eq!(usage["choices"], serde_json::json!([]));
        assert_eq!(usage["usage"]["total_tokens"], 30);
        assert_eq!(usage["timings"]["predicted_n"], 20);
        assert_eq!(usage["timings"]["cache_n"], 0);
        assert_eq!(usage["timings"]["prompt_n"], 10);
        assert!(
            fin.get("timings").is_none(),
            "timings ride on the last chunk only"
        );
    }

    #[test]
    fn without_tools_the_markup_is_content_and_length_wins() {
        let mut b = builder("<think>\n\n</think>\n\n", false);
        let chunks = run(
            &mut b,
            &["<tool_call>\n{\"name\": \"f\"}\n</tool_call>"],
            FinishReason::Length,
        );
        assert!(field(&chunks, "content").starts_with("<tool_call>"));
        assert_eq!(
            chunks[chunks.len() - 2]["choices"][0]["finish_reason"],
            "length"
        );
    }
}
