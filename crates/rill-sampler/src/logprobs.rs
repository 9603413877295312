//! Log-probabilities of a logits row, for the APIs' `logprobs` (a
//! generated token's, and an echoed prompt's tokens').

use crate::cuts::{sort_best_first, top_k_into};

/// Log-probabilities of a logits row (for `logprobs` in APIs).
pub fn log_softmax(row: &[f32]) -> Vec<f32> {
    let lse = log_sum_exp(row);
    row.iter().map(|&v| v - lse).collect()
}

/// `ln Σ eᵛ` over `row`: the max taken out, the exponentials by
/// `exp_fast` (a few ulp; vectorised, where `f32::exp` is a libm call per
/// value: ~3 ms on a 248k row) summed in f32 lanes per block of 256 and
/// the blocks in f64.
fn log_sum_exp(row: &[f32]) -> f32 {
    // In 8 lanes (a fold of `f32::max` is one dependent chain); a NaN is
    // passed over as `f32::max` does.
    let mut lanes = [f32::NEG_INFINITY; 8];
    let mut parts = row.chunks_exact(8);
    for part in &mut parts {
        for (m, &v) in lanes.iter_mut().zip(part) {
            *m = if v > *m { v } else { *m };
        }
    }
    let max = (parts.remainder().iter())
        .chain(&lanes)
        .copied()
        .fold(f32::NEG_INFINITY, f32::max);
    if !max.is_finite() {
        // All −∞ (or +∞ somewhere): what the plain formula gives.
        return max + row.iter().map(|&v| (v - max).exp()).sum::<f32>().ln();
    }
    let mut total = 0.0f64;
    for block in row.chunks(256) {
        let mut lanes = [0.0f32; 8];
        let mut parts = block.chunks_exact(8);
        for part in &mut parts {
            for (l, &v) in lanes.iter_mut().zip(part) {
                *l += rill_kernels::ops::exp_fast(v - max);
            }
        }
        let rest: f32 = parts
            .remainder()
            .iter()
            .map(|&v| rill_kernels::ops::exp_fast(v - max))
            .sum();
        total += (lanes.iter().sum::<f32>() + rest) as f64;
    }
    total.ln() as f32 + max
}

/// The log-probability of a chosen token and the `k` most likely
/// alternatives, best first (ties to the lower id).
#[derive(Clone, Debug, PartialEq)]
pub struct Logprobs {
    pub chosen: f32,
    /// The chosen token's rank in the row, 1 for the most likely (one more
    /// than the count of tokens more likely than it).
    pub rank: u32,
    pub top: Vec<(u32, f32)>,
}

/// [`Logprobs`] of `chosen` in a logits row, with the top `k`. (Called per
/// token, and per prompt token for an echoed prompt: no copy of the row.)
pub fn logprobs(row: &[f32], chosen: u32, k: usize) -> Logprobs {
    let lse = log_sum_exp(row);
    let mut top = Vec::new();
    match k.min(row.len()) {
        0 => {}
        k if k == row.len() => {
            top.extend(row.iter().enumerate().map(|(i, &l)| (i as u32, l)));
            sort_best_first(&mut top);
        }
        k => top_k_into(row, k, &mut top),
    }
    let value = row.get(chosen as usize).copied();
    let rank = value.map_or(row.len(), |c| {
        row.iter().fold(0, |n, &v| n + usize::from(v > c)) + 1
    });
    Logprobs {
        rank: rank as u32,
        chosen: value.map_or(f32::NEG_INFINITY, |v| v - lse),
        top: top.into_iter().map(|(i, v)| (i, v - lse)).collect(),
    }
}
