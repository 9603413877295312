//! The in-register canonical kernels against the blocked path, bit for bit,
//! for every encoding with a NEON decoder and every tile shape.
//! `tests/matmul.rs` checks the same through `matmul` (n = 1..5 against
//! n = 300) but only for the encodings in its list; this covers all of them
//! (Q5_0, Q5_1, Q2_K and Q3_K too) without the threading around it.

use rill_dtype::DType;

use super::{canon_tile, dequantize, gemm, CANON_ROWS, CANON_TOKENS};
use crate::quant::dequantize_with;
use crate::simd::Isa;
use crate::test_common::{matrix, Rng};

/// Every encoding [`canon_tile`] takes, with a column count (several
/// blocks, so accumulators carry across blocks).
const CASES: [(DType, usize); 13] = [
    (DType::Q4_0, 96),
    (DType::Q4_1, 64),
    (DType::Q5_0, 128),
    (DType::Q5_1, 96),
    (DType::Q8_0, 160),
    (DType::Q2K, 512),
    (DType::Q3K, 512),
    (DType::Q4K, 768),
    (DType::Q5K, 512),
    (DType::Q6K, 512),
    (DType::IQ4NL, 128),
    (DType::IQ4XS, 512),
    (DType::MXFP4, 96),
];

#[test]
fn canon_tile_gives_the_blocked_paths_bits() {
    if !Isa::Neon.is_available() {
        return;
    }
    let mut rng = Rng(21);
    for (dtype, cols) in CASES {
        let rows = CANON_ROWS;
        let data = matrix(dtype, rows, cols, &mut rng);
        let rb = data.len() / rows;
        let x: Vec<f32> = (0..CANON_TOKENS * cols).map(|_| rng.f32()).collect();
        // The blocked path: exact decoding (checked against the scalar
        // decoder here too), then the microkernel, one output at a time.
        let mut wf = vec![0f32; rows * cols];
        let mut scalar = vec![0f32; rows * cols];
        // SAFETY: NEON is available (checked above); whole blocks.
        assert!(unsafe { dequantize(dtype, &data, &mut wf) }, "{dtype}");
        dequantize_with(Isa::Scalar, dtype, &data, &mut scalar);
        for (i, (a, b)) in wf.iter().zip(&scalar).enumerate() {
            assert_eq!(a.to_bits(), b.to_bits(), "{dtype}: decoded element {i}");
        }
        let mut want = vec![0f32; rows * CANON_TOKENS];
        for r in 0..rows {
            for t in 0..CANON_TOKENS {
                let (w, xt) = (&wf[r * cols..], &x[t * cols..]);
                let o = &mut want[r * CANON_TOKENS + t..];
                // SAFETY: as above; one row, one token, in bounds.
                unsafe { gemm::tile(w, 1, xt, 1, cols, o) };
            }
        }
        for nr in 1..=CANON_ROWS {
            for nt in 1..=CANON_TOKENS {
                let mut got = vec![f32::NAN; nr * nt];
                // SAFETY: as above; nr whole rows, nt tokens, in bounds.
                let ok = unsafe { canon_tile(dtype, &data[..nr * rb], nr, &x, nt, cols, &mut got) };
                assert!(ok, "{dtype}: no canonical kernel");
                for r in 0..nr {
                    for t in 0..nt {
                        let (g, w) = (got[r * nt + t], want[r * CANON_TOKENS + t]);
                        assert!(
                            g.to_bits() == w.to_bits(),
                            "{dtype} cols {cols}, {nr} rows × {nt} tokens: row {r} token {t}: \
                             {g:e} vs blocked {w:e}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn float_encodings_have_no_canonical_kernel() {
    if !Isa::Neon.is_available() {
        return;
    }
    let (w, x, mut out) = ([0u8; 4 * 32], [0f32; 32], [0f32; 1]);
    // SAFETY: NEON is available; `false` means nothing was read or written.
    assert!(!unsafe { canon_tile(DType::F32, &w, 1, &x, 1, 32, &mut out) });
}

/// [`h2f`](super::h2f) (`fcvt`) against `half`'s conversions (the scalar
/// decoders' `to_f32`, and its software fallback `to_f32_const`, which
/// runs where the CPU has no FP16), for every bit pattern.
#[test]
fn h2f_is_the_scalar_conversion() {
    if !Isa::Neon.is_available() {
        return;
    }
    for bits in 0..=u16::MAX {
        let h = half::f16::from_bits(bits);
        let b = bits.to_le_bytes();
        // SAFETY: NEON is available; `b` holds the 2 bytes read.
        let got = unsafe { super::h2f(b.as_ptr()) }.to_bits();
        assert_eq!(got, h.to_f32().to_bits(), "{bits:#06x}");
        assert_eq!(got, h.to_f32_const().to_bits(), "{bits:#06x}");
    }
}
