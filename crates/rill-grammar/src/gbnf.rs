//! llama.cpp's GBNF grammars (the `grammar` field of llama-server, the
//! `.gbnf` files users keep), translated into llguidance's Lark dialect.
//!
//! GBNF: rules `name ::= alternatives` (names of letters, digits and `-`;
//! the grammar starts at `root`), string literals `"…"` and character
//! classes `[…]` / `[^…]` with the escapes `\x` `\u` `\U` `\t` `\r` `\n`
//! `\\` `\"` `\[` `\]`, `.` for any character, groups, `|`, `*` `+` `?`
//! and `{m}` `{m,}` `{m,n}`, comments from `#` to the end of the line.
//!
//! The translation keeps the language: rule `name` becomes `g_<name>`
//! (letters kept, `-` → `__`, `_` → `_0`, an upper-case letter → `_` and
//! its lower case, so that every name stays a Lark rule and no two collide),
//! `start: g_root`; literals become JSON-escaped strings; classes and `.`
//! become one-character regexes whose characters are written as
//! `\x{…}` escapes. A rule may span lines (it ends where the next
//! `name ::=` begins), which accepts every grammar llama.cpp accepts.

use crate::GrammarError;
use std::collections::BTreeSet;
use std::fmt::Write;

/// Whether `text` looks like GBNF: a line that defines a rule with `::=`
/// (Lark defines them with `:`).
pub fn looks_like_gbnf(text: &str) -> bool {
    text.lines().any(|l| {
        let l = l.trim_start();
        let name_end = l.find(|c: char| !is_name_char(c)).unwrap_or(l.len());
        name_end > 0 && l[name_end..].trim_start().starts_with("::=")
    })
}

/// The Lark grammar of GBNF grammar `src`.
pub fn to_lark(src: &str) -> Result<String, GrammarError> {
    let tokens = lex(src)?;
    let mut p = Parser { t: &tokens, i: 0 };
    let mut rules: Vec<(String, Alt)> = Vec::new();
    while p.i < tokens.len() {
        let name = match p.next() {
            Some(Tok::Name(n)) => n.clone(),
            other => return Err(err(format!("expected a rule name, found {}", show(other)))),
        };
        if !matches!(p.next(), Some(Tok::Defines)) {
            return Err(err(format!("expected ::= after the rule name {name:?}")));
        }
        let body = p.alternates(0)?;
        if rules.iter().any(|(n, _)| *n == name) {
            return Err(err(format!("rule {name:?} is defined twice")));
        }
        rules.push((name, body));
    }
    let defined: BTreeSet<&str> = rules.iter().map(|(n, _)| n.as_str()).collect();
    if !defined.contains("root") {
        return Err(err("the grammar has no root rule".into()));
    }
    let mut out = String::from("start: g_root\n");
    for (name, body) in &rules {
        let _ = write!(out, "{}: ", rule_name(name));
        emit(body, &defined, &mut out)?;
        out.push('\n');
    }
    Ok(out)
}

/// A character of a rule name: llama.cpp's letters, digits and `-`, and
/// `_` as well (some grammars in the wild use it).
fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

fn err(msg: String) -> GrammarError {
    GrammarError(format!("GBNF grammar: {msg}"))
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Name(String),
    Defines,
    Literal(String),
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
    Any,
    LParen,
    RParen,
    Pipe,
    Repeat(usize, Option<usize>),
}

fn show(t: Option<&Tok>) -> String {
    match t {
        None => "the end".into(),
        Some(Tok::Name(n)) => format!("{n:?}"),
        Some(Tok::Defines) => "::=".into(),
        Some(Tok::Pipe) => "|".into(),
        Some(Tok::LParen) => "(".into(),
        Some(Tok::RParen) => ")".into(),
        Some(Tok::Repeat(..)) => "a repetition".into(),
        Some(_) => "a terminal".into(),
    }
}

/// One escaped or plain character of a literal or class at `chars[*i]`.
fn char_at(chars: &[char], i: &mut usize) -> Result<char, GrammarError> {
    let c = chars[*i];
    *i += 1;
    if c != '\\' {
        return Ok(c);
    }
    let Some(&e) = chars.get(*i) else {
        return Err(err("a backslash at the end of the grammar".into()));
    };
    *i += 1;
    let hex = |i: &mut usize, n: usize| -> Result<char, GrammarError> {
        let digits: String = chars.get(*i..*i + n).unwrap_or_default().iter().collect();
        *i += n;
        u32::from_str_radix(&digits, 16)
            .ok()
            .filter(|_| digits.len() == n)
            .and_then(char::from_u32)
            .ok_or_else(|| err(format!("bad escape \\{e}{digits}")))
    };
    Ok(match e {
        'x' => hex(i, 2)?,
        'u' => hex(i, 4)?,
        'U' => hex(i, 8)?,
        't' => '\t',
        'r' => '\r',
        'n' => '\n',
        '\\' | '"' | '[' | ']' | '-' | '^' | '/' => e,
        other => return Err(err(format!("unknown escape \\{other}"))),
    })
}

fn number(chars: &[char], i: &mut usize) -> Option<usize> {
    let start = *i;
    while chars.get(*i).is_some_and(|c| c.is_ascii_digit()) {
        *i += 1;
    }
    chars[start..*i].iter().collect::<String>().parse().ok()
}

fn lex(src: &str) -> Result<Vec<Tok>, GrammarError> {
    let chars: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            _ if c.is_whitespace() => i += 1,
            '#' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            ':' if chars.get(i + 1..i + 3) == Some(&[':', '=']) => {
                out.push(Tok::Defines);
                i += 3;
            }
            '"' => {
                i += 1;
                let mut s = String::new();
                loop {
                    match chars.get(i) {
                        None => return Err(err("a string literal is not closed".into())),
                        Some('"') => break,
                        Some(_) => s.push(char_at(&chars, &mut i)?),
                    }
                }
                i += 1;
                out.push(Tok::Literal(s));
            }
            '[' => {
                i += 1;
                let negated = chars.get(i) == Some(&'^');
                i += usize::from(negated);
                let mut ranges = Vec::new();
                loop {
                    match chars.get(i) {
                        None => return Err(err("a character class is not closed".into())),
                        Some(']') => break,
                        Some(_) => {
                            let lo = char_at(&chars, &mut i)?;
                            let hi = if chars.get(i) == Some(&'-')
                                && chars.get(i + 1).is_some_and(|&c| c != ']')
                            {
                                i += 1;
                                char_at(&chars, &mut i)?
                            } else {
                                lo
                            };
                            if hi < lo {
                                return Err(err(format!("the class range {lo:?}-{hi:?} is empty")));
                            }
                            ranges.push((lo, hi));
                        }
                    }
                }
                i += 1;
                out.push(Tok::Class { negated, ranges });
            }
            '.' => {
                out.push(Tok::Any);
                i += 1;
            }
            '(' | ')' | '|' => {
                out.push(match c {
                    '(' => Tok::LParen,
                    ')' => Tok::RParen,
                    _ => Tok::Pipe,
                });
                i += 1;
            }
            '*' | '+' | '?' => {
                out.push(match c {
                    '*' => Tok::Repeat(0, None),
                    '+' => Tok::Repeat(1, None),
                    _ => Tok::Repeat(0, Some(1)),
                });
                i += 1;
            }
            '{' => {
                i += 1;
                let skip = |i: &mut usize| {
                    while chars.get(*i).is_some_and(|c| *c == ' ') {
                        *i += 1;
                    }
                };
                skip(&mut i);
                let lo = number(&chars, &mut i)
                    .ok_or_else(|| err("a repetition {m,n} needs its minimum".into()))?;
                skip(&mut i);
                let hi = if chars.get(i) == Some(&',') {
                    i += 1;
                    skip(&mut i);
                    number(&chars, &mut i)
                } else {
                    Some(lo)
                };
                skip(&mut i);
                if chars.get(i) != Some(&'}') {
                    return Err(err("a repetition {m,n} is not closed".into()));
                }
                i += 1;
                if hi.is_some_and(|h| h < lo) {
                    return Err(err(format!(
                        "the repetition {{{lo},{}}} is empty",
                        hi.unwrap()
                    )));
                }
                out.push(Tok::Repeat(lo, hi));
            }
            _ if is_name_char(c) => {
                let start = i;
                while chars.get(i).is_some_and(|&c| is_name_char(c)) {
                    i += 1;
                }
                out.push(Tok::Name(chars[start..i].iter().collect()));
            }
            other => return Err(err(format!("unexpected character {other:?}"))),
        }
    }
    Ok(out)
}

/// An atom and the repetitions after it (`(min, max)`, `None`: unbounded).
type Item = (Atom, Vec<(usize, Option<usize>)>);
/// Alternatives, each a sequence of items.
type Alt = Vec<Vec<Item>>;

#[derive(Debug)]
enum Atom {
    Ref(String),
    Literal(String),
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
    Any,
    Group(Alt),
}

struct Parser<'a> {
    t: &'a [Tok],
    i: usize,
}

/// Deepest nesting of groups: the parser and llguidance recurse on it.
const MAX_DEPTH: usize = crate::MAX_NESTING;

impl Parser<'_> {
    fn next(&mut self) -> Option<&Tok> {
        let t = self.t.get(self.i);
        self.i += 1;
        t
    }

    /// Whether the next two tokens start another rule.
    fn at_rule_start(&self) -> bool {
        matches!(
            (self.t.get(self.i), self.t.get(self.i + 1)),
            (Some(Tok::Name(_)), Some(Tok::Defines))
        )
    }

    fn alternates(&mut self, depth: usize) -> Result<Alt, GrammarError> {
        if depth > MAX_DEPTH {
            return Err(err(format!("groups nest deeper than {MAX_DEPTH}")));
        }
        let mut alts = vec![self.sequence(depth)?];
        while self.t.get(self.i) == Some(&Tok::Pipe) {
            self.i += 1;
            alts.push(self.sequence(depth)?);
        }
        Ok(alts)
    }

    fn sequence(&mut self, depth: usize) -> Result<Vec<Item>, GrammarError> {
        let mut seq = Vec::new();
        loop {
            if self.at_rule_start() {
                break;
            }
            let atom = match self.t.get(self.i) {
                None | Some(Tok::Pipe) | Some(Tok::RParen) => break,
                Some(Tok::Name(n)) => Atom::Ref(n.clone()),
                Some(Tok::Literal(s)) => Atom::Literal(s.clone()),
                Some(Tok::Class { negated, ranges }) => Atom::Class {
                    negated: *negated,
                    ranges: ranges.clone(),
                },
                Some(Tok::Any) => Atom::Any,
                Some(Tok::LParen) => {
                    self.i += 1;
                    let inner = self.alternates(depth + 1)?;
                    if self.t.get(self.i) != Some(&Tok::RParen) {
                        return Err(err(format!(
                            "expected ) to close a group, found {}",
                            show(self.t.get(self.i))
                        )));
                    }
                    Atom::Group(inner)
                }
                Some(t @ (Tok::Defines | Tok::Repeat(..))) => {
                    return Err(err(format!("unexpected {}", show(Some(t)))))
                }
            };
            self.i += 1;
            let mut reps = Vec::new();
            while let Some(Tok::Repeat(lo, hi)) = self.t.get(self.i) {
                reps.push((*lo, *hi));
                self.i += 1;
            }
            seq.push((atom, reps));
        }
        Ok(seq)
    }
}

/// `g_` and the GBNF name, spelled so that it is a Lark rule name and two
/// names never meet: `-` → `__`, `_` → `_0`, an upper-case letter → `_` +
/// lower case.
fn rule_name(gbnf: &str) -> String {
    let mut s = String::from("g_");
    for c in gbnf.chars() {
        match c {
            '-' => s.push_str("__"),
            '_' => s.push_str("_0"),
            c if c.is_ascii_uppercase() => {
                s.push('_');
                s.push(c.to_ascii_lowercase());
            }
            c => s.push(c),
        }
    }
    s
}

/// A character inside a regex class, escaped unless plainly alphanumeric.
fn class_char(c: char, out: &mut String) {
    if c.is_ascii_alphanumeric() {
        out.push(c);
    } else {
        let _ = write!(out, "\\x{{{:X}}}", c as u32);
    }
}

fn emit(alt: &Alt, defined: &BTreeSet<&str>, out: &mut String) -> Result<(), GrammarError> {
    for (k, seq) in alt.iter().enumerate() {
        if k > 0 {
            out.push_str(" | ");
        }
        if seq.is_empty() {
            // the empty sequence
            out.push_str("\"\"");
        }
        for (j, (atom, reps)) in seq.iter().enumerate() {
            if j > 0 {
                out.push(' ');
            }
            match atom {
                Atom::Ref(n) => {
                    if !defined.contains(n.as_str()) {
                        return Err(err(format!("rule {n:?} is used but not defined")));
                    }
                    out.push_str(&rule_name(n));
                }
                Atom::Literal(s) => {
                    out.push_str(&serde_json::Value::String(s.clone()).to_string());
                }
                Atom::Class { negated, ranges } => {
                    out.push_str("/[");
                    if *negated {
                        out.push('^');
                    }
                    for &(lo, hi) in ranges {
                        class_char(lo, out);
                        if hi != lo {
                            out.push('-');
                            class_char(hi, out);
                        }
                    }
                    out.push_str("]/");
                }
                Atom::Any => out.push_str("/(?s:.)/"),
                Atom::Group(inner) => {
                    out.push('(');
                    emit(inner, defined, out)?;
                    out.push(')');
                }
            }
            for &(lo, hi) in reps {
                match (lo, hi) {
                    (0, None) => out.push('*'),
                    (1, None) => out.push('+'),
                    (0, Some(1)) => out.push('?'),
                    (m, None) => {
                        let _ = write!(out, "{{{m},}}");
                    }
                    (m, Some(n)) if m == n => {
                        let _ = write!(out, "{{{m}}}");
                    }
                    (m, Some(n)) => {
                        let _ = write!(out, "{{{m},{n}}}");
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_literals_classes_and_repetitions_translate() {
        let g = r#"
# a comment
root ::= greeting ws? Name-list a_b   # trailing comment
greeting ::= "hi\t\"x\"" | "\u00e9\x41"
ws ::= [ \t\n]*
Name-list ::=
    [a-zA-Z_] [^"\\\x7F\x00-\x1F]{0,3}
  ( "," . ){2,} ("!"{3})?
a_b ::= "x"
"#;
        let lark = to_lark(g).unwrap();
        let want = [
            "start: g_root",
            "g_root: g_greeting g_ws? g__name__list g_a_0b",
            r#"g_greeting: "hi\t\"x\"" | "éA""#,
            r"g_ws: /[\x{20}\x{9}\x{A}]/*",
            r#"g__name__list: /[a-zA-Z\x{5F}]/ /[^\x{22}\x{5C}\x{7F}\x{0}-\x{1F}]/{0,3} ("," /(?s:.)/){2,} ("!"{3})?"#,
            r#"g_a_0b: "x""#,
        ];
        assert_eq!(lark.lines().collect::<Vec<_>>(), want, "{lark}");
        assert!(looks_like_gbnf(g));
        assert!(!looks_like_gbnf("start: \"a\" | b\nb: /x/"));
    }

    #[test]
    fn bad_grammars_say_what_is_wrong() {
        for (g, says) in [
            ("root ::= foo", "not defined"),
            ("main ::= \"a\"", "no root"),
            ("root ::= \"a", "not closed"),
            ("root ::= [a-", "not closed"),
            ("root ::= (\"a\"", "expected )"),
            ("root ::= \"\\q\"", "unknown escape"),
            ("root ::= \"a\"{3,1}", "empty"),
            ("root ::= [z-a]", "empty"),
            ("root ::= \"a\"\nroot ::= \"b\"", "twice"),
            ("root ::= * \"a\"", "unexpected"),
            ("::= \"a\"", "expected a rule name"),
            ("root \"a\"", "expected ::="),
        ] {
            let e = to_lark(g).expect_err(g);
            assert!(e.0.contains(says), "{g:?}: {}", e.0);
        }
        let deep = format!("root ::= {}\"a\"{}", "(".repeat(100), ")".repeat(100));
        assert!(to_lark(&deep).unwrap_err().0.contains("nest"));
    }
}
