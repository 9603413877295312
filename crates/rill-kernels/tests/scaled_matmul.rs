//! Products with matrices whose scales are stored apart (Hugging Face FP8
//! tiles, NVFP4 groups), on every kernel path this CPU has. A few tokens
//! (decode) are decoded in registers with their scales; many (prefill)
//! decode rows first: both must give the same bits — alone, in batches,
//! over any thread split, in row slices cut inside a tile — and match an
//! f64 reference of the scalar decoding.

use rill_dtype::DType;
use rill_kernels::q8::{ActFormat, Q8Acts};
use rill_kernels::simd::Isa;
use rill_kernels::{
    matmul_many_with, matmul_on, matmul_with, MatJob, MatRef, Precision, Scales, Threads,
};

mod common;
use common::{dot_f64, dot_tolerance, Rng};

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
        // Scales near 1..100 (E4M3 exponents 7..13), sign cleared.
        scales: (0..ROWS * cols / 16)
            .map(|_| 0x38 + (rng.below(48) as u8))
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

fn run(isa: Isa, threads: usize, w: MatRef, x: &[f32], n: usize) -> Vec<f32> {
    let mut out = vec![f32::NAN; n * w.rows];
    matmul_with(isa, &Threads::new(threads), w, x, n, &mut out);
    out
}

fn token(out: &[f32], t: usize) -> &[f32] {
    &out[t * ROWS..(t + 1) * ROWS]
}

fn assert_bits(got: &[f32], want: &[f32], what: &str) {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            g.to_bits() == w.to_bits(),
            "{what}: element {i}: {g:e} vs {w:e}"
        );
    }
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
    let mut out = vec![f32::NAN; n * w.rows];
    matmul_on(
        isa,
        Precision::Q8,
        &Threads::new(threads),
        w,
        x,
        n,
        &mut out,
    );
    out
}

/// NVFP4 with 8-bit activations: every path gives the scalar reference's
/// bits (so a token's result does not depend on its batch), rows of whole
/// 128-value blocks on the SIMD kernel and others on the reference, and
/// the result stays within the activations' rounding of the exact one.
#[test]
fn nvfp4_with_8_bit_activations_gives_the_reference_bits() {
    let mut rng = Rng(12);
    // 1040 = 8 · 128 + 16: not whole blocks of 32 either, stays exact.
    for case in [
        nvfp4(256, &mut rng),
        nvfp4(1024, &mut rng),
        nvfp4(1056, &mut rng),
        nvfp4(1040, &mut rng),
    ] {
        let (w, cols) = (case.mat(), case.cols);
        let q8 = ActFormat::for_mat(&w);
        assert_eq!(
            q8.is_some(),
            cfg!(target_arch = "x86_64") && cols % 32 == 0,
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
