//! Log-probabilities in the two OpenAI shapes: chat
//! (`{"content": [{token, logprob, bytes, top_logprobs}]}`) and legacy
//! completions (`{tokens, token_logprobs, top_logprobs, text_offset}`).

use rill_engine::TokenInfo;
use rill_tokenizer::Tokenizer;
use serde::Serialize;
use serde_json::{Map, Value as Json};

/// One alternative of a chat token.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TopLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
}

/// One generated token of a chat completion: the token as its
/// alternatives are given, and those.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ChatTokenLogprob {
    #[serde(flatten)]
    pub chosen: TopLogprob,
    pub top_logprobs: Vec<TopLogprob>,
}

/// `choices[].logprobs` of a chat completion (or chunk).
#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub struct ChatLogprobs {
    pub content: Vec<ChatTokenLogprob>,
}

fn piece(tok: &Tokenizer, id: u32) -> (String, Vec<u8>) {
    let bytes = tok
        .token_to_piece(id)
        .map(<[u8]>::to_vec)
        .unwrap_or_default();
    (String::from_utf8_lossy(&bytes).into_owned(), bytes)
}

/// A log-probability as JSON can carry it (`-inf` becomes a large negative).
fn finite(lp: f32) -> f32 {
    if lp.is_finite() {
        lp
    } else {
        -9999.0
    }
}

/// A token and its log-probability, as JSON carries them.
fn alternative(tok: &Tokenizer, id: u32, lp: f32) -> TopLogprob {
    let (token, bytes) = piece(tok, id);
    TopLogprob {
        token,
        logprob: finite(lp),
        bytes,
    }
}

pub fn chat_token(tok: &Tokenizer, t: &TokenInfo) -> Option<ChatTokenLogprob> {
    Some(ChatTokenLogprob {
        chosen: alternative(tok, t.id, t.logprob?),
        top_logprobs: (t.top.iter())
            .map(|&(id, lp)| alternative(tok, id, lp))
            .collect(),
    })
}

/// `choices[].logprobs` of a legacy completion.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct CompletionLogprobs {
    pub tokens: Vec<String>,
    pub token_logprobs: Vec<f32>,
    pub top_logprobs: Vec<Map<String, Json>>,
    pub text_offset: Vec<usize>,
}

impl CompletionLogprobs {
    /// Add a token that starts at character offset `offset` of the text.
    pub fn push(&mut self, tok: &Tokenizer, t: &TokenInfo, offset: usize) {
        let Some(lp) = t.logprob else {
            return;
        };
        self.tokens.push(piece(tok, t.id).0);
        self.token_logprobs.push(finite(lp));
        let mut top = Map::new();
        for &(id, lp) in &t.top {
            top.insert(piece(tok, id).0, Json::from(finite(lp)));
        }
        self.top_logprobs.push(top);
        self.text_offset.push(offset);
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
}
