//! Pre-tokenization: split (NFC-normalised) text into the pieces that BPE then encodes separately.
//!
//! Hand-written equivalent of the `Split` regexes in the Qwen tokenizers (Isolated behaviour, as
//! Hugging Face `tokenizers` runs it with Oniguruma: leftmost-first alternation with
//! backtracking):
//!
//! ```text
//! qwen2:  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//! qwen35: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//! ```
//!
//! The only difference: `qwen35` puts combining marks (`\p{M}`) in the letter class (a word keeps
//! its marks, e.g. Devanagari vowel signs or NFD accents) and takes them out of the punctuation
//! class; in `qwen2` a mark is "punctuation" and breaks words. The optional one-char prefix
//! `[^\r\n\p{L}\p{N}]` is the same in both (so in `qwen35` a mark may also be that prefix).
//!
//! Character classes as Oniguruma (Unicode 16) has them: `\s` is the White_Space property (not
//! U+001C..U+001F), `\p{L}`/`\p{M}`/`\p{N}` the general categories; `(?i:'s)` also matches `'ſ`
//! (U+017F folds to `s`).

use unicode_general_category::{get_general_category, GeneralCategory as Gc};

/// Which pre-tokenizer regex to follow (GGUF `tokenizer.ggml.pre`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreTokenizer {
    /// `qwen2`: Qwen2 / Qwen3 pattern.
    Qwen2,
    /// `qwen35`: Qwen3.5 / Qwen3.6 pattern (marks belong to words).
    Qwen35,
}

impl PreTokenizer {
    /// Parse the GGUF `tokenizer.ggml.pre` name.
    pub fn from_gguf_name(name: &str) -> Option<PreTokenizer> {
        match name {
            "qwen2" => Some(PreTokenizer::Qwen2),
            "qwen35" => Some(PreTokenizer::Qwen35),
            _ => None,
        }
    }

    /// The GGUF `tokenizer.ggml.pre` name.
    pub fn gguf_name(self) -> &'static str {
        match self {
            PreTokenizer::Qwen2 => "qwen2",
            PreTokenizer::Qwen35 => "qwen35",
        }
    }
}

// Class flags of one char.
const WS: u8 = 1; // \s
const L: u8 = 2; // \p{L}
const M: u8 = 4; // \p{M}
const N: u8 = 8; // \p{N}
const CRLF: u8 = 16; // \r or \n
const SPACE: u8 = 32; // ' '
const APOS: u8 = 64; // '\''

/// The regex classes of a char (public for tests: `WS`=1, `L`=2, `M`=4, `N`=8).
pub fn char_class(c: char) -> u8 {
    if c.is_ascii() {
        return ASCII_CLASS[c as usize];
    }
    if is_white_space(c) {
        return WS;
    }
    match get_general_category(c) {
        Gc::UppercaseLetter
        | Gc::LowercaseLetter
        | Gc::TitlecaseLetter
        | Gc::ModifierLetter
        | Gc::OtherLetter => L,
        Gc::NonspacingMark | Gc::SpacingMark | Gc::EnclosingMark => M,
        Gc::DecimalNumber | Gc::LetterNumber | Gc::OtherNumber => N,
        _ => 0,
    }
}

/// Unicode White_Space (what Oniguruma's `\s` matches), non-ASCII part.
fn is_white_space(c: char) -> bool {
    matches!(
        c,
        '\u{85}' | '\u{A0}' | '\u{1680}' | '\u{2000}'
            ..='\u{200A}' | '\u{2028}' | '\u{2029}' | '\u{202F}' | '\u{205F}' | '\u{3000}'
    )
}

const ASCII_CLASS: [u8; 128] = {
    let mut t = [0u8; 128];
    let mut i = 0;
    while i < 128 {
        let c = i as u8;
        t[i] = match c {
            b'\n' | b'\r' => WS | CRLF,
            b'\t' | 0x0B | 0x0C => WS,
            b' ' => WS | SPACE,
            b'\'' => APOS,
            b'a'..=b'z' | b'A'..=b'Z' => L,
            b'0'..=b'9' => N,
            _ => 0,
        };
        i += 1;
    }
    t
};

/// Split `text` into pieces; calls `f(piece)` for each, in order. The pieces cover `text`.
pub fn pre_tokenize<'a>(pre: PreTokenizer, text: &'a str, mut f: impl FnMut(&'a str)) {
    if text.is_empty() {
        return;
    }
    // byte offset and class of every char, plus a sentinel offset at the end
    let mut offs: Vec<usize> = Vec::with_capacity(text.len() + 1);
    let mut cls: Vec<u8> = Vec::with_capacity(text.len());
    for (o, c) in text.char_indices() {
        offs.push(o);
        cls.push(char_class(c));
    }
    offs.push(text.len());
    let m = Matcher {
        pre,
        text: text.as_bytes(),
        offs: &offs,
        cls: &cls,
    };
    let n = cls.len();
    let mut i = 0;
    while i < n {
        let end = m.match_at(i).max(i + 1);
        f(&text[offs[i]..offs[end]]);
        i = end;
    }
}

/// Byte ranges of the pieces of `text` (convenience for tests and tools).
pub fn pre_tokenize_ranges(pre: PreTokenizer, text: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let base = text.as_ptr() as usize;
    pre_tokenize(pre, text, |p| {
        let s = p.as_ptr() as usize - base;
        out.push((s, s + p.len()));
    });
    out
}

struct Matcher<'t> {
    pre: PreTokenizer,
    text: &'t [u8],
    offs: &'t [usize],
    cls: &'t [u8],
}

impl Matcher<'_> {
    #[inline]
    fn is_letter(&self, f: u8) -> bool {
        match self.pre {
            PreTokenizer::Qwen2 => f & L != 0,
            PreTokenizer::Qwen35 => f & (L | M) != 0,
        }
    }

    /// `[^\s\p{L}\p{N}]` (qwen2) / `[^\s\p{L}\p{M}\p{N}]` (qwen35)
    #[inline]
    fn is_punct(&self, f: u8) -> bool {
        match self.pre {
            PreTokenizer::Qwen2 => f & (WS | L | N) == 0,
            PreTokenizer::Qwen35 => f & (WS | L | M | N) == 0,
        }
    }

    /// First index at or after `i` whose char is not in the class.
    #[inline]
    fn run_end(&self, mut i: usize, pred: impl Fn(u8) -> bool) -> usize {
        while i < self.cls.len() && pred(self.cls[i]) {
            i += 1;
        }
        i
    }

    /// ASCII byte of char `i`, or 0 for a non-ASCII char or past the end.
    #[inline]
    fn ascii_at(&self, i: usize) -> u8 {
        if i + 1 < self.offs.len() {
            let (a, b) = (self.offs[i], self.offs[i + 1]);
            if b == a + 1 {
                return self.text[a];
            }
            // ſ (U+017F) is the one non-ASCII char the contractions care about
            if &self.text[a..b] == "ſ".as_bytes() {
                return b's';
            }
        }
        0
    }

    /// `(?i:'s|'t|'re|'ve|'m|'ll|'d)` at char `i` (which is an apostrophe): match length.
    fn contraction(&self, i: usize) -> Option<usize> {
        let c1 = self.ascii_at(i + 1).to_ascii_lowercase();
        match c1 {
            b's' | b't' | b'm' | b'd' => Some(2),
            b'r' | b'v' if self.ascii_at(i + 2).eq_ignore_ascii_case(&b'e') => Some(3),
            b'l' if self.ascii_at(i + 2).eq_ignore_ascii_case(&b'l') => Some(3),
            _ => None,
        }
    }

    /// End (char index, exclusive) of the regex match starting at char `i`.
    fn match_at(&self, i: usize) -> usize {
        let n = self.cls.len();
        let f = self.cls[i];
        // 1. contractions
        if f & APOS != 0 {
            if let Some(len) = self.contraction(i) {
                return i + len;
            }
        }
        // 2. [^\r\n\p{L}\p{N}]?\p{L}+  (qwen35: [\p{L}\p{M}]+)
        if self.is_letter(f) {
            // (in qwen35 a mark could be taken as the prefix too; the match is the same run)
            return self.run_end(i, |g| self.is_letter(g));
        }
        if f & (CRLF | L | N) == 0 && i + 1 < n && self.is_letter(self.cls[i + 1]) {
            return self.run_end(i + 1, |g| self.is_letter(g));
        }
        // 3. \p{N}
        if f & N != 0 {
            return i + 1;
        }
        // 4. ' ?[^\s\p{L}\p{N}]+[\r\n]*'
        let start = if f & SPACE != 0 && i + 1 < n && self.is_punct(self.cls[i + 1]) {
            i + 1
        } else {
            i
        };
        if self.is_punct(self.cls[start]) {
            let j = self.run_end(start, |g| self.is_punct(g));
            return self.run_end(j, |g| g & CRLF != 0);
        }
        if f & WS != 0 {
            let end = self.run_end(i, |g| g & WS != 0);
            // 5. \s*[\r\n]+ : up to and including the last \r or \n of the whitespace run
            if let Some(k) = (i..end).rev().find(|&k| self.cls[k] & CRLF != 0) {
                return k + 1;
            }
            // 6. \s+(?!\S) : the run, less its last char when a non-space follows
            if end == n {
                return end;
            }
            if end - i >= 2 {
                return end - 1;
            }
            // 7. \s+
            return end;
        }
        // not reachable: every char is a letter, mark, number, space or punctuation
        i + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(pre: PreTokenizer, s: &str) -> Vec<&str> {
        let mut v = Vec::new();
        pre_tokenize(pre, s, |p| v.push(p));
        v
    }

    #[test]
    fn basic_splits() {
        let q = PreTokenizer::Qwen35;
        assert_eq!(split(q, "Hello world"), ["Hello", " world"]);
        assert_eq!(
            split(q, "I'll 'RE 'sam"),
            ["I", "'ll", " '", "RE", " '", "sam"]
        );
        assert_eq!(split(q, "x'ſx"), ["x", "'ſ", "x"]);
        assert_eq!(split(q, "12345"), ["1", "2", "3", "4", "5"]);
        assert_eq!(split(q, "a   b"), ["a", "  ", " b"]);
        assert_eq!(split(q, "a \n\n b"), ["a", " \n\n", " b"]);
        assert_eq!(split(q, "a  "), ["a", "  "]);
        assert_eq!(split(q, "a \t!"), ["a", " ", "\t", "!"]);
        assert_eq!(split(q, "(hello) ..\n\nx"), ["(hello", ")", " ..\n\n", "x"]);
        assert_eq!(split(q, "\u{3000}日本"), ["\u{3000}日本"]);
        assert_eq!(split(q, ""), Vec::<&str>::new());
    }

    #[test]
    fn marks_differ() {
        // e + combining acute, then a Devanagari word with vowel signs
        let s = "cafe\u{301} नमस्ते";
        assert_eq!(split(PreTokenizer::Qwen35, s), ["cafe\u{301}", " नमस्ते"]);
        assert_eq!(
            split(PreTokenizer::Qwen2, s),
            ["cafe", "\u{301}", " नमस", "्त", "े"]
        );
    }
}
