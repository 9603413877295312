//! Added tokens (`<|im_start|>`, `<think>`, …) are found in the raw text before normalization and
//! pre-tokenization, as HF's `AddedVocabulary` does for tokens with `normalized: false` (all of the
//! Qwen ones; none of them has `lstrip`, `rstrip` or `single_word`). HF matches them with an
//! Aho-Corasick automaton in leftmost-longest mode: the match starting first wins, and of those
//! starting at the same place the longest.

/// One added token.
#[derive(Clone, Debug)]
pub(crate) struct Added {
    pub content: Box<str>,
    pub id: u32,
    /// HF `special` (GGUF CONTROL): not matched when the caller turns special parsing off.
    pub special: bool,
}

/// Finds added tokens in text.
pub(crate) struct SpecialMatcher {
    tokens: Vec<Added>,
    /// indices into `tokens` by first byte, longest content first
    by_first: Vec<Vec<u32>>,
}

impl SpecialMatcher {
    pub(crate) fn new(mut tokens: Vec<Added>) -> SpecialMatcher {
        tokens.retain(|t| !t.content.is_empty());
        let mut by_first: Vec<Vec<u32>> = vec![Vec::new(); 256];
        for (i, t) in tokens.iter().enumerate() {
            by_first[t.content.as_bytes()[0] as usize].push(i as u32);
        }
        for list in &mut by_first {
            // longest first; ties (identical contents) keep the lower index
            list.sort_by_key(|&i| std::cmp::Reverse(tokens[i as usize].content.len()));
        }
        SpecialMatcher { tokens, by_first }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The first added token in `text[from..]`: (start, end, id).
    pub(crate) fn find(
        &self,
        text: &str,
        from: usize,
        parse_special: bool,
    ) -> Option<(usize, usize, u32)> {
        let bytes = text.as_bytes();
        for pos in from..bytes.len() {
            let cands = &self.by_first[bytes[pos] as usize];
            if cands.is_empty() {
                continue;
            }
            let rest = &bytes[pos..];
            for &i in cands {
                let t = &self.tokens[i as usize];
                if (parse_special || !t.special) && rest.starts_with(t.content.as_bytes()) {
                    return Some((pos, pos + t.content.len(), t.id));
                }
            }
        }
        None
    }
}

/// Split `text` into runs of plain text and added tokens.
pub(crate) enum Segment<'a> {
    Text(&'a str),
    Token(u32),
}

pub(crate) fn segments<'a>(
    m: &SpecialMatcher,
    text: &'a str,
    parse_special: bool,
    mut f: impl FnMut(Segment<'a>),
) {
    if m.is_empty() {
        if !text.is_empty() {
            f(Segment::Text(text));
        }
        return;
    }
    let mut at = 0;
    while let Some((s, e, id)) = m.find(text, at, parse_special) {
        if s > at {
            f(Segment::Text(&text[at..s]));
        }
        f(Segment::Token(id));
        at = e;
    }
    if at < text.len() {
        f(Segment::Text(&text[at..]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leftmost_longest() {
        let m = SpecialMatcher::new(vec![
            Added {
                content: "<a>".into(),
                id: 1,
                special: true,
            },
            Added {
                content: "<a><b>".into(),
                id: 2,
                special: false,
            },
            Added {
                content: "b>".into(),
                id: 3,
                special: false,
            },
        ]);
        let collect = |s: &'static str, p: bool| {
            let mut v = Vec::new();
            segments(&m, s, p, |seg| {
                v.push(match seg {
                    Segment::Text(t) => t.to_string(),
                    Segment::Token(id) => format!("#{id}"),
                })
            });
            v
        };
        assert_eq!(collect("x<a><b>y<a>", true), ["x", "#2", "y", "#1"]);
        assert_eq!(collect("<a>b>", true), ["#1", "#3"]);
        assert_eq!(collect("<a>b>", false), ["<a>", "#3"]);
        assert_eq!(collect("<a><b>", false), ["#2"]);
        assert_eq!(collect("<a><b", false), ["<a><b"]);
        assert_eq!(collect("", true), Vec::<String>::new());
    }
}
