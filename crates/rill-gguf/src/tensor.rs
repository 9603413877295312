//! Tensor infos and the checks that tie them to the data section.

use crate::GgufError;
use rill_dtype::DType;

/// GGUF's type ids (ggml's `enum ggml_type`) of the encodings rill knows.
const GGML_IDS: [(u32, DType); 33] = [
    (0, DType::F32),
    (1, DType::F16),
    (2, DType::Q4_0),
    (3, DType::Q4_1),
    (6, DType::Q5_0),
    (7, DType::Q5_1),
    (8, DType::Q8_0),
    (9, DType::Q8_1),
    (10, DType::Q2K),
    (11, DType::Q3K),
    (12, DType::Q4K),
    (13, DType::Q5K),
    (14, DType::Q6K),
    (15, DType::Q8K),
    (16, DType::IQ2XXS),
    (17, DType::IQ2XS),
    (18, DType::IQ3XXS),
    (19, DType::IQ1S),
    (20, DType::IQ4NL),
    (21, DType::IQ3S),
    (22, DType::IQ2S),
    (23, DType::IQ4XS),
    (24, DType::I8),
    (25, DType::I16),
    (26, DType::I32),
    (27, DType::I64),
    (28, DType::F64),
    (29, DType::IQ1M),
    (30, DType::BF16),
    (34, DType::TQ1_0),
    (35, DType::TQ2_0),
    (39, DType::MXFP4),
    (40, DType::NVFP4),
];

/// The encoding of ggml type id `id`, if rill knows it.
pub fn dtype_of_ggml_id(id: u32) -> Option<DType> {
    GGML_IDS.iter().find(|(i, _)| *i == id).map(|&(_, t)| t)
}

/// The ggml type id of an encoding, if GGUF has one for it.
pub fn ggml_id_of(dtype: DType) -> Option<u32> {
    GGML_IDS.iter().find(|(_, t)| *t == dtype).map(|&(i, _)| i)
}

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
        dtype_of_ggml_id(self.ggml_type).ok_or_else(|| GgufError::UnknownTensorType {
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

#[cfg(test)]
mod ggml_id_tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_are_unique() {
        for t in rill_dtype::ALL {
            let id = ggml_id_of(t).expect("every known encoding has a GGUF id");
            assert_eq!(dtype_of_ggml_id(id), Some(t));
        }
        assert_eq!(dtype_of_ggml_id(31), None, "31 was a removed repacked type");
        assert_eq!(dtype_of_ggml_id(1000), None);
    }
}
