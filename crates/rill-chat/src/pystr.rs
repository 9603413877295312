//! Python `str` methods as chat templates call them (`content.split('</think>')[0].rstrip('\n')`).
//!
//! minijinja-contrib's `pycompat` callback covers many of these, but with Rust semantics in places
//! (Unicode `White_Space` instead of `str.isspace`, no `maxsplit`, ...). The ones chat templates
//! lean on are reimplemented here with Python's exact behaviour; anything else falls through to
//! `pycompat`.

use minijinja::value::{Value, ValueKind};
use minijinja::{Error, ErrorKind, State};

use crate::pyfmt::py_str;

/// Python's `str.isspace()` for one character (bidi class WS/B/S or category Zs).
pub fn py_isspace(c: char) -> bool {
    matches!(
        c,
        '\t' | '\n'
            | '\u{b}'
            | '\u{c}'
            | '\r'
            | '\u{1c}'..='\u{1f}'
            | ' '
            | '\u{85}'
            | '\u{a0}'
            | '\u{1680}'
            | '\u{2000}'..='\u{200a}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{202f}'
            | '\u{205f}'
            | '\u{3000}'
    )
}

#[derive(Clone, Copy, PartialEq)]
pub enum Side {
    Both,
    Left,
    Right,
}

/// Python `str.strip/lstrip/rstrip(chars=None)`.
pub fn py_strip<'a>(s: &'a str, chars: Option<&str>, side: Side) -> &'a str {
    let pred = |c: char| match chars {
        Some(set) => set.contains(c),
        None => py_isspace(c),
    };
    match side {
        Side::Both => s.trim_matches(pred),
        Side::Left => s.trim_start_matches(pred),
        Side::Right => s.trim_end_matches(pred),
    }
}

fn bad_args(method: &str, detail: &str) -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!("str.{method}(): {detail}"),
    )
}

fn arg_str<'a>(args: &'a [Value], i: usize, method: &str) -> Result<Option<&'a str>, Error> {
    match args.get(i) {
        None => Ok(None),
        Some(v) if v.is_none() => Ok(None),
        Some(v) => v.as_str().map(Some).ok_or_else(|| {
            bad_args(
                method,
                &format!("argument {} must be str or None, not {}", i + 1, v.kind()),
            )
        }),
    }
}

fn arg_int(args: &[Value], i: usize, method: &str) -> Result<Option<i64>, Error> {
    match args.get(i) {
        None => Ok(None),
        Some(v) if v.is_none() => Ok(None),
        Some(v) => v
            .as_i64()
            .map(Some)
            .ok_or_else(|| bad_args(method, &format!("argument {} must be an integer", i + 1))),
    }
}

fn max_args(args: &[Value], n: usize, method: &str) -> Result<(), Error> {
    if args.len() > n {
        return Err(bad_args(
            method,
            &format!("takes at most {n} arguments ({} given)", args.len()),
        ));
    }
    Ok(())
}

fn str_list<I: IntoIterator<Item = S>, S: Into<String>>(items: I) -> Value {
    Value::from(
        items
            .into_iter()
            .map(|s| Value::from(s.into()))
            .collect::<Vec<_>>(),
    )
}

/// Python slice bounds (`s[start:end]`) over characters, returned as byte offsets.
fn char_slice(s: &str, start: Option<i64>, end: Option<i64>) -> &str {
    let n = s.chars().count() as i64;
    let norm = |i: i64| if i < 0 { (n + i).max(0) } else { i.min(n) };
    let a = start.map(norm).unwrap_or(0);
    let b = end.map(norm).unwrap_or(n);
    if a >= b {
        return "";
    }
    let byte = |ci: i64| {
        s.char_indices()
            .nth(ci as usize)
            .map(|(b, _)| b)
            .unwrap_or(s.len())
    };
    &s[byte(a)..byte(b)]
}

/// Python `str.split()` with no separator: runs of whitespace, at most `maxsplit` splits.
fn split_whitespace(s: &str, maxsplit: i64, from_right: bool) -> Vec<String> {
    let chars: Vec<char> = if from_right {
        s.chars().rev().collect()
    } else {
        s.chars().collect()
    };
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    let mut splits = 0;
    while i < chars.len() {
        while i < chars.len() && py_isspace(chars[i]) {
            i += 1;
        }
        if i == chars.len() {
            break;
        }
        if maxsplit >= 0 && splits == maxsplit {
            // The remainder, with only leading whitespace removed.
            parts.push(chars[i..].iter().collect());
            break;
        }
        let start = i;
        while i < chars.len() && !py_isspace(chars[i]) {
            i += 1;
        }
        parts.push(chars[start..i].iter().collect());
        splits += 1;
    }
    if from_right {
        parts.reverse();
        for p in &mut parts {
            *p = p.chars().rev().collect();
        }
    }
    parts
}

fn split(s: &str, args: &[Value], method: &str) -> Result<Value, Error> {
    max_args(args, 2, method)?;
    let sep = arg_str(args, 0, method)?;
    let maxsplit = arg_int(args, 1, method)?.unwrap_or(-1);
    let from_right = method == "rsplit";
    let Some(sep) = sep else {
        return Ok(str_list(split_whitespace(s, maxsplit, from_right)));
    };
    if sep.is_empty() {
        return Err(Error::new(ErrorKind::InvalidOperation, "empty separator"));
    }
    Ok(match (maxsplit < 0, from_right) {
        (true, _) => str_list(s.split(sep)),
        (false, false) => str_list(s.splitn(maxsplit as usize + 1, sep)),
        (false, true) => {
            let mut v: Vec<&str> = s.rsplitn(maxsplit as usize + 1, sep).collect();
            v.reverse();
            str_list(v)
        }
    })
}

/// Python `str.splitlines(keepends=False)`.
fn splitlines(s: &str, keepends: bool) -> Vec<String> {
    let is_break = |c: char| {
        matches!(
            c,
            '\n' | '\r'
                | '\u{b}'
                | '\u{c}'
                | '\u{1c}'
                | '\u{1d}'
                | '\u{1e}'
                | '\u{85}'
                | '\u{2028}'
                | '\u{2029}'
        )
    };
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        if is_break(c) {
            let mut end = String::from(c);
            if c == '\r' && it.peek() == Some(&'\n') {
                it.next();
                end.push('\n');
            }
            if keepends {
                cur.push_str(&end);
            }
            out.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

fn affix_match(s: &str, args: &[Value], method: &str) -> Result<Value, Error> {
    max_args(args, 3, method)?;
    let Some(pat) = args.first() else {
        return Err(bad_args(method, "takes at least 1 argument (0 given)"));
    };
    let hay = char_slice(s, arg_int(args, 1, method)?, arg_int(args, 2, method)?);
    let test = |p: &str| {
        if method == "startswith" {
            hay.starts_with(p)
        } else {
            hay.ends_with(p)
        }
    };
    if let Some(p) = pat.as_str() {
        return Ok(Value::from(test(p)));
    }
    if matches!(pat.kind(), ValueKind::Seq) {
        for p in pat.try_iter()? {
            let p = p
                .as_str()
                .ok_or_else(|| {
                    bad_args(
                        method,
                        "tuple for startswith/endswith must only contain str",
                    )
                })?
                .to_string();
            if test(&p) {
                return Ok(Value::from(true));
            }
        }
        return Ok(Value::from(false));
    }
    Err(bad_args(method, "first arg must be str or a tuple of str"))
}

fn py_capitalize(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(first) => first
            .to_uppercase()
            .chain(chars.as_str().to_lowercase().chars())
            .collect(),
        None => String::new(),
    }
}

fn py_title(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut prev_cased = false;
    for c in s.chars() {
        let cased = c.is_uppercase() || c.is_lowercase();
        if prev_cased {
            out.extend(c.to_lowercase());
        } else {
            out.extend(c.to_uppercase());
        }
        prev_cased = cased;
    }
    out
}

/// Character index of the first (or last) occurrence of `sub` in `s[start:end]`, like `str.find`.
fn find(s: &str, args: &[Value], method: &str) -> Result<Option<usize>, Error> {
    max_args(args, 3, method)?;
    let sub = arg_str(args, 0, method)?.ok_or_else(|| bad_args(method, "must be str"))?;
    let start = arg_int(args, 1, method)?;
    let hay = char_slice(s, start, arg_int(args, 2, method)?);
    let offset = {
        let n = s.chars().count() as i64;
        start
            .map(|i| if i < 0 { (n + i).max(0) } else { i.min(n) })
            .unwrap_or(0) as usize
    };
    let pos = if method == "rfind" || method == "rindex" {
        hay.rfind(sub)
    } else {
        hay.find(sub)
    };
    Ok(pos.map(|b| offset + hay[..b].chars().count()))
}

/// Dispatches a Python `str` method. `Ok(None)`: not handled here.
pub fn call_str_method(s: &str, method: &str, args: &[Value]) -> Result<Option<Value>, Error> {
    let v = match method {
        "strip" | "lstrip" | "rstrip" => {
            max_args(args, 1, method)?;
            let side = match method {
                "strip" => Side::Both,
                "lstrip" => Side::Left,
                _ => Side::Right,
            };
            Value::from(py_strip(s, arg_str(args, 0, method)?, side))
        }
        "split" | "rsplit" => split(s, args, method)?,
        "splitlines" => {
            max_args(args, 1, method)?;
            let keep = args.first().is_some_and(|v| v.is_true());
            str_list(splitlines(s, keep))
        }
        "replace" => {
            max_args(args, 3, method)?;
            let old =
                arg_str(args, 0, method)?.ok_or_else(|| bad_args(method, "old must be str"))?;
            let new =
                arg_str(args, 1, method)?.ok_or_else(|| bad_args(method, "new must be str"))?;
            match arg_int(args, 2, method)? {
                Some(n) if n >= 0 => Value::from(s.replacen(old, new, n as usize)),
                _ => Value::from(s.replace(old, new)),
            }
        }
        "startswith" | "endswith" => affix_match(s, args, method)?,
        "upper" => Value::from(s.to_uppercase()),
        "lower" => Value::from(s.to_lowercase()),
        "capitalize" => Value::from(py_capitalize(s)),
        "title" => Value::from(py_title(s)),
        "isspace" => Value::from(!s.is_empty() && s.chars().all(py_isspace)),
        "find" | "rfind" => Value::from(find(s, args, method)?.map(|i| i as i64).unwrap_or(-1)),
        "index" | "rindex" => match find(s, args, method)? {
            Some(i) => Value::from(i as i64),
            None => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    "substring not found",
                ))
            }
        },
        "count" => {
            max_args(args, 3, method)?;
            let sub = arg_str(args, 0, method)?.ok_or_else(|| bad_args(method, "must be str"))?;
            let hay = char_slice(s, arg_int(args, 1, method)?, arg_int(args, 2, method)?);
            let n = if sub.is_empty() {
                hay.chars().count() + 1
            } else {
                hay.matches(sub).count()
            };
            Value::from(n as i64)
        }
        "join" => {
            max_args(args, 1, method)?;
            let items = args
                .first()
                .ok_or_else(|| bad_args(method, "takes exactly one argument"))?;
            let mut parts = Vec::new();
            for item in items.try_iter()? {
                match item.as_str() {
                    Some(p) => parts.push(p.to_string()),
                    None => {
                        return Err(Error::new(
                            ErrorKind::InvalidOperation,
                            format!(
                                "sequence item {}: expected str instance, {} found",
                                parts.len(),
                                item.kind()
                            ),
                        ))
                    }
                }
            }
            Value::from(parts.join(s))
        }
        _ => return Ok(None),
    };
    Ok(Some(v))
}

/// The environment's unknown-method callback: Python `str` methods first, then `pycompat`.
pub fn unknown_method(
    state: &State,
    value: &Value,
    method: &str,
    args: &[Value],
) -> Result<Value, Error> {
    if let Some(s) = value.as_str() {
        if let Some(v) = call_str_method(s, method, args)? {
            // Keep the "safe" marker like Markup methods do in jinja2.
            return Ok(match (value.is_safe(), v.as_str()) {
                (true, Some(out)) => Value::from_safe_string(out.to_string()),
                _ => v,
            });
        }
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
}

/// Python `str(value)` then `.strip(chars)`: jinja2's `trim` filter.
pub fn trim_filter(value: &Value, chars: Option<&str>) -> Value {
    let s = py_str(value);
    let out = py_strip(&s, chars, Side::Both).to_string();
    if value.is_safe() {
        Value::from_safe_string(out)
    } else {
        Value::from(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(s: &str, m: &str, args: &[Value]) -> String {
        let v = call_str_method(s, m, args).unwrap().unwrap();
        crate::pyfmt::py_str(&v)
    }

    #[test]
    fn python_split_semantics() {
        assert_eq!(call("  a b  c ", "split", &[]), "['a', 'b', 'c']");
        assert_eq!(
            call("  a b  c ", "split", &[Value::from(()), Value::from(1)]),
            "['a', 'b  c ']"
        );
        assert_eq!(
            call("  a b  c ", "rsplit", &[Value::from(()), Value::from(1)]),
            "['  a b', 'c']"
        );
        assert_eq!(
            call("a,b,,c", "split", &[Value::from(","), Value::from(2)]),
            "['a', 'b', ',c']"
        );
        assert_eq!(
            call("a,b,,c", "rsplit", &[Value::from(","), Value::from(1)]),
            "['a,b,', 'c']"
        );
        assert_eq!(call("", "split", &[]), "[]");
        assert_eq!(call("", "split", &[Value::from("x")]), "['']");
        assert!(call_str_method("a", "split", &[Value::from("")]).is_err());
    }

    #[test]
    fn python_strip_semantics() {
        assert_eq!(
            py_strip("\u{1f}\u{a0} x \u{3000}\u{1c}", None, Side::Both),
            "x"
        );
        assert_eq!(py_strip("\u{200b}x", None, Side::Both), "\u{200b}x");
        assert_eq!(py_strip("xxhixx", Some("x"), Side::Left), "hixx");
    }

    #[test]
    fn misc_methods() {
        assert_eq!(call("they're bill's", "title", &[]), "They'Re Bill'S");
        assert_eq!(
            call("hello world", "find", &[Value::from("o"), Value::from(5)]),
            "7"
        );
        assert_eq!(call("a\r\nb\rc\n", "splitlines", &[]), "['a', 'b', 'c']");
        assert_eq!(
            call("abc", "startswith", &[Value::from("b"), Value::from(1)]),
            "True"
        );
        assert_eq!(
            call("ab", "replace", &[Value::from(""), Value::from("-")]),
            "-a-b-"
        );
        assert_eq!(call("ab", "count", &[Value::from("")]), "3");
    }
}
