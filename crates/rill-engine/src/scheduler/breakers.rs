//! DRY's sequence breakers, made once per list of texts: most requests
//! that use DRY use the default list, and making one reads the whole
//! vocabulary.

use super::Worker;
use rill_sampler::Breakers;
use std::sync::Arc;

impl Worker {
    /// DRY's breakers `texts` as tokens of this model's vocabulary.
    pub(super) fn breakers(&mut self, texts: &[String]) -> Arc<Breakers> {
        /// Distinct breaker lists kept (each a small map).
        const KEEP: usize = 16;
        if let Some(b) = self.dry_breakers.get(texts) {
            return b.clone();
        }
        let tok = &self.tok;
        let b = Arc::new(Breakers::build(
            texts,
            tok.vocab_size(),
            |id| tok.token_to_piece(id).unwrap_or_default(),
            |text| tok.encode(text, false),
        ));
        if self.dry_breakers.len() >= KEEP {
            self.dry_breakers.clear();
        }
        self.dry_breakers.insert(texts.to_vec(), b.clone());
        b
    }
}
