//! DRY ("don't repeat yourself", the repetition sampler of llama.cpp and
//! koboldcpp): a token that would extend a sequence already seen in the
//! recent history loses `multiplier · base^(length − allowed_length)` of
//! its logit, where `length` is how long the repeated sequence it would
//! extend is. Sequence breakers (by default newline, `:`, `"`, `*`) cut the
//! repetitions that are looked at: none runs back across one.

use std::collections::HashMap;
use std::sync::Arc;

/// DRY's parameters (llama-server's request names without the `dry_`
/// prefix). `Default` is off, with llama.cpp's other defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct DryConfig {
    /// 0 = off.
    pub multiplier: f32,
    /// At least 1.
    pub base: f32,
    /// Repetitions up to this length are free.
    pub allowed_length: usize,
    /// How many of the latest tokens are scanned (0 = off; `usize::MAX`:
    /// the whole history).
    pub penalty_last_n: usize,
    /// The breakers as text; a sampler takes them as tokens
    /// ([`Breakers`], which needs the vocabulary).
    pub sequence_breakers: Vec<String>,
}

/// llama.cpp's default breakers.
pub const DEFAULT_BREAKERS: [&str; 4] = ["\n", ":", "\"", "*"];
/// Longest breaker kept, in bytes (llama.cpp: 40 characters).
const MAX_BREAKER_BYTES: usize = 40;
/// Longest tail of a breaker, in tokens.
const MAX_TAIL_TOKENS: usize = 20;

impl Default for DryConfig {
    fn default() -> Self {
        DryConfig {
            multiplier: 0.0,
            base: 1.75,
            allowed_length: 2,
            penalty_last_n: 64,
            sequence_breakers: DEFAULT_BREAKERS.iter().map(|s| s.to_string()).collect(),
        }
    }
}

impl DryConfig {
    pub fn is_on(&self) -> bool {
        self.multiplier != 0.0 && self.base >= 1.0 && self.penalty_last_n > 0
    }
}

/// Sequence breakers as tokens: for each token that starts one, the tokens
/// that must follow it (none: the token holds a whole breaker). A token
/// whose text ends with the start of a breaker heads the breaker's rest
/// as the tokenizer encodes it (at most 20 tokens).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Breakers {
    tails: HashMap<u32, Vec<Vec<u32>>>,
}

impl Breakers {
    /// The breakers `texts` over a vocabulary of `n_tokens` whose token `id`
    /// reads `piece(id)` (bytes, special tokens by their text) and whose
    /// tokenizer encodes text with `encode`. Empty breakers are skipped;
    /// long ones cut to 40 bytes (at a character boundary).
    pub fn build<'v>(
        texts: &[String],
        n_tokens: usize,
        piece: impl Fn(u32) -> &'v [u8],
        encode: impl Fn(&str) -> Vec<u32>,
    ) -> Breakers {
        let mut tails: HashMap<u32, Vec<Vec<u32>>> = HashMap::new();
        for text in texts.iter().filter(|t| !t.is_empty()) {
            let mut cut = text.len().min(MAX_BREAKER_BYTES);
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            let b = &text[..cut];
            let bytes = b.as_bytes();
            for id in 0..n_tokens as u32 {
                let word = piece(id);
                let mut add = |tail: Vec<u32>| {
                    let list = tails.entry(id).or_default();
                    if !list.contains(&tail) {
                        list.push(tail);
                    }
                };
                if contains(word, bytes) {
                    add(Vec::new());
                    continue;
                }
                // Every place where the word's end is the breaker's start:
                // the rest of the breaker must follow as tokens.
                for pos in (0..word.len()).filter(|&p| word[p] == bytes[0]) {
                    let held = word.len() - pos;
                    if held < bytes.len() && word[pos..] == bytes[..held] {
                        if let Ok(rest) = std::str::from_utf8(&bytes[held..]) {
                            let mut tail = encode(rest);
                            tail.truncate(MAX_TAIL_TOKENS);
                            add(tail);
                        }
                    }
                }
            }
        }
        Breakers { tails }
    }

    /// Whether `id` is a breaker by itself (DRY never penalises those).
    fn is_whole(&self, id: u32) -> bool {
        self.tails
            .get(&id)
            .is_some_and(|t| t.iter().any(Vec::is_empty))
    }
}

/// Penalise in `row` the tokens that would extend a repetition of the
/// latest tokens of `history` (see the module doc).
pub(crate) fn apply(c: &DryConfig, breakers: &Arc<Breakers>, row: &mut [f32], history: &[u32]) {
    if !c.is_on() {
        return;
    }
    let n = history.len().min(c.penalty_last_n);
    if n <= c.allowed_length {
        return;
    }
    // `back(i)`: the token `i` places from the end (0 = the latest).
    let window = &history[history.len() - n..];
    let back = |i: usize| window[n - 1 - i];
    // The nearest breaker bounds how far back a repetition may reach: a
    // breaker whose head is `i` from the end and whose tail follows it
    // leaves `i − tail` tokens after it.
    let mut limit = n;
    for i in 0..n {
        let Some(tails) = breakers.tails.get(&back(i)) else {
            continue;
        };
        let longest = (tails.iter())
            .filter(|t| {
                t.len() <= i && t.iter().enumerate().all(|(o, &tok)| tok == back(i - o - 1))
            })
            .map(Vec::len)
            .max();
        if let Some(len) = longest {
            limit = i - len;
            break;
        }
    }
    if limit < c.allowed_length {
        return;
    }
    // z[k]: how many of the latest tokens also end `k` places earlier (the
    // Z-function of the window read backwards). The token that followed
    // such an earlier run would continue the repetition.
    let z = z_function(n, back);
    let mut longest: HashMap<u32, usize> = HashMap::new();
    for (k, &len) in z.iter().enumerate().skip(1) {
        let len = len.min(limit);
        if len >= c.allowed_length {
            let next = back(k - 1);
            let e = longest.entry(next).or_insert(0);
            *e = (*e).max(len);
        }
    }
    // base^exp stays finite: the exponent is capped where it would
    // overflow an f32 (as llama.cpp does).
    let max_exp = match c.base > 1.000_001 {
        true => (88.722_84_f32 / c.base.ln()) as usize,
        false => usize::MAX,
    };
    for (tok, len) in longest {
        if breakers.is_whole(tok) {
            continue;
        }
        if let Some(l) = row.get_mut(tok as usize) {
            let exp = (len - c.allowed_length).min(max_exp);
            *l -= c.multiplier * c.base.powi(exp.min(i32::MAX as usize) as i32);
        }
    }
}

/// The Z-function of the sequence `s(0), …, s(n − 1)`: `z[k]` is the
/// length of the longest common prefix of it and its suffix from `k`
/// (`z[0] = 0`), in linear time.
fn z_function(n: usize, s: impl Fn(usize) -> u32) -> Vec<usize> {
    let mut z = vec![0usize; n];
    let (mut l, mut r) = (0usize, 0usize); // the rightmost match is [l, r)
    for k in 1..n {
        let mut len = if k < r { z[k - l].min(r - k) } else { 0 };
        while k + len < n && s(len) == s(k + len) {
            len += 1;
        }
        z[k] = len;
        if k + len > r {
            (l, r) = (k, k + len);
        }
    }
    z
}

/// Whether `needle` (not empty) occurs in `hay`.
fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition, directly: for each earlier end `k`, the common
    /// suffix length by comparison.
    fn z_naive(s: &[u32]) -> Vec<usize> {
        (0..s.len())
            .map(|k| match k {
                0 => 0,
                _ => (0..s.len() - k).take_while(|&i| s[i] == s[k + i]).count(),
            })
            .collect()
    }

    #[test]
    fn z_function_matches_its_definition() {
        let mut rng = crate::Rng::new(3);
        for len in 0..60 {
            for alphabet in [1, 2, 3, 7] {
                let s: Vec<u32> = (0..len).map(|_| rng.below(alphabet) as u32).collect();
                assert_eq!(z_function(s.len(), |i| s[i]), z_naive(&s), "{s:?}");
            }
        }
    }

    fn words() -> Vec<&'static [u8]> {
        vec![b"a", b"b", b"c", b"\n", b"x:", b"Us", b"er", b"User", b":"]
    }

    fn build(texts: &[&str]) -> Breakers {
        let w = words();
        let texts: Vec<String> = texts.iter().map(|s| s.to_string()).collect();
        // A toy tokenizer: one token per byte it knows.
        let encode = |t: &str| -> Vec<u32> {
            t.bytes()
                .filter_map(|b| w.iter().position(|x| *x == [b]).map(|i| i as u32))
                .collect()
        };
        Breakers::build(&texts, w.len(), |id| words()[id as usize], encode)
    }

    #[test]
    fn breakers_are_whole_tokens_or_heads_with_tails() {
        let b = build(&["\n", ":", "User:"]);
        // "\n", "x:" and ":" hold a breaker; "User" ends with the start of
        // "User:" and needs ":" after it; "Us" needs "er:" (not a token
        // sequence the toy tokenizer can spell: "e" and "r" are unknown,
        // so only ":" remains of it).
        assert!(b.is_whole(3) && b.is_whole(4) && b.is_whole(8));
        assert_eq!(b.tails[&7], vec![vec![8u32]]);
        assert_eq!(b.tails[&5], vec![vec![8u32]]);
        assert!(!b.tails.contains_key(&0));
        assert_eq!(build(&[""]), Breakers::default());
    }

    fn cfg() -> DryConfig {
        DryConfig {
            multiplier: 1.0,
            base: 2.0,
            allowed_length: 2,
            penalty_last_n: 64,
            sequence_breakers: vec![],
        }
    }

    #[test]
    fn the_token_that_extends_a_repeat_is_penalised_by_its_length() {
        // a b c x a b → "c" would make "a b c" again: a run of 2 extended,
        // exponent 0, penalty 1·2^0.
        let none = Arc::new(Breakers::default());
        let mut row = vec![0.0f32; 10];
        apply(&cfg(), &none, &mut row, &[0, 1, 2, 9, 0, 1]);
        assert_eq!(row[2], -1.0);
        assert!(row.iter().enumerate().all(|(i, &l)| i == 2 || l == 0.0));
        // a b c d x a b c d → "x"-free run of 4: 2^(4−2) = 4 on what
        // followed it ("x", id 9).
        let mut row = vec![0.0f32; 10];
        apply(&cfg(), &none, &mut row, &[0, 1, 2, 3, 9, 0, 1, 2, 3]);
        assert_eq!(row[9], -4.0);
        // Within the allowed length: nothing.
        let mut row = vec![0.0f32; 10];
        apply(&cfg(), &none, &mut row, &[0, 1, 9, 5, 1]);
        assert!(row.iter().all(|&l| l == 0.0));
        // The window: the first run is out of the last 5 tokens.
        let mut row = vec![0.0f32; 10];
        let c = DryConfig {
            penalty_last_n: 5,
            ..cfg()
        };
        apply(&c, &none, &mut row, &[0, 1, 2, 3, 9, 0, 1, 2, 3]);
        assert!(row.iter().all(|&l| l == 0.0));
        // Off.
        let mut row = vec![0.0f32; 10];
        let c = DryConfig {
            multiplier: 0.0,
            ..cfg()
        };
        apply(&c, &none, &mut row, &[0, 1, 2, 3, 9, 0, 1, 2, 3]);
        assert!(row.iter().all(|&l| l == 0.0));
    }

    #[test]
    fn a_breaker_bounds_the_repeat_and_is_never_penalised() {
        let b = Arc::new(build(&["\n"]));
        // a b c \n a b c: the run "a b c" after the newline is cut to the 3
        // tokens since it; "\n" itself would extend "a b c" but is a breaker.
        let hist = [0, 1, 2, 3, 0, 1, 2];
        let mut row = vec![0.0f32; 10];
        apply(&cfg(), &b, &mut row, &hist);
        assert!(row.iter().all(|&l| l == 0.0), "{row:?}");
        // Without breakers the newline is penalised: run 3 → 2^1.
        let mut row = vec![0.0f32; 10];
        apply(&cfg(), &Arc::new(Breakers::default()), &mut row, &hist);
        assert_eq!(row[3], -2.0);
        // a b c a b \n a b: the breaker 2 tokens back limits runs to 2.
        let hist = [0, 1, 2, 0, 1, 2, 3, 0, 1];
        let mut row = vec![0.0f32; 10];
        apply(&cfg(), &b, &mut row, &hist);
        assert_eq!(row[2], -1.0, "{row:?}");
        // A two-token breaker ("User" ":"): "User" alone does not break.
        let b2 = Arc::new(build(&["User:"]));
        let hist = [0, 1, 2, 7, 0, 1];
        let mut row = vec![0.0f32; 10];
        apply(&cfg(), &b2, &mut row, &hist);
        assert_eq!(row[2], -1.0);
        let hist = [0, 1, 2, 7, 8, 0, 1];
        let mut row = vec![0.0f32; 10];
        apply(&cfg(), &b2, &mut row, &hist);
        assert_eq!(row[2], -1.0, "the breaker is behind the run: no cut");
        // "User" ":" two tokens back: the run "a b User : a b" is cut to
        // "a b" (2^0 on "User", which is no breaker by itself); without
        // the breaker it is 6 long (2^4).
        let hist = [0, 1, 7, 8, 0, 1, 7, 8, 0, 1];
        let mut row = vec![0.0f32; 10];
        apply(&cfg(), &b2, &mut row, &hist);
        assert_eq!(row[7], -1.0, "{row:?}");
        let mut row = vec![0.0f32; 10];
        apply(&cfg(), &Arc::new(Breakers::default()), &mut row, &hist);
        assert_eq!(row[7], -16.0, "{row:?}");
    }

    /// Against the definition on random histories: every token's penalty
    /// from the longest earlier run it would extend, found by direct
    /// comparison (no breakers).
    #[test]
    fn penalties_match_the_definition_on_random_histories() {
        let mut rng = crate::Rng::new(11);
        let none = Arc::new(Breakers::default());
        for _ in 0..300 {
            let len = 1 + rng.below(40);
            let alphabet = 1 + rng.below(4);
            let hist: Vec<u32> = (0..len).map(|_| rng.below(alphabet) as u32).collect();
            let c = DryConfig {
                allowed_length: rng.below(4),
                multiplier: 0.5,
                base: 1.5,
                ..cfg()
            };
            let mut row = vec![0.0f32; 4];
            apply(&c, &none, &mut row, &hist);
            let mut want = vec![0.0f32; 4];
            if len > c.allowed_length {
                let mut best: HashMap<u32, usize> = HashMap::new();
                for end in 0..len - 1 {
                    // Run ending at `end` equal to the run ending at the last.
                    let run = (0..=end)
                        .take_while(|&i| hist[end - i] == hist[len - 1 - i])
                        .count();
                    if run >= c.allowed_length {
                        let e = best.entry(hist[end + 1]).or_insert(0);
                        *e = (*e).max(run);
                    }
                }
                for (t, run) in best {
                    want[t as usize] -= 0.5 * 1.5f32.powi((run - c.allowed_length) as i32);
                }
            }
            assert_eq!(row, want, "{hist:?} allowed {}", c.allowed_length);
        }
    }
}
