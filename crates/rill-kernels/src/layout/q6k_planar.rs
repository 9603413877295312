//! Q6_K → [`rill_dtype::DType::Q6KPlanar`].
//!
//! Q6_K keeps each code's low 4 bits in `ql` (two codes a byte) and its top
//! 2 bits in `qh` (four a byte). Taking a 32-code vector out costs an AVX2
//! kernel about four operations (shift, two masks, an or); with 8-bit
//! activations on a CPU with 128-bit vector pipes (AMD Zen 1 and 2) that is
//! most of the work of the LM head, which dominates a decode step. The
//! planar form stores half `h`'s codes `q[128h + 32s + l]` (s = 0..3) as
//! three 32-byte planes at `96h + 32k`:
//!
//! ```text
//! byte 96h + 32k + l = q[128h + 32k + l] | ((q[128h + 96 + l] >> 2k) & 3) << 6     (k = 0, 1, 2)
//! ```
//!
//! so codes of quarters 0-2 are one mask (`& 0x3F`) and quarter 3's three
//! masks, three shifts and two ors, for all 32 lanes at once: 11 operations
//! per 128 codes instead of 16. Scales (bytes 192..208) and `d` (208..210)
//! stay where Q6_K has them, so a block is still 210 bytes and a row the
//! same length. Measured on AMD EPYC Zen 1, 1 token, 8-bit activations,
//! 65,536 × 2048 out of cache, 2 threads: 41 → 47 GFLOP/s.

use crate::quant::{k_quants, QK_K};

/// Bytes of a Q6_K block.
const Q6K_BYTES: usize = 210;

/// Rewrite whole Q6_K blocks into the planar layout in place; `false`
/// (nothing written) when `bytes` is not whole blocks.
pub(super) fn rewrite(bytes: &mut [u8]) -> bool {
    if !bytes.len().is_multiple_of(Q6K_BYTES) {
        return false;
    }
    for block in bytes.chunks_exact_mut(Q6K_BYTES) {
        let planes = planes(block[..192].try_into().expect("192 bytes"));
        block[..192].copy_from_slice(&planes);
    }
    true
}

/// The three planes of each half (the module doc) of a Q6_K block's codes
/// (`ql` then `qh`). Lane by lane over 32 columns (it vectorizes): a
/// model's Q6_K matrices are rewritten at load, gigabytes of them.
pub(super) fn planes(b: &[u8; 192]) -> [u8; 192] {
    let mut p = [0u8; 192];
    for h in 0..2 {
        for l in 0..32 {
            let (lo0, lo1, hi) = (b[64 * h + l], b[64 * h + 32 + l], b[128 + 32 * h + l]);
            // Quarter s: nibble s/2 of ql[64h + 32(s%2) + l], bits 2s.. of qh.
            let q = [
                lo0 & 0x0F | (hi & 3) << 4,
                lo1 & 0x0F | (hi >> 2 & 3) << 4,
                lo0 >> 4 | (hi >> 4 & 3) << 4,
                lo1 >> 4 | (hi >> 6) << 4,
            ];
            for k in 0..3 {
                p[96 * h + 32 * k + l] = q[k] | (q[3] >> (2 * k) & 3) << 6;
            }
        }
    }
    p
}

/// The 256 unsigned 6-bit codes of a planar block, in element order.
pub(crate) fn unpack_q6k_planar(block: &[u8]) -> [u8; QK_K] {
    let mut q = [0u8; QK_K];
    for h in 0..2 {
        for l in 0..32 {
            let mut top = 0;
            for k in 0..3 {
                let b = block[96 * h + 32 * k + l];
                q[128 * h + 32 * k + l] = b & 0x3F;
                top |= (b >> 6) << (2 * k);
            }
            q[128 * h + 96 + l] = top;
        }
    }
    q
}

/// The Q6_K block a planar block was made from.
pub(crate) fn to_q6k(block: &[u8]) -> [u8; Q6K_BYTES] {
    let q = unpack_q6k_planar(block);
    let mut out = [0u8; Q6K_BYTES];
    for h in 0..2 {
        for t in 0..128 {
            let v = q[128 * h + t];
            out[64 * h + t % 64] |= (v & 0x0F) << (4 * (t / 64));
            if t < 32 {
                for s in 0..4 {
                    out[128 + 32 * h + t] |= (q[128 * h + 32 * s + t] >> 4) << (2 * s);
                }
            }
        }
    }
    out[192..].copy_from_slice(&block[192..Q6K_BYTES]);
    out
}

/// Decode a planar block: the values of the Q6_K block it was made from.
pub fn decode_q6k_planar(b: &[u8; Q6K_BYTES], out: &mut [f32; QK_K]) {
    k_quants::decode_q6_k(&to_q6k(b), out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use rill_dtype::DType;

    fn random_blocks(n: usize, seed: u64) -> Vec<u8> {
        let mut rnd = crate::test_util::xorshift(seed);
        (0..n * Q6K_BYTES).map(|_| rnd() as u8).collect()
    }

    #[test]
    fn a_rewritten_block_goes_back_to_the_same_bytes() {
        let file = random_blocks(64, 0x51A7);
        let mut planar = file.clone();
        assert!(super::super::rewrite(
            DType::Q6K,
            DType::Q6KPlanar,
            2 * Q6K_BYTES,
            &mut planar
        ));
        assert_ne!(planar, file, "the codes moved");
        for (p, f) in planar
            .chunks_exact(Q6K_BYTES)
            .zip(file.chunks_exact(Q6K_BYTES))
        {
            assert_eq!(&to_q6k(p)[..], f);
            assert_eq!(unpack_q6k_planar(p), crate::q8::unpack_q6_k(f));
            assert_eq!(&p[192..], &f[192..], "scales and d stay");
        }
    }

    #[test]
    fn only_q6k_is_rewritten_and_only_whole_blocks() {
        let mut b = random_blocks(2, 7);
        let before = b.clone();
        assert!(!super::super::rewrite(
            DType::Q4K,
            DType::Q6KPlanar,
            Q6K_BYTES,
            &mut b
        ));
        assert!(!super::super::rewrite(
            DType::Q6K,
            DType::Q6KPlanar,
            Q6K_BYTES,
            &mut b[..300]
        ));
        assert_eq!(b, before);
    }
}
