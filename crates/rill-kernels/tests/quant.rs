//! rill's quant decoders against gguf-py's reference `dequantize`.
//!
//! The fixtures (`tests/fixtures/<TYPE>.bin` encoded blocks and `<TYPE>.f32`
//! gguf-py's decoding) come from `tests/fixtures/make_quant_fixtures.py`.
//!
//! Tolerances:
//! * `dequantize` must match gguf-py **bit for bit**: both widen f16 scales
//!   exactly and then do the same f32 multiplies/subtracts in the same order
//!   (and Rust never fuses them into FMAs), so there is no rounding slack to
//!   allow.
//! * `dot` accumulates in f32 in an order of its choosing, so it is compared
//!   with an f64 dot of the decoded row within `1e-5 * Σ|wᵢ·xᵢ|` — relative to
//!   the sum of magnitudes, because cancellation can make the result itself
//!   arbitrarily small while the f32 rounding error scales with the terms.

use rill_dtype::{DType, ALL};
use rill_kernels::quant::{dequantize_with, dot_with, is_supported};
use rill_kernels::Isa;

/// Decode on every kernel class this CPU runs: each must give the scalar
/// class's bits, which are returned.
fn dequantize(dtype: DType, src: &[u8], dst: &mut [f32]) {
    dequantize_with(Isa::Scalar, dtype, src, dst);
    let mut other = vec![0f32; dst.len()];
    for isa in Isa::available() {
        dequantize_with(isa, dtype, src, &mut other);
        assert!(
            other
                .iter()
                .zip(&*dst)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{dtype}: the {isa} decoder differs from the scalar one"
        );
    }
}

mod common;
use common::{dot_f64, dot_tolerance, fixture, tame, Rng, SUPPORTED};

struct Fixture {
    dtype: DType,
    raw: Vec<u8>,
    want: Vec<f32>,
}

impl Fixture {
    fn load(dtype: DType) -> Fixture {
        let read = |ext: &str| fixture(dtype, ext);
        let raw = read("bin");
        let want: Vec<f32> = read("f32")
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        assert_eq!(
            Some(raw.len() as u64),
            dtype.bytes_for(want.len() as u64),
            "{dtype}: fixture sizes disagree"
        );
        Fixture { dtype, raw, want }
    }

    fn n_blocks(&self) -> usize {
        self.want.len() / self.dtype.block_len()
    }

    /// Encoded bytes and expected values of blocks `first..first + n`.
    fn blocks(&self, first: usize, n: usize) -> (&[u8], &[f32]) {
        let (bb, bl) = (self.dtype.block_bytes(), self.dtype.block_len());
        (
            &self.raw[first * bb..(first + n) * bb],
            &self.want[first * bl..(first + n) * bl],
        )
    }
}

/// Deterministic activations in [-1, 1) (splitmix64), so no rand dependency.
fn activations(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng(seed);
    (0..n).map(|_| rng.f32()).collect()
}

fn assert_bits_eq(dtype: DType, got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len());
    let bl = dtype.block_len();
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            g.to_bits() == w.to_bits(),
            "{dtype} {what}: element {i} (block {}, index {}): rill {g:e} ({:#010x}), gguf-py {w:e} ({:#010x})",
            i / bl,
            i % bl,
            g.to_bits(),
            w.to_bits()
        );
    }
}

/// Every kernel class's fused dot is within f32 accumulation error of the
/// f64 product of the decoded weights.
fn check_dot(dtype: DType, row: &[u8], w: &[f32], x: &[f32], what: &str) {
    for isa in Isa::available() {
        check_dot_on(isa, dtype, row, w, x, what);
    }
}

fn check_dot_on(isa: Isa, dtype: DType, row: &[u8], w: &[f32], x: &[f32], what: &str) {
    let x = &tame(w, x)[..];
    let got = dot_with(isa, dtype, row, x);
    let (exact, mag) = dot_f64(w, x);
    let tol = dot_tolerance(mag);
    assert!(
        (got as f64 - exact).abs() <= tol,
        "{isa} {dtype} {what}: dot {got:e}, f64 reference {exact:e} (tolerance {tol:e})"
    );
}

#[test]
fn is_supported_is_exactly_the_decoded_types() {
    for t in ALL {
        assert_eq!(is_supported(t), SUPPORTED.contains(&t), "{t}");
    }
    for t in [DType::Q8K, DType::Q8_1, DType::F64, DType::I8] {
        assert!(!is_supported(t), "{t}");
    }
}

#[test]
fn dequantize_matches_gguf_py_bit_for_bit() {
    for dtype in SUPPORTED {
        let f = Fixture::load(dtype);
        assert!(f.n_blocks() >= 8, "{dtype}: fixture too small");
        // The whole fixture as one tensor...
        let mut got = vec![f32::NAN; f.want.len()];
        dequantize(dtype, &f.raw, &mut got);
        assert_bits_eq(dtype, &got, &f.want, "whole fixture");
        // ...and block by block, so a decoder cannot depend on its neighbours.
        for b in 0..f.n_blocks() {
            let (raw, want) = f.blocks(b, 1);
            let mut one = vec![f32::NAN; want.len()];
            dequantize(dtype, raw, &mut one);
            assert_bits_eq(dtype, &one, want, &format!("block {b} alone"));
        }
    }
}

#[test]
fn dot_matches_f64_reference() {
    for dtype in SUPPORTED {
        let f = Fixture::load(dtype);
        let x = activations(
            f.want.len(),
            rill_dtype::ALL.iter().position(|&t| t == dtype).unwrap() as u64,
        );
        check_dot(dtype, &f.raw, &f.want, &x, "whole fixture");
        for b in 0..f.n_blocks() {
            let (raw, want) = f.blocks(b, 1);
            let bl = dtype.block_len();
            check_dot(
                dtype,
                raw,
                want,
                &x[b * bl..(b + 1) * bl],
                &format!("block {b}"),
            );
        }
        let (raw, want) = f.blocks(1, 3.min(f.n_blocks() - 1));
        check_dot(dtype, raw, want, &x[..want.len()], "blocks 1..4");
    }
}

/// Float rows are dotted in chunks of 64 elements: cover every tail length.
#[test]
fn float_dot_handles_any_length() {
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let f = Fixture::load(dtype);
        let x = activations(f.want.len(), 7);
        for n in (0..=200).chain([255, 256, 257, 511, 512]) {
            let (raw, want) = f.blocks(0, n);
            check_dot(dtype, raw, want, &x[..n], &format!("first {n} elements"));
        }
    }
}

#[test]
fn dot_of_empty_row_is_zero() {
    for dtype in SUPPORTED {
        for isa in Isa::available() {
            assert_eq!(dot_with(isa, dtype, &[], &[]), 0.0, "{isa} {dtype}");
        }
    }
}

/// A few blocks decoded by hand, independent of gguf-py.
#[test]
fn hand_decoded_blocks() {
    let one = half::f16::from_f32(1.0).to_bits().to_le_bytes();
    let neg_half = half::f16::from_f32(-0.5).to_bits().to_le_bytes();

    // Q4_0, d = 1: byte j = (j << 4) | (15 - j) gives element j = 7 - j and
    // element j + 16 = j - 8.
    let mut b = vec![one[0], one[1]];
    b.extend((0..16u8).map(|j| (j << 4) | (15 - j)));
    let mut out = [0.0f32; 32];
    dequantize(DType::Q4_0, &b, &mut out);
    for j in 0..16 {
        assert_eq!(out[j], 7.0 - j as f32);
        assert_eq!(out[j + 16], j as f32 - 8.0);
    }

    // Q4_1, d = 1, m = -0.5: all quants 15 -> 14.5.
    let mut b = vec![one[0], one[1], neg_half[0], neg_half[1]];
    b.extend([0xFFu8; 16]);
    dequantize(DType::Q4_1, &b, &mut out);
    assert!(out.iter().all(|&v| v == 14.5));

    // Q5_0, d = -0.5: qh has only bit 31 set, all nibbles 0: element 31 is
    // q = 16 -> 0, the rest q = 0 -> -16 * -0.5 = 8.
    let mut b = vec![neg_half[0], neg_half[1], 0, 0, 0, 0x80];
    b.extend([0u8; 16]);
    dequantize(DType::Q5_0, &b, &mut out);
    assert!(out[..31].iter().all(|&v| v == 8.0));
    assert_eq!(out[31], 0.0);

    // Q8_0, d = -0.5: int8 quants -128..=127 stride 8.
    let mut b = vec![neg_half[0], neg_half[1]];
    b.extend((0..32).map(|i| (-128 + 8 * i) as i8 as u8));
    dequantize(DType::Q8_0, &b, &mut out);
    for (i, &v) in out.iter().enumerate() {
        assert_eq!(v, (-128 + 8 * i as i32) as f32 * -0.5);
    }

    // MXFP4, e = 127 (scale 1): codes 0..16 are the e2m1 values themselves.
    let mut b = vec![127u8];
    b.extend((0..16u8).map(|j| j | (j << 4)));
    dequantize(DType::MXFP4, &b, &mut out);
    let e2m1 = [
        0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0,
    ];
    assert_eq!(&out[..16], &e2m1);
    assert_eq!(&out[16..], &e2m1);

    // IQ4_NL, d = 1: the nibble indexes the non-linear table.
    let mut b = vec![one[0], one[1]];
    b.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
    dequantize(DType::IQ4NL, &b, &mut out);
    assert_eq!(out[0], -127.0);
    assert_eq!(out[15], 113.0);
    assert_eq!(out[16], 113.0);
    assert_eq!(out[8], 1.0);

    // Q4_K, d = 1, dmin = 1: scale/min bytes all 0xFF decode to 63 / 63,
    // so quant 15 -> 63 * 15 - 63.
    let mut b = vec![one[0], one[1], one[0], one[1]];
    b.extend([0xFFu8; 140]);
    let mut out = [0.0f32; 256];
    dequantize(DType::Q4K, &b, &mut out);
    assert!(out.iter().all(|&v| v == 63.0 * 15.0 - 63.0));
}
