//! Prompt cache for hybrid models.
//!
//! A GDN layer's recurrent state cannot be cut back to an earlier position,
//! so reuse works from snapshots: the whole [`SequenceState`] (recurrent
//! states, conv windows and the attention KV of that prefix) taken at known
//! positions — the end of each prompt and every `interval` tokens during
//! prefill. A new request resumes from the longest cached prefix of its
//! prompt and prefills only the rest. Entries live under a byte budget and
//! are evicted least recently used first.

use rill_model::SequenceState;

struct Entry {
    tokens: Vec<u32>,
    state: SequenceState,
    bytes: usize,
    last_used: u64,
}

pub struct PrefixCache {
    entries: Vec<Entry>,
    budget: usize,
    used: usize,
    clock: u64,
}

/// A cache hit: the state after `len` prompt tokens.
pub struct Hit {
    pub len: usize,
    pub state: SequenceState,
}

impl PrefixCache {
    pub fn new(budget_bytes: usize) -> PrefixCache {
        PrefixCache {
            entries: Vec::new(),
            budget: budget_bytes,
            used: 0,
            clock: 0,
        }
    }

    pub fn bytes(&self) -> usize {
        self.used
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Every entry: its tokens and state.
    pub fn entries(&self) -> impl Iterator<Item = (&[u32], &SequenceState)> {
        self.entries.iter().map(|e| (&e.tokens[..], &e.state))
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The longest cached strict prefix of `prompt` (at least one token must
    /// be left to run, to get the logits of the last position).
    pub fn lookup(&mut self, prompt: &[u32], capacity: usize) -> Option<Hit> {
        self.clock += 1;
        let best = self
            .entries
            .iter_mut()
            .filter(|e| e.tokens.len() < prompt.len() && prompt.starts_with(&e.tokens))
            .max_by_key(|e| e.tokens.len())?;
        best.last_used = self.clock;
        Some(Hit {
            len: best.tokens.len(),
            state: best.state.with_capacity(capacity),
        })
    }

    /// Evict least recently used entries until at most `limit` bytes are
    /// held: (entries, bytes) evicted.
    pub fn shrink_to(&mut self, limit: usize) -> (usize, usize) {
        let (mut n, mut bytes) = (0, 0);
        while self.used > limit {
            let Some(oldest) = self
                .entries
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| e.last_used)
                .map(|(i, _)| i)
            else {
                break;
            };
            let b = self.entries.swap_remove(oldest).bytes;
            self.used -= b;
            (n, bytes) = (n + 1, bytes + b);
        }
        (n, bytes)
    }

    /// Remember the state after `tokens`, holding at most `room` bytes
    /// (besides its own budget). Replaces an entry for the same prefix;
    /// evicts the least recently used entries to stay in budget.
    pub fn insert(&mut self, tokens: &[u32], state: &SequenceState, room: usize) {
        let bytes = state.bytes() + tokens.len() * 4;
        let budget = self.budget.min(room);
        if bytes > budget || tokens.is_empty() {
            return;
        }
        self.clock += 1;
        if let Some(e) = self.entries.iter_mut().find(|e| e.tokens == tokens) {
            e.last_used = self.clock;
            return;
        }
        self.shrink_to(budget - bytes);
        self.used += bytes;
        self.entries.push(Entry {
            tokens: tokens.to_vec(),
            state: state.clone(),
            bytes,
            last_used: self.clock,
        });
    }
}
