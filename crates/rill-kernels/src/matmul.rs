//! Weight matrix × activations.
//!
//! A weight matrix is `rows × cols` in its file encoding, one encoded row per
//! output feature (ggml layout: `ne[0] = cols` is contiguous). Activations are
//! `n` row vectors of `cols` f32. The output is `n × rows`.
//!
//! One token: each row is decoded block by block inside the dot product.
//! Many tokens: each row is decoded once into a scratch buffer and reused for
//! every token, so weights are read once per batch, not once per token.

use crate::ops::dot_f32;
use crate::quant;
use crate::threads::{SharedMut, Threads};
use rill_dtype::DType;

/// A borrowed, encoded weight matrix.
#[derive(Clone, Copy, Debug)]
pub struct MatRef<'a> {
    pub dtype: DType,
    pub rows: usize,
    pub cols: usize,
    pub data: &'a [u8],
}

impl<'a> MatRef<'a> {
    /// Bytes of one encoded row.
    pub fn row_bytes(&self) -> usize {
        self.cols / self.dtype.block_len() * self.dtype.block_bytes()
    }

    /// The encoded bytes of row `r`.
    pub fn row(&self, r: usize) -> &'a [u8] {
        let rb = self.row_bytes();
        &self.data[r * rb..(r + 1) * rb]
    }

    /// Rows `start..end` as a matrix of their own (e.g. one expert of a stacked tensor).
    pub fn slice_rows(&self, start: usize, end: usize) -> MatRef<'a> {
        let rb = self.row_bytes();
        MatRef {
            dtype: self.dtype,
            rows: end - start,
            cols: self.cols,
            data: &self.data[start * rb..end * rb],
        }
    }

    /// Decode row `r` into `out` (`cols` values).
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        quant::dequantize(self.dtype, self.row(r), out);
    }
}

/// `out[t][r] = Σ_c w[r][c] · x[t][c]` for `t < n`, threaded over rows.
///
/// Batch invariance: every output is computed as `dot_f32(decoded row r, x[t])`
/// whatever `n` is and whatever the other rows of `x` hold, so a token gets
/// bit-identical results alone or in a batch (the serving engine relies on
/// this to give a request the same tokens under any load). Each weight row is
/// decoded once per call and reused for every token.
pub fn matmul(threads: &Threads, w: MatRef<'_>, x: &[f32], n: usize, out: &mut [f32]) {
    assert_eq!(x.len(), n * w.cols, "activation size");
    assert_eq!(out.len(), n * w.rows, "output size");
    let rows = w.rows;
    let out_ptr = SharedMut::new(out);
    // Enough rows per task that scheduling overhead stays small.
    let min_rows = (16384 / w.cols.max(1)).max(1);
    threads.for_ranges(rows, min_rows, |r0, r1| {
        let mut row = vec![0f32; w.cols];
        for r in r0..r1 {
            w.dequantize_row(r, &mut row);
            for t in 0..n {
                let v = dot_f32(&row, &x[t * w.cols..(t + 1) * w.cols]);
                // SAFETY: element (t, r) belongs to this task's rows only.
                unsafe { *out_ptr.at(t * rows + r) = v };
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_is_the_same_alone_or_in_a_batch() {
        let (rows, cols) = (37, 96);
        let w: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 7919) % 1000) as f32 / 997.0 - 0.5)
            .collect();
        let bytes: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
        let m = MatRef {
            dtype: rill_dtype::DType::F32,
            rows,
            cols,
            data: &bytes,
        };
        let x: Vec<f32> = (0..5 * cols)
            .map(|i| ((i * 104729) % 1000) as f32 / 1013.0 - 0.4)
            .collect();
        let threads = Threads::new(2);
        let mut all = vec![0f32; 5 * rows];
        matmul(&threads, m, &x, 5, &mut all);
        for t in 0..5 {
            let mut one = vec![0f32; rows];
            matmul(&threads, m, &x[t * cols..(t + 1) * cols], 1, &mut one);
            assert_eq!(&all[t * rows..(t + 1) * rows], &one[..], "token {t}");
        }
    }
}
