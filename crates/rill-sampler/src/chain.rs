//! The chain in an order of the user's ([`crate::SamplerConfig::order`]):
//! the plain algorithm, each stage acting as llama.cpp's sampler of that
//! name acts on the candidates the stages before it left. The default order
//! never comes here: [`Sampler::distribution`](crate::Sampler) computes the
//! same draw without sorting the vocabulary.

use crate::cuts::{
    keep_at_least_one, min_p_keep, sigma_floor, softmax, softmax_wide, sort_best_first, top_p_keep,
    typical_cut, xtc_cut,
};
use crate::order::Stage;
use crate::{apply_penalties, dry, Sampler};

impl Sampler {
    /// The candidates (`self.cand`) and their probabilities after `order`
    /// over a biased `row`. A cut decides on the softmax of the candidates'
    /// logits as they are at its turn (divided by the temperature when that
    /// stage came first), penalties and DRY change the logits of the tokens
    /// still there, a temperature of 0 keeps the best candidate, and a stage
    /// left out of `order` is not applied (without `temperature` the draw is
    /// at the logits' own scale, as in llama.cpp). The draw is from the
    /// softmax of what is left.
    pub(crate) fn chain(
        &mut self,
        mut row: Vec<f32>,
        history: &[u32],
        order: &[Stage],
    ) -> Vec<f64> {
        let c = self.config.cuts();
        self.cand.clear();
        (self.cand).extend(row.iter().enumerate().map(|(i, &l)| (i as u32, l)));
        // Best first once a cut has needed it (and until logits change).
        let mut sorted = false;
        fn sort(cand: &mut [(u32, f32)], sorted: &mut bool) {
            if !std::mem::replace(sorted, true) {
                sort_best_first(cand);
            }
        }
        for &stage in order {
            match stage {
                Stage::Penalties | Stage::Dry => {
                    // By token id on a whole row, then back onto the
                    // candidates (the row's other tokens are gone).
                    row.fill(f32::NEG_INFINITY);
                    for &(id, l) in &self.cand {
                        row[id as usize] = l;
                    }
                    if stage == Stage::Penalties {
                        apply_penalties(&self.config, &mut row, history);
                    } else {
                        dry::apply(&self.config.dry, &self.breakers, &mut row, history);
                    }
                    for cand in self.cand.iter_mut() {
                        cand.1 = row[cand.0 as usize];
                    }
                    sorted = false;
                }
                Stage::TopNSigma if c.top_n_sigma > 0.0 => {
                    let logits: Vec<f32> = self.cand.iter().map(|c| c.1).collect();
                    let floor = sigma_floor(&logits, c.top_n_sigma);
                    sort(&mut self.cand, &mut sorted);
                    keep_at_least_one(&mut self.cand, |l| l >= floor);
                }
                Stage::TopK if c.top_k > 0 && c.top_k < self.cand.len() => {
                    sort(&mut self.cand, &mut sorted);
                    self.cand.truncate(c.top_k);
                }
                Stage::Typical if c.typical_p < 1.0 => {
                    sort(&mut self.cand, &mut sorted);
                    let p = softmax(&self.cand, 1.0);
                    typical_cut(&mut self.cand, &p, c.typical_p, c.min_keep);
                }
                Stage::TopP if c.top_p < 1.0 => {
                    sort(&mut self.cand, &mut sorted);
                    let p = softmax(&self.cand, 1.0);
                    self.cand.truncate(top_p_keep(&p, c.top_p, c.min_keep));
                }
                Stage::MinP if c.min_p > 0.0 => {
                    sort(&mut self.cand, &mut sorted);
                    let p = softmax(&self.cand, 1.0);
                    self.cand.truncate(min_p_keep(&p, c.min_p, c.min_keep));
                }
                Stage::Xtc
                    if c.xtc_probability > 0.0
                        && c.xtc_threshold <= 0.5
                        && self.cand.len() > 1
                        && self.rng.next_f64() < c.xtc_probability as f64 =>
                {
                    sort(&mut self.cand, &mut sorted);
                    xtc_cut(&mut self.cand, c.xtc_threshold, c.min_keep);
                }
                Stage::Temperature => match self.temperature_now(c.temperature) {
                    // Dividing keeps the order.
                    t if t > 0.0 => self.cand.iter_mut().for_each(|c| c.1 /= t),
                    _ => {
                        self.only_the_best();
                        sorted = true;
                    }
                },
                _ => {}
            }
        }
        if self.cand.len() > 4096 {
            softmax_wide(&self.cand, 1.0)
        } else {
            softmax(&self.cand, 1.0)
        }
    }
}
