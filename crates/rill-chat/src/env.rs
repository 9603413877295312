//! The minijinja environment, configured the way transformers configures jinja2 for chat
//! templates (`ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)` plus
//! `loopcontrols`, `raise_exception`, `strftime_now`, its own `tojson`), with the jinja2/Python
//! behaviours minijinja does not share filled in by hand.

use std::fmt::{self, Write};

use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{AutoEscape, Environment, Error, ErrorKind, State};

use crate::pyfmt::{json_dumps, py_str, JsonOptions};
use crate::pystr::{trim_filter, unknown_method};

/// Carried as the source of the error `raise_exception` returns, so a render failure can be told
/// apart from other errors and reported with the template's own message.
#[derive(Debug)]
pub struct Raised(pub String);

impl fmt::Display for Raised {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Raised {}

pub fn build_environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_keep_trailing_newline(false);
    env.set_auto_escape_callback(|_| AutoEscape::None);
    env.set_unknown_method_callback(unknown_method);
    env.set_formatter(format_value);

    env.add_function("raise_exception", raise_exception);
    env.add_function("strftime_now", strftime_now);

    env.add_filter("tojson", tojson);
    env.add_filter("string", string_filter);
    env.add_filter("trim", |v: &Value, chars: Option<String>| {
        trim_filter(v, chars.as_deref())
    });
    env.add_filter("items", items_filter);
    env.add_filter("join", join_filter);
    env.add_filter("length", length_filter);
    env.add_filter("count", length_filter);

    env.add_test("sequence", is_sequence);
    env.add_test("iterable", is_iterable);
    env.add_test("number", is_number);
    env
}

/// `{{ value }}` prints Python's `str(value)` (`True`, `None`, `['a', 1]`, `1e+16`, ...).
fn format_value(
    out: &mut minijinja::Output<'_>,
    _state: &State,
    value: &Value,
) -> Result<(), Error> {
    let res = match value.as_str() {
        Some(s) => out.write_str(s),
        None => out.write_str(&py_str(value)),
    };
    res.map_err(|_| Error::new(ErrorKind::WriteFailure, "failed to write output"))
}

fn raise_exception(message: Option<Value>) -> Result<Value, Error> {
    let msg = message.as_ref().map(py_str).unwrap_or_default();
    Err(Error::new(ErrorKind::InvalidOperation, msg.clone()).with_source(Raised(msg)))
}

/// `strftime_now(format)`: `datetime.now().strftime(format)` (local time).
fn strftime_now(format: &str) -> Result<Value, Error> {
    let now = chrono::Local::now();
    let mut out = String::new();
    write!(out, "{}", now.format(format)).map_err(|_| {
        Error::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now: invalid format string {format:?}"),
        )
    })?;
    Ok(Value::from(out))
}

/// transformers' `tojson`: `json.dumps(x, ensure_ascii=False, indent=None, separators=None,
/// sort_keys=False)`; positional arguments follow that order.
fn tojson(
    value: &Value,
    ensure_ascii: Option<Value>,
    indent: Option<Value>,
    kwargs: Kwargs,
) -> Result<Value, Error> {
    let ensure_ascii = match ensure_ascii {
        Some(v) => v,
        None => kwargs
            .get::<Option<Value>>("ensure_ascii")?
            .unwrap_or(Value::from(false)),
    };
    let indent = match indent {
        Some(v) => Some(v),
        None => kwargs.get::<Option<Value>>("indent")?,
    };
    let separators = kwargs.get::<Option<Value>>("separators")?;
    let sort_keys = kwargs.get::<Option<Value>>("sort_keys")?;
    kwargs.assert_all_used()?;

    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => Some(match v.kind() {
            ValueKind::String => v.as_str().unwrap_or_default().to_string(),
            ValueKind::Bool => " ".repeat(usize::from(v.is_true())),
            _ => {
                let n = v.as_i64().ok_or_else(|| {
                    Error::new(
                        ErrorKind::InvalidOperation,
                        "tojson: indent must be an int or a str",
                    )
                })?;
                " ".repeat(n.clamp(0, 1024) as usize)
            }
        }),
    };
    let mut opts = JsonOptions::new(
        ensure_ascii.is_true(),
        indent,
        sort_keys.is_some_and(|v| v.is_true()),
    );
    if let Some(seps) = separators.filter(|v| !v.is_none()) {
        let parts: Vec<Value> = seps.try_iter()?.collect();
        match parts.as_slice() {
            [a, b] if a.as_str().is_some() && b.as_str().is_some() => {
                opts.item_sep = a.as_str().unwrap_or_default().to_string();
                opts.key_sep = b.as_str().unwrap_or_default().to_string();
            }
            _ => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    "tojson: separators must be a (item_separator, key_separator) pair of strings",
                ))
            }
        }
    }
    json_dumps(value, &opts).map(Value::from)
}

/// jinja2 `string`: `soft_str`, i.e. Python `str()` (keeps an already-safe string as is).
fn string_filter(value: &Value) -> Value {
    if value.kind() == ValueKind::String {
        value.clone()
    } else {
        Value::from(py_str(value))
    }
}

/// jinja2 `items`: pairs of a mapping; an undefined value gives nothing; anything else fails.
fn items_filter(value: &Value) -> Result<Value, Error> {
    match value.kind() {
        ValueKind::Undefined => Ok(Value::from(Vec::<Value>::new())),
        ValueKind::Map => {
            let mut pairs = Vec::new();
            for key in value.try_iter()? {
                let item = value.get_item(&key)?;
                pairs.push(Value::from(vec![key, item]));
            }
            Ok(Value::from(pairs))
        }
        _ => Err(Error::new(
            ErrorKind::InvalidOperation,
            "Can only get item pairs from a mapping.",
        )),
    }
}

/// jinja2 `join(d='', attribute=None)`: items go through Python `str()`.
fn join_filter(value: &Value, sep: Option<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    let attribute = kwargs.get::<Option<Value>>("attribute")?;
    let sep = match sep {
        Some(s) => Some(s),
        None => kwargs.get::<Option<Value>>("d")?,
    };
    kwargs.assert_all_used()?;
    let sep = sep.as_ref().map(py_str).unwrap_or_default();
    if value.is_undefined() {
        return Ok(Value::from(""));
    }
    let mut out = String::new();
    for (i, item) in value.try_iter()?.enumerate() {
        if i > 0 {
            out.push_str(&sep);
        }
        let item = match &attribute {
            Some(attr) => match attr.as_str() {
                Some(name) => item.get_attr(name)?,
                None => item.get_item(attr)?,
            },
            None => item,
        };
        out.push_str(&py_str(&item));
    }
    Ok(Value::from(out))
}

/// jinja2 `length`/`count`: `len(value)`; undefined has length 0.
fn length_filter(value: &Value) -> Result<Value, Error> {
    if value.is_undefined() {
        return Ok(Value::from(0));
    }
    if let Some(s) = value.as_str() {
        return Ok(Value::from(s.chars().count()));
    }
    match value.len() {
        Some(n) => Ok(Value::from(n)),
        None => Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("object of type '{}' has no len()", value.kind()),
        )),
    }
}

/// jinja2 `sequence`: has `len()` and `__getitem__` (str, list, dict).
fn is_sequence(value: &Value) -> bool {
    matches!(
        value.kind(),
        ValueKind::String | ValueKind::Seq | ValueKind::Map
    )
}

/// jinja2 `iterable`: `iter(value)` works (str, list, dict, and jinja2's `Undefined`).
fn is_iterable(value: &Value) -> bool {
    matches!(
        value.kind(),
        ValueKind::Undefined
            | ValueKind::String
            | ValueKind::Seq
            | ValueKind::Map
            | ValueKind::Iterable
    )
}

/// jinja2 `number`: `isinstance(value, numbers.Number)`, which includes `bool`.
fn is_number(value: &Value) -> bool {
    matches!(value.kind(), ValueKind::Number | ValueKind::Bool)
}

/// Rewrites transformers' `{% generation %}` / `{% endgeneration %}` tags (assistant-mask
/// markers, which render their body unchanged) to `{% if true %}` / `{% endif %}`, keeping the
/// whitespace-control markers so trimming is unchanged.
pub fn rewrite_generation_tags(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(pos) = rest.find("{%") {
        out.push_str(&rest[..pos]);
        let tag = &rest[pos..];
        let Some(end) = tag.find("%}") else {
            out.push_str(tag);
            return out;
        };
        let inner = &tag[2..end];
        let body = inner
            .trim_start_matches(['-', '+'])
            .trim_end_matches(['-', '+']);
        let replacement = match body.trim() {
            "generation" => Some("if true"),
            "endgeneration" => Some("endif"),
            _ => None,
        };
        match replacement {
            Some(rep) => {
                let lead = &inner[..inner.len() - inner.trim_start_matches(['-', '+']).len()];
                let trail = &inner[inner.trim_end_matches(['-', '+']).len()..];
                out.push_str("{%");
                out.push_str(lead);
                out.push(' ');
                out.push_str(rep);
                out.push(' ');
                out.push_str(trail);
                out.push_str("%}");
            }
            None => out.push_str(&tag[..end + 2]),
        }
        rest = &tag[end + 2..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_tags_become_if_blocks() {
        let src = "a{%- generation %}b{% endgeneration -%}c{% if x %}{% endif %}";
        assert_eq!(
            rewrite_generation_tags(src),
            "a{%- if true %}b{% endif -%}c{% if x %}{% endif %}"
        );
    }
}
