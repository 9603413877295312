//! `matmul` on every kernel path this CPU has: batch invariance bit for bit,
//! and accuracy against an f64 reference.
//!
//! Invariance: an output `out[t][r]` must not depend on `n`, on the other
//! tokens, on the thread count or on how rows are split (tasks, row slices,
//! several products in one region): the serving engine gives a request the
//! same tokens alone or batched only because of this. Each path has its own
//! canonical order, so invariance is checked within one path.
//!
//! Accuracy: `|out − Σ w·x (f64)| ≤ 1e-5 · Σ|w·x|` with `w` the scalar
//! decoding of the row (every path decodes bit-identically).

use rill_dtype::DType;
use rill_kernels::quant::dequantize_with;
use rill_kernels::simd::Isa;
use rill_kernels::{matmul_many_with, matmul_with, MatJob, MatRef, Threads};

mod common;
use common::{dot_f64, dot_tolerance, matrix, Rng};

/// The encodings whose products are checked, with a column count each
/// (floats: not a multiple of 8 or 16, so the element-wise tail runs; and
/// whole blocks of 16, which few tokens decode in registers).
const CASES: [(DType, usize); 14] = [
    (DType::F32, 203),
    (DType::F32, 7),
    (DType::BF16, 200),
    (DType::F16, 136),
    (DType::BF16, 256),
    (DType::F16, 320),
    (DType::Q8_0, 224),
    (DType::Q4_0, 96),
    (DType::Q4K, 512),
    (DType::Q6K, 512),
    (DType::IQ4XS, 256),
    (DType::Q4_1, 64),
    (DType::Q5K, 256),
    (DType::IQ4NL, 128),
];

/// Checked for invariance only (the MXFP4 fixture's scales overflow f32 in
/// products with the accuracy test's large activations; the others add
/// encodings that only some paths decode in registers).
const INVARIANCE_ONLY: [(DType, usize); 5] = [
    (DType::MXFP4, 96),
    (DType::Q5_0, 64),
    (DType::Q5_1, 96),
    (DType::Q2K, 256),
    (DType::Q3K, 512),
];

fn mat(dtype: DType, rows: usize, cols: usize, data: &[u8]) -> MatRef<'_> {
    MatRef::new(dtype, rows, cols, data)
}

fn run(isa: Isa, threads: usize, w: MatRef, x: &[f32], n: usize) -> Vec<f32> {
    let mut out = vec![f32::NAN; n * w.rows];
    matmul_with(isa, &Threads::new(threads), w, x, n, &mut out);
    out
}

/// Token `t` of `out` (`n × rows`).
fn token(out: &[f32], rows: usize, t: usize) -> &[f32] {
    &out[t * rows..(t + 1) * rows]
}

fn assert_bits(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            g.to_bits() == w.to_bits(),
            "{what}: element {i}: {g:e} vs {w:e}"
        );
    }
}

#[test]
fn outputs_do_not_depend_on_batch_threads_or_row_split() {
    let mut rng = Rng(11);
    let rows = 37;
    for (dtype, cols) in CASES.into_iter().chain(INVARIANCE_ONLY) {
        let data = matrix(dtype, rows, cols, &mut rng);
        let w = mat(dtype, rows, cols, &data);
        let n = 300;
        let x: Vec<f32> = (0..n * cols).map(|_| rng.f32()).collect();
        for isa in Isa::available() {
            let what = |s: &str| format!("{dtype} cols {cols} {isa:?}: {s}");
            let all = run(isa, 1, w, &x, n);
            // Alone: n = 1, for tokens at every position of a tile.
            for t in [0, 1, 5, 6, 7, 11, 12, 150, 298, 299] {
                let one = run(isa, 1, w, &x[t * cols..(t + 1) * cols], 1);
                assert_bits(
                    &one,
                    token(&all, rows, t),
                    &what(&format!("token {t} alone")),
                );
            }
            // Small batches (decode steps of a few sequences: decoded in
            // registers on some paths) at other offsets.
            for m in 2..=5 {
                let t0 = 100 + 13 * m;
                let few = run(isa, 2, w, &x[t0 * cols..(t0 + m) * cols], m);
                for t in 0..m {
                    assert_bits(
                        token(&few, rows, t),
                        token(&all, rows, t0 + t),
                        &what(&format!("token {} of {m}", t0 + t)),
                    );
                }
            }
            // A batch of 7 taken from the middle (other tile offsets).
            let (t0, m) = (293, 7);
            let seven = run(isa, 2, w, &x[t0 * cols..(t0 + m) * cols], m);
            for t in 0..m {
                assert_bits(
                    token(&seven, rows, t),
                    token(&all, rows, t0 + t),
                    &what(&format!("token {} of 7", t0 + t)),
                );
            }
            // Other tokens in the batch hold other (even non-finite) values.
            let mut mixed: Vec<f32> = (0..9 * cols).map(|_| rng.f32() * 1e3).collect();
            mixed[..cols].fill(f32::NAN);
            mixed[4 * cols..5 * cols].copy_from_slice(&x[42 * cols..43 * cols]);
            let got = run(isa, 1, w, &mixed, 9);
            assert_bits(
                token(&got, rows, 4),
                token(&all, rows, 42),
                &what("with other tokens"),
            );
            // Other thread counts (other task splits).
            for threads in [2, 3] {
                let got = run(isa, threads, w, &x, n);
                assert_bits(&got, &all, &what(&format!("{threads} threads")));
            }
            // Row slices, and several slices in one region.
            let cuts = [0, 3, 4, 17, 30, rows];
            let mut outs: Vec<Vec<f32>> = cuts
                .windows(2)
                .map(|c| vec![0f32; (c[1] - c[0]) * n])
                .collect();
            let mut jobs: Vec<MatJob> = cuts
                .windows(2)
                .zip(outs.iter_mut())
                .map(|(c, out)| MatJob {
                    w: w.slice_rows(c[0], c[1]),
                    x: &x,
                    n,
                    out,
                    pick: None,
                })
                .collect();
            matmul_many_with(isa, &Threads::new(2), &mut jobs);
            drop(jobs);
            for (c, out) in cuts.windows(2).zip(&outs) {
                for t in 0..n {
                    let r = c[1] - c[0];
                    assert_bits(
                        &out[t * r..(t + 1) * r],
                        &token(&all, rows, t)[c[0]..c[1]],
                        &what(&format!("rows {}..{} token {t}", c[0], c[1])),
                    );
                }
            }
        }
    }
}

#[test]
fn outputs_match_an_f64_reference() {
    let mut rng = Rng(12);
    let rows = 21;
    for (dtype, cols) in CASES {
        let data = matrix(dtype, rows, cols, &mut rng);
        let w = mat(dtype, rows, cols, &data);
        let mut wf = vec![0f32; rows * cols];
        dequantize_with(Isa::Scalar, dtype, &data, &mut wf);
        let n = 13;
        // Activations of very different magnitudes, so some dots cancel.
        let x: Vec<f32> = (0..n * cols)
            .map(|i| rng.f32() * [1e-3f32, 1.0, 300.0][i % 3])
            .collect();
        for isa in Isa::available() {
            let got = run(isa, 2, w, &x, n);
            for t in 0..n {
                for r in 0..rows {
                    let (wr, xt) = (&wf[r * cols..(r + 1) * cols], &x[t * cols..(t + 1) * cols]);
                    let (exact, mag) = dot_f64(wr, xt);
                    let tol = dot_tolerance(mag);
                    let g = got[t * rows + r] as f64;
                    assert!(
                        (g - exact).abs() <= tol,
                        "{dtype} cols {cols} {isa:?} token {t} row {r}: {g:e} vs f64 {exact:e} (tolerance {tol:e})"
                    );
                }
            }
        }
    }
}

/// F32 weights are read in place when aligned and decoded (copied) when not:
/// both give the same bits.
#[test]
fn f32_weights_aligned_or_not_give_the_same_bits() {
    let mut rng = Rng(13);
    let (rows, cols, n) = (19, 45, 8);
    let data = matrix(DType::F32, rows, cols, &mut rng);
    let mut shifted = vec![0u8; data.len() + 4];
    let off = (1..4)
        .find(|&o| !(shifted[o..].as_ptr() as usize).is_multiple_of(4))
        .expect("an unaligned offset");
    shifted[off..off + data.len()].copy_from_slice(&data);
    let x: Vec<f32> = (0..n * cols).map(|_| rng.f32()).collect();
    for isa in Isa::available() {
        let a = run(isa, 1, mat(DType::F32, rows, cols, &data), &x, n);
        let b = run(
            isa,
            2,
            mat(DType::F32, rows, cols, &shifted[off..off + data.len()]),
            &x,
            n,
        );
        assert_bits(&b, &a, &format!("{isa:?} unaligned"));
    }
}

#[test]
fn empty_products_are_fine() {
    let data = matrix(DType::F32, 3, 8, &mut Rng(14));
    for isa in Isa::available() {
        let w = mat(DType::F32, 3, 8, &data);
        assert!(run(isa, 2, w, &[], 0).is_empty());
        let none = mat(DType::F32, 0, 8, &[]);
        assert!(run(isa, 2, none, &[0.5; 16], 2).is_empty());
    }
}
