//! Softmax attention of one query row over a chosen set of cached
//! positions (QSA's selected blocks): only those keys and values are read.
//!
//! Per KV head, each chosen key row is decoded once and scored against the
//! group's query heads; then each value row is decoded once and added with
//! the group's weights. The cache may be coded, with exact f16 rows for
//! the sinks and the recent window, read as the dense kernel reads them.

use super::AttnShape;
use crate::kv::KvSide;
use crate::ops::{axpy_with, dot_f32_with};
use crate::simd::Isa;

/// Floats of scratch [`attend_positions`] needs for `n_positions` keys.
pub fn positions_scratch_len(shape: AttnShape, n_positions: usize) -> usize {
    let group = shape.n_head / shape.n_head_kv.max(1);
    group * n_positions + shape.head_dim
}

/// Attention of the query row `q` (`[n_head × head_dim]`, at position
/// `query`) over the cached keys and values at `positions` (each at most
/// `query`, any order), into `out` (`[n_head × head_dim]`). Scores are
/// scaled by `1/√head_dim`. `positions` must not be empty.
#[allow(clippy::too_many_arguments)]
pub fn attend_positions(
    isa: Isa,
    shape: AttnShape,
    q: &[f32],
    query: usize,
    positions: &[usize],
    k: KvSide<'_>,
    v: KvSide<'_>,
    scratch: &mut [f32],
    out: &mut [f32],
) {
    let (nh, nkv, hd) = shape.check_rows(q, out, 1);
    assert!(!positions.is_empty(), "attention over no positions");
    let held = k.positions(nkv * hd).min(v.positions(nkv * hd));
    assert!(positions.iter().all(|&p| p <= query && p < held));
    let n = positions.len();
    assert!(scratch.len() >= positions_scratch_len(shape, n));
    isa.check();
    let group = nh / nkv;
    let scale = 1.0 / (hd as f32).sqrt();
    let (scores, row) = scratch.split_at_mut(group * n);
    let row = &mut row[..hd];
    for kvh in 0..nkv {
        let heads = kvh * group..(kvh + 1) * group;
        for (j, &p) in positions.iter().enumerate() {
            read_row(&k, isa, (nkv, hd, kvh), query, p, row);
            for (g, h) in heads.clone().enumerate() {
                scores[g * n + j] = dot_f32_with(isa, &q[h * hd..(h + 1) * hd], row) * scale;
            }
        }
        for g in 0..group {
            let s = &mut scores[g * n..(g + 1) * n];
            let max = s.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
            let mut sum = 0.0;
            for x in s.iter_mut() {
                *x = (*x - max).exp();
                sum += *x;
            }
            let inv = 1.0 / sum;
            for x in s.iter_mut() {
                *x *= inv;
            }
        }
        for h in heads.clone() {
            out[h * hd..(h + 1) * hd].fill(0.0);
        }
        for (j, &p) in positions.iter().enumerate() {
            read_row(&v, isa, (nkv, hd, kvh), query, p, row);
            for (g, h) in heads.clone().enumerate() {
                axpy_with(isa, scores[g * n + j], row, &mut out[h * hd..(h + 1) * hd]);
            }
        }
    }
}

/// KV head `kvh`'s row at position `p` as the query at `query` reads it:
/// from the exact f16 rows where the side keeps them for that pair, else
/// from the (possibly coded) rows.
fn read_row(
    side: &KvSide<'_>,
    isa: Isa,
    geo: (usize, usize, usize),
    query: usize,
    p: usize,
    dst: &mut [f32],
) {
    let hd = geo.1;
    match &side.exact {
        Some(e) if e.reads_exact(query, p) => side.decode_exact_rows(isa, geo, p, 1, dst, hd),
        _ => side.decode_rows(isa, geo, p, 1, dst, hd),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::attend_causal;
    use crate::test_util::{noise, shape};
    use crate::threads::Threads;

    /// [`attend_positions`] over an f32 cache, with scratch of its own.
    fn run(
        isa: Isa,
        shape: AttnShape,
        q: &[f32],
        query: usize,
        positions: &[usize],
        (k, v): (&[f32], &[f32]),
    ) -> Vec<f32> {
        let mut out = vec![0f32; q.len()];
        let mut scratch = vec![0f32; positions_scratch_len(shape, positions.len())];
        let (k, v) = (KvSide::f32(k), KvSide::f32(v));
        attend_positions(
            isa,
            shape,
            q,
            query,
            positions,
            k,
            v,
            &mut scratch,
            &mut out,
        );
        out
    }

    /// Over every position up to the query, it is the dense causal kernel.
    #[test]
    fn all_positions_give_dense_attention() {
        let shape = shape(4, 2, 32);
        let len = 70;
        let kv = 2 * 32;
        let (k, v) = (noise(1, len * kv), noise(2, len * kv));
        let q = noise(3, 4 * 32);
        let threads = Threads::new(1);
        for isa in Isa::available() {
            let query = len - 1;
            let mut dense = vec![0f32; 4 * 32];
            let mut scratch = vec![0f32; shape.scratch_per_thread()];
            attend_causal(
                isa,
                &threads,
                shape,
                &q,
                1,
                query,
                KvSide::f32(&k),
                KvSide::f32(&v),
                &mut scratch,
                &mut dense,
            );
            let positions: Vec<usize> = (0..=query).rev().collect();
            let sparse = run(isa, shape, &q, query, &positions, (&k, &v));
            for (a, b) in dense.iter().zip(&sparse) {
                assert!((a - b).abs() < 1e-5, "{isa:?}: {a} vs {b}");
            }
        }
    }

    /// A subset is the softmax over just those keys (a direct reference).
    #[test]
    fn a_subset_is_the_softmax_over_it() {
        let shape = shape(2, 1, 16);
        let len = 40;
        let (k, v) = (noise(4, len * 16), noise(5, len * 16));
        let q = noise(6, 2 * 16);
        let positions = [3usize, 17, 18, 19, 36, 39];
        for isa in Isa::available() {
            let out = run(isa, shape, &q, 39, &positions, (&k, &v));
            for h in 0..2 {
                let qh = &q[h * 16..(h + 1) * 16];
                let sc: Vec<f64> = positions
                    .iter()
                    .map(|&p| {
                        (0..16)
                            .map(|i| qh[i] as f64 * k[p * 16 + i] as f64)
                            .sum::<f64>()
                            / 4.0
                    })
                    .collect();
                let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let w: Vec<f64> = sc.iter().map(|s| (s - m).exp()).collect();
                let z: f64 = w.iter().sum();
                for i in 0..16 {
                    let want: f64 = positions
                        .iter()
                        .zip(&w)
                        .map(|(&p, wi)| wi / z * v[p * 16 + i] as f64)
                        .sum();
                    let got = out[h * 16 + i] as f64;
                    assert!(
                        (want - got).abs() < 1e-5,
                        "{isa:?} head {h} dim {i}: {want} vs {got}"
                    );
                }
            }
        }
    }
}
