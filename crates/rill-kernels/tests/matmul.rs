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
use rill_kernels::{matmul_many_with, matmul_on, MatJob, MatRef, Precision, Scales, Threads};

mod common;
use common::{assert_bits, dot_f64, dot_tolerance, matrix, Rng};

/// The encodings whose products are checked, with a column count each
/// (floats: not a multiple of 8 or 16, so the element-wise tail runs; and
/// whole blocks of 16, which few tokens decode in registers).
const CASES: [(DType, usize); 15] = [
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
    (DType::NVFP4, 192),
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
    product(isa, Precision::Exact, threads, w, x, n)
}

/// `w · xᵀ` for `n` tokens in `precision` on `isa` with `threads` workers.
fn product(
    isa: Isa,
    precision: Precision,
    threads: usize,
    w: MatRef,
    x: &[f32],
    n: usize,
) -> Vec<f32> {
    let mut out = vec![f32::NAN; n * w.rows];
    matmul_on(isa, precision, &Threads::new(threads), w, x, n, &mut out);
    out
}

/// Token `t` of `out` (`n × rows`).
fn token(out: &[f32], rows: usize, t: usize) -> &[f32] {
    &out[t * rows..(t + 1) * rows]
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

/// Products with matrices whose scales are stored apart (Hugging Face FP8
/// tiles, NVFP4 groups), on every kernel path this CPU has. A few tokens
/// (decode) are decoded in registers with their scales; many (prefill)
/// decode rows first: both must give the same bits — alone, in batches,
/// over any thread split, in row slices cut inside a tile — and match an
/// f64 reference of the scalar decoding.
mod scaled {
    use super::*;
    use rill_kernels::q8::{ActFormat, Q8Acts};
    use rill_kernels::Scales;

    const ROWS: usize = 37;

    /// A matrix's codes and scales, owned.
    struct Case {
        what: String,
        dtype: DType,
        cols: usize,
        codes: Vec<u8>,
        scales: Vec<u8>,
        kind: Kind,
    }

    #[derive(Clone, Copy)]
    enum Kind {
        Tiles(DType, usize, usize),
        Groups(f32),
    }

    impl Case {
        fn mat(&self) -> MatRef<'_> {
            let scales = match self.kind {
                Kind::Tiles(dtype, tile_rows, tile_cols) => Scales::Tiles {
                    data: &self.scales,
                    dtype,
                    tile_rows,
                    tile_cols,
                    row0: 0,
                },
                Kind::Groups(global) => Scales::Groups {
                    data: &self.scales,
                    dtype: DType::F8E4M3,
                    group: 16,
                    global,
                },
            };
            MatRef {
                scales,
                ..MatRef::new(self.dtype, ROWS, self.cols, &self.codes)
            }
        }
    }

    /// An E4M3 byte that is not NaN.
    fn e4m3(rng: &mut Rng) -> u8 {
        loop {
            let b = rng.next() as u8;
            if b & 0x7F != 0x7F {
                return b;
            }
        }
    }

    fn scale_bytes(dtype: DType, n: usize, rng: &mut Rng) -> Vec<u8> {
        (0..n)
            .flat_map(|_| {
                let v = 1e-3 + 9e-3 * (rng.f32() + 1.0) / 2.0;
                match dtype {
                    DType::F32 => v.to_le_bytes().to_vec(),
                    DType::BF16 => half::bf16::from_f32(v).to_bits().to_le_bytes().to_vec(),
                    _ => half::f16::from_f32(v).to_bits().to_le_bytes().to_vec(),
                }
            })
            .collect()
    }

    fn fp8(dtype: DType, (tr, tc): (usize, usize), cols: usize, rng: &mut Rng) -> Case {
        let codes = (0..ROWS * cols).map(|_| e4m3(rng)).collect();
        let tiles = ROWS.div_ceil(tr) * cols.div_ceil(tc);
        Case {
            what: format!("FP8 {cols} cols, {tr}x{tc} {dtype} tiles"),
            dtype: DType::F8E4M3,
            cols,
            codes,
            scales: scale_bytes(dtype, tiles, rng),
            kind: Kind::Tiles(dtype, tr, tc),
        }
    }

    fn nvfp4(cols: usize, rng: &mut Rng) -> Case {
        Case {
            what: format!("NVFP4 {cols} cols"),
            dtype: DType::E2M1,
            cols,
            codes: (0..ROWS * cols / 2).map(|_| rng.next() as u8).collect(),
            // Scales of magnitude 1..100 (E4M3 exponents 7..13), a quarter
            // of them negative.
            scales: (0..ROWS * cols / 16)
                .map(|_| (0x38 + rng.below(48) as u8) | (u8::from(rng.below(4) == 0) << 7))
                .collect(),
            kind: Kind::Groups(3.7e-4),
        }
    }

    fn cases() -> Vec<Case> {
        let mut rng = Rng(41);
        vec![
            fp8(DType::F32, (128, 128), 384, &mut rng),
            fp8(DType::BF16, (16, 128), 256, &mut rng),
            // A last tile of 16 columns (400 = 8 · 48 + 16), F16 scales.
            fp8(DType::F16, (8, 48), 400, &mut rng),
            // Tiles of 20 columns straddle the 16-value chunks: the rows are
            // decoded first even for one token.
            fp8(DType::BF16, (24, 20), 320, &mut rng),
            nvfp4(256, &mut rng),
            nvfp4(1040, &mut rng),
        ]
    }

    fn token(out: &[f32], t: usize) -> &[f32] {
        &out[t * ROWS..(t + 1) * ROWS]
    }

    #[test]
    fn few_tokens_give_the_bits_of_decoded_rows() {
        let mut rng = Rng(7);
        for case in cases() {
            let (w, cols) = (case.mat(), case.cols);
            let n = 40;
            let x: Vec<f32> = (0..n * cols).map(|_| rng.f32()).collect();
            for isa in Isa::available() {
                let what = |s: &str| format!("{} {isa:?}: {s}", case.what);
                // Many tokens: rows decoded with their scales, then multiplied.
                let all = run(isa, 1, w, &x, n);
                for m in 1..=5 {
                    for t0 in [0, 17, 40 - m] {
                        let few = run(isa, 2, w, &x[t0 * cols..(t0 + m) * cols], m);
                        for t in 0..m {
                            assert_bits(
                                token(&few, t),
                                token(&all, t0 + t),
                                &what(&format!("token {} of {m}", t0 + t)),
                            );
                        }
                    }
                }
                for threads in [2, 3] {
                    let one = run(isa, threads, w, &x[5 * cols..6 * cols], 1);
                    assert_bits(&one, token(&all, 5), &what(&format!("{threads} threads")));
                }
                // Row slices cut inside tiles, several in one region, one token.
                let cuts = [0, 3, 4, 17, 30, ROWS];
                let xt = &x[9 * cols..10 * cols];
                let mut outs: Vec<Vec<f32>> =
                    cuts.windows(2).map(|c| vec![0f32; c[1] - c[0]]).collect();
                let mut jobs: Vec<MatJob> = cuts
                    .windows(2)
                    .zip(outs.iter_mut())
                    .map(|(c, out)| MatJob {
                        w: w.slice_rows(c[0], c[1]),
                        x: xt,
                        n: 1,
                        out,
                        pick: None,
                    })
                    .collect();
                matmul_many_with(isa, &Threads::new(2), &mut jobs);
                drop(jobs);
                for (c, out) in cuts.windows(2).zip(&outs) {
                    assert_bits(
                        out,
                        &token(&all, 9)[c[0]..c[1]],
                        &what(&format!("rows {}..{}", c[0], c[1])),
                    );
                }
            }
        }
    }

    /// Rows decoded with their scales (the blocked path's rows) are the scalar
    /// decoder's values bit for bit on every path, in whole matrices, in views
    /// cut inside a tile, and with NaN codes.
    #[test]
    fn decoded_rows_are_the_scalar_values() {
        let mut rng = Rng(10);
        let mut all = cases();
        let mut nan = fp8(DType::BF16, (16, 128), 256, &mut rng);
        nan.codes[5 * 256 + 33] = 0x7F;
        nan.codes[6 * 256 + 255] = 0xFF;
        all.push(nan);
        for case in all {
            let whole = case.mat();
            for w in [whole, whole.slice_rows(5, 29)] {
                let (mut want, mut got) = (vec![0f32; w.cols], vec![0f32; w.cols]);
                for r in 0..w.rows {
                    w.dequantize_row(Isa::Scalar, r, &mut want);
                    for isa in Isa::available() {
                        got.fill(0.5);
                        w.dequantize_row(isa, r, &mut got);
                        assert_bits(&got, &want, &format!("{} {isa:?} row {r}", case.what));
                    }
                }
            }
        }
    }

    #[test]
    fn products_match_an_f64_reference_of_the_scalar_decoding() {
        let mut rng = Rng(8);
        for case in cases() {
            let (w, cols) = (case.mat(), case.cols);
            let mut wf = vec![0f32; ROWS * cols];
            for r in 0..ROWS {
                w.dequantize_row(Isa::Scalar, r, &mut wf[r * cols..(r + 1) * cols]);
            }
            for n in [1, 3, 9] {
                let x: Vec<f32> = (0..n * cols)
                    .map(|i| rng.f32() * [1e-3f32, 1.0, 300.0][i % 3])
                    .collect();
                for isa in Isa::available() {
                    let got = run(isa, 2, w, &x, n);
                    for t in 0..n {
                        for r in 0..ROWS {
                            let wr = &wf[r * cols..(r + 1) * cols];
                            let (exact, mag) = dot_f64(wr, &x[t * cols..(t + 1) * cols]);
                            let g = got[t * ROWS + r] as f64;
                            assert!(
                                (g - exact).abs() <= dot_tolerance(mag),
                                "{} {isa:?} n {n} token {t} row {r}: {g:e} vs f64 {exact:e}",
                                case.what
                            );
                        }
                    }
                }
            }
        }
    }

    /// A NaN code (`S.1111.111`, which no quantizer writes) makes its row's
    /// product NaN on every path, as the scalar decoding does.
    #[test]
    fn a_nan_code_gives_nan_on_every_path() {
        let mut rng = Rng(9);
        let mut case = fp8(DType::F32, (128, 128), 256, &mut rng);
        case.codes[3 * 256 + 100] = 0xFF;
        let w = case.mat();
        let x: Vec<f32> = (0..6 * 256).map(|_| rng.f32()).collect();
        for isa in Isa::available() {
            let all = run(isa, 1, w, &x, 6);
            let one = run(isa, 1, w, &x[..256], 1);
            assert!(one[3].is_nan() && all[3].is_nan(), "{isa:?}");
            assert_bits(&one, token(&all, 0), &format!("{isa:?}"));
        }
    }

    fn run_q8(isa: Isa, threads: usize, w: MatRef, x: &[f32], n: usize) -> Vec<f32> {
        product(isa, Precision::Q8, threads, w, x, n)
    }

    /// NVFP4 with 8-bit activations: every path gives the scalar reference's
    /// bits (so a token's result does not depend on its batch), rows of whole
    /// 128-value blocks on the SIMD kernel and others on the reference, and
    /// the result stays within the activations' rounding of the exact one.
    #[test]
    fn nvfp4_with_8_bit_activations_gives_the_reference_bits() {
        let mut rng = Rng(12);
        // NaN scale bytes: their rows are the reference's (NaN), also in a
        // panel's rows.
        let mut nan = nvfp4(1024, &mut rng);
        nan.what.push_str(" with NaN scales");
        nan.scales[3 * 64 + 5] = 0x7F;
        nan.scales[17 * 64 + 63] = 0xFF;
        // 1040 = 8 · 128 + 16: not whole blocks of 32 either, stays exact.
        for case in [
            nvfp4(256, &mut rng),
            nvfp4(1024, &mut rng),
            nvfp4(1056, &mut rng),
            nvfp4(1040, &mut rng),
            nan,
        ] {
            let (w, cols) = (case.mat(), case.cols);
            let q8 = ActFormat::for_mat(&w);
            assert_eq!(
                q8.is_some(),
                cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) && cols % 32 == 0,
                "{}",
                case.what
            );
            let n = 11;
            let x: Vec<f32> = (0..n * cols)
                .map(|i| rng.f32() * [0.3f32, 1.0, 4.0][i % 3])
                .collect();
            let want = run_q8(Isa::Scalar, 1, w, &x, n);
            for isa in Isa::available() {
                // Without integer kernels: the exact path of the class itself.
                let want = match q8 {
                    Some(_) => want.clone(),
                    None => run(isa, 1, w, &x, n),
                };
                for m in [1, 2, 3, 4, 5, 11] {
                    for threads in [1, 2] {
                        let got = run_q8(isa, threads, w, &x[..m * cols], m);
                        assert_bits(
                            &got,
                            &want[..m * ROWS],
                            &format!("{} {isa:?} n {m}", case.what),
                        );
                    }
                }
            }
            if q8.is_none() {
                continue;
            }
            let mut acts = Q8Acts::default();
            acts.quantize(ActFormat::B32, &x, n, cols);
            let mut wr = vec![0f32; cols];
            for r in 0..ROWS {
                w.dequantize_row(Isa::Scalar, r, &mut wr);
                if wr.iter().any(|v| v.is_nan()) {
                    assert!((0..n).all(|t| want[t * ROWS + r].is_nan()), "row {r}");
                    continue;
                }
                for t in 0..n {
                    let d = acts.row(t).d;
                    let (truth, mag) = dot_f64(&wr, &x[t * cols..(t + 1) * cols]);
                    // Half a step of each activation, plus the scale's f16
                    // rounding (2⁻¹¹ of 127 steps).
                    let bound: f64 = wr
                        .iter()
                        .enumerate()
                        .map(|(c, &a)| (a as f64).abs() * d[c / 32] as f64 * (0.5 + 127.0 / 2048.0))
                        .sum::<f64>()
                        * 1.001
                        + 1e-5 * mag;
                    let err = (want[t * ROWS + r] as f64 - truth).abs();
                    assert!(
                        err <= bound,
                        "{} row {r} token {t}: {err:e} over {bound:e}",
                        case.what
                    );
                }
            }
        }
    }
}

/// Output scales ([`Scales::Rows`]: GGUF NVFP4's `.scale`, one f32 per block
/// of rows) multiply each row's products by its block's factor, in both
/// precisions and on every path, also on a slice that starts inside a
/// block; a decoded row is multiplied by it too.
#[test]
fn row_scales_multiply_each_rows_outputs() {
    let mut rng = Rng(5);
    let (rows, cols, n) = (12, 256, 3);
    let data = matrix(DType::NVFP4, rows, cols, &mut rng);
    let factors = [0.5f32, -2.0, 3.0, 0.25];
    let bytes: Vec<u8> = factors.iter().flat_map(|f| f.to_le_bytes()).collect();
    let x: Vec<f32> = (0..n * cols).map(|_| rng.f32()).collect();
    let plain_w = mat(DType::NVFP4, rows, cols, &data);
    let w = MatRef {
        scales: Scales::Rows {
            data: &bytes,
            block_rows: 3,
            row0: 0,
        },
        ..plain_w
    };
    let part = w.slice_rows(4, 11);
    for isa in Isa::available() {
        for precision in [Precision::Exact, Precision::Q8] {
            let plain = product(isa, precision, 1, plain_w, &x, n);
            let scaled = product(isa, precision, 2, w, &x, n);
            let sliced = product(isa, precision, 1, part, &x, n);
            for t in 0..n {
                for r in 0..rows {
                    let want = plain[t * rows + r] * factors[r / 3];
                    assert_eq!(
                        scaled[t * rows + r].to_bits(),
                        want.to_bits(),
                        "{isa:?} row {r}"
                    );
                }
                for r in 0..7 {
                    let want = plain[t * rows + 4 + r] * factors[(4 + r) / 3];
                    assert_eq!(
                        sliced[t * 7 + r].to_bits(),
                        want.to_bits(),
                        "{isa:?} slice row {r}"
                    );
                }
            }
        }
        let (mut a, mut b) = (vec![0f32; cols], vec![0f32; cols]);
        plain_w.dequantize_row(isa, 5, &mut a);
        part.dequantize_row(isa, 1, &mut b);
        let want: Vec<u32> = a.iter().map(|v| (v * factors[1]).to_bits()).collect();
        assert_eq!(b.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want);
    }
}
