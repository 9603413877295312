//! A chat reply as it streams: thinking, answer text, tool calls.
//!
//! Engine text goes through the `<think>` splitter; thinking becomes
//! `reasoning_content`, the answer goes through the tool-call splitter (when
//! the request has tools) and becomes `content` or `tool_calls`. Each part is
//! trimmed of the whitespace the template puts around it.
//!
//! Every front end reads replies through these: the server's chat API and
//! `rill chat` alike.

mod json_call;
mod thinking;
mod tool_calls;
mod xml_call;

pub use thinking::{Piece, ThinkSplitter, TrimStream};
pub use tool_calls::{
    parse_hermes, parse_tool_call, parse_xml, partial_suffix, Segment, ToolCall, ToolCallStream,
};
pub use xml_call::{argument_piece, close as close_arguments};

/// A classified piece of a reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    Reasoning(String),
    Content(String),
    /// A tool call begins (the XML and Hermes JSON forms stream): its
    /// function's name.
    CallStart(String),
    /// One complete argument of the call begun: its name and value.
    CallArgument(String, serde_json::Value),
    /// A whole call: after its start and arguments when it streamed, alone
    /// otherwise. Its `arguments` are what the streamed pieces join to.
    Call(ToolCall),
}

/// Where a reply's thinking goes (llama.cpp's `--reasoning-format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ReasoningFormat {
    /// Into `reasoning_content`, apart from the answer (`auto`, `deepseek`).
    #[default]
    Apart,
    /// Into `reasoning_content`, and kept in the content with its tags
    /// (`deepseek-legacy`).
    Both,
    /// Left in the content as the model wrote it, tags and all (`none`).
    InContent,
}

impl ReasoningFormat {
    /// llama.cpp's names: `auto`, `deepseek`, `deepseek-legacy`, `none`.
    pub fn from_name(name: &str) -> Option<ReasoningFormat> {
        match name {
            "auto" | "deepseek" => Some(ReasoningFormat::Apart),
            "deepseek-legacy" => Some(ReasoningFormat::Both),
            "none" => Some(ReasoningFormat::InContent),
            _ => None,
        }
    }
}

pub struct ChatOutput {
    think: ThinkSplitter,
    tools: Option<ToolCallStream>,
    reasoning: TrimStream,
    content: TrimStream,
    format: ReasoningFormat,
    /// With the thinking in the content: the tag the prompt opened the
    /// reply with, put before the reply's first text.
    opened: Option<String>,
}

impl ChatOutput {
    /// `prompt` is the rendered prompt (it tells whether the reply starts
    /// inside `<think>`); `parse_tools` turns on tool-call parsing.
    pub fn new(prompt: &str, parse_tools: bool) -> ChatOutput {
        ChatOutput::with_format(prompt, parse_tools, ReasoningFormat::Apart)
    }

    /// [`new`](Self::new) with the thinking sent where `format` says.
    pub fn with_format(prompt: &str, parse_tools: bool, format: ReasoningFormat) -> ChatOutput {
        let think = ThinkSplitter::new(prompt);
        // The prompt's text from its last `<think>`, whitespace included
        // (`<think>\n`), when the reply starts inside it.
        let opened = (think.in_think && format != ReasoningFormat::Apart)
            .then(|| prompt.rfind("<think>").map(|at| prompt[at..].to_string()))
            .flatten();
        ChatOutput {
            think,
            tools: parse_tools.then(ToolCallStream::new),
            reasoning: TrimStream::default(),
            content: TrimStream::default(),
            format,
            opened,
        }
    }

    pub fn feed(&mut self, text: &str) -> Vec<Part> {
        let pieces = self.think.feed(text);
        self.route(pieces, text, false)
    }

    pub fn finish(&mut self) -> Vec<Part> {
        let pieces = self.think.finish();
        self.route(pieces, "", true)
    }

    /// The split `pieces` of `text` as the format wants them: apart, or the
    /// raw text as the answer (with the thinking too, for `Both`).
    fn route(&mut self, pieces: Vec<Piece>, text: &str, end: bool) -> Vec<Part> {
        if self.format == ReasoningFormat::Apart {
            return self.classify(pieces, end);
        }
        let mut out = Vec::new();
        if self.format == ReasoningFormat::Both {
            let thinking = pieces
                .into_iter()
                .filter(|p| matches!(p, Piece::Thinking(_)));
            out = self.classify(thinking.collect(), false);
        }
        let raw = match self.opened.take() {
            Some(open) => open + text,
            None => text.to_string(),
        };
        let answer = (!raw.is_empty()).then_some(Piece::Answer(raw));
        out.extend(self.classify(answer.into_iter().collect(), end));
        out
    }

    fn classify(&mut self, pieces: Vec<Piece>, end: bool) -> Vec<Part> {
        let mut out = Vec::new();
        for p in pieces {
            match p {
                Piece::Thinking(t) => push(&mut out, Part::Reasoning(self.reasoning.feed(&t))),
                Piece::Answer(a) => match &mut self.tools {
                    Some(tools) => {
                        let segs = tools.feed(&a);
                        self.segments(segs, &mut out);
                    }
                    None => push(&mut out, Part::Content(self.content.feed(&a))),
                },
            }
        }
        if end {
            if let Some(tools) = &mut self.tools {
                let segs = tools.finish();
                self.segments(segs, &mut out);
            }
        }
        out
    }

    fn segments(&mut self, segs: Vec<Segment>, out: &mut Vec<Part>) {
        for s in segs {
            match s {
                Segment::Text(t) => push(out, Part::Content(self.content.feed(&t))),
                Segment::CallStart(name) => {
                    // Whitespace between text and a call (or between calls)
                    // belongs to neither.
                    self.content.reset();
                    out.push(Part::CallStart(name));
                }
                Segment::CallArgument(k, v) => out.push(Part::CallArgument(k, v)),
                Segment::Call(c) => {
                    self.content.reset();
                    out.push(Part::Call(c));
                }
            }
        }
    }
}

fn push(out: &mut Vec<Part>, p: Part) {
    let empty = match &p {
        Part::Reasoning(s) | Part::Content(s) => s.is_empty(),
        Part::CallStart(_) | Part::CallArgument(..) | Part::Call(_) => false,
    };
    if !empty {
        out.push(p);
    }
}

/// A whole reply, gathered (non-streaming responses).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Gathered {
    pub reasoning: String,
    pub content: String,
    pub calls: Vec<ToolCall>,
}

impl Gathered {
    pub fn add(&mut self, parts: Vec<Part>) {
        for p in parts {
            match p {
                Part::Reasoning(s) => self.reasoning.push_str(&s),
                Part::Content(s) => self.content.push_str(&s),
                Part::Call(c) => self.calls.push(c),
                Part::CallStart(_) | Part::CallArgument(..) => {}
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// `text` cut into pieces of `n` characters (the last one shorter), as
    /// a stream of tokens might bring it.
    pub(crate) fn in_pieces(text: &str, n: usize) -> Vec<String> {
        let chars: Vec<char> = text.chars().collect();
        chars.chunks(n).map(|c| c.iter().collect()).collect()
    }

    fn run(prompt: &str, tools: bool, pieces: &[&str]) -> Gathered {
        let mut o = ChatOutput::new(prompt, tools);
        let mut g = Gathered::default();
        for p in pieces {
            g.add(o.feed(p));
        }
        g.add(o.finish());
        g
    }

    #[test]
    fn reasoning_is_split_and_trimmed() {
        let g = run(
            "<|im_start|>assistant\n<think>\n",
            false,
            &[
                "Let me",
                " think.\n",
                "</thi",
                "nk>\n\nThe answer",
                " is 4.",
                "\n",
            ],
        );
        assert_eq!(g.reasoning, "Let me think.");
        assert_eq!(g.content, "The answer is 4.");
        assert!(g.calls.is_empty());
    }

    /// llama.cpp's `--reasoning-format`: `none` leaves the reply as the
    /// model wrote it (from the tag the prompt opened), `deepseek-legacy`
    /// gives the thinking apart and in the content.
    #[test]
    fn reasoning_formats_route_the_thinking() {
        let text = "Let me think.\n</think>\n\nThe answer is 4.\n";
        let pieces = in_pieces(text, 3);
        let gather = |format| {
            let mut o = ChatOutput::with_format("<|im_start|>assistant\n<think>\n", false, format);
            let mut g = Gathered::default();
            for p in &pieces {
                g.add(o.feed(p));
            }
            g.add(o.finish());
            g
        };
        let raw = "<think>\nLet me think.\n</think>\n\nThe answer is 4.";
        let none = gather(ReasoningFormat::InContent);
        assert_eq!((none.reasoning.as_str(), none.content.as_str()), ("", raw));
        let both = gather(ReasoningFormat::Both);
        assert_eq!(
            (both.reasoning.as_str(), both.content.as_str()),
            ("Let me think.", raw)
        );
        let apart = gather(ReasoningFormat::Apart);
        assert_eq!(
            (apart.reasoning.as_str(), apart.content.as_str()),
            ("Let me think.", "The answer is 4.")
        );
        // Thinking off in the prompt: nothing to open.
        let mut o =
            ChatOutput::with_format("<think>\n\n</think>\n\n", false, ReasoningFormat::InContent);
        let mut g = Gathered::default();
        g.add(o.feed("Hi"));
        g.add(o.finish());
        assert_eq!(g.content, "Hi");
        assert_eq!(
            ReasoningFormat::from_name("deepseek"),
            Some(ReasoningFormat::Apart)
        );
        assert_eq!(
            ReasoningFormat::from_name("none"),
            Some(ReasoningFormat::InContent)
        );
        assert_eq!(ReasoningFormat::from_name("raw"), None);
    }

    #[test]
    fn thinking_off_is_all_content() {
        let g = run(
            "<|im_start|>assistant\n<think>\n\n</think>\n\n",
            false,
            &["Hello", " there"],
        );
        assert_eq!(g.reasoning, "");
        assert_eq!(g.content, "Hello there");
    }

    #[test]
    fn tool_calls_after_thinking() {
        let text = "I need the weather.\n</think>\n\nChecking.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n{\"name\": \"t\", \"arguments\": {\"a\": [1]}}\n</tool_call>";
        let pieces = in_pieces(text, 2);
        let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
        let g = run("<think>\n", true, &refs);
        assert_eq!(g.reasoning, "I need the weather.");
        assert_eq!(g.content, "Checking.");
        assert_eq!(
            g.calls,
            vec![
                ToolCall {
                    name: "get_weather".into(),
                    arguments: "{\"city\":\"Paris\"}".into()
                },
                ToolCall {
                    name: "t".into(),
                    arguments: "{\"a\":[1]}".into()
                }
            ]
        );
        // Without tools in the request, the same text stays content.
        let g = run("<think>\n", false, &refs);
        assert!(g.calls.is_empty());
        assert!(g.content.contains("<tool_call>"));
    }
}
