//! Separating the model's thinking (`<think>…</think>`) from its answer in
//! streamed text, and trimming the whitespace around each part as it streams.

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

/// Streams text with leading whitespace removed and trailing whitespace held
/// back until more text follows it (so the end comes out trimmed).
#[derive(Debug, Default, Clone)]
pub struct TrimStream {
    started: bool,
    held: String,
}

impl TrimStream {
    pub fn feed(&mut self, text: &str) -> String {
        let text = if self.started {
            text
        } else {
            text.trim_start()
        };
        if text.is_empty() {
            return String::new();
        }
        self.started = true;
        let body = text.trim_end();
        if body.is_empty() {
            self.held.push_str(text);
            return String::new();
        }
        let mut out = std::mem::take(&mut self.held);
        out.push_str(body);
        self.held.push_str(&text[body.len()..]);
        out
    }

    /// Drop held trailing whitespace and start again (a new part begins).
    pub fn reset(&mut self) {
        self.started = false;
        self.held.clear();
    }

    /// Whether anything was emitted since the last reset.
    pub fn started(&self) -> bool {
        self.started
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
    fn trim_stream_trims_both_ends() {
        let mut t = TrimStream::default();
        let out: String = ["\n\n", " a", " \n", "\n", "b\n", "\n"]
            .iter()
            .map(|p| t.feed(p))
            .collect();
        assert_eq!(out, "a \n\nb");
        t.reset();
        assert!(!t.started());
        assert_eq!(t.feed("\n x"), "x");
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
