//! Response bodies of the OpenAI API.

use super::logprobs::{ChatLogprobs, CompletionLogprobs};
use rill_engine::Done;
use serde::Serialize;

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

/// Figures beyond OpenAI's (llama.cpp reports similar ones).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Timings {
    pub ttft_ms: f64,
    pub total_ms: f64,
}

impl Timings {
    pub fn from_done(d: &Done) -> Timings {
        Timings {
            ttft_ms: d.ttft_ms,
            total_ms: d.total_ms,
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

/// A tool call inside a streamed delta (with its position in the list).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ToolCallDelta {
    pub index: usize,
    #[serde(flatten)]
    pub call: ToolCallOut,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct AssistantMessage {
    pub role: &'static str,
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
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

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ChatCompletion {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChatChoice>,
    pub usage: Usage,
    pub timings: Timings,
}

/// `choices[].delta` of a chunk.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Delta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
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
pub struct ChatChunk {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChunkChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
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
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Completion {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<CompletionChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timings: Option<Timings>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ModelCard {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub owned_by: &'static str,
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
