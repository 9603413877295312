use super::*;

use crate::test_util::noise;

/// The definition: per (row, head) all scores, softmax, weighted values.
fn reference(shape: AttnShape, q: &[f32], m: usize, pos0: usize, k: &[f32], v: &[f32]) -> Vec<f32> {
    let (nh, nkv, hd) = (shape.n_head, shape.n_head_kv, shape.head_dim);
    let scale = 1.0 / (hd as f64).sqrt();
    let mut out = vec![0f32; m * nh * hd];
    for t in 0..m {
        for h in 0..nh {
            let kvh = h / (nh / nkv);
            let qh = &q[(t * nh + h) * hd..(t * nh + h + 1) * hd];
            let scores: Vec<f64> = (0..=pos0 + t)
                .map(|p| {
                    let kp = &k[(p * nkv + kvh) * hd..(p * nkv + kvh + 1) * hd];
                    qh.iter()
                        .zip(kp)
                        .map(|(&a, &b)| a as f64 * b as f64)
                        .sum::<f64>()
                        * scale
                })
                .collect();
            let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
            let sum: f64 = e.iter().sum();
            for d in 0..hd {
                let acc: f64 = e
                    .iter()
                    .enumerate()
                    .map(|(p, w)| w * v[(p * nkv + kvh) * hd + d] as f64)
                    .sum();
                out[(t * nh + h) * hd + d] = (acc / sum) as f32;
            }
        }
    }
    out
}

#[allow(clippy::too_many_arguments)]
fn run(
    isa: Isa,
    threads: &Threads,
    shape: AttnShape,
    q: &[f32],
    m: usize,
    pos0: usize,
    k: &[f32],
    v: &[f32],
) -> Vec<f32> {
    let mut scratch = vec![0f32; threads.count() * shape.scratch_per_thread()];
    let mut out = vec![0f32; m * shape.n_head * shape.head_dim];
    attend_causal(
        isa,
        threads,
        shape,
        q,
        m,
        pos0,
        k,
        v,
        &mut scratch,
        &mut out,
    );
    out
}

#[test]
fn matches_the_definition() {
    for (nh, nkv, hd) in [(4usize, 1usize, 32usize), (16, 2, 40), (3, 3, 17)] {
        let shape = AttnShape {
            n_head: nh,
            n_head_kv: nkv,
            head_dim: hd,
        };
        for (pos0, m) in [(0usize, 1usize), (0, 70), (63, 2), (100, 37), (129, 1)] {
            let len = pos0 + m;
            // Larger scores than unit vectors give: a peaked softmax.
            let q: Vec<f32> = noise(1, m * nh * hd).iter().map(|x| 3.0 * x).collect();
            let k = noise(2, len * nkv * hd);
            let v = noise(3, len * nkv * hd);
            let want = reference(shape, &q, m, pos0, &k, &v);
            for (isa, t) in Isa::available()
                .into_iter()
                .flat_map(|i| [(i, 1), (i, 2), (i, 3)])
            {
                let got = run(isa, &Threads::new(t), shape, &q, m, pos0, &k, &v);
                let err = got
                    .iter()
                    .zip(&want)
                    .fold(0f32, |e, (a, b)| e.max((a - b).abs()));
                assert!(err < 2e-5, "{isa} {shape:?} pos0={pos0} m={m}: error {err}");
            }
        }
    }
}

#[test]
fn a_query_gets_the_same_bits_in_any_block_or_chunking() {
    let shape = AttnShape {
        n_head: 16,
        n_head_kv: 2,
        head_dim: 48,
    };
    let (nh, hd) = (shape.n_head, shape.head_dim);
    let len = 200;
    let q = noise(4, len * nh * hd);
    let k = noise(5, len * 2 * hd);
    let v = noise(6, len * 2 * hd);
    // Every class gives the scalar class's bits (module doc, Invariance).
    let whole = run(Isa::Scalar, &Threads::new(2), shape, &q, len, 0, &k, &v);
    let row = nh * hd;
    // Chunks of odd sizes, and one row at a time (decode).
    for (isa, chunk) in Isa::available()
        .into_iter()
        .flat_map(|i| [(i, 1usize), (i, 7), (i, 64), (i, 65)])
    {
        let threads = Threads::new(if chunk == 7 { 1 } else { 3 });
        let mut p = 0;
        while p < len {
            let m = chunk.min(len - p);
            let got = run(
                isa,
                &threads,
                shape,
                &q[p * row..(p + m) * row],
                m,
                p,
                &k,
                &v,
            );
            assert!(
                got.iter()
                    .zip(&whole[p * row..(p + m) * row])
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{isa}: chunk {chunk}, rows {p}..{}",
                p + m
            );
            p += m;
        }
    }
}
