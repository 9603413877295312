//! Decoding of quantized weight blocks (interface stub; the implementation lands next).
use rill_dtype::DType;

/// Whether the kernels can decode `dtype`.
pub fn is_supported(_dtype: DType) -> bool {
    todo!()
}

/// Decode `dst.len()` elements (a whole number of blocks) from `src`.
pub fn dequantize(_dtype: DType, _src: &[u8], _dst: &mut [f32]) {
    todo!()
}

/// Dot product of one encoded row (`x.len()` elements) with f32 activations,
/// decoding block by block (no whole-row f32 copy).
pub fn dot(_dtype: DType, _row: &[u8], _x: &[f32]) -> f32 {
    todo!()
}
