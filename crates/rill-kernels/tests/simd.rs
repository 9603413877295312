//! Every SIMD kernel path this CPU can run, against the scalar reference.
//!
//! * `dequantize_with(isa)` must equal the scalar `dequantize` **bit for
//!   bit**: the SIMD decoders do the same f32 operations per element (exact
//!   widening of scales and quants, then the same multiply / subtract, never
//!   fused).
//! * `dot_with(isa)` may fuse the scale into an FMA or factor a block scale out
//!   of its sum, and sums in another order, so it is compared with an f64 dot
//!   of the scalar-decoded row within `1e-5 · Σ|wᵢ·xᵢ|` (see `tests/quant.rs`).
//!
//! Rows are the committed fixtures and rows of 1, 2, 7 and 16 blocks drawn at
//! random from them (so blocks meet neighbours they were not encoded with).

use rill_dtype::DType;
use rill_kernels::ops::{axpy_with, dot_f32_with};
use rill_kernels::quant::{dequantize_with, dot_with};
use rill_kernels::simd::Isa;

mod common;
use common::{dot_f64, dot_tolerance, fixture, tame, Rng, SUPPORTED};

/// Rows to test: the whole fixture, then `n` blocks picked at random from it.
/// Float encodings (one element per block) take runs of 32 elements per "block".
fn rows(dtype: DType, raw: &[u8], rng: &mut Rng) -> Vec<Vec<u8>> {
    let unit = if dtype.block_len() == 1 {
        32 * dtype.block_bytes()
    } else {
        dtype.block_bytes()
    };
    let n_units = raw.len() / unit;
    let mut out = vec![raw.to_vec()];
    for n in [1usize, 2, 7, 16] {
        for _ in 0..3 {
            let mut row = Vec::with_capacity(n * unit);
            for _ in 0..n {
                let u = rng.below(n_units);
                row.extend_from_slice(&raw[u * unit..(u + 1) * unit]);
            }
            out.push(row);
        }
    }
    out
}

fn elements(dtype: DType, bytes: usize) -> usize {
    bytes / dtype.block_bytes() * dtype.block_len()
}

/// `f(dtype, row, elements, rng)` for every row of [`rows`] of every
/// supported encoding, drawn from `Rng(seed)`.
fn each_row(seed: u64, mut f: impl FnMut(DType, &[u8], usize, &mut Rng)) {
    let mut rng = Rng(seed);
    for dtype in SUPPORTED {
        let raw = fixture(dtype, "bin");
        for row in rows(dtype, &raw, &mut rng) {
            f(dtype, &row, elements(dtype, row.len()), &mut rng);
        }
    }
}

fn simd_paths() -> Vec<Isa> {
    Isa::available()
        .into_iter()
        .filter(|&i| i != Isa::Scalar)
        .collect()
}

#[test]
fn best_is_available_and_scalar_always_is() {
    assert!(Isa::best().is_available());
    assert!(Isa::Scalar.is_available());
    assert_eq!(Isa::available()[0], Isa::Scalar);
    eprintln!("kernel paths on this CPU: {:?}", Isa::available());
}

#[test]
fn simd_dequantize_is_bit_identical_to_scalar() {
    each_row(1, |dtype, row, n, _| {
        let mut want = vec![f32::NAN; n];
        dequantize_with(Isa::Scalar, dtype, row, &mut want);
        for isa in simd_paths() {
            let mut got = vec![f32::NAN; n];
            dequantize_with(isa, dtype, row, &mut got);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    g.to_bits() == w.to_bits(),
                    "{dtype} {isa:?} row of {n}: element {i}: {g:e} vs scalar {w:e}"
                );
            }
        }
    });
}

fn check_dot(isa: Isa, dtype: DType, row: &[u8], x: &[f32], what: &str) {
    let mut w = vec![0f32; x.len()];
    dequantize_with(Isa::Scalar, dtype, row, &mut w);
    let x = &tame(&w, x)[..];
    let (exact, mag) = dot_f64(&w, x);
    let tol = dot_tolerance(mag);
    let got = dot_with(isa, dtype, row, x) as f64;
    assert!(
        (got - exact).abs() <= tol,
        "{dtype} {isa:?} {what}: dot {got:e}, f64 reference {exact:e} (tolerance {tol:e})"
    );
    let scalar = dot_with(Isa::Scalar, dtype, row, x) as f64;
    assert!(
        (got - scalar).abs() <= 2.0 * tol,
        "{dtype} {isa:?} {what}: dot {got:e}, scalar {scalar:e} (tolerance {tol:e})"
    );
}

#[test]
fn simd_dot_matches_scalar() {
    each_row(2, |dtype, row, n, rng| {
        let x: Vec<f32> = (0..n).map(|_| rng.f32()).collect();
        for isa in Isa::available() {
            check_dot(isa, dtype, row, &x, &format!("row of {n}"));
        }
    });
}

/// Activations of very different magnitudes, so a cancelling dot is tested.
#[test]
fn simd_dot_with_wide_activations() {
    let mut rng = Rng(3);
    for dtype in SUPPORTED {
        let raw = fixture(dtype, "bin");
        let n = elements(dtype, raw.len());
        let x: Vec<f32> = (0..n)
            .map(|i| rng.f32() * [1e-3f32, 1.0, 300.0][i % 3])
            .collect();
        for isa in Isa::available() {
            check_dot(isa, dtype, &raw, &x, "wide activations");
        }
    }
}

/// Float rows need not be whole vectors: every tail length.
#[test]
fn simd_float_rows_of_any_length() {
    let mut rng = Rng(4);
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let raw = fixture(dtype, "bin");
        let bb = dtype.block_bytes();
        for n in (0..=70).chain([127, 128, 129, 255, 256, 257]) {
            let n = n.min(raw.len() / bb);
            let row = &raw[..n * bb];
            let x: Vec<f32> = (0..n).map(|_| rng.f32()).collect();
            let mut want = vec![0f32; n];
            dequantize_with(Isa::Scalar, dtype, row, &mut want);
            for isa in Isa::available() {
                check_dot(isa, dtype, row, &x, &format!("{n} elements"));
                let mut got = vec![f32::NAN; n];
                dequantize_with(isa, dtype, row, &mut got);
                assert!(
                    got.iter()
                        .zip(&want)
                        .all(|(g, w)| g.to_bits() == w.to_bits()),
                    "{dtype} {isa:?}: {n} elements"
                );
            }
        }
    }
}

#[test]
fn simd_f32_ops_match_scalar() {
    let mut rng = Rng(5);
    for n in (0..=40).chain([63, 64, 65, 1000, 4096]) {
        let a: Vec<f32> = (0..n).map(|_| rng.f32()).collect();
        let b: Vec<f32> = (0..n).map(|_| rng.f32()).collect();
        let (exact, mag) = dot_f64(&a, &b);
        let tol = 1e-6 * mag + 1e-30;
        let y0: Vec<f32> = (0..n).map(|_| rng.f32()).collect();
        for isa in Isa::available() {
            let got = dot_f32_with(isa, &a, &b) as f64;
            assert!(
                (got - exact).abs() <= tol,
                "{isa:?} n={n}: {got} vs {exact}"
            );
            let mut y = y0.clone();
            axpy_with(isa, 0.375, &a, &mut y);
            for i in 0..n {
                let want = y0[i] as f64 + 0.375 * a[i] as f64;
                // Scalar rounds twice (mul, add), FMA once: within 1 ulp-ish.
                assert!(
                    (y[i] as f64 - want).abs() <= 2.0 * f32::EPSILON as f64 * want.abs().max(1.0),
                    "{isa:?} axpy n={n} i={i}"
                );
            }
        }
    }
}
