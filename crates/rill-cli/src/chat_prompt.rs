//! Chat-template plumbing shared by `rill run --chat` and `rill chat`.

use anyhow::{Context, Result};
use rill_chat::{ChatRequest, ChatTemplate, Message};
use rill_gguf::{GgufFile, MetaValue};
use rill_tokenizer::Tokenizer;

/// The file's chat template, with its BOS/EOS strings as transformers passes them.
pub fn load_template(file: &GgufFile, tok: &Tokenizer) -> Result<ChatTemplate> {
    let source = file
        .get("tokenizer.chat_template")
        .and_then(MetaValue::as_str)
        .context("the model file has no chat template (tokenizer.chat_template)")?;
    let text = |id: Option<u32>| id.and_then(|i| tok.token_text(i)).map(str::to_string);
    ChatTemplate::new(source, text(tok.bos_id()), text(tok.eos_id()))
        .context("the model's chat template does not compile")
}

/// Render `messages` with a generation prompt. `thinking: None` leaves the
/// template's default (Qwen3.5 thinks unless told not to).
pub fn render(tmpl: &ChatTemplate, messages: &[Message], thinking: Option<bool>) -> Result<String> {
    let mut req = ChatRequest::new(messages.to_vec());
    req.add_generation_prompt = true;
    req.enable_thinking = thinking;
    tmpl.render(&req)
        .context("the chat template failed to render")
}

/// Splits streamed model output into thinking (`<think>…</think>`) and answer.
#[derive(Debug, Default)]
pub struct ThinkSplitter {
    pub in_think: bool,
    held: String,
    pub thinking: String,
    pub answer: String,
}

/// A piece of output, classified.
#[derive(Debug, PartialEq, Eq)]
pub enum Piece {
    Thinking(String),
    Answer(String),
}

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

impl ThinkSplitter {
    /// `prompt` decides the start: templates that open `<think>` in the
    /// generation prompt make the model start inside it.
    pub fn new(prompt: &str) -> ThinkSplitter {
        let open = prompt.rfind(OPEN);
        let close = prompt.rfind(CLOSE);
        ThinkSplitter {
            in_think: matches!((open, close), (Some(o), c) if c.is_none_or(|c| c < o)),
            ..Default::default()
        }
    }

    pub fn feed(&mut self, text: &str) -> Vec<Piece> {
        self.held.push_str(text);
        let mut out = Vec::new();
        loop {
            let tag = if self.in_think { CLOSE } else { OPEN };
            if let Some(at) = self.held.find(tag) {
                let before: String = self.held[..at].to_string();
                self.push(before, &mut out);
                self.held.drain(..at + tag.len());
                self.in_think = !self.in_think;
                continue;
            }
            // Keep a possible partial tag at the end.
            let mut keep = 0;
            for i in 1..tag.len() {
                if self.held.ends_with(&tag[..i]) {
                    keep = i;
                }
            }
            let cut = self.held.len() - keep;
            let now: String = self.held[..cut].to_string();
            self.held.drain(..cut);
            self.push(now, &mut out);
            return out;
        }
    }

    pub fn finish(&mut self) -> Vec<Piece> {
        let rest = std::mem::take(&mut self.held);
        let mut out = Vec::new();
        self.push(rest, &mut out);
        out
    }

    fn push(&mut self, s: String, out: &mut Vec<Piece>) {
        if s.is_empty() {
            return;
        }
        if self.in_think {
            self.thinking.push_str(&s);
            out.push(Piece::Thinking(s));
        } else {
            self.answer.push_str(&s);
            out.push(Piece::Answer(s));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_thinking_across_pieces() {
        let mut s = ThinkSplitter::new("<|im_start|>assistant\n<think>\n");
        assert!(s.in_think);
        let mut pieces = Vec::new();
        for p in ["let me ", "think</th", "ink>\n\nThe answer", " is 4."] {
            pieces.extend(s.feed(p));
        }
        pieces.extend(s.finish());
        assert_eq!(s.thinking, "let me think");
        assert_eq!(s.answer, "\n\nThe answer is 4.");
        assert!(pieces
            .iter()
            .all(|p| !matches!(p, Piece::Answer(a) if a.contains('<'))));
    }

    #[test]
    fn closed_think_in_prompt_starts_in_answer() {
        let s = ThinkSplitter::new("<think>\n\n</think>\n\n");
        assert!(!s.in_think);
        let mut s = ThinkSplitter::new("plain");
        assert_eq!(
            s.feed("hi <think>x</think>y"),
            vec![
                Piece::Answer("hi ".into()),
                Piece::Thinking("x".into()),
                Piece::Answer("y".into())
            ]
        );
    }
}
