//! Typed views of the weights, bound to their bytes in the file.
//!
//! Matrices stay in their file encoding (memory-mapped, zero copy) and are
//! decoded inside the kernels. Only vectors (norm weights, biases, decay
//! constants — a few KB per layer) are decoded to f32 at load time.

use crate::error::ModelError;
use rill_dtype::DType;
use rill_gguf::{GgufFile, TensorInfo};
use rill_kernels::{quant, MatRef};
use std::sync::Arc;

/// Bytes of one tensor inside a file the model keeps open.
///
/// The file (`Arc<GgufFile>`) is owned by the [`crate::Model`] together with
/// every `Bytes`, and a mapping's address never changes while it lives, so the
/// pointer stays valid for as long as the model does.
#[derive(Clone, Copy)]
pub(crate) struct Bytes {
    ptr: *const u8,
    len: usize,
}

// SAFETY: the bytes are immutable, shared read-only by all threads.
unsafe impl Send for Bytes {}
unsafe impl Sync for Bytes {}

impl Bytes {
    fn of(file: &Arc<GgufFile>, info: &TensorInfo) -> Bytes {
        let s = file.tensor_data(info);
        Bytes {
            ptr: s.as_ptr(),
            len: s.len(),
        }
    }

    fn as_slice(&self) -> &[u8] {
        // SAFETY: see the type's documentation.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// A 2-D weight: `rows` output features of `cols` inputs each.
pub(crate) struct Matrix {
    pub dtype: DType,
    pub rows: usize,
    pub cols: usize,
    bytes: Bytes,
}

impl Matrix {
    pub fn view(&self) -> MatRef<'_> {
        MatRef {
            dtype: self.dtype,
            rows: self.rows,
            cols: self.cols,
            data: self.bytes.as_slice(),
        }
    }
}

/// A stack of expert matrices (`[cols, rows, n_expert]` in ggml order).
pub(crate) struct Experts {
    all: Matrix,
    rows: usize,
}

impl Experts {
    pub fn expert(&self, e: usize) -> MatRef<'_> {
        self.all
            .view()
            .slice_rows(e * self.rows, (e + 1) * self.rows)
    }

    /// Expert `e`, rows `start..end` (a fused gate/up tensor holds both halves).
    pub fn expert_rows(&self, e: usize, start: usize, end: usize) -> MatRef<'_> {
        self.all
            .view()
            .slice_rows(e * self.rows + start, e * self.rows + end)
    }
}

/// Looks tensors up by name, checks shapes and types, and binds them.
pub(crate) struct Binder<'a> {
    pub file: &'a Arc<GgufFile>,
}

impl Binder<'_> {
    pub fn has(&self, name: &str) -> bool {
        self.file.tensor(name).is_some()
    }

    fn info(&self, name: &str) -> Result<&TensorInfo, ModelError> {
        self.file
            .tensor(name)
            .ok_or_else(|| ModelError::MissingTensor(name.to_string()))
    }

    fn check(&self, info: &TensorInfo, want: &[u64]) -> Result<DType, ModelError> {
        if info.shape != want {
            return Err(ModelError::BadShape {
                name: info.name.clone(),
                got: info.shape.clone(),
                want: want.to_vec(),
            });
        }
        let dtype = info.dtype()?;
        if !quant::is_supported(dtype) {
            return Err(ModelError::UnsupportedType {
                name: info.name.clone(),
                dtype,
            });
        }
        Ok(dtype)
    }

    /// The shape of a tensor (ggml order), if present.
    pub fn shape(&self, name: &str) -> Option<Vec<u64>> {
        self.file.tensor(name).map(|i| i.shape.clone())
    }

    /// A `rows × cols` matrix (ggml shape `[cols, rows]`).
    pub fn matrix(&self, name: &str, rows: usize, cols: usize) -> Result<Matrix, ModelError> {
        let info = self.info(name)?;
        let dtype = self.check(info, &[cols as u64, rows as u64])?;
        Ok(Matrix {
            dtype,
            rows,
            cols,
            bytes: Bytes::of(self.file, info),
        })
    }

    /// `n_expert` stacked `rows × cols` matrices (ggml shape `[cols, rows, n_expert]`).
    pub fn experts(
        &self,
        name: &str,
        n_expert: usize,
        rows: usize,
        cols: usize,
    ) -> Result<Experts, ModelError> {
        let info = self.info(name)?;
        let dtype = self.check(info, &[cols as u64, rows as u64, n_expert as u64])?;
        Ok(Experts {
            all: Matrix {
                dtype,
                rows: rows * n_expert,
                cols,
                bytes: Bytes::of(self.file, info),
            },
            rows,
        })
    }

    /// A vector of `n` values, decoded to f32. Accepts `[n]` or `[1, n]`-like
    /// shapes with the same element count (converters squeeze differently).
    pub fn vector(&self, name: &str, n: usize) -> Result<Vec<f32>, ModelError> {
        let info = self.info(name)?;
        let count: u64 = info.shape.iter().product();
        let want = [n as u64];
        let dtype = if count == n as u64 {
            self.check(
                &TensorInfo {
                    shape: want.to_vec(),
                    ..info.clone()
                },
                &want,
            )?
        } else {
            self.check(info, &want)?
        };
        if !n.is_multiple_of(dtype.block_len()) {
            return Err(ModelError::BadShape {
                name: name.into(),
                got: info.shape.clone(),
                want: want.to_vec(),
            });
        }
        let mut out = vec![0f32; n];
        quant::dequantize(dtype, self.file.tensor_data(info), &mut out);
        Ok(out)
    }

    /// The raw f32 contents of a small tensor with exactly `shape`.
    pub fn small(&self, name: &str, shape: &[u64]) -> Result<Vec<f32>, ModelError> {
        let info = self.info(name)?;
        let dtype = self.check(info, shape)?;
        let n: u64 = shape.iter().product();
        let mut out = vec![0f32; n as usize];
        quant::dequantize(dtype, self.file.tensor_data(info), &mut out);
        Ok(out)
    }
}
