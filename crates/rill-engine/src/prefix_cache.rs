//! Prompt cache for hybrid models.
//!
//! A GDN layer's recurrent state cannot be cut back to an earlier position,
//! so reuse works from snapshots: the whole [`SequenceState`] (recurrent
//! states, conv windows and the attention KV of that prefix) taken at known
//! positions — the end of each prompt and every `interval` tokens during
//! prefill. A new request resumes from the longest cached prefix of its
//! prompt and prefills only the rest.
//!
//! The snapshots sit at the nodes of a radix tree of token runs (a node's
//! tokens are its path from the root). A snapshot is a clone of the
//! sequence state, which shares the KV pages of the sequence it was taken
//! from and of every other snapshot on the same path (`rill_model::kv`:
//! pages are reference counted and copied on write), so N snapshots of one
//! conversation hold its KV once plus N recurrent states. The cache's
//! bytes count each page once ([`SharedPages`]), under a byte budget;
//! snapshots are evicted least recently used first, and a page is freed
//! (and leaves the count) only when nothing holds it any more.

use rill_model::{SequenceState, SharedPages};

struct Snapshot {
    state: SequenceState,
    last_used: u64,
}

/// A node: the tokens of the edge from its parent, and maybe a snapshot
/// of the state after its path's tokens.
struct Node {
    run: Vec<u32>,
    parent: usize,
    children: Vec<usize>,
    snap: Option<Snapshot>,
}

pub struct PrefixCache {
    /// Node 0 is the root (no tokens); freed slots are `None`.
    nodes: Vec<Option<Node>>,
    free: Vec<usize>,
    snapshots: usize,
    pages: SharedPages,
    /// Bytes of the tree's token runs.
    token_bytes: usize,
    budget: usize,
    clock: u64,
    /// Keep what is evicted in `evicted` (for the disk cache) instead of
    /// dropping it.
    keep_evicted: bool,
    evicted: Vec<(Vec<u32>, SequenceState)>,
}

/// A cache hit: the state after `len` prompt tokens.
pub struct Hit {
    pub len: usize,
    pub state: SequenceState,
}

/// Tokens `a` and `b` start with alike.
fn common(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl PrefixCache {
    pub fn new(budget_bytes: usize) -> PrefixCache {
        let root = Node {
            run: Vec::new(),
            parent: 0,
            children: Vec::new(),
            snap: None,
        };
        PrefixCache {
            nodes: vec![Some(root)],
            free: Vec::new(),
            snapshots: 0,
            pages: SharedPages::new(),
            token_bytes: 0,
            budget: budget_bytes,
            clock: 0,
            keep_evicted: false,
            evicted: Vec::new(),
        }
    }

    /// Keep evicted snapshots for [`PrefixCache::take_evicted`] (a disk
    /// cache writes them) instead of dropping them.
    pub fn keep_evicted(&mut self, keep: bool) {
        self.keep_evicted = keep;
    }

    /// The snapshots evicted since the last call, with their tokens. They
    /// no longer count in the cache's bytes; their pages live until these
    /// are dropped.
    pub fn take_evicted(&mut self) -> Vec<(Vec<u32>, SequenceState)> {
        std::mem::take(&mut self.evicted)
    }

    fn node(&self, i: usize) -> &Node {
        self.nodes[i].as_ref().expect("a live node")
    }

    fn node_mut(&mut self, i: usize) -> &mut Node {
        self.nodes[i].as_mut().expect("a live node")
    }

    /// Bytes held: every KV page once, the recurrent states, the tokens.
    pub fn bytes(&self) -> usize {
        self.pages.bytes() + self.token_bytes
    }

    /// Distinct KV pages held.
    pub fn pages(&self) -> usize {
        self.pages.pages()
    }

    /// Bytes `state` holds that the cache does not (pages it shares with
    /// the cache are the cache's already).
    pub fn extra_bytes(&self, state: &SequenceState) -> usize {
        self.pages.extra(state)
    }

    /// Snapshots held.
    pub fn len(&self) -> usize {
        self.snapshots
    }

    pub fn is_empty(&self) -> bool {
        self.snapshots == 0
    }

    /// The tokens of node `i`'s path.
    fn path(&self, mut i: usize) -> Vec<u32> {
        let mut runs = Vec::new();
        while i != 0 {
            let n = self.node(i);
            runs.push(&n.run[..]);
            i = n.parent;
        }
        runs.into_iter().rev().flatten().copied().collect()
    }

    /// Every snapshot: its tokens and state.
    pub fn entries(&self) -> Vec<(Vec<u32>, &SequenceState)> {
        (self.nodes.iter().enumerate())
            .filter_map(|(i, n)| Some((i, &n.as_ref()?.snap.as_ref()?.state)))
            .map(|(i, s)| (self.path(i), s))
            .collect()
    }

    /// The child of `at` whose run starts with `t`.
    fn child(&self, at: usize, t: u32) -> Option<usize> {
        (self.node(at).children.iter().copied()).find(|&c| self.node(c).run[0] == t)
    }

    /// The longest cached strict prefix of `prompt` (at least one token must
    /// be left to run, to get the logits of the last position).
    pub fn lookup(&mut self, prompt: &[u32], capacity: usize) -> Option<Hit> {
        self.clock += 1;
        let (mut at, mut depth, mut best) = (0, 0, None);
        while depth < prompt.len() {
            let Some(c) = self.child(at, prompt[depth]) else {
                break;
            };
            let run = &self.node(c).run;
            if common(run, &prompt[depth..]) < run.len() {
                break;
            }
            (at, depth) = (c, depth + run.len());
            if depth < prompt.len() && self.node(at).snap.is_some() {
                best = Some((at, depth));
            }
        }
        let (i, len) = best?;
        let clock = self.clock;
        let snap = self.node_mut(i).snap.as_mut().expect("a snapshot");
        snap.last_used = clock;
        Some(Hit {
            len,
            state: snap.state.with_capacity(capacity),
        })
    }

    /// Evict least recently used snapshots until at most `limit` bytes are
    /// held: (snapshots, bytes) evicted.
    pub fn shrink_to(&mut self, limit: usize) -> (usize, usize) {
        let (mut n, mut bytes) = (0, 0);
        while self.bytes() > limit {
            let Some(oldest) = (self.nodes.iter().enumerate())
                .filter_map(|(i, n)| Some((i, n.as_ref()?.snap.as_ref()?.last_used)))
                .min_by_key(|&(_, t)| t)
                .map(|(i, _)| i)
            else {
                break;
            };
            let before = self.bytes();
            let snap = self.node_mut(oldest).snap.take().expect("a snapshot");
            self.pages.remove(&snap.state);
            self.snapshots -= 1;
            if self.keep_evicted {
                self.evicted.push((self.path(oldest), snap.state));
            }
            self.prune(oldest);
            (n, bytes) = (n + 1, bytes + (before - self.bytes()));
        }
        (n, bytes)
    }

    /// Drop node `i` and its ancestors while they hold no snapshot and no
    /// children.
    fn prune(&mut self, mut i: usize) {
        while i != 0 {
            let n = self.node(i);
            if n.snap.is_some() || !n.children.is_empty() {
                return;
            }
            let parent = n.parent;
            self.token_bytes -= n.run.len() * 4;
            self.nodes[i] = None;
            self.free.push(i);
            self.node_mut(parent).children.retain(|&c| c != i);
            i = parent;
        }
    }

    fn add_node(&mut self, node: Node) -> usize {
        self.token_bytes += node.run.len() * 4;
        match self.free.pop() {
            Some(i) => {
                self.nodes[i] = Some(node);
                i
            }
            None => {
                self.nodes.push(Some(node));
                self.nodes.len() - 1
            }
        }
    }

    /// The node whose path is `tokens`, if there is one.
    fn find(&self, tokens: &[u32]) -> Option<usize> {
        let (mut at, mut depth) = (0, 0);
        while depth < tokens.len() {
            let c = self.child(at, tokens[depth])?;
            let run = &self.node(c).run;
            if common(run, &tokens[depth..]) < run.len() {
                return None;
            }
            (at, depth) = (c, depth + run.len());
        }
        Some(at)
    }

    /// The node whose path is `tokens`, made (splitting an edge where the
    /// path leaves it) if missing.
    fn node_for(&mut self, tokens: &[u32]) -> usize {
        let (mut at, mut depth) = (0, 0);
        while depth < tokens.len() {
            let rest = &tokens[depth..];
            let Some(c) = self.child(at, rest[0]) else {
                let leaf = Node {
                    run: rest.to_vec(),
                    parent: at,
                    children: Vec::new(),
                    snap: None,
                };
                let leaf = self.add_node(leaf);
                self.node_mut(at).children.push(leaf);
                return leaf;
            };
            let k = common(&self.node(c).run, rest);
            if k < self.node(c).run.len() {
                // Split c's edge after k tokens.
                let tail = self.node_mut(c).run.split_off(k);
                let head = std::mem::replace(&mut self.node_mut(c).run, tail);
                self.token_bytes -= head.len() * 4;
                let mid = self.add_node(Node {
                    run: head,
                    parent: at,
                    children: vec![c],
                    snap: None,
                });
                self.node_mut(c).parent = mid;
                for ch in &mut self.node_mut(at).children {
                    if *ch == c {
                        *ch = mid;
                    }
                }
                (at, depth) = (mid, depth + k);
            } else {
                (at, depth) = (c, depth + k);
            }
        }
        at
    }

    /// Remember the state after `tokens`, holding at most `room` bytes
    /// (besides its own budget). Keeps an existing snapshot for the same
    /// prefix; evicts the least recently used snapshots to stay in budget.
    pub fn insert(&mut self, tokens: &[u32], state: &SequenceState, room: usize) {
        let budget = self.budget.min(room);
        // The most it can add (every page its own): over the budget, it
        // never fits.
        if state.bytes() + tokens.len() * 4 > budget || tokens.is_empty() {
            return;
        }
        self.clock += 1;
        let clock = self.clock;
        if let Some(i) = self.find(tokens) {
            if let Some(s) = &mut self.node_mut(i).snap {
                s.last_used = clock;
                return;
            }
        }
        // Room for what it adds now, then again once counted (an eviction
        // may have left it the only holder of pages it shared).
        let extra = self.pages.extra(state) + tokens.len() * 4;
        self.shrink_to(budget.saturating_sub(extra));
        let i = self.node_for(tokens);
        let state = state.clone();
        self.pages.add(&state);
        self.snapshots += 1;
        self.node_mut(i).snap = Some(Snapshot {
            state,
            last_used: clock,
        });
        self.shrink_to(budget);
    }
}
