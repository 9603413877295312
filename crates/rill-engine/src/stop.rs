//! Stop strings over streamed text.
//!
//! Text is released only once it can no longer be the beginning of a stop
//! string, so a stop string split across tokens is never half printed.

/// Outcome of feeding text to a [`StopMatcher`].
#[derive(Debug, PartialEq, Eq)]
pub struct Fed {
    /// Text safe to show now.
    pub emit: String,
    /// A stop string was found; generation should end.
    pub stopped: bool,
    /// Which one (llama-server reports it as `stopping_word`).
    pub word: Option<String>,
}

#[derive(Clone, Debug, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    held: String,
    /// The stop string found goes out too (vLLM's
    /// `include_stop_str_in_output`).
    keep_stop: bool,
}

impl StopMatcher {
    /// Empty stop strings are ignored.
    pub fn new(stops: &[String]) -> StopMatcher {
        StopMatcher {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            held: String::new(),
            keep_stop: false,
        }
    }

    /// The stop string that ends the text is part of it.
    pub fn keeping_the_stop(mut self) -> StopMatcher {
        self.keep_stop = true;
        self
    }

    /// Text that no stop string may end (vLLM's `min_tokens`: stops are
    /// looked for only past them): released at once with what was held.
    pub fn feed_unchecked(&mut self, text: &str) -> Fed {
        self.held.push_str(text);
        Fed {
            emit: std::mem::take(&mut self.held),
            stopped: false,
            word: None,
        }
    }

    pub fn feed(&mut self, text: &str) -> Fed {
        self.held.push_str(text);
        // Earliest complete stop string wins; text before it is emitted.
        let hit = (self.stops.iter())
            .filter_map(|s| self.held.find(s.as_str()).map(|at| (at, s)))
            .min_by_key(|&(at, _)| at);
        if let Some((at, word)) = hit {
            let end = if self.keep_stop { at + word.len() } else { at };
            let emit = self.held[..end].to_string();
            let word = Some(word.clone());
            self.held.clear();
            return Fed {
                emit,
                stopped: true,
                word,
            };
        }
        // Hold back the longest suffix that is a prefix of some stop string.
        let mut keep = 0;
        for s in &self.stops {
            for (i, _) in s.char_indices().skip(1) {
                if i > keep && self.held.ends_with(&s[..i]) {
                    keep = i;
                }
            }
        }
        let cut = self.held.len() - keep;
        let emit = self.held[..cut].to_string();
        self.held.drain(..cut);
        Fed {
            emit,
            stopped: false,
            word: None,
        }
    }

    /// Text still held back, released at the end of generation.
    pub fn flush(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (String, bool) {
        let stops: Vec<String> = stops.iter().map(|s| s.to_string()).collect();
        let mut m = StopMatcher::new(&stops);
        let mut out = String::new();
        for p in pieces {
            let f = m.feed(p);
            out.push_str(&f.emit);
            if f.stopped {
                return (out, true);
            }
        }
        out.push_str(&m.flush());
        (out, false)
    }

    #[test]
    fn stop_split_across_pieces_is_never_printed() {
        assert_eq!(
            run(&["END"], &["hello E", "N", "D more"]),
            ("hello ".into(), true)
        );
    }

    #[test]
    fn a_kept_stop_goes_out_and_unchecked_text_never_stops() {
        let mut m = StopMatcher::new(&["END".into()]).keeping_the_stop();
        assert_eq!(m.feed("a E").emit, "a ");
        let f = m.feed("ND b");
        assert_eq!((f.emit.as_str(), f.stopped), ("END", true));
        let mut m = StopMatcher::new(&["END".into()]);
        assert_eq!(m.feed("x E").emit, "x ");
        let f = m.feed_unchecked("ND");
        assert_eq!((f.emit.as_str(), f.stopped), ("END", false));
        assert!(!m.feed(" y").stopped);
    }

    #[test]
    fn near_miss_is_released() {
        assert_eq!(
            run(&["END"], &["hello E", "NX"]),
            ("hello ENX".into(), false)
        );
        assert_eq!(run(&["END"], &["ab", "E"]), ("abE".into(), false));
    }

    #[test]
    fn earliest_of_several_stops_wins_and_unicode_is_safe() {
        assert_eq!(run(&["b", "éz"], &["aéz b"]), ("a".into(), true));
        let mut m = StopMatcher::new(&["b".into(), "éz".into()]);
        assert_eq!(m.feed("aéz b").word.as_deref(), Some("éz"));
        assert_eq!(run(&["日本"], &["x日", "本y"]), ("x".into(), true));
        assert_eq!(run(&[], &["free"]), ("free".into(), false));
    }
}
