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
pub fn matmul(threads: &Threads, w: MatRef<'_>, x: &[f32], n: usize, out: &mut [f32]) {
    assert_eq!(x.len(), n * w.cols, "activation size");
    assert_eq!(out.len(), n * w.rows, "output size");
    let rows = w.rows;
    let out_ptr = SharedMut::new(out);
    // Enough rows per task that scheduling overhead stays small.
    let min_rows = (16384 / w.cols.max(1)).max(1);
    threads.for_ranges(rows, min_rows, |r0, r1| {
        if n == 1 {
            for r in r0..r1 {
                let v = quant::dot(w.dtype, w.row(r), x);
                // SAFETY: each task writes only rows r0..r1, disjoint across tasks.
                unsafe { *out_ptr.at(r) = v };
            }
        } else {
            let mut row = vec![0f32; w.cols];
            for r in r0..r1 {
                w.dequantize_row(r, &mut row);
                for t in 0..n {
                    let v = dot_f32(&row, &x[t * w.cols..(t + 1) * w.cols]);
                    // SAFETY: element (t, r) belongs to this task's rows only.
                    unsafe { *out_ptr.at(t * rows + r) = v };
                }
            }
        }
    });
}
