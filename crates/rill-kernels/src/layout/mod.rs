//! Weight layouts rewritten at load for a kernel class.
//!
//! A file's encoding is what its writer chose; some kernels read another
//! arrangement of the same bits faster. [`load_layout`] says which encoding
//! a matrix is best held in for a run (kernel class and precision), and
//! [`rewrite`] turns a file's blocks into it in place (the loader copies a
//! matrix once, rewrites it and lets the file's pages go, so the model never
//! holds two copies). The values are unchanged: every kernel decodes a
//! rewritten block to the same numbers as the original, and the bytes of a
//! matrix and of a row stay the same in number.
//!
//! * Q6_K → [`DType::Q6KPlanar`] (`q6k_planar`): each block's codes in
//!   planes that one mask takes apart.
//! * Q4_K → [`DType::Q4KX8`] (`q4k_x8`): every 8 rows interleaved block by
//!   block, so that the integer kernels keep 8 rows in the lanes of a
//!   vector with no rewrite per product.

mod q4k_x8;
mod q6k_planar;

pub use q4k_x8::row_blocks as q4k_x8_row;
pub(crate) use q4k_x8::{block_of as q4k_x8_block, GROUP_BYTES as Q4K_X8_BYTES};
pub use q6k_planar::decode_q6k_planar;
pub(crate) use q6k_planar::to_q6k;

use crate::{Isa, Precision};
use rill_dtype::DType;

/// The encoding a matrix stored as `dtype` is best held in for a run on
/// kernel class `isa` at `precision`, when it differs from `dtype`.
/// `granule`: the rows every slice of the matrix the model takes starts at
/// a multiple of (an expert's rows in a stacked tensor; the whole matrix
/// when it is used whole): an interleaved layout needs its groups whole.
///
/// Only the integer kernels of the AVX2 classes read a rewritten layout
/// faster; the exact kernels, and every other class, read the file's.
pub fn load_layout(isa: Isa, precision: Precision, dtype: DType, granule: usize) -> Option<DType> {
    let integer_avx2 = matches!(isa, Isa::Avx2 | Isa::AvxVnni) && precision == Precision::Q8;
    if !integer_avx2 {
        return None;
    }
    match dtype {
        DType::Q6K => Some(DType::Q6KPlanar),
        DType::Q4K if granule > 0 && granule.is_multiple_of(DType::Q4KX8.interleaved_rows()) => {
            Some(DType::Q4KX8)
        }
        _ => None,
    }
}

/// The bytes a rewrite from `from` to `to` works in whole units of, for
/// rows of `row_bytes`: a block, or a group of interleaved rows.
pub fn unit_bytes(to: DType, row_bytes: usize) -> usize {
    match to.interleaved_rows() {
        1 => to.block_bytes(),
        n => n * row_bytes,
    }
}

/// Rewrite `bytes` (whole rows of `row_bytes`; whole [`unit_bytes`]) from
/// `from` into `to` in place; `false` (nothing written) when `to` is not a
/// layout of `from` or the bytes are not whole units.
pub fn rewrite(from: DType, to: DType, row_bytes: usize, bytes: &mut [u8]) -> bool {
    match (from, to) {
        (DType::Q6K, DType::Q6KPlanar) => q6k_planar::rewrite(bytes),
        (DType::Q4K, DType::Q4KX8) => q4k_x8::rewrite(row_bytes, bytes),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_are_chosen_for_avx2_integer_kernels_only() {
        use Precision::{Exact, Q8};
        assert_eq!(
            load_layout(Isa::Avx2, Q8, DType::Q6K, 1),
            Some(DType::Q6KPlanar)
        );
        assert_eq!(
            load_layout(Isa::AvxVnni, Q8, DType::Q4K, 512),
            Some(DType::Q4KX8)
        );
        assert_eq!(load_layout(Isa::Avx2, Exact, DType::Q6K, 1), None);
        assert_eq!(load_layout(Isa::Avx2, Exact, DType::Q4K, 512), None);
        assert_eq!(load_layout(Isa::Scalar, Q8, DType::Q6K, 1), None);
        assert_eq!(load_layout(Isa::Scalar, Q8, DType::Q4K, 8), None);
        assert_eq!(load_layout(Isa::Avx2, Q8, DType::Q5K, 8), None);
        // Slices that would cut a group of 8 rows keep Q4_K.
        assert_eq!(load_layout(Isa::Avx2, Q8, DType::Q4K, 12), None);
        assert_eq!(load_layout(Isa::Avx2, Q8, DType::Q4K, 0), None);
    }
}
