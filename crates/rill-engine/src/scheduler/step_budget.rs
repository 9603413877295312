//! The step's row budget: how many rows one batched forward step runs,
//! all sequences together (llama.cpp's `--ubatch-size`, vLLM's
//! `--max-num-batched-tokens`).
//!
//! A step's working memory (projections, gathered expert inputs, the
//! attention's rows) grows with its rows, not with the context: without a
//! bound, k concurrent prefills take k prompt chunks at once. Decode and
//! verify rows always run; prompt chunks fill what is left, oldest request
//! first, and a chunk that does not fit waits for a later step, whole.
//! Chunks are never cut to fit: their boundaries depend only on the prompt
//! (see `Sequence::prefill_span`), so a request computes the same rows,
//! bit for bit, alone or in a crowd. The oldest prefill always runs, so
//! every prompt advances and a budget below one chunk only serialises.

use super::Worker;
use crate::sequence::Sequence;
use crate::speculation::MAX_DRAFT;

impl Worker {
    /// Move the prefilling sequences whose chunk does not fit this step's
    /// budget to `parked` (they rejoin `running` after the step).
    pub(super) fn park_over_budget(&mut self) {
        let chunk = self.config.prefill_chunk;
        let draft = self.config.spec.draft_max.min(MAX_DRAFT);
        let n_vocab = self.model.config.n_vocab;
        let park = over_budget(
            &self.running,
            (chunk, n_vocab),
            draft,
            self.config.step_tokens,
        );
        // Highest index first, so the lower ones stay where they are.
        for &i in park.iter().rev() {
            self.parked.push(self.running.swap_remove(i));
        }
    }

    /// The parked sequences back with the others, after the step.
    pub(super) fn unpark(&mut self) {
        self.running.append(&mut self.parked);
    }
}

/// Rows `s` adds to a step: its prompt chunk (`chunk`: the engine's chunk
/// length and the vocabulary, see [`Sequence::prefill_span`]), or its token
/// and the most drafts it may verify.
fn rows(s: &Sequence, chunk: (usize, usize), draft: usize) -> usize {
    if s.in_prefill() {
        s.prefill_span(chunk.0, chunk.1).len()
    } else {
        1 + if s.speculates() { draft } else { 0 }
    }
}

/// Indices (ascending) of the prefilling sequences that wait this step.
fn over_budget(
    running: &[Sequence],
    chunk: (usize, usize),
    draft: usize,
    budget: usize,
) -> Vec<usize> {
    let decoding = running.iter().filter(|s| !s.in_prefill());
    let used = decoding.map(|s| rows(s, chunk, draft)).sum();
    let mut prefilling: Vec<usize> = (0..running.len())
        .filter(|&i| running[i].in_prefill())
        .collect();
    prefilling.sort_by_key(|&i| running[i].sub.at);
    let chunks = prefilling.iter().map(|&i| rows(&running[i], chunk, draft));
    let mut park: Vec<usize> = fill(used, chunks, budget)
        .into_iter()
        .map(|k| prefilling[k])
        .collect();
    park.sort_unstable();
    park
}

/// Given `used` rows and prompt chunks of `sizes` rows in priority order,
/// the positions (in that order) of the chunks that do not fit `budget`:
/// the first always runs, each later one runs if it still fits.
fn fill(mut used: usize, sizes: impl Iterator<Item = usize>, budget: usize) -> Vec<usize> {
    let mut out = Vec::new();
    for (k, n) in sizes.enumerate() {
        if k == 0 || used + n <= budget {
            used += n;
        } else {
            out.push(k);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::fill;

    #[test]
    fn chunks_fill_the_budget_in_order_and_the_first_always_runs() {
        // Two 256-row chunks fit 512; the third and fourth wait.
        assert_eq!(fill(0, [256, 256, 256, 256].into_iter(), 512), vec![2, 3]);
        // Decode rows count: three decoders leave room for one chunk.
        assert_eq!(fill(3, [256, 256].into_iter(), 512), vec![1]);
        // A later, shorter chunk (a prompt's tail) still fits.
        assert_eq!(fill(0, [256, 256, 40].into_iter(), 300), vec![1]);
        // The oldest runs even past the budget (progress), alone.
        assert_eq!(fill(600, [256, 8].into_iter(), 512), vec![1]);
        assert_eq!(fill(0, [1024].into_iter(), 512), Vec::<usize>::new());
    }
}
