//! Tensor infos and the checks that tie them to the data section.

use crate::GgufError;
use rill_dtype::DType;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    /// ggml order: `shape[0]` is the contiguous (row) dimension.
    pub shape: Vec<u64>,
    /// The raw ggml type id; ids rill does not know are kept (see [`TensorInfo::dtype`]).
    pub ggml_type: u32,
    /// Offset of the data from the start of its split's data section, as written in the file.
    pub offset: u64,
    /// Index (0-based) of the split file that holds the data; 0 for an unsplit file.
    pub split: usize,
}

impl TensorInfo {
    /// The element encoding, or an error naming the tensor and the type id when rill does not
    /// know the id.
    pub fn dtype(&self) -> Result<DType, GgufError> {
        DType::from_ggml_id(self.ggml_type).ok_or_else(|| GgufError::UnknownTensorType {
            tensor: self.name.clone(),
            type_id: self.ggml_type,
        })
    }

    /// Product of the dimensions (1 for a zero-dimensional tensor). Exact for every tensor
    /// of an opened file (overflow is refused at open time); saturates otherwise.
    pub fn n_elements(&self) -> u64 {
        self.shape.iter().fold(1u64, |n, &d| n.saturating_mul(d))
    }

    /// Bytes of data, from the shape and the block geometry of the type.
    pub fn size_bytes(&self) -> Result<u64, GgufError> {
        let dt = self.dtype()?;
        let bad = |reason: String| GgufError::BadShape {
            tensor: self.name.clone(),
            shape: self.shape.clone(),
            reason,
        };
        let block = dt.block_len() as u64;
        // ggml quantizes rows independently, so blocks may not straddle rows.
        let row = self.shape.first().copied().unwrap_or(1);
        if row % block != 0 {
            return Err(bad(format!(
                "row length {row} is not a multiple of the {dt} block size {block}"
            )));
        }
        let n = self
            .shape
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(d))
            .ok_or_else(|| bad("element count overflows".into()))?;
        dt.bytes_for(n)
            .ok_or_else(|| bad(format!("{n} elements of {dt} overflow the byte size")))
    }
}

/// Check every tensor of one file against its data section: aligned offsets, data inside the
/// file, no overlaps. Tensors of unknown type cannot be sized; for them only the offset is
/// checked (aligned and inside the data section) and their data is never handed out.
pub(crate) fn check_layout(
    tensors: &[TensorInfo],
    alignment: u64,
    data_len: u64,
) -> Result<(), GgufError> {
    let mut extents = Vec::with_capacity(tensors.len());
    for t in tensors {
        if t.offset % alignment != 0 {
            return Err(GgufError::Misaligned {
                tensor: t.name.clone(),
                offset: t.offset,
                alignment,
            });
        }
        let size = match t.size_bytes() {
            Ok(size) => size,
            Err(GgufError::UnknownTensorType { .. }) => 0,
            Err(e) => return Err(e),
        };
        let end = t.offset.checked_add(size);
        match end {
            Some(end) if end <= data_len => {
                if size > 0 {
                    extents.push((t.offset, end, &t.name));
                }
            }
            _ => {
                return Err(GgufError::OutOfBounds {
                    tensor: t.name.clone(),
                    start: t.offset,
                    end: end.unwrap_or(u64::MAX),
                    data_len,
                })
            }
        }
    }
    // Legit writers never overlap tensors; an overlap means a corrupt offset table.
    extents.sort_unstable();
    for w in extents.windows(2) {
        if w[1].0 < w[0].1 {
            return Err(GgufError::Overlap(w[0].2.clone(), w[1].2.clone()));
        }
    }
    Ok(())
}
