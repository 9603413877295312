//! One sequence's constraint: the grammar's state after the tokens
//! committed so far, and the masks of the states it was in lately.
//!
//! Every grammar state has an id derived from the tokens that led to it,
//! so a state reached again (a draft rolled back, then accepted) finds the
//! mask computed the first time. Committing a token asks the helper thread
//! for the new state's mask ([`crate::helper`]).

use crate::helper::Helper;
use crate::GrammarError;
use llguidance::toktrie::SimpleVob;
use llguidance::Matcher;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

/// Masks kept per constraint: the committed state's and those of a step's
/// drafts (at most 8 drafted tokens).
const KEPT_MASKS: usize = 10;

/// How many of a row's best tokens [`Constraint::best_allowed`] walks
/// before it computes the mask.
const CANDIDATES: usize = 16;

/// Whether logit `a` ranks above `b` (NaN below every number).
fn better(a: f32, b: f32) -> bool {
    !a.is_nan() && (b.is_nan() || a > b)
}

/// The [`CANDIDATES`] best tokens of `row`, best first (ties to the lower
/// id; NaN is below every number), in one pass over the row.
fn best_candidates(row: &[f32]) -> impl Iterator<Item = u32> {
    // Kept sorted best first. Once CANDIDATES numbers are kept, a value
    // enters only if it beats the last of them (`floor`); the row is
    // screened 16 values at a time against it with a comparison the
    // compiler vectorises (the 248k-token row of the bench model in ~40 µs,
    // against ~350 µs one value at a time).
    let mut top: Vec<(f32, u32)> = Vec::with_capacity(CANDIDATES + 1);
    let mut floor: Option<f32> = None;
    let mut take = |i: usize, v: f32, floor: &mut Option<f32>| {
        if floor.is_some_and(|f| !better(v, f)) {
            return;
        }
        // After every kept value at least as good (so ties keep id order).
        let at = top.partition_point(|&(k, _)| !better(v, k));
        top.insert(at, (v, i as u32));
        top.truncate(CANDIDATES);
        // (A NaN among the kept means fewer numbers than CANDIDATES so far:
        // no floor yet.)
        *floor = (top.len() == CANDIDATES)
            .then(|| top[CANDIDATES - 1].0)
            .filter(|f| !f.is_nan());
    };
    const SCREEN: usize = 16;
    let whole = row.len() / SCREEN * SCREEN;
    for (c, chunk) in row[..whole].chunks_exact(SCREEN).enumerate() {
        if let Some(f) = floor {
            if !chunk.iter().fold(false, |any, &v| any | (v > f)) {
                continue;
            }
        }
        for (j, &v) in chunk.iter().enumerate() {
            take(c * SCREEN + j, v, &mut floor);
        }
    }
    for (j, &v) in row[whole..].iter().enumerate() {
        take(whole + j, v, &mut floor);
    }
    top.into_iter().map(|(_, i)| i)
}

pub(crate) struct Shared {
    matcher: Matcher,
    /// The id of each state since the start: the last is the current one.
    path: Vec<u64>,
    /// Masks by state id, the most recent last.
    masks: VecDeque<(u64, Result<SimpleVob, String>)>,
}

/// The constraint's state, even if a thread panicked holding it (the
/// matcher is then in whatever state llguidance left it: its errors say so).
pub(crate) fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

/// The id of the state `token` leads to from `parent` (a 64-bit mix).
fn next_id(parent: u64, token: u32) -> u64 {
    let mut x = parent.rotate_left(17) ^ (token as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

impl Shared {
    fn state(&self) -> u64 {
        *self.path.last().expect("the start state is always there")
    }

    /// The current state's mask, computed now unless it was already.
    fn mask(&mut self) -> &Result<SimpleVob, String> {
        let state = self.state();
        let at = match self.masks.iter().position(|(id, _)| *id == state) {
            Some(at) => at,
            None => {
                let m = self
                    .matcher
                    .compute_mask_or_eos()
                    .map_err(|e| crate::describe(&e));
                if self.masks.len() == KEPT_MASKS {
                    self.masks.pop_front();
                }
                self.masks.push_back((state, m));
                self.masks.len() - 1
            }
        };
        &self.masks[at].1
    }

    /// The current state's mask if it was computed already.
    fn cached_mask(&self) -> Option<&Result<SimpleVob, String>> {
        let state = self.state();
        self.masks
            .iter()
            .find(|(id, _)| *id == state)
            .map(|(_, m)| m)
    }

    /// Whether the mask allows `id`, answered by running the token's bytes
    /// through the parser where that is sure to be the mask's answer:
    /// a walk of one token's bytes instead of the vocabulary's trie (a mask
    /// took ~60 µs median, ~280 µs p90 on the demo model's 32k vocabulary,
    /// the walk ~10 µs). Where it is not sure, the mask is computed:
    /// - a state that forces bytes: the mask then holds only the canonical
    ///   tokenization of those bytes (a shorter token that the walk would
    ///   take is not in it);
    /// - special tokens and the end (the mask admits special tokens by
    ///   their marker, the end by whether the grammar may stop);
    /// - a stopped parser (its mask is the end alone).
    fn allows(&mut self, id: u32) -> Result<bool, String> {
        if let Some(m) = self.cached_mask() {
            return m.as_ref().map(|m| m.is_allowed(id)).map_err(Clone::clone);
        }
        if let Some(answer) = self.walk(id) {
            return answer;
        }
        self.mask()
            .as_ref()
            .map(|m| m.is_allowed(id))
            .map_err(Clone::clone)
    }

    /// The parser's answer for `id` alone where it is the mask's (see
    /// [`Shared::allows`]); `None` where only the mask can tell.
    fn walk(&mut self, id: u32) -> Option<Result<bool, String>> {
        let sure = !self.matcher.is_stopped()
            && !self.matcher.is_error()
            && !self.special_or_end(id)
            && self.matcher.compute_ff_bytes().is_empty();
        sure.then(|| match self.matcher.validate_tokens(&[id]) {
            Ok(n) => Ok(n == 1),
            Err(e) => Err(crate::describe(&e)),
        })
    }

    /// A special token (marked in the trie) or one of the end tokens.
    fn special_or_end(&self, id: u32) -> bool {
        let Ok(env) = self.matcher.tok_env() else {
            return true;
        };
        let trie = env.tok_trie();
        trie.eos_tokens().contains(&id)
            || trie.token(id).first() == Some(&llguidance::toktrie::TokTrie::SPECIAL_TOKEN_MARKER)
    }

    /// Compute the mask of `state` if the constraint is still there.
    pub(crate) fn prefetch(&mut self, state: u64) {
        if self.state() == state {
            let _ = self.mask();
        }
    }
}

/// One sequence's constraint (see the module's notes).
pub struct Constraint {
    shared: Arc<Mutex<Shared>>,
    helper: Helper,
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint")
            .field("stopped", &self.is_done())
            .finish_non_exhaustive()
    }
}

impl Constraint {
    /// A constraint at its start, whose mask `first` is (computed by the
    /// compiler to check the grammar admits any output).
    pub(crate) fn new(matcher: Matcher, helper: Helper, first: SimpleVob) -> Constraint {
        let mut masks = VecDeque::with_capacity(KEPT_MASKS);
        masks.push_back((0, Ok(first)));
        let shared = Shared {
            matcher,
            path: vec![0],
            masks,
        };
        Constraint {
            shared: Arc::new(Mutex::new(shared)),
            helper,
        }
    }

    /// Ask the helper thread for the current state's mask.
    fn prefetch(&self) {
        let state = lock(&self.shared).state();
        self.helper.ask((Arc::downgrade(&self.shared), state));
    }

    /// Set every token the grammar does not allow next to −∞ in `logits`
    /// (the end-of-turn token is allowed once the grammar may end). Returns
    /// how many tokens stay allowed (0: the grammar is stuck).
    pub fn mask(&mut self, logits: &mut [f32]) -> Result<usize, GrammarError> {
        let mut shared = lock(&self.shared);
        let allowed = shared
            .mask()
            .as_ref()
            .map_err(|e| GrammarError(format!("grammar error: {e}")))?;
        Ok(apply(allowed, logits))
    }

    /// Whether the grammar allows `id` next: the mask's answer, without
    /// computing the mask where one token's bytes can tell (see
    /// `Shared::allows`).
    pub fn allows(&mut self, id: u32) -> Result<bool, GrammarError> {
        lock(&self.shared)
            .allows(id)
            .map_err(|e| GrammarError(format!("grammar error: {e}")))
    }

    /// Whether the current state's mask has been computed (by a caller or
    /// by the helper thread): what the walks spare is visible to tests.
    pub fn has_mask(&self) -> bool {
        lock(&self.shared).cached_mask().is_some()
    }

    /// The parser's own answer for `id` where `allows` takes it instead of
    /// the mask's (`None` elsewhere): exposed so that tests can hold it
    /// against the mask in every state.
    pub fn allows_by_walk(&mut self, id: u32) -> Option<Result<bool, GrammarError>> {
        lock(&self.shared)
            .walk(id)
            .map(|r| r.map_err(|e| GrammarError(format!("grammar error: {e}"))))
    }

    /// The allowed token with the highest logit in `row` (ties to the lower
    /// id, NaN last): what a greedy pick over the masked row is. `None`
    /// when nothing is allowed. Without the state's mask at hand, the row's
    /// best [`CANDIDATES`] tokens are first walked through the parser in
    /// that order (see `Shared::allows`): the first one allowed is the
    /// answer when every walk before it was sure, since all better tokens
    /// are then refused. A refused greedy pick is usually a near miss (a
    /// closing quote instead of a comma), so this spares most masks (~160
    /// µs each in free text on the demo model's 32k vocabulary, against
    /// ~6 µs for the pass over the row and ~1 µs a walk). Otherwise the
    /// mask is computed and read in place, without copying the row.
    pub fn best_allowed(&mut self, row: &[f32]) -> Result<Option<u32>, GrammarError> {
        let err = |e: String| GrammarError(format!("grammar error: {e}"));
        let mut shared = lock(&self.shared);
        if shared.cached_mask().is_none() {
            for id in best_candidates(row) {
                match shared.walk(id) {
                    Some(Ok(true)) => return Ok(Some(id)),
                    Some(Ok(false)) => {}
                    Some(Err(e)) => return Err(err(e)),
                    None => break,
                }
            }
        }
        let allowed = shared.mask().as_ref().map_err(|e| err(e.clone()))?;
        let mut best: Option<(usize, f32)> = None;
        for (w, &word) in allowed.as_slice().iter().enumerate() {
            let mut bits = word;
            while bits != 0 {
                let i = w * 32 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let Some(&v) = row.get(i) else { break };
                if best.is_none_or(|(_, b)| better(v, b)) {
                    best = Some((i, v));
                }
            }
        }
        Ok(best.map(|(i, _)| i as u32))
    }

    /// The sampled token, into the grammar's state; the next state's mask
    /// is then computed ahead on the helper thread.
    pub fn commit(&mut self, id: u32) -> Result<(), GrammarError> {
        {
            let mut shared = lock(&self.shared);
            shared
                .matcher
                .consume_token(id)
                .map_err(|e| GrammarError(format!("grammar error: {}", crate::describe(&e))))?;
            let next = next_id(shared.state(), id);
            shared.path.push(next);
        }
        self.prefetch();
        Ok(())
    }

    /// Take back the last `n` committed tokens (drafts the target did not
    /// keep).
    pub fn rollback(&mut self, n: usize) -> Result<(), GrammarError> {
        if n == 0 {
            return Ok(());
        }
        let mut shared = lock(&self.shared);
        if n >= shared.path.len() {
            return Err(GrammarError(format!(
                "cannot take back {n} tokens of {}",
                shared.path.len() - 1
            )));
        }
        shared
            .matcher
            .rollback(n)
            .map_err(|e| GrammarError(format!("grammar error: {}", crate::describe(&e))))?;
        let keep = shared.path.len() - n;
        shared.path.truncate(keep);
        Ok(())
    }

    /// The grammar is complete: nothing but the end may follow.
    pub fn is_done(&self) -> bool {
        lock(&self.shared).matcher.is_stopped()
    }

    /// The grammar could end here.
    pub fn is_accepting(&mut self) -> bool {
        lock(&self.shared).matcher.is_accepting().unwrap_or(false)
    }
}

/// `logits` outside `allowed` set to −∞; how many stay.
fn apply(allowed: &SimpleVob, logits: &mut [f32]) -> usize {
    // A word of the bit set at a time: most words of a grammar's mask are
    // all-allowed or all-banned, so this is a pass over the vocabulary's
    // bits, not a call per token.
    let words = allowed.as_slice();
    let mut n = 0;
    for (w, chunk) in logits.chunks_mut(32).enumerate() {
        let bits = words.get(w).copied().unwrap_or(0);
        match bits {
            u32::MAX if chunk.len() == 32 => n += 32,
            0 => chunk.fill(f32::NEG_INFINITY),
            _ => {
                for (b, l) in chunk.iter_mut().enumerate() {
                    if bits >> b & 1 == 1 {
                        n += 1;
                    } else {
                        *l = f32::NEG_INFINITY;
                    }
                }
            }
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against a full sort by (logit, NaN last; id): rows shorter than the
    /// candidates and than the screen, ragged tails, ties, NaNs first.
    #[test]
    fn best_candidates_are_the_sorted_rows_head() {
        let mut seed = 7u64;
        let mut next = move || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as u32
        };
        for len in [0, 1, 5, 15, 16, 17, 31, 33, 100, 1000, 4099] {
            for case in 0..6 {
                let row: Vec<f32> = (0..len)
                    .map(|i| match (case, next() % 10) {
                        // NaNs at the start, then numbers.
                        (0, _) if i < 20 => f32::NAN,
                        (1, 0) => f32::NAN,
                        // Few distinct values: many ties.
                        (2, r) => r as f32,
                        (3, _) => -(i as f32),
                        (4, _) => f32::NEG_INFINITY,
                        _ => (next() % 1000) as f32 * 0.37,
                    })
                    .collect();
                let mut want: Vec<u32> = (0..len as u32).collect();
                want.sort_by(|&a, &b| {
                    let (x, y) = (row[a as usize], row[b as usize]);
                    match (x.is_nan(), y.is_nan()) {
                        (true, true) => a.cmp(&b),
                        (true, false) => std::cmp::Ordering::Greater,
                        (false, true) => std::cmp::Ordering::Less,
                        _ => y.partial_cmp(&x).unwrap().then(a.cmp(&b)),
                    }
                });
                want.truncate(CANDIDATES);
                let got: Vec<u32> = best_candidates(&row).collect();
                assert_eq!(got, want, "len {len}, case {case}");
            }
        }
    }
}
