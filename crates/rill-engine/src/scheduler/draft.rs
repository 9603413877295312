//! The worker's MTP-head part of a step: which requests speculate, the
//! batched draft steps before the trunk, and the head catching up on
//! prefilled prompt rows.

use super::Worker;
use crate::request::Request;
use crate::sequence::Sequence;
use crate::speculation::{Speculation, MAX_DRAFT};
use rill_model::{MtpItem, MtpOptions, SequenceState};

impl Worker {
    /// A request speculates when the engine and the request allow it, the
    /// model has an MTP head, and the state's head cache stands where the
    /// trunk does (a prompt-cache snapshot of a request that did not
    /// speculate has no head rows).
    pub(super) fn speculation_for(
        &self,
        req: &Request,
        state: &SequenceState,
    ) -> Option<Speculation> {
        let mut config = self.config.spec.clone();
        if let Some(n) = req.draft_max {
            config.draft_max = config.draft_max.min(n);
        }
        config.draft_max = config.draft_max.min(MAX_DRAFT);
        let head_in_step = state.mtp_position() == Some(state.position());
        let usable = config.is_on() && self.model.has_mtp() && head_in_step;
        usable.then(|| Speculation::new(config, self.model.config.n_embd))
    }

    /// The MTP head's part of a step, before the trunk: every decoding
    /// sequence that speculates feeds the head its unseen rows and drafts,
    /// one batched head step per draft position.
    pub(super) fn draft(&mut self, spans: &[Option<std::ops::Range<usize>>]) {
        let mut any = false;
        for (s, span) in self.running.iter_mut().zip(spans) {
            if span.is_none() {
                any |= s.plan_draft();
            }
        }
        if !any {
            return;
        }
        let mut first = true;
        loop {
            let mut who = Vec::new();
            let mut items: Vec<MtpItem> = Vec::new();
            for (i, (s, span)) in self.running.iter_mut().zip(spans).enumerate() {
                if span.is_some() {
                    continue;
                }
                let item = if first {
                    s.first_draft_item()
                } else {
                    s.next_draft_item()
                };
                if let Some(item) = item {
                    who.push(i);
                    items.push(item);
                }
            }
            if items.is_empty() {
                return;
            }
            let vocab = self.config.spec.draft_vocab;
            let options = MtpOptions {
                vocab_rows: (vocab > 0).then_some(vocab),
            };
            let result = self.model.forward_mtp_with(
                &self.runner,
                &mut items,
                options,
                &mut self.head_outputs,
            );
            drop(items);
            if let Err(e) = result {
                self.head_failed(&who, &e);
                return;
            }
            for (j, &i) in who.iter().enumerate() {
                let (l, h) = (self.head_outputs.logits(j), self.head_outputs.hidden(j));
                self.running[i].take_draft(l, h, &self.tok);
            }
            first = false;
            if !self.running.iter().any(Sequence::is_drafting) {
                return;
            }
        }
    }

    /// The head catches up on the prompt rows of this step's prefills
    /// (before their prompt-cache snapshots are taken, so that a snapshot
    /// can go on speculating).
    pub(super) fn catch_up(&mut self, spans: &[Option<std::ops::Range<usize>>]) {
        let mut who = Vec::new();
        let mut items: Vec<MtpItem> = Vec::new();
        for (i, (s, span)) in self.running.iter_mut().zip(spans).enumerate() {
            if span.is_some() && s.plan_catch_up() {
                if let Some(item) = s.first_draft_item() {
                    who.push(i);
                    items.push(item);
                }
            }
        }
        if items.is_empty() {
            return;
        }
        let result = self
            .model
            .forward_mtp_into(&self.runner, &mut items, &mut self.head_outputs);
        drop(items);
        if let Err(e) = result {
            self.head_failed(&who, &e);
        }
    }

    /// Never expected (the head's inputs are checked as the trunk's are):
    /// the sequences go on without speculation rather than fail.
    fn head_failed(&mut self, who: &[usize], e: &rill_model::ForwardError) {
        tracing::warn!(
            "MTP head step failed, speculation off for {} sequences: {e}",
            who.len()
        );
        for &i in who {
            self.running[i].stop_speculating();
        }
    }
}
