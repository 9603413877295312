//! QSA's indexer scores (DESIGN.md §2.5): every query's index heads
//! against the pooled key of every complete key block,
//! `s_b = Σ_h relu(q_h · k_b) / √d`.
//!
//! The block keys are one row of `d` values per block, in any KV cache
//! encoding. They are decoded a tile of [`TILE`] blocks at a time (never the
//! whole cache at once), transposed, and the tile's scores of a group of
//! queries are one matrix product (`small::product_nn`): each `q_h · k_b` is
//! a single fused multiply-add chain over `d` in order, so a score has the
//! same bits on every kernel class, in any group of queries and whatever the
//! number of blocks — a query's block choice does not depend on its batch.

use crate::kv::{KvRows, KvSide};
use crate::simd::Isa;
use crate::small::{product_nn, transpose};

/// Blocks per tile.
const TILE: usize = 64;

/// Floats of scratch [`block_scores`] needs for `queries` query rows of
/// `n_head` heads of `d` values.
pub fn block_scores_scratch_len(n_head: usize, d: usize, queries: usize) -> usize {
    2 * TILE * d + queries * n_head * TILE
}

/// The scores of the query rows `q` (`[m × n_head × d]`) against the first
/// `nb` block keys of `keys` (one row of `d` values per block), into
/// `scores` (`[m × nb]`: row `i` for query `i`).
pub fn block_scores(
    isa: Isa,
    q: &[f32],
    (n_head, d): (usize, usize),
    keys: KvRows<'_>,
    nb: usize,
    scratch: &mut [f32],
    scores: &mut [f32],
) {
    let width = n_head * d;
    assert!(width > 0 && q.len().is_multiple_of(width));
    let (m, rows) = (q.len() / width, q.len() / d);
    assert!(keys.positions(d) >= nb, "{nb} block keys asked of fewer");
    assert!(scores.len() >= m * nb);
    assert!(scratch.len() >= block_scores_scratch_len(n_head, d, m));
    isa.check();
    let side = KvSide {
        rows: keys,
        exact: None,
    };
    let scale = 1.0 / (d as f32).sqrt();
    let (tile, rest) = scratch.split_at_mut(TILE * d);
    let (kt, rest) = rest.split_at_mut(TILE * d);
    let dots = &mut rest[..rows * TILE];
    for b0 in (0..nb).step_by(TILE) {
        let n = TILE.min(nb - b0);
        side.decode_rows(isa, (1, d, 0), b0, n, tile, d);
        transpose(tile, d, (n, d), kt, n);
        product_nn(isa, (q, d), (kt, n), (rows, d, n), (dots, n));
        for (i, qd) in dots[..rows * n].chunks_exact(n_head * n).enumerate() {
            let out = &mut scores[i * nb + b0..i * nb + b0 + n];
            for (j, o) in out.iter_mut().enumerate() {
                let mut s = 0.0f32;
                for h in 0..n_head {
                    s += qd[h * n + j].max(0.0);
                }
                *o = s * scale;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::{encode, encoded_len};
    use crate::test_util::noise;
    use rill_dtype::DType;

    /// The definition: per head one fused chain over `d` in order, relu,
    /// summed over heads in order, scaled.
    fn direct(q: &[f32], n_head: usize, d: usize, keys: &[f32], b: usize) -> f32 {
        let mut s = 0.0f32;
        for h in 0..n_head {
            let dot = (0..d).fold(0f32, |a, i| q[h * d + i].mul_add(keys[b * d + i], a));
            s += dot.max(0.0);
        }
        s / (d as f32).sqrt()
    }

    #[test]
    fn scores_are_the_definition_on_every_class_and_encoding() {
        let (n_head, d, nb, m) = (3, 64, 150, 5);
        let q = noise(1, m * n_head * d);
        let keys = noise(2, nb * d);
        for dtype in [DType::F32, DType::F16, DType::Q8_0] {
            let mut bytes = vec![0u8; encoded_len(dtype, keys.len())];
            encode(dtype, &keys, &mut bytes);
            // What the encoded rows hold.
            let mut held = vec![0f32; keys.len()];
            crate::quant::dequantize_with(Isa::Scalar, dtype, &bytes, &mut held);
            let rows = KvRows::Coded {
                dtype,
                bytes: &bytes,
            };
            for isa in Isa::available() {
                // All queries at once, and each alone over fewer blocks.
                let mut scratch = vec![0f32; block_scores_scratch_len(n_head, d, m)];
                let mut all = vec![0f32; m * nb];
                block_scores(isa, &q, (n_head, d), rows, nb, &mut scratch, &mut all);
                for i in 0..m {
                    let qi = &q[i * n_head * d..(i + 1) * n_head * d];
                    let few = nb - 7 * i;
                    let mut one = vec![0f32; few];
                    block_scores(isa, qi, (n_head, d), rows, few, &mut scratch, &mut one);
                    for b in 0..nb {
                        let want = direct(qi, n_head, d, &held, b);
                        assert_eq!(all[i * nb + b].to_bits(), want.to_bits(), "{dtype} {isa:?}");
                        if b < few {
                            assert_eq!(one[b].to_bits(), want.to_bits());
                        }
                    }
                }
            }
        }
        // f32 rows given as plain values read the same.
        let mut s = vec![0f32; nb];
        let mut scratch = vec![0f32; block_scores_scratch_len(n_head, d, 1)];
        let q0 = &q[..n_head * d];
        block_scores(
            Isa::Scalar,
            q0,
            (n_head, d),
            KvRows::F32(&keys),
            nb,
            &mut scratch,
            &mut s,
        );
        assert_eq!(s[nb - 1], direct(q0, n_head, d, &keys, nb - 1));
    }
}
