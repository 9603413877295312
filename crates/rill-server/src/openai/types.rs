//! Request bodies of the OpenAI API, as clients send them.
//!
//! Fields are parsed leniently (unknown keys are ignored, `null` means
//! unset) and checked afterwards in [`super::params`], so a bad value gets a
//! message that names the parameter.

use rill_chat::Message;
use rill_sampler::SamplingPrefs;
use serde::Deserialize;
use serde_json::{Map, Value as Json};

pub use super::prompt::{Piece, Prompt};

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
    pub include_usage: Option<bool>,
}

/// `stream` and `stream_options`, as both endpoints take them.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct StreamFields {
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
}

impl StreamFields {
    pub fn enabled(&self) -> bool {
        self.stream.unwrap_or(false)
    }

    pub fn include_usage(&self) -> bool {
        self.stream_options
            .as_ref()
            .and_then(|o| o.include_usage)
            .unwrap_or(false)
    }
}

/// The sampling and length parameters both endpoints share. A missing or
/// `null` field is `None` (serde's rule for `Option` fields).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct SamplingFields {
    /// `temperature`, `top_k`, `top_p`, `min_p` and the penalties.
    #[serde(flatten)]
    pub prefs: SamplingPrefs,
    pub seed: Option<i64>,
    pub stop: Option<Stop>,
    pub max_tokens: Option<i64>,
    pub n: Option<i64>,
    /// Extension: keep generating past end-of-generation tokens.
    pub ignore_eos: Option<bool>,
    /// llama-server's `speculative.n_max`: most tokens the MTP head drafts
    /// per step for this request (0: no speculation).
    #[serde(rename = "speculative.n_max")]
    pub speculative_n_max: Option<i64>,
    /// OpenAI's `logit_bias`: token id (a decimal string) → bias.
    pub logit_bias: Option<Map<String, Json>>,
    /// vLLM's `prompt_logprobs`: every prompt token's log-probability and
    /// rank with this many alternatives (0..=20; not with `stream`).
    pub prompt_logprobs: Option<i64>,
    /// llama-server's `cache_prompt` (default true): false runs the prompt
    /// whole instead of resuming from the prompt cache.
    pub cache_prompt: Option<bool>,
    /// vLLM's `min_tokens`: no end-of-generation token, stop token or stop
    /// string before this many tokens.
    pub min_tokens: Option<i64>,
    /// vLLM's `stop_token_ids`: tokens that end the generation.
    pub stop_token_ids: Option<Vec<i64>>,
    /// vLLM's `include_stop_str_in_output`.
    pub include_stop_str_in_output: Option<bool>,
}

impl SamplingFields {
    /// The request's values, and the server's defaults where it has none.
    pub fn or_defaults(mut self, defaults: &SamplingPrefs) -> SamplingFields {
        self.prefs = self.prefs.or(defaults);
        self
    }

    /// `max_tokens` from `n_predict` (the server's `--n-predict`) where the
    /// request names none.
    pub fn or_n_predict(mut self, n_predict: Option<usize>) -> SamplingFields {
        if self.max_tokens.is_none() {
            self.max_tokens = n_predict.map(|n| n.min(i64::MAX as usize) as i64);
        }
        self
    }
}

/// `POST /v1/chat/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatCompletionRequest {
    pub model: Option<String>,
    pub messages: Vec<Message>,
    #[serde(flatten)]
    pub sampling: SamplingFields,
    /// The newer name of `max_tokens`; it wins when both are given.
    pub max_completion_tokens: Option<i64>,
    #[serde(flatten)]
    pub streaming: StreamFields,
    pub logprobs: Option<bool>,
    pub top_logprobs: Option<i64>,
    pub tools: Option<Vec<Json>>,
    pub tool_choice: Option<Json>,
    /// vLLM's: `false` answers a final assistant message with a new turn
    /// instead of continuing it (the default here, as in llama-server).
    pub continue_final_message: Option<bool>,
    /// `false`: at most one tool call (exactly one when a call is forced).
    pub parallel_tool_calls: Option<bool>,
    pub chat_template_kwargs: Option<Map<String, Json>>,
    /// Convenience for `chat_template_kwargs.enable_thinking`.
    pub enable_thinking: Option<bool>,
    /// OpenAI's `reasoning_effort`; `"none"` turns thinking off.
    pub reasoning_effort: Option<String>,
    /// llama-server's: most tokens the thinking block may take before the
    /// server closes it (-1: the server's `--reasoning-budget`; 0: at once).
    /// `reasoning_budget_tokens` (its newer name) wins.
    pub thinking_budget_tokens: Option<i64>,
    pub reasoning_budget_tokens: Option<i64>,
    /// llama-server's: written before `</think>` when the budget closes it
    /// (`reasoning_budget_message` its newer name, which wins).
    pub thinking_budget_message: Option<String>,
    pub reasoning_budget_message: Option<String>,
    /// llama-server's: where the reply's thinking goes (`auto`,
    /// `deepseek`, `deepseek-legacy`, `none`; the server's
    /// `--reasoning-format` when unset).
    pub reasoning_format: Option<String>,
    /// llama-server's: every streamed chunk carries the running `timings`.
    pub timings_per_token: Option<bool>,
    /// llama-server's: while the prompt runs, a chunk with its
    /// `prompt_progress` after each prefill chunk (streams only).
    pub return_progress: Option<bool>,
    /// `response_format` and the other structured-output fields.
    #[serde(flatten)]
    pub constraint: crate::structured::ConstraintFields,
}

impl ChatCompletionRequest {
    pub fn sampling(&self) -> SamplingFields {
        SamplingFields {
            max_tokens: self.max_completion_tokens.or(self.sampling.max_tokens),
            ..self.sampling.clone()
        }
    }
}

/// `POST /v1/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct CompletionRequest {
    pub model: Option<String>,
    pub prompt: Prompt,
    #[serde(flatten)]
    pub sampling: SamplingFields,
    pub best_of: Option<i64>,
    #[serde(flatten)]
    pub streaming: StreamFields,
    /// Number of most likely alternatives per token (0..=20).
    pub logprobs: Option<i64>,
    /// Structured output (`response_format`, `guided_*`, `grammar`, …).
    #[serde(flatten)]
    pub constraint: crate::structured::ConstraintFields,
    /// vLLM's `return_token_ids`: the prompt's and the completion's token
    /// ids in the response (`prompt_token_ids`, `token_ids`).
    pub return_token_ids: Option<bool>,
    /// llama-server's: while the prompt runs, a chunk without text carrying
    /// its `prompt_progress` after each prefill chunk (streams only).
    pub return_progress: Option<bool>,
    pub echo: Option<bool>,
    pub suffix: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(r.streaming.include_usage() && r.streaming.enabled());
    }
}
