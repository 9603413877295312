//! A draw's outcome kept for the caller (llama-server's
//! `post_sampling_probs`): what the chain left and what was taken.

use crate::Sampler;

/// What a draw came down to (llama-server's `post_sampling_probs`): the
/// probability of the token returned and the most likely tokens, best
/// first (ties to the lower id), under the distribution after the whole
/// chain; tokens the chain cut have none. A greedy draw is the best token
/// at 1.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Drawn {
    pub chosen: f64,
    pub top: Vec<(u32, f64)>,
}

impl Sampler {
    /// Keep each draw's outcome ([`Drawn`], its `n` most likely tokens)
    /// for [`last_draw`](Self::last_draw).
    pub fn record_draws(&mut self, n: usize) {
        self.record = Some(n);
    }

    /// The outcome of the last draw since [`forget_draw`](Self::forget_draw),
    /// when draws are recorded.
    pub fn last_draw(&self) -> Option<&Drawn> {
        self.last.as_ref()
    }

    pub fn forget_draw(&mut self) {
        self.last = None;
    }

    /// Record a draw of `token` from `probs` (over `self.cand`; `None`: a
    /// greedy pick).
    pub(crate) fn note(&mut self, token: u32, probs: Option<&[f64]>) {
        let Some(n) = self.record else { return };
        let Some(probs) = probs else {
            self.last = Some(Drawn {
                chosen: 1.0,
                top: if n > 0 {
                    vec![(token, 1.0)]
                } else {
                    Vec::new()
                },
            });
            return;
        };
        let mut top: Vec<(u32, f64)> = (self.cand.iter().zip(probs))
            .filter(|(_, &p)| p > 0.0)
            .map(|(c, &p)| (c.0, p))
            .collect();
        let better = |a: &(u32, f64), b: &(u32, f64)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if top.len() > n && n > 0 {
            top.select_nth_unstable_by(n - 1, better);
        }
        top.truncate(n);
        top.sort_unstable_by(better);
        let chosen = (self.cand.iter().zip(probs))
            .find(|(c, _)| c.0 == token)
            .map_or(0.0, |(_, &p)| p);
        self.last = Some(Drawn { chosen, top });
    }
}
