//! Response bodies of the OpenAI API.

use super::logprobs::{ChatLogprobs, CompletionLogprobs};
use rill_engine::Done;
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use serde_json::Value as Json;

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PromptTokensDetails {
    pub cached_tokens: usize,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
    pub prompt_tokens_details: PromptTokensDetails,
}

impl Usage {
    pub fn from_done(d: &Done) -> Usage {
        Usage {
            prompt_tokens: d.prompt_tokens,
            completion_tokens: d.completion_tokens,
            total_tokens: d.prompt_tokens + d.completion_tokens,
            prompt_tokens_details: PromptTokensDetails {
                cached_tokens: d.cached_tokens,
            },
        }
    }
}

/// Figures beyond OpenAI's: rill's own (`ttft_ms`, `total_ms`) and
/// llama-server's `timings` names, which its web UI and other clients read.
///
/// `prompt_ms` is the time to the first token (queue wait included) and
/// `predicted_ms` the time after it; `predicted_per_second` counts the tokens
/// after the first over `predicted_ms`, since the first one belongs to the
/// prompt's time. `cache_n` prompt tokens came from the prompt cache,
/// `prompt_n` were computed.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Timings {
    pub ttft_ms: f64,
    pub total_ms: f64,
    pub cache_n: usize,
    pub prompt_n: usize,
    pub prompt_ms: f64,
    pub prompt_per_token_ms: f64,
    pub prompt_per_second: f64,
    pub predicted_n: usize,
    pub predicted_ms: f64,
    pub predicted_per_token_ms: f64,
    pub predicted_per_second: f64,
    /// Tokens the MTP head drafted, and how many were accepted (llama-server's names).
    pub draft_n: usize,
    pub draft_n_accepted: usize,
}

/// `a / b`, or 0 when that is not a finite number.
fn ratio(a: f64, b: f64) -> f64 {
    let r = a / b;
    if r.is_finite() {
        r
    } else {
        0.0
    }
}

impl Timings {
    pub fn from_done(d: &Done) -> Timings {
        let prompt_n = d.prompt_tokens.saturating_sub(d.cached_tokens);
        let prompt_ms = d.ttft_ms.max(0.0);
        let predicted_ms = (d.total_ms - d.ttft_ms).max(0.0);
        let after_first = d.completion_tokens.saturating_sub(1) as f64;
        Timings {
            ttft_ms: d.ttft_ms,
            total_ms: d.total_ms,
            cache_n: d.cached_tokens,
            prompt_n,
            prompt_ms,
            prompt_per_token_ms: ratio(prompt_ms, prompt_n as f64),
            prompt_per_second: ratio(prompt_n as f64 * 1e3, prompt_ms),
            predicted_n: d.completion_tokens,
            predicted_ms,
            predicted_per_token_ms: ratio(predicted_ms, after_first),
            predicted_per_second: ratio(after_first * 1e3, predicted_ms),
            draft_n: d.drafted_tokens,
            draft_n_accepted: d.accepted_tokens,
        }
    }
}

/// A stream's timings while it runs (llama-server's `timings_per_token`),
/// measured here from the stream's start: the prompt counted whole (what
/// the prompt cache served is known at the end, whose timings are the
/// engine's), the first token's arrival, and the tokens since.
#[derive(Debug, Clone)]
pub struct StreamClock {
    started: std::time::Instant,
    first: Option<std::time::Instant>,
    prompt_n: usize,
    generated: usize,
}

impl StreamClock {
    pub fn new(prompt_n: usize) -> StreamClock {
        StreamClock {
            started: std::time::Instant::now(),
            first: None,
            prompt_n,
            generated: 0,
        }
    }

    /// `n` more tokens came.
    pub fn tokens(&mut self, n: usize) {
        if n > 0 && self.first.is_none() {
            self.first = Some(std::time::Instant::now());
        }
        self.generated += n;
    }

    pub fn timings(&self) -> Timings {
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        let now = std::time::Instant::now();
        let prompt_ms = ms(self.first.unwrap_or(now) - self.started);
        let predicted_ms = self.first.map_or(0.0, |f| ms(now - f));
        let after_first = self.generated.saturating_sub(1) as f64;
        Timings {
            ttft_ms: prompt_ms,
            total_ms: ms(now - self.started),
            cache_n: 0,
            prompt_n: self.prompt_n,
            prompt_ms,
            prompt_per_token_ms: ratio(prompt_ms, self.prompt_n as f64),
            prompt_per_second: ratio(self.prompt_n as f64 * 1e3, prompt_ms),
            predicted_n: self.generated,
            predicted_ms,
            predicted_per_token_ms: ratio(predicted_ms, after_first),
            predicted_per_second: ratio(after_first * 1e3, predicted_ms),
            draft_n: 0,
            draft_n_accepted: 0,
        }
    }
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FunctionCall {
    pub name: String,
    pub arguments: String,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ToolCallOut {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: FunctionCall,
}

/// A tool call inside a streamed delta: its position in the list, and
/// what this chunk adds (OpenAI's shape): the id, type and name with the
/// first piece, then pieces of the arguments, which join to the whole.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ToolCallDelta {
    pub index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    pub function: FunctionDelta,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FunctionDelta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub arguments: String,
}

impl ToolCallDelta {
    /// The first piece of call `index`: its id, type, name and `arguments`.
    pub fn opening(index: usize, call: ToolCallOut) -> ToolCallDelta {
        ToolCallDelta {
            index,
            id: Some(call.id),
            kind: Some(call.kind),
            function: FunctionDelta {
                name: Some(call.function.name),
                arguments: call.function.arguments,
            },
        }
    }

    /// A further piece of call `index`'s arguments.
    pub fn arguments(index: usize, piece: String) -> ToolCallDelta {
        ToolCallDelta {
            index,
            id: None,
            kind: None,
            function: FunctionDelta {
                name: None,
                arguments: piece,
            },
        }
    }
}

/// The thinking, under both names clients read: `reasoning_content`
/// (llama.cpp, most SDKs) and `reasoning` (vLLM); nothing when there is none.
fn reasoning_both_names<S: Serializer>(r: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
    let mut m = s.serialize_map(None)?;
    if let Some(r) = r {
        m.serialize_entry("reasoning_content", r)?;
        m.serialize_entry("reasoning", r)?;
    }
    m.end()
}

/// The reply.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AssistantMessage {
    pub role: &'static str,
    pub content: Option<String>,
    #[serde(flatten, serialize_with = "reasoning_both_names")]
    pub reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallOut>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ChatChoice {
    pub index: usize,
    pub message: AssistantMessage,
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: &'static str,
}

/// `choices[].delta` of a chunk: only what it carries (the thinking under
/// both names, as in [`AssistantMessage`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Delta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(flatten, serialize_with = "reasoning_both_names")]
    pub reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallDelta>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ChunkChoice {
    pub index: usize,
    pub delta: Delta,
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: Option<&'static str>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CompletionChoice {
    pub index: usize,
    pub text: String,
    pub logprobs: Option<CompletionLogprobs>,
    pub finish_reason: Option<&'static str>,
    /// With `return_token_ids`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_token_ids: Option<Vec<u32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_ids: Option<Vec<u32>>,
    /// vLLM's `prompt_logprobs`, when asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_logprobs: Option<Vec<Json>>,
}

/// What every OpenAI reply and stream chunk is: the choices of one object
/// kind, with the usage and llama-server's `timings` where they are known
/// (a whole reply, and the last chunk of a stream).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Envelope<C> {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<C>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timings: Option<Timings>,
    /// vLLM's `prompt_logprobs` of a chat completion (a completion's are
    /// per choice).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_logprobs: Option<Vec<Json>>,
}

/// `chat.completion`.
pub type ChatCompletion = Envelope<ChatChoice>;
/// `chat.completion.chunk`.
pub type ChatChunk = Envelope<ChunkChoice>;
/// `text_completion`, whole or a chunk of a stream.
pub type Completion = Envelope<CompletionChoice>;

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ModelCard {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub owned_by: &'static str,
    /// Positions per sequence (vLLM's name; routers read it).
    pub max_model_len: usize,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ModelList {
    pub object: &'static str,
    pub data: Vec<ModelCard>,
}

/// Seconds since the Unix epoch.
pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rill_engine::FinishReason;

    #[test]
    fn thinking_under_both_names() {
        let m = AssistantMessage {
            role: "assistant",
            content: Some("hi".into()),
            reasoning_content: Some("hmm".into()),
            tool_calls: Vec::new(),
        };
        assert_eq!(
            serde_json::to_value(&m).unwrap(),
            serde_json::json!({"role": "assistant", "content": "hi", "reasoning_content": "hmm", "reasoning": "hmm"})
        );
        let m = AssistantMessage {
            content: None,
            reasoning_content: None,
            ..m
        };
        assert_eq!(
            serde_json::to_value(&m).unwrap(),
            serde_json::json!({"role": "assistant", "content": null})
        );
        let d = Delta {
            reasoning_content: Some("x".into()),
            ..Delta::default()
        };
        assert_eq!(
            serde_json::to_value(&d).unwrap(),
            serde_json::json!({"reasoning_content": "x", "reasoning": "x"})
        );
        assert_eq!(
            serde_json::to_value(Delta::default()).unwrap(),
            serde_json::json!({})
        );
    }

    #[test]
    fn timings_in_llama_server_terms() {
        let t = Timings::from_done(&Done {
            stop_word: None,
            finish: FinishReason::Stop,
            prompt_tokens: 110,
            cached_tokens: 10,
            completion_tokens: 21,
            ttft_ms: 50.0,
            total_ms: 250.0,
            queue_ms: 0.0,
            prefill_ms: 50.0,
            decode_ms: 200.0,
            drafted_tokens: 0,
            accepted_tokens: 0,
        });
        assert_eq!((t.cache_n, t.prompt_n, t.predicted_n), (10, 100, 21));
        assert_eq!((t.prompt_ms, t.predicted_ms), (50.0, 200.0));
        assert_eq!(t.prompt_per_second, 2000.0);
        assert_eq!(t.predicted_per_second, 100.0);
        assert_eq!(t.predicted_per_token_ms, 10.0);
        // One token, everything cached: no division by zero.
        let t = Timings::from_done(&Done {
            stop_word: None,
            finish: FinishReason::Length,
            prompt_tokens: 5,
            cached_tokens: 5,
            completion_tokens: 1,
            ttft_ms: 3.0,
            total_ms: 3.0,
            queue_ms: 0.0,
            prefill_ms: 3.0,
            decode_ms: 0.0,
            drafted_tokens: 0,
            accepted_tokens: 0,
        });
        assert_eq!((t.prompt_per_second, t.predicted_per_second), (0.0, 0.0));
        assert_eq!(t.prompt_per_token_ms, 0.0);
    }
}
