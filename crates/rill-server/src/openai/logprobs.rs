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

/// `choices[].logprobs` of a legacy completion. An echoed prompt's first
/// token has no log-probability: `null` in both lists, as OpenAI gives it.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct CompletionLogprobs {
    pub tokens: Vec<String>,
    pub token_logprobs: Vec<Option<f32>>,
    pub top_logprobs: Vec<Option<Map<String, Json>>>,
    pub text_offset: Vec<usize>,
}

impl CompletionLogprobs {
    /// Add a generated token that starts at character offset `offset` of
    /// the text (none without a log-probability: none was asked for).
    pub fn push(&mut self, tok: &Tokenizer, t: &TokenInfo, offset: usize) {
        if t.logprob.is_some() {
            self.push_scored(tok, t, usize::MAX, offset);
        }
    }

    /// Add a token with at most `k` alternatives, `null`s where it has no
    /// log-probability (an echoed prompt's first).
    fn push_scored(&mut self, tok: &Tokenizer, t: &TokenInfo, k: usize, offset: usize) {
        self.tokens.push(piece(tok, t.id).0);
        self.token_logprobs.push(t.logprob.map(finite));
        self.top_logprobs.push(t.logprob.map(|_| {
            let mut top = Map::new();
            for &(id, lp) in t.top.iter().take(k) {
                top.insert(piece(tok, id).0, Json::from(finite(lp)));
            }
            top
        }));
        self.text_offset.push(offset);
    }

    /// An echoed prompt's tokens, scored with `k` alternatives each: the
    /// logprobs and the prompt's text, whose character count is where the
    /// generated text starts.
    pub fn prompt(tok: &Tokenizer, tokens: &[TokenInfo], k: usize) -> (CompletionLogprobs, String) {
        let mut lp = CompletionLogprobs::default();
        let mut text = TextOffsets::default();
        for t in tokens {
            lp.push_scored(tok, t, k, text.chars);
            text.add(tok.token_to_piece(t.id).unwrap_or_default());
        }
        (lp, text.finish())
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
}

/// vLLM's `prompt_logprobs`: per prompt token (the first `null`), its id
/// and its `k` best alternatives' ids (decimal strings) → `{logprob, rank,
/// decoded_token}`.
pub fn prompt_logprobs(tok: &Tokenizer, tokens: &[TokenInfo], k: usize) -> Vec<Json> {
    let entry = |id: u32, lp: f32, rank: u32| serde_json::json!({"logprob": finite(lp), "rank": rank, "decoded_token": piece(tok, id).0});
    tokens
        .iter()
        .map(|t| {
            let (Some(lp), Some(rank)) = (t.logprob, t.rank) else {
                return Json::Null;
            };
            let mut m = Map::new();
            for (r, &(id, alt)) in t.top.iter().take(k).enumerate() {
                m.insert(id.to_string(), entry(id, alt, r as u32 + 1));
            }
            m.insert(t.id.to_string(), entry(t.id, lp, rank));
            Json::Object(m)
        })
        .collect()
}

/// The text of `ids` as an echo shows it (the tokens' bytes, invalid UTF-8
/// replaced).
pub fn echo_text(tok: &Tokenizer, ids: &[u32]) -> String {
    let mut text = TextOffsets::default();
    for &id in ids {
        text.add(tok.token_to_piece(id).unwrap_or_default());
    }
    text.finish()
}

/// Text decoded a token's bytes at a time, counting its characters as
/// they complete (a token may end inside a character: the next one's
/// offset is that character's).
#[derive(Default)]
struct TextOffsets {
    text: String,
    pending: Vec<u8>,
    chars: usize,
}

impl TextOffsets {
    fn add(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    self.chars += s.chars().count();
                    self.text.push_str(s);
                    self.pending.clear();
                    return;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    let s = std::str::from_utf8(&self.pending[..valid]).unwrap_or_default();
                    self.chars += s.chars().count();
                    self.text.push_str(s);
                    match e.error_len() {
                        // Incomplete at the end: wait for the next token.
                        None => {
                            self.pending.drain(..valid);
                            return;
                        }
                        // Invalid bytes: one replacement character.
                        Some(n) => {
                            self.chars += 1;
                            self.text.push(char::REPLACEMENT_CHARACTER);
                            self.pending.drain(..valid + n);
                        }
                    }
                }
            }
        }
    }

    fn finish(mut self) -> String {
        if !self.pending.is_empty() {
            self.text.push(char::REPLACEMENT_CHARACTER);
        }
        self.text
    }
}

#[cfg(test)]
mod tests {
    use super::TextOffsets;

    #[test]
    fn offsets_count_characters_across_split_tokens() {
        let mut t = TextOffsets::default();
        let mut at = Vec::new();
        // "aé" then "€" split over two tokens, then an invalid byte, then "b".
        for piece in [&b"a\xc3"[..], b"\xa9\xe2\x82", b"\xac", b"\xff", b"b"] {
            at.push(t.chars);
            t.add(piece);
        }
        assert_eq!(at, [0, 1, 2, 3, 4]);
        assert_eq!(t.finish(), "aé€\u{FFFD}b");
    }
}
