//! Byte-level BPE: merges applied by rank (lowest first; leftmost among equal ranks), exactly as
//! Hugging Face's `BPE` model with `ignore_merges = false` does it.

use rustc_hash::FxHashMap;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Words up to this many symbols use the simple quadratic scan; longer ones a heap.
const SHORT_WORD: usize = 48;

/// Merge table over token ids.
pub(crate) struct Bpe {
    /// (left id, right id) packed into a u64 → (rank, merged id)
    merges: FxHashMap<u64, (u32, u32)>,
    /// token id of each single byte
    byte_ids: [u32; 256],
}

#[inline]
fn key(a: u32, b: u32) -> u64 {
    ((a as u64) << 32) | b as u64
}

impl Bpe {
    /// `merges[rank] = (left, right, merged)` as token ids. When a pair appears twice the later
    /// entry wins (as in HF, which collects the list into a map).
    pub(crate) fn new(merges: &[(u32, u32, u32)], byte_ids: [u32; 256]) -> Bpe {
        let mut map = FxHashMap::with_capacity_and_hasher(merges.len(), Default::default());
        for (rank, &(a, b, m)) in merges.iter().enumerate() {
            map.insert(key(a, b), (rank as u32, m));
        }
        Bpe {
            merges: map,
            byte_ids,
        }
    }

    #[inline]
    fn merge(&self, a: u32, b: u32) -> Option<(u32, u32)> {
        self.merges.get(&key(a, b)).copied()
    }

    /// Append the ids of one pre-tokenized piece (raw bytes) to `out`.
    pub(crate) fn encode_word(&self, word: &[u8], out: &mut Vec<u32>) {
        match word.len() {
            0 => {}
            1 => out.push(self.byte_ids[word[0] as usize]),
            n if n <= SHORT_WORD => self.encode_short(word, out),
            _ => self.encode_long(word, out),
        }
    }

    /// Repeatedly merge the lowest-ranked adjacent pair (leftmost on ties).
    fn encode_short(&self, word: &[u8], out: &mut Vec<u32>) {
        let mut syms: Vec<u32> = word.iter().map(|&b| self.byte_ids[b as usize]).collect();
        // rank of the pair (syms[i], syms[i+1]); u32::MAX = no merge
        let mut ranks: Vec<(u32, u32)> = syms
            .windows(2)
            .map(|w| self.merge(w[0], w[1]).unwrap_or((u32::MAX, 0)))
            .collect();
        loop {
            let mut best = u32::MAX;
            let mut at = 0;
            for (i, &(r, _)) in ranks.iter().enumerate() {
                if r < best {
                    best = r;
                    at = i;
                }
            }
            if best == u32::MAX {
                break;
            }
            let merged = ranks[at].1;
            syms[at] = merged;
            syms.remove(at + 1);
            ranks.remove(at);
            if at > 0 {
                ranks[at - 1] = self.merge(syms[at - 1], merged).unwrap_or((u32::MAX, 0));
            }
            if at < ranks.len() {
                ranks[at] = self.merge(merged, syms[at + 1]).unwrap_or((u32::MAX, 0));
            }
        }
        out.extend_from_slice(&syms);
    }

    /// Same result as `encode_short`, O(n log n): doubly linked symbols and a heap of candidate
    /// merges keyed by (rank, position of the left symbol); stale entries are skipped.
    fn encode_long(&self, word: &[u8], out: &mut Vec<u32>) {
        const NONE: u32 = u32::MAX;
        struct Sym {
            id: u32,
            prev: u32,
            next: u32,
            alive: bool,
        }
        let n = word.len();
        let mut syms: Vec<Sym> = (0..n)
            .map(|i| Sym {
                id: self.byte_ids[word[i] as usize],
                prev: if i == 0 { NONE } else { i as u32 - 1 },
                next: if i + 1 == n { NONE } else { i as u32 + 1 },
                alive: true,
            })
            .collect();
        let mut heap: BinaryHeap<Reverse<(u32, u32)>> = BinaryHeap::with_capacity(n);
        for i in 0..n - 1 {
            if let Some((r, _)) = self.merge(syms[i].id, syms[i + 1].id) {
                heap.push(Reverse((r, i as u32)));
            }
        }
        while let Some(Reverse((rank, left))) = heap.pop() {
            let l = left as usize;
            if !syms[l].alive || syms[l].next == NONE {
                continue;
            }
            let r = syms[l].next as usize;
            let Some((cur_rank, merged)) = self.merge(syms[l].id, syms[r].id) else {
                continue;
            };
            if cur_rank != rank {
                continue; // the pair at this position changed since it was pushed
            }
            syms[l].id = merged;
            syms[r].alive = false;
            let rn = syms[r].next;
            syms[l].next = rn;
            if rn != NONE {
                syms[rn as usize].prev = l as u32;
                if let Some((r2, _)) = self.merge(merged, syms[rn as usize].id) {
                    heap.push(Reverse((r2, l as u32)));
                }
            }
            let p = syms[l].prev;
            if p != NONE {
                if let Some((r2, _)) = self.merge(syms[p as usize].id, merged) {
                    heap.push(Reverse((r2, p)));
                }
            }
        }
        let mut i = 0u32;
        while i != NONE {
            out.push(syms[i as usize].id);
            i = syms[i as usize].next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// byte b ↦ id b; merges over ids ≥ 256
    fn toy() -> Bpe {
        let mut byte_ids = [0u32; 256];
        for (b, id) in byte_ids.iter_mut().enumerate() {
            *id = b as u32;
        }
        let a = b'a' as u32;
        let b = b'b' as u32;
        // 256 = aa, 257 = ab, 258 = aa+b, 259 = aa+aa
        Bpe::new(
            &[(a, a, 256), (a, b, 257), (256, b, 258), (256, 256, 259)],
            byte_ids,
        )
    }

    #[test]
    fn short_and_long_agree() {
        let bpe = toy();
        let words: Vec<Vec<u8>> = vec![
            b"aaab".to_vec(),
            b"aaaa".to_vec(),
            b"abaaab".to_vec(),
            b"aaaaaaab".repeat(20),
            b"ab".repeat(40),
            b"a".repeat(101),
        ];
        for w in words {
            let (mut s, mut l) = (Vec::new(), Vec::new());
            bpe.encode_short(&w, &mut s);
            bpe.encode_long(&w, &mut l);
            assert_eq!(s, l, "{}", String::from_utf8_lossy(&w));
        }
        let mut v = Vec::new();
        bpe.encode_word(b"aaab", &mut v);
        assert_eq!(v, [256, 257]);
        v.clear();
        bpe.encode_word(b"aaaa", &mut v);
        assert_eq!(v, [259]);
    }
}
