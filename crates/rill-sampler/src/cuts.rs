//! The cuts of a draw's candidates (top-n-σ, top-k, typical) and the
//! softmaxes they are decided on, as free functions over `(id, logit)`
//! candidates; [`crate::Sampler`] strings them together in llama.cpp's
//! order.

/// Top-n-σ's floor: the best logit less `n` standard deviations of the
/// finite logits (mean and deviation in f64).
pub(crate) fn sigma_floor(row: &[f32], n: f32) -> f32 {
    let (mut count, mut sum, mut max) = (0usize, 0f64, f32::NEG_INFINITY);
    for &l in row.iter().filter(|l| l.is_finite()) {
        count += 1;
        sum += l as f64;
        max = max.max(l);
    }
    if count < 2 {
        return f32::NEG_INFINITY;
    }
    let mean = sum / count as f64;
    let var = (row.iter().filter(|l| l.is_finite()))
        .map(|&l| (l as f64 - mean).powi(2))
        .sum::<f64>()
        / count as f64;
    (max as f64 - n as f64 * var.sqrt()) as f32
}

/// Keep the candidates (best first) whose logit passes `keep`, and at least
/// the best one.
pub(crate) fn keep_at_least_one(cand: &mut Vec<(u32, f32)>, keep: impl Fn(f32) -> bool) {
    let n = cand.iter().take_while(|c| keep(c.1)).count().max(1);
    cand.truncate(n);
}

/// Locally typical sampling over `cand` (best first) with probabilities
/// `probs`: the tokens by how far their surprise `−ln p` is from the
/// entropy, nearest first, until their mass passes `typical_p` and they
/// are `min_keep` (at least one); `cand` keeps them, best first again. The
/// kept ones' probabilities at temperature 1 come back.
pub(crate) fn typical_cut(
    cand: &mut Vec<(u32, f32)>,
    probs: &[f64],
    typical_p: f32,
    min_keep: usize,
) -> Vec<f64> {
    let entropy: f64 = -probs
        .iter()
        .filter(|&&p| p > 0.0)
        .map(|&p| p * p.ln())
        .sum::<f64>();
    let shifted = |i: usize| match probs[i] {
        p if p > 0.0 => (-p.ln() - entropy).abs(),
        _ => f64::INFINITY,
    };
    let mut order: Vec<usize> = (0..probs.len()).collect();
    order.sort_by(|&a, &b| shifted(a).total_cmp(&shifted(b)).then(a.cmp(&b)));
    let mut cum = 0.0;
    let mut keep = order.len();
    for (i, &at) in order.iter().enumerate() {
        cum += probs[at];
        if cum > typical_p as f64 && i + 1 >= min_keep {
            keep = i + 1;
            break;
        }
    }
    let mut kept: Vec<(u32, f32)> = order[..keep].iter().map(|&i| cand[i]).collect();
    sort_best_first(&mut kept);
    *cand = kept;
    softmax(cand, 1.0)
}

/// How many of the candidates (best first, probabilities `probs`) top-p
/// keeps: the fewest whose mass reaches `top_p` and that are `min_keep`.
pub(crate) fn top_p_keep(probs: &[f64], top_p: f32, min_keep: usize) -> usize {
    let mut cum = 0.0;
    for (i, p) in probs.iter().enumerate() {
        cum += p;
        if cum >= top_p as f64 && i + 1 >= min_keep {
            return i + 1;
        }
    }
    probs.len()
}

/// How many min-p keeps: those at or above `min_p` of the best, and at
/// least `min_keep` and one.
pub(crate) fn min_p_keep(probs: &[f64], min_p: f32, min_keep: usize) -> usize {
    let floor = probs.first().copied().unwrap_or(0.0) * min_p as f64;
    let passing = probs.iter().take_while(|&&p| p >= floor).count();
    passing.max(min_keep).max(1)
}

/// XTC's cut, once drawn, of candidates best first: every token at or
/// above `threshold` but the last of them, unless fewer than `min_keep`
/// would be left.
pub(crate) fn xtc_cut(cand: &mut Vec<(u32, f32)>, threshold: f32, min_keep: usize) {
    let p = softmax(cand, 1.0);
    let last = p.iter().take_while(|&&q| q >= threshold as f64).count();
    if last > 1 && cand.len() - (last - 1) >= min_keep {
        cand.drain(..last - 1);
    }
}

/// `eˣ` for a logit's distance below the max: 0 far below (and at −∞),
/// where `exp_fast` would clamp.
#[inline(always)]
pub(crate) fn weight(x: f32) -> f32 {
    if x < -87.0 {
        0.0
    } else {
        rill_kernels::ops::exp_fast(x)
    }
}

/// Best first: descending logit, ties to the lower id.
pub(crate) fn sort_best_first(cand: &mut [(u32, f32)]) {
    cand.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
}

/// The `k` best of `row` (`0 < k < row.len()`) into `out`, best first
/// (ties to the lower id): a scan that keeps the best so far, screening
/// blocks of 8 against the k-th best value, for small `k`; a partial
/// selection over every token otherwise.
pub(crate) fn top_k_into(row: &[f32], k: usize, out: &mut Vec<(u32, f32)>) {
    let better = |a: (u32, f32), b: (u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    out.clear();
    if k > 64 {
        out.extend(row.iter().enumerate().map(|(i, &l)| (i as u32, l)));
        out.select_nth_unstable_by(k - 1, |&a, &b| better(a, b));
        out.truncate(k);
        sort_best_first(out);
        return;
    }
    for (b, block) in row.chunks(8).enumerate() {
        if out.len() == k {
            let floor = out.last().map_or(f32::NEG_INFINITY, |w| w.1);
            if !block
                .iter()
                .fold(false, |h, &v| h | (v >= floor) | v.is_nan())
            {
                continue;
            }
        }
        for (j, &v) in block.iter().enumerate() {
            let c = ((8 * b + j) as u32, v);
            if out.len() == k && out.last().is_none_or(|&w| better(c, w).is_ge()) {
                continue;
            }
            let at = out.partition_point(|&w| better(w, c).is_lt());
            out.insert(at, c);
            out.truncate(k);
        }
    }
}

/// Softmax of the candidates' logits at temperature `t`, in f64.
pub(crate) fn softmax(cand: &[(u32, f32)], t: f32) -> Vec<f64> {
    let max = cand.iter().map(|c| c.1).fold(f32::NEG_INFINITY, f32::max) as f64;
    let mut p: Vec<f64> = cand
        .iter()
        .map(|c| ((c.1 as f64 - max) / t as f64).exp())
        .collect();
    let s: f64 = p.iter().sum();
    p.iter_mut().for_each(|v| *v /= s);
    p
}

/// As [`softmax`] for a whole row (no cut: every token a candidate), with
/// `exp_fast` in f32 (a libm `exp` per token took ~5 ms on 248k).
pub(crate) fn softmax_wide(cand: &[(u32, f32)], t: f32) -> Vec<f64> {
    let max = cand.iter().map(|c| c.1).fold(f32::NEG_INFINITY, f32::max);
    if !max.is_finite() {
        return softmax(cand, t);
    }
    let inv_t = 1.0 / t;
    let mut p: Vec<f64> = cand
        .iter()
        .map(|c| weight((c.1 - max) * inv_t) as f64)
        .collect();
    let s: f64 = p.iter().sum();
    p.iter_mut().for_each(|v| *v /= s);
    p
}
