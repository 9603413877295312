//! Mirostat (Basu et al. 2021, arXiv 2007.14966), as llama.cpp runs it:
//! the draw is cut so that its surprise (`−log₂ p` of the token drawn)
//! tracks a target `tau`, with a running bound `mu` (starting at `2·tau`)
//! that each drawn token moves by `eta` times its surprise's error.
//! Version 1 estimates the Zipf exponent of the distribution from its 100
//! best tokens and keeps the top k that exponent and `mu` give; version 2
//! keeps the tokens whose surprise is at most `mu`.

use crate::cuts::{softmax, sort_best_first, top_k_into, weight};

/// Mirostat's parameters (llama-server's `mirostat`, `mirostat_tau`,
/// `mirostat_eta`). `Default` is off.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MirostatConfig {
    /// 0 = off, 1 or 2: the version.
    pub version: u8,
    /// Target surprise, in bits.
    pub tau: f32,
    /// Learning rate.
    pub eta: f32,
}

impl Default for MirostatConfig {
    fn default() -> Self {
        MirostatConfig {
            version: 0,
            tau: 5.0,
            eta: 0.1,
        }
    }
}

/// Tokens version 1 fits the exponent on (llama.cpp's `m`).
const FIT_TOKENS: usize = 100;

/// The candidates (`cand`, best first) and their probabilities for one
/// draw with bound `mu`, from a row already at its temperature.
pub(crate) fn distribution(
    c: &MirostatConfig,
    mu: f32,
    row: &[f32],
    cand: &mut Vec<(u32, f32)>,
) -> Vec<f64> {
    let v = row.len();
    let all = |cand: &mut Vec<(u32, f32)>| {
        cand.clear();
        cand.extend(row.iter().enumerate().map(|(i, &l)| (i as u32, l)));
        sort_best_first(cand);
    };
    if c.version == 1 {
        let m = FIT_TOKENS.min(v);
        match m < v {
            true => top_k_into(row, m, cand),
            false => all(cand),
        }
        // Least squares of ln(p_i / p_{i+1}) on ln((i + 2) / (i + 1)):
        // the Zipf exponent s of the best tokens.
        let (mut tb, mut tt) = (0f64, 0f64);
        for i in 0..(m.saturating_sub(1)).min(cand.len().saturating_sub(1)) {
            let t = ((i + 2) as f64 / (i + 1) as f64).ln();
            tb += t * (cand[i].1 as f64 - cand[i + 1].1 as f64);
            tt += t * t;
        }
        let s = tb / tt;
        let eps = s - 1.0;
        let k = ((eps * 2f64.powf(mu as f64)) / (1.0 - (v as f64).powf(-eps))).powf(1.0 / s);
        let k = if k >= 1.0 { k as usize } else { 1 };
        if k < cand.len() {
            cand.truncate(k);
        } else if k < v {
            top_k_into(row, k, cand);
        } else {
            all(cand);
        }
        return softmax(cand, 1.0);
    }
    // Version 2: p ≥ 2^−mu, that is a logit at least max + ln z − mu·ln 2.
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if !max.is_finite() {
        all(cand);
        cand.truncate(1);
        return softmax(cand, 1.0);
    }
    let z: f64 = row.iter().map(|&l| weight(l - max) as f64).sum();
    let bound = max as f64 + z.ln() - mu as f64 * std::f64::consts::LN_2;
    cand.clear();
    cand.extend(
        (row.iter().enumerate())
            .filter(|&(_, &l)| l as f64 >= bound)
            .map(|(i, &l)| (i as u32, l)),
    );
    if cand.is_empty() {
        let best = crate::argmax(row);
        cand.push((best, row[best as usize]));
    }
    sort_best_first(cand);
    softmax(cand, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Zipf row (p_i ∝ i^−s): version 1 fits exactly s, and keeps the
    /// k best of the paper's formula, computed here directly.
    #[test]
    fn version_1_keeps_the_top_k_of_the_fitted_exponent() {
        let (n, s) = (1000usize, 1.2f64);
        // Shuffled ids, so the cut must find the best ones.
        let ids: Vec<usize> = (0..n).map(|i| (i * 337) % n).collect();
        let mut row = vec![0f32; n];
        for (rank, &id) in ids.iter().enumerate() {
            row[id] = (-s * ((rank + 1) as f64).ln()) as f32;
        }
        for mu in [4.0f32, 10.0, 16.0] {
            let k = (((s - 1.0) * 2f64.powf(mu as f64)) / (1.0 - (n as f64).powf(1.0 - s)))
                .powf(1.0 / s)
                .floor() as usize;
            let c = MirostatConfig {
                version: 1,
                ..Default::default()
            };
            let mut cand = Vec::new();
            let p = distribution(&c, mu, &row, &mut cand);
            // The f32 logits move the fit a hair: allow one token either way.
            assert!(
                cand.len().abs_diff(k.clamp(1, n)) <= 1,
                "mu {mu}: {} vs {k}",
                cand.len()
            );
            let want: Vec<u32> = ids[..cand.len()].iter().map(|&i| i as u32).collect();
            assert_eq!(cand.iter().map(|c| c.0).collect::<Vec<_>>(), want);
            assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        }
    }

    /// Version 2 keeps exactly the tokens of probability ≥ 2^−mu (at least
    /// the best), renormalised.
    #[test]
    fn version_2_keeps_the_tokens_below_the_surprise_bound() {
        let probs = [0.05f64, 0.5, 0.3, 0.15];
        let row: Vec<f32> = probs.iter().map(|p| p.ln() as f32).collect();
        let c = MirostatConfig {
            version: 2,
            ..Default::default()
        };
        let mut cand = Vec::new();
        // 2^−2 = 0.25: ids 1 and 2.
        let p = distribution(&c, 2.0, &row, &mut cand);
        assert_eq!(cand.iter().map(|c| c.0).collect::<Vec<_>>(), vec![1, 2]);
        assert!((p[0] - 0.625).abs() < 1e-6 && (p[1] - 0.375).abs() < 1e-6);
        // 2^−0.1 > 0.5: only the best.
        distribution(&c, 0.1, &row, &mut cand);
        assert_eq!(cand.iter().map(|c| c.0).collect::<Vec<_>>(), vec![1]);
        // 2^−5 < 0.05: all, best first.
        distribution(&c, 5.0, &row, &mut cand);
        assert_eq!(
            cand.iter().map(|c| c.0).collect::<Vec<_>>(),
            vec![1, 2, 3, 0]
        );
    }
}
