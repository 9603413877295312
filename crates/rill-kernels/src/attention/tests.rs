use super::*;

use crate::test_util::{noise, shape};

/// The definition: per (row, head) all scores, softmax, weighted values.
fn reference(shape: AttnShape, q: &[f32], m: usize, pos0: usize, k: &[f32], v: &[f32]) -> Vec<f32> {
    reference_mixed(shape, q, m, pos0, (k, k), (v, v), |_, _| true)
}

/// [`run_on`] over an f32 cache.
fn run(
    isa: Isa,
    threads: &Threads,
    shape: AttnShape,
    q: &[f32],
    rows: (usize, usize),
    (k, v): (&[f32], &[f32]),
) -> Vec<f32> {
    run_on(isa, threads, shape, q, rows, KvSide::f32(k), KvSide::f32(v))
}

/// [`attend_causal`] of rows `m` at `pos0` over the cache sides `k`, `v`,
/// with scratch of its own.
fn run_on(
    isa: Isa,
    threads: &Threads,
    shape: AttnShape,
    q: &[f32],
    (m, pos0): (usize, usize),
    k: KvSide<'_>,
    v: KvSide<'_>,
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
        let shape = shape(nh, nkv, hd);
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
                let got = run(isa, &Threads::new(t), shape, &q, (m, pos0), (&k, &v));
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
    let shape = shape(16, 2, 48);
    let (nh, hd) = (shape.n_head, shape.head_dim);
    let len = 200;
    let q = noise(4, len * nh * hd);
    let k = noise(5, len * 2 * hd);
    let v = noise(6, len * 2 * hd);
    // Every class gives the scalar class's bits (module doc, Invariance).
    let whole = run(Isa::Scalar, &Threads::new(2), shape, &q, (len, 0), (&k, &v));
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
                (m, p),
                (&k, &v),
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

/// One side of a cache in `dtype`, with f16 sinks and window when asked
/// (a ring of exactly the rows the step's queries need).
struct Coded {
    dtype: rill_dtype::DType,
    bytes: Vec<u8>,
    sinks: usize,
    window: usize,
    sink_rows: Vec<u8>,
    ring: Vec<u8>,
    ring_rows: usize,
    len: usize,
}

impl Coded {
    fn new(
        dtype: rill_dtype::DType,
        x: &[f32],
        per_pos: usize,
        sinks: usize,
        window: usize,
    ) -> Coded {
        use crate::kv::{encode, encoded_len};
        use rill_dtype::DType::F16;
        let len = x.len() / per_pos;
        let mut bytes = vec![0u8; encoded_len(dtype, x.len())];
        encode(dtype, x, &mut bytes);
        let row = 2 * per_pos;
        let s = sinks.min(len);
        let mut sink_rows = vec![0u8; s * row];
        encode(F16, &x[..s * per_pos], &mut sink_rows);
        // Every position in the ring: the kernel must not need more.
        let ring_rows = len.max(1) + 3;
        let mut ring = vec![0u8; ring_rows * row];
        for p in 0..len {
            let slot = p % ring_rows;
            encode(
                F16,
                &x[p * per_pos..(p + 1) * per_pos],
                &mut ring[slot * row..(slot + 1) * row],
            );
        }
        Coded {
            dtype,
            bytes,
            sinks,
            window,
            sink_rows,
            ring,
            ring_rows,
            len,
        }
    }

    fn side(&self) -> KvSide<'_> {
        KvSide {
            rows: KvRows::Coded {
                dtype: self.dtype,
                bytes: &self.bytes,
            },
            exact: (self.sinks + self.window > 0).then_some(ExactRows {
                sinks: self.sinks,
                sink_rows: &self.sink_rows,
                window: self.window,
                ring: &self.ring,
                ring_rows: self.ring_rows,
                len: self.len,
            }),
        }
    }
}

fn roundtrip(dtype: rill_dtype::DType, x: &[f32]) -> Vec<f32> {
    let mut bytes = vec![0u8; crate::kv::encoded_len(dtype, x.len())];
    crate::kv::encode(dtype, x, &mut bytes);
    let mut back = vec![0f32; x.len()];
    crate::quant::dequantize_with(Isa::Scalar, dtype, &bytes, &mut back);
    back
}

#[test]
fn a_coded_cache_gives_the_bits_of_its_decoded_values() {
    use rill_dtype::DType::*;
    let shape = shape(8, 2, 64);
    let per = shape.n_head_kv * shape.head_dim;
    let (pos0, m) = (90usize, 41usize);
    let len = pos0 + m;
    let q = noise(11, m * shape.n_head * shape.head_dim);
    let k = noise(12, len * per);
    let v = noise(13, len * per);
    let threads = Threads::new(2);
    for (kt, vt) in [
        (F16, F16),
        (BF16, Q8_0),
        (Q8_0, Q8_0),
        (Q4_0, Q5_1),
        (F32, Q4_0),
    ] {
        let (ck, cv) = (Coded::new(kt, &k, per, 0, 0), Coded::new(vt, &v, per, 0, 0));
        let (dk, dv) = (roundtrip(kt, &k), roundtrip(vt, &v));
        let want = run(Isa::best(), &threads, shape, &q, (m, pos0), (&dk, &dv));
        let got = run_on(
            Isa::best(),
            &threads,
            shape,
            &q,
            (m, pos0),
            ck.side(),
            cv.side(),
        );
        assert!(
            got.iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "K {kt} V {vt}"
        );
    }
}

/// The definition with each (query, key) pair's key and value taken from
/// the f16 rows (sinks, window) or the coded ones.
#[allow(clippy::too_many_arguments)]
fn reference_mixed(
    shape: AttnShape,
    q: &[f32],
    m: usize,
    pos0: usize,
    (k_lo, k_hi): (&[f32], &[f32]),
    (v_lo, v_hi): (&[f32], &[f32]),
    exact: impl Fn(usize, usize) -> bool,
) -> Vec<f32> {
    let (nh, nkv, hd) = (shape.n_head, shape.n_head_kv, shape.head_dim);
    let scale = 1.0 / (hd as f64).sqrt();
    let mut out = vec![0f32; m * nh * hd];
    for t in 0..m {
        let i = pos0 + t;
        for h in 0..nh {
            let kvh = h / (nh / nkv);
            let at = |p: usize| (p * nkv + kvh) * hd;
            let qh = &q[(t * nh + h) * hd..(t * nh + h + 1) * hd];
            let scores: Vec<f64> = (0..=i)
                .map(|p| {
                    let kc = if exact(i, p) { k_hi } else { k_lo };
                    let kp = &kc[at(p)..at(p) + hd];
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
                    .map(|(p, w)| {
                        let vc = if exact(i, p) { v_hi } else { v_lo };
                        w * vc[at(p) + d] as f64
                    })
                    .sum();
                out[(t * nh + h) * hd + d] = (acc / sum) as f32;
            }
        }
    }
    out
}

#[test]
fn sinks_and_window_read_the_f16_rows_per_query() {
    use rill_dtype::DType::{F16, Q4_0};
    let shape = shape(8, 2, 32);
    let per = shape.n_head_kv * shape.head_dim;
    let len = 300;
    let q: Vec<f32> = noise(21, len * shape.n_head * shape.head_dim)
        .iter()
        .map(|x| 3.0 * x)
        .collect();
    let k = noise(22, len * per);
    let v = noise(23, len * per);
    let (k_lo, k_hi) = (roundtrip(Q4_0, &k), roundtrip(F16, &k));
    let (v_lo, v_hi) = (roundtrip(Q4_0, &v), roundtrip(F16, &v));
    let row = shape.n_head * shape.head_dim;
    for (sinks, window) in [(4usize, 70usize), (0, 1), (64, 0), (3, 130)] {
        let exact = |i: usize, j: usize| j < sinks || i - j < window;
        let (ck, cv) = (
            Coded::new(Q4_0, &k, per, sinks, window),
            Coded::new(Q4_0, &v, per, sinks, window),
        );
        let want = reference_mixed(shape, &q, len, 0, (&k_lo, &k_hi), (&v_lo, &v_hi), exact);
        let threads = Threads::new(2);
        let whole = run_on(
            Isa::best(),
            &threads,
            shape,
            &q,
            (len, 0),
            ck.side(),
            cv.side(),
        );
        let err = whole
            .iter()
            .zip(&want)
            .fold(0f32, |e, (a, b)| e.max((a - b).abs()));
        assert!(err < 2e-5, "sinks {sinks} window {window}: error {err}");
        // Chunks and single rows give the bits of one step.
        for chunk in [1usize, 13, 64] {
            let mut p = 0;
            while p < len {
                let m = chunk.min(len - p);
                let q = &q[p * row..(p + m) * row];
                let got = run_on(
                    Isa::best(),
                    &threads,
                    shape,
                    q,
                    (m, p),
                    ck.side(),
                    cv.side(),
                );
                assert!(
                    got.iter()
                        .zip(&whole[p * row..(p + m) * row])
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "sinks {sinks} window {window} chunk {chunk} rows {p}.."
                );
                p += m;
            }
        }
    }
}
