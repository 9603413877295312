//! llama-server's `n_indent`: in code completion, a generated line that is
//! indented less than the block being completed ends the generation (the
//! completion has left the block). The first line is not judged (it goes
//! on from the cursor); every line after a newline is, by its run of spaces
//! and tabs before its first other character.

/// Watches the generated text for a line indented less than `min`.
#[derive(Clone, Debug)]
pub(crate) struct IndentLimit {
    min: usize,
    /// Inside a line's leading whitespace (a newline was generated and no
    /// other character since).
    in_prefix: bool,
    /// Spaces and tabs of that prefix so far.
    width: usize,
}

impl IndentLimit {
    /// `None` for `min` 0 (no limit).
    pub fn new(min: usize) -> Option<IndentLimit> {
        (min > 0).then_some(IndentLimit {
            min,
            in_prefix: false,
            width: 0,
        })
    }

    /// Take the next piece of the text; `Some(at)` when a line indented
    /// less than the limit starts its content at byte `at` of `text`: the
    /// text is cut there (its indentation kept, as llama-server does) and
    /// the generation ends.
    pub fn feed(&mut self, text: &str) -> Option<usize> {
        for (at, c) in text.char_indices() {
            if self.in_prefix {
                if c == ' ' || c == '\t' {
                    self.width += 1;
                    continue;
                }
                if self.width < self.min {
                    return Some(at);
                }
                self.in_prefix = false;
            }
            if c == '\n' {
                self.in_prefix = true;
                self.width = 0;
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The byte where `pieces`, fed in turn, are cut (counted over all of
    /// them), if anywhere.
    fn cut(min: usize, pieces: &[&str]) -> Option<usize> {
        let mut limit = IndentLimit::new(min).unwrap();
        let mut before = 0;
        for p in pieces {
            if let Some(at) = limit.feed(p) {
                return Some(before + at);
            }
            before += p.len();
        }
        None
    }

    #[test]
    fn a_line_indented_less_than_the_block_ends_the_text() {
        let text = "x = 1\n    y = 2\n  z = 3\n";
        assert_eq!(cut(4, &[text]), Some(text.find("z").unwrap()));
        assert_eq!(cut(2, &[text]), None, "both lines indented enough");
        assert_eq!(cut(4, &["x = 1\n", "  ", "  y\n", "  ", "z"]), Some(14));
    }

    #[test]
    fn the_first_line_and_whitespace_only_runs_are_not_judged() {
        assert_eq!(cut(8, &["no indent on the first line"]), None);
        assert_eq!(cut(2, &["a\n", " \t", " "]), None, "no content yet");
        // A tab counts as one, as llama-server counts it.
        assert_eq!(cut(2, &["a\n\t\tb"]), None);
        // An empty line is a line without indentation.
        assert_eq!(cut(1, &["a\n\nb"]), Some(2));
        assert_eq!(IndentLimit::new(0).map(|_| ()), None);
    }

    #[test]
    fn multibyte_text_is_cut_on_a_character_boundary() {
        let text = "é\n  ü\n é";
        let at = cut(2, &[text]).unwrap();
        assert!(text.is_char_boundary(at));
        assert_eq!(&text[..at], "é\n  ü\n ");
    }
}
