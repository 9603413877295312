//! Counting the memory of states that share KV pages.
//!
//! A clone of a [`SequenceState`] shares its KV pages (`kv.rs`): a prompt
//! cache holding N snapshots of one conversation holds its KV once, plus
//! one recurrent state per snapshot. [`SharedPages`] keeps a reference
//! count per page over the states added to it, so that its bytes are the
//! memory those states hold together: each page once, however many of them
//! share it, and freed from the count only when the last one that holds it
//! is removed (as the page itself is freed only when nothing holds it).

use crate::state::SequenceState;
use std::collections::HashMap;

/// The bytes of a set of states, each shared KV page counted once.
#[derive(Debug, Default)]
pub struct SharedPages {
    /// Page address → (holders among the added states, bytes).
    pages: HashMap<usize, (usize, usize)>,
    /// Bytes of the pages.
    page_bytes: usize,
    /// Bytes the states hold alone.
    unpaged: usize,
}

impl SharedPages {
    pub fn new() -> SharedPages {
        SharedPages::default()
    }

    /// Count `state` in: the bytes it adds (its own, and its pages no state
    /// already counted holds).
    pub fn add(&mut self, state: &SequenceState) -> usize {
        let mut added = state.unpaged_bytes();
        self.unpaged += added;
        state.each_kv_page(|at, b| {
            let e = self.pages.entry(at).or_insert((0, b));
            if e.0 == 0 {
                added += b;
                self.page_bytes += b;
            }
            e.0 += 1;
        });
        added
    }

    /// Count `state` (added before) out: the bytes that leaves (its own,
    /// and its pages no other counted state holds).
    pub fn remove(&mut self, state: &SequenceState) -> usize {
        let mut freed = state.unpaged_bytes();
        self.unpaged -= freed;
        state.each_kv_page(|at, b| {
            let e = self.pages.get_mut(&at).expect("a page of a counted state");
            e.0 -= 1;
            if e.0 == 0 {
                self.pages.remove(&at);
                freed += b;
                self.page_bytes -= b;
            }
        });
        freed
    }

    /// Bytes `state` would add (its own, and its pages not counted here),
    /// without counting it.
    pub fn extra(&self, state: &SequenceState) -> usize {
        let mut extra = state.unpaged_bytes();
        state.each_kv_page(|at, b| {
            if !self.pages.contains_key(&at) {
                extra += b;
            }
        });
        extra
    }

    /// Bytes of the counted states together.
    pub fn bytes(&self) -> usize {
        self.page_bytes + self.unpaged
    }

    /// Distinct pages counted.
    pub fn pages(&self) -> usize {
        self.pages.len()
    }
}
