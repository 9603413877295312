//! Qwen3.5's XML tool-call form, read as it streams, so that a call's
//! arguments can go out one by one as each is complete:
//! ```text
//! <function=NAME>
//! <parameter=P>
//! VALUE
//! </parameter>
//! </function>
//! ```
//! A value is taken as JSON when it parses as JSON, otherwise as a string.
//! The arguments object is the concatenation of what was streamed
//! (`{"P":VALUE` …, then `}`), so a client that joins the pieces gets
//! exactly the call's `arguments`.

use serde_json::{Map, Value as Json};

const FUNCTION: &str = "<function=";
const PARAMETER: &str = "<parameter=";
const PARAMETER_END: &str = "</parameter>";
const FUNCTION_END: &str = "</function>";

/// What the start of a call's body says so far.
pub(crate) enum Opening {
    /// `<function=NAME>` is complete: the name, and the bytes it took.
    Function(String, usize),
    /// It may still become one: wait for more text.
    Undecided,
    /// Not the XML form (or a bad name): read the body whole at its end.
    Other,
}

/// Reads `<function=NAME>` at the start of `body` (after white space).
pub(crate) fn opening(body: &str) -> Opening {
    let lead = body.len() - body.trim_start().len();
    let rest = &body[lead..];
    let Some(after) = rest.strip_prefix(FUNCTION) else {
        return if FUNCTION.starts_with(rest) {
            Opening::Undecided
        } else {
            Opening::Other
        };
    };
    match after.find('>') {
        None if after.contains('\n') => Opening::Other,
        None => Opening::Undecided,
        Some(end) => {
            let name = after[..end].trim();
            if name.is_empty() || name.contains('\n') {
                Opening::Other
            } else {
                Opening::Function(name.to_string(), lead + FUNCTION.len() + end + 1)
            }
        }
    }
}

/// One call being read: its name and the arguments read so far.
#[derive(Debug, Clone)]
pub(crate) struct XmlCall {
    pub name: String,
    args: Map<String, Json>,
}

/// A parameter read from the text after the last one.
enum Next {
    /// `(key, value, bytes taken)`.
    Parameter(String, Json, usize),
    /// No parameter starts here (only white space, or `</function>`).
    None,
    /// A parameter starts but is not complete yet.
    Partial,
    /// Text that is not a parameter.
    Bad,
}

fn next_parameter(rest: &str, end: bool) -> Next {
    let Some(at) = rest.find(PARAMETER) else {
        let tail = rest.trim();
        let only_end = tail.is_empty() || tail.starts_with(FUNCTION_END);
        return if only_end || (!end && FUNCTION_END.starts_with(tail)) {
            Next::None
        } else if !end && PARAMETER.starts_with(tail) {
            Next::Partial
        } else {
            Next::Bad
        };
    };
    if !rest[..at].trim().is_empty() {
        return Next::Bad;
    }
    let after = &rest[at + PARAMETER.len()..];
    let Some(close) = after.find('>') else {
        return if end { Next::Bad } else { Next::Partial };
    };
    let key = after[..close].trim();
    if key.is_empty() || key.contains('\n') {
        return Next::Bad;
    }
    let value = &after[close + 1..];
    let base = at + PARAMETER.len() + close + 1;
    // The value runs to `</parameter>`, or (left unclosed) to the next
    // parameter, the function's end, or the end of the output.
    let (raw, taken) = if let Some(e) = value.find(PARAMETER_END) {
        (&value[..e], base + e + PARAMETER_END.len())
    } else if let Some(e) = value.find(PARAMETER).or_else(|| value.find(FUNCTION_END)) {
        (&value[..e], base + e)
    } else if end {
        (value, base + value.len())
    } else {
        return Next::Partial;
    };
    Next::Parameter(key.to_string(), parameter_value(raw), taken)
}

/// A parameter's value: the template writes `\nVALUE\n`; JSON if it parses.
fn parameter_value(raw: &str) -> Json {
    let v = raw.strip_prefix('\n').unwrap_or(raw);
    let v = v.strip_suffix('\n').unwrap_or(v);
    match serde_json::from_str::<Json>(v.trim()) {
        Ok(j) if !v.trim().is_empty() => j,
        _ => Json::String(v.to_string()),
    }
}

impl XmlCall {
    pub fn new(name: String) -> XmlCall {
        XmlCall {
            name,
            args: Map::new(),
        }
    }

    /// Reads the complete parameters at the start of `text` (all of them
    /// when `end`: the call's text is whole); each new one is handed to
    /// `each` (a repeated key keeps its first value). Returns the bytes
    /// taken, or `None` when `strict` and the text is not parameters.
    pub fn read(
        &mut self,
        text: &str,
        end: bool,
        strict: bool,
        mut each: impl FnMut(&str, &Json),
    ) -> Option<usize> {
        let mut taken = 0;
        loop {
            match next_parameter(&text[taken..], end) {
                Next::Parameter(key, value, n) => {
                    taken += n;
                    if !self.args.contains_key(&key) {
                        each(&key, &value);
                        self.args.insert(key, value);
                    }
                }
                Next::None | Next::Partial => return Some(taken),
                Next::Bad if strict => return None,
                // Streaming: what is not a parameter is passed over.
                Next::Bad => match text[taken..].find(PARAMETER) {
                    Some(at) if at > 0 => taken += at,
                    _ => return Some(if end { text.len() } else { taken }),
                },
            }
        }
    }

    /// The call's arguments: a JSON object of what was read.
    pub fn arguments(&self) -> String {
        Json::Object(self.args.clone()).to_string()
    }
}

/// The text an argument adds to the arguments object as it streams: `{`
/// before the first, `,` before the others (the closing is [`close`]).
pub fn argument_piece(first: bool, key: &str, value: &Json) -> String {
    let key = Json::String(key.to_string());
    format!("{}{key}:{value}", if first { "{" } else { "," })
}

/// The text that ends a streamed arguments object.
pub fn close(none_yet: bool) -> &'static str {
    if none_yet {
        "{}"
    } else {
        "}"
    }
}
