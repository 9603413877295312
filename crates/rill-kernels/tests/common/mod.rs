//! Helpers shared by the kernel tests.
#![allow(dead_code)]

use rill_dtype::DType;

/// The encodings rill computes with (the tests' own list, kept apart from
/// the library's `is_supported` on purpose: it is what that is checked against).
pub const SUPPORTED: [DType; 26] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
    DType::Q2K,
    DType::Q3K,
    DType::Q4K,
    DType::Q5K,
    DType::Q6K,
    DType::IQ4NL,
    DType::IQ4XS,
    DType::MXFP4,
    DType::IQ2XXS,
    DType::IQ2XS,
    DType::IQ2S,
    DType::IQ3XXS,
    DType::IQ3S,
    DType::IQ1S,
    DType::IQ1M,
    DType::TQ1_0,
    DType::TQ2_0,
    DType::NVFP4,
];

/// splitmix64.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    pub fn f32(&mut self) -> f32 {
        ((self.next() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// A `rows × cols` matrix: float encodings from random values in [-1, 1)
/// (the float fixtures hold values near the overflow limits), the others
/// from blocks of the committed fixtures drawn at random.
pub fn matrix(dtype: DType, rows: usize, cols: usize, rng: &mut Rng) -> Vec<u8> {
    let n = rows * cols;
    match dtype {
        DType::F32 => (0..n).flat_map(|_| rng.f32().to_le_bytes()).collect(),
        DType::F16 => (0..n)
            .flat_map(|_| half::f16::from_f32(rng.f32()).to_bits().to_le_bytes())
            .collect(),
        DType::BF16 => (0..n)
            .flat_map(|_| half::bf16::from_f32(rng.f32()).to_bits().to_le_bytes())
            .collect(),
        _ => {
            let raw = fixture(dtype, "bin");
            let bb = dtype.block_bytes();
            let blocks = raw.len() / bb;
            let mut out = Vec::with_capacity(n / dtype.block_len() * bb);
            for _ in 0..n / dtype.block_len() {
                let b = rng.below(blocks);
                out.extend_from_slice(&raw[b * bb..(b + 1) * bb]);
            }
            out
        }
    }
}

/// The committed fixture `tests/fixtures/<TYPE>.<ext>` (`bin`: encoded
/// blocks; `f32`: gguf-py's decoding of them).
pub fn fixture(dtype: DType, ext: &str) -> Vec<u8> {
    let p = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(format!("{}.{ext}", dtype.name()));
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// `x` with the activations of near-`f32::MAX` weights (the BF16 fixture has
/// `±3.39e38`) scaled down: with such a term, whether an f32 partial sum
/// overflows depends on the summation order, and no order is the right one.
pub fn tame(w: &[f32], x: &[f32]) -> Vec<f32> {
    w.iter()
        .zip(x)
        .map(|(&a, &b)| if a.abs() > 1e36 { b * 1e-3 } else { b })
        .collect()
}

/// `Σ w·x` in f64 and `Σ |w·x|`, the magnitude the accuracy bounds scale
/// with (cancellation can make the sum itself arbitrarily small while the
/// f32 rounding error scales with the terms).
pub fn dot_f64(w: &[f32], x: &[f32]) -> (f64, f64) {
    let exact = w.iter().zip(x).map(|(&a, &b)| a as f64 * b as f64).sum();
    let mag = w
        .iter()
        .zip(x)
        .map(|(&a, &b)| (a as f64 * b as f64).abs())
        .sum();
    (exact, mag)
}

/// The bound on an f32 dot's error against [`dot_f64`]: `1e-5 · Σ|w·x|`,
/// plus the smallest normal f32 (for all-zero terms).
pub fn dot_tolerance(mag: f64) -> f64 {
    1e-5 * mag + f64::from(f32::MIN_POSITIVE)
}

/// `got` and `want` hold the same bits, element by element.
pub fn assert_bits(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            g.to_bits() == w.to_bits(),
            "{what}: element {i}: {g:e} vs {w:e}"
        );
    }
}
