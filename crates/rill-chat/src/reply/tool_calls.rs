//! Tool calls in model output.
//!
//! Two forms are understood, both inside `<tool_call>…</tool_call>`:
//! - Qwen3.5's XML form, as its chat template teaches it:
//!   ```text
//!   <tool_call>
//!   <function=NAME>
//!   <parameter=P>
//!   VALUE
//!   </parameter>
//!   </function>
//!   </tool_call>
//!   ```
//!   A value is taken as JSON when it parses as JSON, otherwise as a string.
//! - The Hermes JSON form of Qwen3 / Qwen3-Next:
//!   `<tool_call>\n{"name": NAME, "arguments": {…}}\n</tool_call>`.
//!
//! [`ToolCallStream`] separates calls from the surrounding text as it
//! streams, holding back anything that may be the start of a call.

use super::json_call;
use super::xml_call::{opening, Opening, XmlCall};
use serde_json::{Map, Value as Json};

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

/// A parsed call: the function name and its arguments as a JSON object text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    pub name: String,
    pub arguments: String,
}

/// Parse the inside of one `<tool_call>` block (either form).
pub fn parse_tool_call(body: &str) -> Option<ToolCall> {
    let body = body.trim();
    if body.starts_with("<function=") {
        parse_xml(body)
    } else if body.starts_with('{') {
        parse_hermes(body)
    } else {
        None
    }
}

/// `<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n…</function>`
pub fn parse_xml(body: &str) -> Option<ToolCall> {
    let Opening::Function(name, at) = opening(body) else {
        return None;
    };
    let mut call = XmlCall::new(name);
    let rest = &body[at..];
    let taken = call.read(rest, true, true, |_, _| {})?;
    // After the parameters: `</function>` (or nothing, if the model left it out).
    let tail = rest[taken..].trim();
    if !(tail.is_empty() || tail == "</function>") {
        return None;
    }
    Some(ToolCall {
        name: call.name.clone(),
        arguments: call.arguments(),
    })
}

/// `{"name": NAME, "arguments": {…}}` (`arguments` may also be a JSON string,
/// or be called `parameters`).
pub fn parse_hermes(body: &str) -> Option<ToolCall> {
    let v: Json = serde_json::from_str(body.trim()).ok()?;
    let obj = v.as_object()?;
    let name = obj.get("name")?.as_str()?;
    if name.is_empty() {
        return None;
    }
    let args = obj
        .get("arguments")
        .or_else(|| obj.get("parameters"))
        .cloned()
        .unwrap_or(Json::Object(Map::new()));
    let arguments = match args {
        Json::String(s) => match serde_json::from_str::<Json>(&s) {
            Ok(j @ Json::Object(_)) => j.to_string(),
            _ => return None,
        },
        j @ Json::Object(_) => j.to_string(),
        Json::Null => "{}".to_string(),
        _ => return None,
    };
    Some(ToolCall {
        name: name.to_string(),
        arguments,
    })
}

/// A piece of answer text, classified.
#[derive(Debug, Clone, PartialEq)]
pub enum Segment {
    Text(String),
    /// A call begins: its function's name is known; its arguments follow
    /// one by one, then the whole [`Segment::Call`].
    CallStart(String),
    /// One argument of the call begun, complete.
    CallArgument(String, Json),
    /// A whole call (after its start and arguments when it streamed).
    Call(ToolCall),
}

/// Splits streamed answer text into plain text and tool calls; a call in
/// the XML form or the Hermes JSON form streams (its start once the name is
/// known, then each argument as it completes); what is neither comes whole
/// at its end.
#[derive(Debug, Default, Clone)]
pub struct ToolCallStream {
    held: String,
    in_call: bool,
    /// The XML call being streamed.
    xml: Option<XmlCall>,
    /// A Hermes JSON call being read: how many of its arguments went out
    /// (`None` before its start went out).
    json: Option<Option<usize>>,
    /// The call's body is not the XML form: read it whole at its end.
    whole: bool,
}

impl ToolCallStream {
    pub fn new() -> ToolCallStream {
        ToolCallStream::default()
    }

    pub fn feed(&mut self, text: &str) -> Vec<Segment> {
        self.held.push_str(text);
        let mut out = Vec::new();
        loop {
            if self.in_call {
                if !self.advance_call(false, &mut out) {
                    return out;
                }
            } else if let Some(at) = self.held.find(OPEN) {
                let before: String = self.held[..at].to_string();
                push_text(&mut out, before);
                self.held.drain(..at + OPEN.len());
                self.in_call = true;
            } else {
                let keep = partial_suffix(&self.held, OPEN);
                let cut = self.held.len() - keep;
                let now: String = self.held[..cut].to_string();
                self.held.drain(..cut);
                push_text(&mut out, now);
                return out;
            }
        }
    }

    /// Reads the open call as far as the text goes (all of it when `end`):
    /// true when the call ended.
    fn advance_call(&mut self, end: bool, out: &mut Vec<Segment>) -> bool {
        if self.xml.is_none() && self.json.is_none() && !self.whole {
            match opening(&self.held) {
                Opening::Function(name, at) => {
                    self.held.drain(..at);
                    out.push(Segment::CallStart(name.clone()));
                    self.xml = Some(XmlCall::new(name));
                }
                Opening::Undecided if !end && !self.held.contains(CLOSE) => return false,
                _ if self.held.trim_start().starts_with('{') => self.json = Some(None),
                _ => self.whole = true,
            }
        }
        let close = self.held.find(CLOSE);
        let ends = end || close.is_some();
        if self.json.is_some() {
            if let Some(call) = self.advance_json(close, ends, out) {
                out.push(Segment::Call(call));
            } else if !ends {
                return false;
            } else {
                self.push_whole(close, out);
            }
        } else if let Some(call) = &mut self.xml {
            let region = &self.held[..close.unwrap_or(self.held.len())];
            let taken = call
                .read(region, ends, false, |k, v| {
                    out.push(Segment::CallArgument(k.to_string(), v.clone()))
                })
                .unwrap_or(0);
            if !ends {
                self.held.drain(..taken);
                return false;
            }
            out.push(Segment::Call(ToolCall {
                name: call.name.clone(),
                arguments: call.arguments(),
            }));
        } else if ends {
            self.push_whole(close, out);
        } else {
            return false;
        }
        let at = close.map_or(self.held.len(), |c| c + CLOSE.len());
        self.held.drain(..at);
        self.in_call = false;
        self.xml = None;
        self.json = None;
        self.whole = false;
        true
    }

    /// Streams a Hermes call's start and new arguments out of its text so
    /// far (up to `close`); the whole call once it ends (`ends`: its text
    /// is all there) if it streamed. A body that turns out not to stream
    /// before it started is read whole instead.
    fn advance_json(
        &mut self,
        close: Option<usize>,
        ends: bool,
        out: &mut Vec<Segment>,
    ) -> Option<ToolCall> {
        let body = &self.held[..close.unwrap_or(self.held.len())];
        let sent = self.json.as_mut()?;
        let Some(read) = json_call::read(body, ends) else {
            // Not streamable, and nothing of it went out: whole, at its end.
            self.json = None;
            self.whole = true;
            return None;
        };
        let name = read.started?;
        let from = match sent {
            Some(n) => *n,
            None => {
                out.push(Segment::CallStart(name.clone()));
                0
            }
        };
        for (k, v) in read.args.iter().skip(from) {
            out.push(Segment::CallArgument(k.clone(), v.clone()));
        }
        *sent = Some(read.args.len());
        ends.then(|| ToolCall {
            name,
            arguments: Json::Object(read.args).to_string(),
        })
    }

    /// The call's body read whole: a call, or (not one) its text.
    fn push_whole(&self, close: Option<usize>, out: &mut Vec<Segment>) {
        let at = close.unwrap_or(self.held.len());
        let body = &self.held[..at];
        match parse_tool_call(body) {
            Some(call) => out.push(Segment::Call(call)),
            None if close.is_some() => push_text(out, format!("{OPEN}{body}{CLOSE}")),
            None => push_text(out, format!("{OPEN}{body}")),
        }
    }

    /// The end of the output: an unterminated call is parsed if it can be,
    /// otherwise returned as text.
    pub fn finish(&mut self) -> Vec<Segment> {
        let mut out = Vec::new();
        if self.in_call {
            self.advance_call(true, &mut out);
        }
        let rest = std::mem::take(&mut self.held);
        push_text(&mut out, rest);
        out
    }
}

fn push_text(out: &mut Vec<Segment>, s: String) {
    if !s.is_empty() {
        out.push(Segment::Text(s));
    }
}

/// Length of the longest suffix of `s` that is a proper prefix of `tag`.
pub fn partial_suffix(s: &str, tag: &str) -> usize {
    (1..tag.len())
        .rev()
        .find(|&i| s.ends_with(&tag[..i]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(call: &ToolCall) -> Json {
        serde_json::from_str(&call.arguments).unwrap()
    }

    #[test]
    fn xml_form_as_the_qwen35_template_writes_it() {
        let body = "\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=opts>\n{\"unit\": \"C\", \"hourly\": [1, 2]}\n</parameter>\n<parameter=note>\nline one\nline two\n</parameter>\n</function>\n";
        let c = parse_tool_call(body).unwrap();
        assert_eq!(c.name, "get_weather");
        assert_eq!(
            args(&c),
            serde_json::json!({"city": "Paris", "days": 3, "opts": {"unit": "C", "hourly": [1, 2]}, "note": "line one\nline two"})
        );
        // Key order is kept.
        assert!(c.arguments.starts_with("{\"city\""), "{}", c.arguments);
    }

    #[test]
    fn xml_edge_cases() {
        let c = parse_xml("<function=ping>\n</function>").unwrap();
        assert_eq!((c.name.as_str(), c.arguments.as_str()), ("ping", "{}"));
        let c = parse_xml("<function=f>\n<parameter=a>\ntrue\n</parameter>\n<parameter=b>\n\"quoted\"\n</parameter>\n<parameter=c>\n12abc\n</parameter>\n").unwrap();
        assert_eq!(
            args(&c),
            serde_json::json!({"a": true, "b": "quoted", "c": "12abc"})
        );
        let c = parse_xml("<function=f>\n<parameter=a>\nx\n<parameter=b>\ny</function>").unwrap();
        assert_eq!(args(&c), serde_json::json!({"a": "x", "b": "y"}));
        assert!(parse_xml("<function=>\n</function>").is_none());
        assert!(parse_xml("<function=f>\ngarbage\n</function>").is_none());
        assert!(parse_tool_call("just text").is_none());
    }

    #[test]
    fn hermes_form() {
        let c = parse_tool_call(
            "\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n",
        )
        .unwrap();
        assert_eq!(c.name, "get_weather");
        assert_eq!(args(&c), serde_json::json!({"city": "Paris", "days": 3}));
        let c = parse_hermes("{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}").unwrap();
        assert_eq!(args(&c), serde_json::json!({"a": 1}));
        let c = parse_hermes("{\"name\": \"f\"}").unwrap();
        assert_eq!(c.arguments, "{}");
        assert!(parse_hermes("{\"name\": \"f\", \"arguments\": 3}").is_none());
        assert!(parse_hermes("{\"arguments\": {}}").is_none());
        assert!(parse_hermes("{not json").is_none());
    }

    fn run(pieces: &[&str]) -> Vec<Segment> {
        let mut s = ToolCallStream::new();
        let mut out = Vec::new();
        for p in pieces {
            out.extend(s.feed(p));
        }
        out.extend(s.finish());
        // Merge adjacent text for easy comparison.
        let mut merged: Vec<Segment> = Vec::new();
        for seg in out {
            match (merged.last_mut(), seg) {
                (Some(Segment::Text(a)), Segment::Text(b)) => a.push_str(&b),
                (_, seg) => merged.push(seg),
            }
        }
        merged
    }

    #[test]
    fn stream_splits_calls_across_pieces() {
        let text = "Let me check.\n\n<tool_call>\n<function=f>\n<parameter=x>\n1\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>";
        // Feed it in every split into pieces of 3 characters.
        let pieces = super::super::tests::in_pieces(text, 3);
        let out = run(&pieces.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(
            out,
            vec![
                Segment::Text("Let me check.\n\n".into()),
                Segment::CallStart("f".into()),
                Segment::CallArgument("x".into(), serde_json::json!(1)),
                Segment::Call(ToolCall {
                    name: "f".into(),
                    arguments: "{\"x\":1}".into()
                }),
                Segment::Text("\n".into()),
                Segment::CallStart("g".into()),
                Segment::Call(ToolCall {
                    name: "g".into(),
                    arguments: "{}".into()
                }),
            ]
        );
    }

    #[test]
    fn a_hermes_call_streams_its_name_then_each_argument() {
        let text = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par}is\", \"days\": 12, \"opts\": {\"u\": [\"C\"]}}}\n</tool_call>";
        let want_args = serde_json::json!({"city": "Par}is", "days": 12, "opts": {"u": ["C"]}});
        for size in [1, 2, 5, 13] {
            let pieces = super::super::tests::in_pieces(text, size);
            let out = run(&pieces.iter().map(String::as_str).collect::<Vec<_>>());
            let Some((Segment::Call(call), streamed)) = out.split_last() else {
                panic!("{out:?}");
            };
            assert_eq!(streamed[0], Segment::CallStart("get_weather".into()));
            let pieces: Vec<_> = streamed[1..]
                .iter()
                .map(|s| match s {
                    Segment::CallArgument(k, v) => (k.clone(), v.clone()),
                    other => panic!("{other:?}"),
                })
                .collect();
            assert_eq!(pieces.len(), 3, "{out:?}");
            // The pieces a client joins are the call's arguments.
            let mut joined = String::new();
            for (i, (k, v)) in pieces.iter().enumerate() {
                joined.push_str(&super::super::argument_piece(i == 0, k, v));
            }
            joined.push_str(super::super::close_arguments(pieces.is_empty()));
            assert_eq!(joined, call.arguments);
            assert_eq!(args(call), want_args);
        }
        // Feeding it token by token, each argument goes out as soon as it
        // is complete: "days" at its comma.
        let mut s = ToolCallStream::new();
        assert_eq!(s.feed("<tool_call>\n{\"name\": \"f\", "), vec![]);
        assert_eq!(
            s.feed("\"arguments\": {\"n\": 1"),
            vec![Segment::CallStart("f".into())]
        );
        assert_eq!(
            s.feed("2, "),
            vec![Segment::CallArgument("n".into(), serde_json::json!(12))]
        );
        // Arguments given as a string, or the name after them: whole.
        let out = run(&["<tool_call>{\"arguments\": {\"a\": 1}, \"name\": \"f\"}</tool_call>"]);
        assert_eq!(
            out,
            vec![Segment::Call(ToolCall {
                name: "f".into(),
                arguments: "{\"a\":1}".into()
            })]
        );
    }

    #[test]
    fn stream_holds_only_possible_tags() {
        let mut s = ToolCallStream::new();
        assert_eq!(s.feed("a <tool"), vec![Segment::Text("a ".into())]);
        assert_eq!(s.feed("box>"), vec![Segment::Text("<toolbox>".into())]);
        assert_eq!(s.feed("x <"), vec![Segment::Text("x ".into())]);
        assert_eq!(s.finish(), vec![Segment::Text("<".into())]);
    }

    #[test]
    fn stream_bad_or_unterminated_calls() {
        // A block that does not parse comes back as text.
        assert_eq!(
            run(&["<tool_call>oops</tool_call> end"]),
            vec![Segment::Text("<tool_call>oops</tool_call> end".into())]
        );
        // Generation stopped before </tool_call>: still a call if complete.
        assert_eq!(
            run(&["<tool_call>\n<function=f>\n</function>\n"]),
            vec![
                Segment::CallStart("f".into()),
                Segment::Call(ToolCall {
                    name: "f".into(),
                    arguments: "{}".into()
                })
            ]
        );
        assert_eq!(
            run(&["<tool_call>\n{\"name\": "]),
            vec![Segment::Text("<tool_call>\n{\"name\": ".into())]
        );
    }

    #[test]
    fn an_xml_call_streams_its_name_then_each_argument() {
        let mut s = ToolCallStream::new();
        assert_eq!(s.feed("<tool_call>\n<funct"), vec![]);
        assert_eq!(
            s.feed("ion=get_weather>\n<parameter=city>\nPar"),
            vec![Segment::CallStart("get_weather".into())]
        );
        assert_eq!(s.feed("is\n</param"), vec![]);
        assert_eq!(
            s.feed("eter>\n<parameter=days>\n3\n</parameter>\n"),
            vec![
                Segment::CallArgument("city".into(), serde_json::json!("Paris")),
                Segment::CallArgument("days".into(), serde_json::json!(3)),
            ]
        );
        let end = s.feed("</function>\n</tool_call>after");
        assert_eq!(
            end,
            vec![
                Segment::Call(ToolCall {
                    name: "get_weather".into(),
                    arguments: "{\"city\":\"Paris\",\"days\":3}".into()
                }),
                Segment::Text("after".into()),
            ]
        );
    }

    #[test]
    fn streamed_pieces_join_to_the_arguments_in_every_split() {
        use crate::reply::{argument_piece, close_arguments};
        let text = "<tool_call>\n<function=f>\n<parameter=a>\nx y\n</parameter>\n<parameter=b>\n{\"k\": [1, 2]}\n</parameter>\n<parameter=a>\nagain\n</parameter>\n<parameter=c>\n\"q\"\n</function>\n</tool_call>";
        for n in [1, 2, 5, 13, text.len()] {
            let pieces = super::super::tests::in_pieces(text, n);
            let mut s = ToolCallStream::new();
            let mut segs = Vec::new();
            for p in &pieces {
                segs.extend(s.feed(p));
            }
            segs.extend(s.finish());
            let mut joined = String::new();
            let mut sent = 0;
            let mut whole = None;
            for seg in segs {
                match seg {
                    Segment::CallStart(name) => assert_eq!(name, "f"),
                    Segment::CallArgument(k, v) => {
                        joined.push_str(&argument_piece(sent == 0, &k, &v));
                        sent += 1;
                    }
                    Segment::Call(c) => {
                        joined.push_str(close_arguments(sent == 0));
                        whole = Some(c);
                    }
                    Segment::Text(t) => panic!("text {t:?}"),
                }
            }
            let whole = whole.expect("one call");
            // A repeated parameter keeps its first value.
            assert_eq!(joined, whole.arguments, "pieces of {n}");
            assert_eq!(
                args(&whole),
                serde_json::json!({"a": "x y", "b": {"k": [1, 2]}, "c": "q"})
            );
            assert_eq!(parse_tool_call(&text[11..text.len() - 12]), Some(whole));
        }
    }
}
