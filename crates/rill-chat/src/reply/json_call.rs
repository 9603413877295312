//! The Hermes JSON tool-call form of Qwen3 / Qwen3-Next, read as it
//! streams, so that a call's arguments go out one by one as each member of
//! its `arguments` object is complete:
//! ```text
//! {"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}
//! ```
//! The call starts once its name is known and its `arguments` object has
//! opened (a name written after the arguments, or arguments given as a JSON
//! string, are read whole at the end instead). As for the XML form, the
//! arguments object is what was streamed (`{"city":"Paris"`, `,"days":3`,
//! then `}`); a repeated key keeps its first value.

use serde_json::{Map, Value as Json};

/// What the text of a call's body says so far.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct JsonCallRead {
    /// The function's name, once the call can stream: the name is known and
    /// the `arguments` object has opened.
    pub started: Option<String>,
    /// The complete members of `arguments`, in order.
    pub args: Map<String, Json>,
    /// The outer object is complete.
    pub finished: bool,
}

/// Reading stopped before the end of the text.
enum Stop {
    /// The text ends before the next token is whole.
    Incomplete,
    /// Not the form (or not streamable): the caller reads the body whole.
    Bad,
}

type Scan<T> = Result<T, Stop>;

fn skip_ws(s: &[u8], mut i: usize) -> usize {
    while i < s.len() && s[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

fn expect(s: &[u8], i: usize, c: u8) -> Scan<usize> {
    match s.get(i) {
        None => Err(Stop::Incomplete),
        Some(&b) if b == c => Ok(i + 1),
        Some(_) => Err(Stop::Bad),
    }
}

/// The end (one past the closing quote) of the string starting at `i`.
fn string_end(s: &[u8], i: usize) -> Scan<usize> {
    expect(s, i, b'"')?;
    let mut j = i + 1;
    while j < s.len() {
        match s[j] {
            b'\\' => j += 2,
            b'"' => return Ok(j + 1),
            _ => j += 1,
        }
    }
    Err(Stop::Incomplete)
}

/// The end of the JSON value starting at `i`; `end`: the text is whole (a
/// number at its very end is complete).
fn value_end(s: &[u8], i: usize, end: bool) -> Scan<usize> {
    match s.get(i) {
        None => Err(Stop::Incomplete),
        Some(b'"') => string_end(s, i),
        Some(b'{' | b'[') => {
            let mut depth = 0usize;
            let mut j = i;
            while j < s.len() {
                match s[j] {
                    b'"' => {
                        j = string_end(s, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Ok(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            Err(Stop::Incomplete)
        }
        Some(_) => {
            // A number, true, false or null: it runs to a delimiter.
            let mut j = i;
            while j < s.len() && !matches!(s[j], b',' | b'}' | b']') && !s[j].is_ascii_whitespace()
            {
                j += 1;
            }
            if j == s.len() && !end {
                Err(Stop::Incomplete)
            } else {
                Ok(j)
            }
        }
    }
}

/// The value at `text[i..j]`, parsed.
fn parse<T: serde::de::DeserializeOwned>(text: &str, i: usize, j: usize) -> Scan<T> {
    serde_json::from_str(&text[i..j]).map_err(|_| Stop::Bad)
}

/// Reads as much of a Hermes call's body as the text holds (`end`: all of
/// it has come). `None`: the body is not a streamable call.
pub(crate) fn read(text: &str, end: bool) -> Option<JsonCallRead> {
    let mut out = JsonCallRead::default();
    match read_into(text, end, &mut out) {
        Ok(()) | Err(Stop::Incomplete) => Some(out),
        // Once the call has started streaming, what went out stands: the
        // call ends with the arguments read so far.
        Err(Stop::Bad) if out.started.is_some() => Some(out),
        Err(Stop::Bad) => None,
    }
}

fn read_into(text: &str, end: bool, out: &mut JsonCallRead) -> Scan<()> {
    let s = text.as_bytes();
    let mut name: Option<String> = None;
    let mut i = expect(s, skip_ws(s, 0), b'{')?;
    loop {
        i = skip_ws(s, i);
        if s.get(i) == Some(&b'}') {
            out.finished = true;
            return Ok(());
        }
        let key_end = string_end(s, i)?;
        let key: String = parse(text, i, key_end)?;
        i = skip_ws(s, expect(s, skip_ws(s, key_end), b':')?);
        match key.as_str() {
            "arguments" | "parameters" if out.started.is_none() => {
                // Only an object streams, and only once the name is known.
                let Some(n) = name.clone() else {
                    return Err(Stop::Bad);
                };
                i = expect(s, i, b'{')?;
                out.started = Some(n);
                i = read_arguments(text, i, end, &mut out.args)?;
            }
            _ => {
                let j = value_end(s, i, end)?;
                if key == "name" {
                    let v: Json = parse(text, i, j)?;
                    match v {
                        Json::String(n) if !n.is_empty() && name.is_none() => name = Some(n),
                        _ => return Err(Stop::Bad),
                    }
                }
                i = j;
            }
        }
        i = skip_ws(s, i);
        match s.get(i) {
            None => return Err(Stop::Incomplete),
            Some(b',') => i += 1,
            Some(b'}') => {
                out.finished = true;
                return Ok(());
            }
            Some(_) => return Err(Stop::Bad),
        }
    }
}

/// The members of the arguments object after its `{` at `i`, into `args`;
/// the position after its `}`.
fn read_arguments(
    text: &str,
    mut i: usize,
    end: bool,
    args: &mut Map<String, Json>,
) -> Scan<usize> {
    let s = text.as_bytes();
    i = skip_ws(s, i);
    if s.get(i) == Some(&b'}') {
        return Ok(i + 1);
    }
    loop {
        i = skip_ws(s, i);
        let key_end = string_end(s, i)?;
        let key: String = parse(text, i, key_end)?;
        i = skip_ws(s, expect(s, skip_ws(s, key_end), b':')?);
        let j = value_end(s, i, end)?;
        let value: Json = parse(text, i, j)?;
        args.entry(key).or_insert(value);
        i = skip_ws(s, j);
        match s.get(i) {
            None => return Err(Stop::Incomplete),
            Some(b',') => i += 1,
            Some(b'}') => return Ok(i + 1),
            Some(_) => return Err(Stop::Bad),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args_of(r: &JsonCallRead) -> Json {
        Json::Object(r.args.clone())
    }

    #[test]
    fn members_complete_one_by_one() {
        let full = r#"{"name": "get_weather", "arguments": {"city": "Paris, \"FR\"", "days": 3, "opts": {"a": [1, {"b": "}"}]}}}"#;
        let mut seen = Vec::new();
        for cut in 0..=full.len() {
            let r = read(&full[..cut], false).expect("streamable");
            seen.push((r.started.clone(), r.args.len(), r.finished));
        }
        // The call starts at the arguments' `{`, not before.
        let start = full.find("{\"city").unwrap();
        assert_eq!(seen[start].0, None);
        assert_eq!(seen[start + 1].0.as_deref(), Some("get_weather"));
        // `days` is complete at its comma, not at `3` (it might go on: 31).
        let days = full.find("3,").unwrap();
        assert_eq!(seen[days + 1].1, 1);
        assert_eq!(seen[days + 2].1, 2);
        // Arguments never shrink, and the whole text finishes.
        assert!(seen.windows(2).all(|w| w[0].1 <= w[1].1));
        let last = read(full, false).unwrap();
        assert!(last.finished);
        assert_eq!(
            args_of(&last),
            json!({"city": "Paris, \"FR\"", "days": 3, "opts": {"a": [1, {"b": "}"}]}})
        );
    }

    #[test]
    fn what_cannot_stream_is_left_whole() {
        // The name after the arguments; arguments as a JSON string; not JSON.
        assert_eq!(read(r#"{"arguments": {"a": 1}, "name": "f"}"#, true), None);
        assert_eq!(
            read(r#"{"name": "f", "arguments": "{\"a\": 1}"}"#, true),
            None
        );
        assert_eq!(read("not json", true), None);
        assert_eq!(read(r#"{"name": 5, "arguments": {}}"#, true), None);
        // Undecided is not refused: nothing yet, or a name not yet closed.
        assert_eq!(read("", false), Some(JsonCallRead::default()));
        assert_eq!(
            read(r#"{"name": "ge"#, false),
            Some(JsonCallRead::default())
        );
    }

    #[test]
    fn a_number_at_the_end_is_complete_only_at_the_end() {
        let text = r#"{"name": "f", "parameters": {"n": 12"#;
        assert_eq!(read(text, false).unwrap().args.len(), 0);
        assert_eq!(args_of(&read(text, true).unwrap()), json!({"n": 12}));
    }

    #[test]
    fn a_started_call_that_breaks_keeps_what_streamed() {
        let r = read(r#"{"name": "f", "arguments": {"a": 1, "b" oops}}"#, true).unwrap();
        assert_eq!(r.started.as_deref(), Some("f"));
        assert_eq!(args_of(&r), json!({"a": 1}));
        // A repeated key keeps its first value, as it streamed.
        let r = read(r#"{"name": "f", "arguments": {"a": 1, "a": 2}}"#, true).unwrap();
        assert_eq!(args_of(&r), json!({"a": 1}));
    }
}
