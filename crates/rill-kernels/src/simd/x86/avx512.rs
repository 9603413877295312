//! AVX-512 kernels for the hottest encodings (others fall back to AVX2).

use rill_dtype::DType;

/// # Safety
/// The CPU must have AVX-512F/BW/VL plus AVX2+FMA+F16C.
pub(super) unsafe fn dot(_dtype: DType, _row: &[u8], _x: &[f32]) -> Option<f32> {
    None
}
