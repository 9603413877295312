//! Request bodies of the OpenAI API, as clients send them.
//!
//! Fields are parsed leniently (unknown keys are ignored, `null` means
//! unset) and checked afterwards in [`super::params`], so a bad value gets a
//! message that names the parameter.

use rill_chat::Message;
use serde::Deserialize;
use serde_json::{Map, Value as Json};

/// `stop`: one string or several.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

impl Stop {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Stop::One(s) => vec![s],
            Stop::Many(v) => v,
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: Option<bool>,
}

/// The sampling and length parameters both endpoints share.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SamplingFields {
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub min_p: Option<f64>,
    pub presence_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub repetition_penalty: Option<f64>,
    pub seed: Option<i64>,
    pub stop: Option<Stop>,
    pub max_tokens: Option<i64>,
    pub n: Option<i64>,
    pub ignore_eos: Option<bool>,
    /// llama-server's `speculative.n_max`: most tokens the MTP head drafts
    /// per step for this request (0: no speculation).
    pub speculative_n_max: Option<i64>,
    /// OpenAI's `logit_bias`: token id (a decimal string) → bias.
    pub logit_bias: Option<Map<String, Json>>,
}

/// `POST /v1/chat/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatCompletionRequest {
    #[serde(default)]
    pub model: Option<String>,
    pub messages: Vec<Message>,
    #[serde(default)]
    pub temperature: Option<f64>,
    #[serde(default)]
    pub top_p: Option<f64>,
    #[serde(default)]
    pub top_k: Option<i64>,
    #[serde(default)]
    pub min_p: Option<f64>,
    #[serde(default)]
    pub presence_penalty: Option<f64>,
    #[serde(default)]
    pub frequency_penalty: Option<f64>,
    /// Extension (llama.cpp / vLLM).
    #[serde(default)]
    pub repetition_penalty: Option<f64>,
    #[serde(default)]
    pub seed: Option<i64>,
    #[serde(default)]
    pub stop: Option<Stop>,
    #[serde(default)]
    pub max_tokens: Option<i64>,
    #[serde(default)]
    pub max_completion_tokens: Option<i64>,
    #[serde(default)]
    pub n: Option<i64>,
    /// Extension: keep generating past end-of-generation tokens.
    #[serde(default)]
    pub ignore_eos: Option<bool>,
    /// Extension (llama-server's name): most tokens drafted per step.
    #[serde(default, rename = "speculative.n_max")]
    pub speculative_n_max: Option<i64>,
    #[serde(default)]
    pub logit_bias: Option<Map<String, Json>>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    #[serde(default)]
    pub logprobs: Option<bool>,
    #[serde(default)]
    pub top_logprobs: Option<i64>,
    #[serde(default)]
    pub tools: Option<Vec<Json>>,
    #[serde(default)]
    pub tool_choice: Option<Json>,
    /// vLLM's: `false` answers a final assistant message with a new turn
    /// instead of continuing it (the default here, as in llama-server).
    #[serde(default)]
    pub continue_final_message: Option<bool>,
    /// `false`: at most one tool call (exactly one when a call is forced).
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    #[serde(default)]
    pub chat_template_kwargs: Option<Map<String, Json>>,
    /// Convenience for `chat_template_kwargs.enable_thinking`.
    #[serde(default)]
    pub enable_thinking: Option<bool>,
    /// OpenAI's `reasoning_effort`; `"none"` turns thinking off.
    #[serde(default)]
    pub reasoning_effort: Option<String>,
    /// `response_format` and the other structured-output fields.
    #[serde(flatten)]
    pub constraint: crate::structured::ConstraintFields,
}

impl ChatCompletionRequest {
    pub fn sampling(&self) -> SamplingFields {
        SamplingFields {
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            min_p: self.min_p,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            repetition_penalty: self.repetition_penalty,
            seed: self.seed,
            stop: self.stop.clone(),
            // The newer name wins when both are given.
            max_tokens: self.max_completion_tokens.or(self.max_tokens),
            n: self.n,
            ignore_eos: self.ignore_eos,
            speculative_n_max: self.speculative_n_max,
            logit_bias: self.logit_bias.clone(),
        }
    }

    pub fn streaming(&self) -> bool {
        self.stream.unwrap_or(false)
    }

    pub fn include_usage(&self) -> bool {
        self.stream_options
            .as_ref()
            .and_then(|o| o.include_usage)
            .unwrap_or(false)
    }
}

/// `prompt` of a completion: text, token ids, or a batch of either.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum Prompt {
    Text(String),
    Tokens(Vec<i64>),
    Texts(Vec<String>),
    TokenBatch(Vec<Vec<i64>>),
}

/// `POST /v1/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct CompletionRequest {
    #[serde(default)]
    pub model: Option<String>,
    pub prompt: Prompt,
    #[serde(default)]
    pub temperature: Option<f64>,
    #[serde(default)]
    pub top_p: Option<f64>,
    #[serde(default)]
    pub top_k: Option<i64>,
    #[serde(default)]
    pub min_p: Option<f64>,
    #[serde(default)]
    pub presence_penalty: Option<f64>,
    #[serde(default)]
    pub frequency_penalty: Option<f64>,
    #[serde(default)]
    pub repetition_penalty: Option<f64>,
    #[serde(default)]
    pub seed: Option<i64>,
    #[serde(default)]
    pub stop: Option<Stop>,
    #[serde(default)]
    pub max_tokens: Option<i64>,
    #[serde(default)]
    pub n: Option<i64>,
    #[serde(default)]
    pub best_of: Option<i64>,
    #[serde(default)]
    pub ignore_eos: Option<bool>,
    /// Extension (llama-server's name): most tokens drafted per step.
    #[serde(default, rename = "speculative.n_max")]
    pub speculative_n_max: Option<i64>,
    #[serde(default)]
    pub logit_bias: Option<Map<String, Json>>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    /// Number of most likely alternatives per token (0..=20).
    #[serde(default)]
    pub logprobs: Option<i64>,
    /// Structured output (`response_format`, `guided_*`, `grammar`, …).
    #[serde(flatten)]
    pub constraint: crate::structured::ConstraintFields,
    /// vLLM's `return_token_ids`: the prompt's and the completion's token
    /// ids in the response (`prompt_token_ids`, `token_ids`).
    #[serde(default)]
    pub return_token_ids: Option<bool>,
    #[serde(default)]
    pub echo: Option<bool>,
    #[serde(default)]
    pub suffix: Option<String>,
}

impl CompletionRequest {
    pub fn sampling(&self) -> SamplingFields {
        SamplingFields {
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            min_p: self.min_p,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            repetition_penalty: self.repetition_penalty,
            seed: self.seed,
            stop: self.stop.clone(),
            max_tokens: self.max_tokens,
            n: self.n,
            ignore_eos: self.ignore_eos,
            speculative_n_max: self.speculative_n_max,
            logit_bias: self.logit_bias.clone(),
        }
    }

    pub fn streaming(&self) -> bool {
        self.stream.unwrap_or(false)
    }

    pub fn include_usage(&self) -> bool {
        self.stream_options
            .as_ref()
            .and_then(|o| o.include_usage)
            .unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_shapes() {
        let p = |s: &str| serde_json::from_str::<Prompt>(s).unwrap();
        assert_eq!(p(r#""hi""#), Prompt::Text("hi".into()));
        assert_eq!(p("[1, 2]"), Prompt::Tokens(vec![1, 2]));
        assert_eq!(p(r#"["a"]"#), Prompt::Texts(vec!["a".into()]));
        assert_eq!(p("[[1], [2]]"), Prompt::TokenBatch(vec![vec![1], vec![2]]));
    }

    #[test]
    fn chat_request_with_parts_and_nulls() {
        let r: ChatCompletionRequest = serde_json::from_str(
            r#"{"model": null, "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
                "stop": "x", "max_tokens": 5, "max_completion_tokens": 7, "temperature": null,
                "stream_options": {"include_usage": true}, "stream": true, "user": "someone"}"#,
        )
        .unwrap();
        assert_eq!(r.sampling().max_tokens, Some(7));
        assert_eq!(r.sampling().stop, Some(Stop::One("x".into())));
        assert!(r.include_usage() && r.streaming());
    }
}
