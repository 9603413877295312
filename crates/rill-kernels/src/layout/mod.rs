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
//! * Q6_K → [`DType::Q6KX8`] (`q6k_x8`): the same for Q6_K, each row's codes
//!   planar; a matrix sliced inside its groups of 8 rows stays planar.

mod q4k_x8;
mod q6k_planar;
mod q6k_x8;

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
    let whole_groups = granule > 0 && granule.is_multiple_of(8);
    match dtype {
        DType::Q6K if whole_groups => Some(DType::Q6KX8),
        DType::Q6K => Some(DType::Q6KPlanar),
        DType::Q4K if whole_groups => Some(DType::Q4KX8),
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

/// The file encoding an interleaved layout ([`DType::interleaved_rows`])
/// was made from.
pub fn interleaved_source(dtype: DType) -> Option<DType> {
    match dtype {
        DType::Q4KX8 => Some(DType::Q4K),
        DType::Q6KX8 => Some(DType::Q6K),
        _ => None,
    }
}

/// Row `r`'s block `b` of an interleaved matrix (`data` from its first
/// row, rows of `row_bytes`), as the block of the source encoding it was
/// made from (in the first bytes of the array).
pub(crate) fn source_block(
    dtype: DType,
    data: &[u8],
    row_bytes: usize,
    r: usize,
    b: usize,
) -> [u8; 210] {
    let group = &data[r / 8 * 8 * row_bytes..];
    let mut out = [0u8; 210];
    match dtype {
        DType::Q4KX8 => {
            let g = &group[b * q4k_x8::GROUP_BYTES..][..q4k_x8::GROUP_BYTES];
            out[..144].copy_from_slice(&q4k_x8::block_of(g, r % 8));
        }
        DType::Q6KX8 => {
            let g = &group[b * q6k_x8::GROUP_BYTES..][..q6k_x8::GROUP_BYTES];
            out = q6k_x8::block_of(g, r % 8);
        }
        _ => unreachable!("{dtype} is not an interleaved layout"),
    }
    out
}

/// Row `r` of an interleaved matrix (`data` from its first row, rows of
/// `row_bytes`) as the row of the source encoding it was made from, into
/// `out` (`row_bytes`).
pub fn source_row(dtype: DType, data: &[u8], row_bytes: usize, r: usize, out: &mut [u8]) {
    let bb = interleaved_source(dtype).map_or(0, DType::block_bytes);
    for (b, dst) in out[..row_bytes].chunks_exact_mut(bb.max(1)).enumerate() {
        dst.copy_from_slice(&source_block(dtype, data, row_bytes, r, b)[..bb]);
    }
}

/// Rewrite `bytes` (whole groups of 8 rows of `row_bytes`, whole blocks of
/// `block` bytes) in place, each block of a group by `interleave` (the 8
/// rows' blocks, then the group's block to write); `false` (nothing
/// written) when they are not whole groups of whole blocks.
fn interleave_groups(
    row_bytes: usize,
    block: usize,
    bytes: &mut [u8],
    interleave: fn([&[u8]; 8], &mut [u8]),
) -> bool {
    let group = 8 * row_bytes;
    if row_bytes == 0 || !row_bytes.is_multiple_of(block) || !bytes.len().is_multiple_of(group) {
        return false;
    }
    let mut rows = vec![0u8; group];
    for g in bytes.chunks_exact_mut(group) {
        rows.copy_from_slice(g);
        for (b, out) in g.chunks_exact_mut(8 * block).enumerate() {
            interleave(
                std::array::from_fn(|r| &rows[r * row_bytes + b * block..][..block]),
                out,
            );
        }
    }
    true
}

/// Rewrite `bytes` (whole rows of `row_bytes`; whole [`unit_bytes`]) from
/// `from` into `to` in place; `false` (nothing written) when `to` is not a
/// layout of `from` or the bytes are not whole units.
pub fn rewrite(from: DType, to: DType, row_bytes: usize, bytes: &mut [u8]) -> bool {
    match (from, to) {
        (DType::Q6K, DType::Q6KPlanar) => q6k_planar::rewrite(bytes),
        (DType::Q4K, DType::Q4KX8) => q4k_x8::rewrite(row_bytes, bytes),
        (DType::Q6K, DType::Q6KX8) => q6k_x8::rewrite(row_bytes, bytes),
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
            load_layout(Isa::Avx2, Q8, DType::Q6K, 16),
            Some(DType::Q6KX8)
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

    /// Every row of an interleaved layout comes back as the file's bytes,
    /// random blocks and blocks of bound values (Q4_K's 6-bit scales and
    /// mins all 63, or 0).
    #[test]
    fn every_row_of_an_interleaved_layout_comes_back_bit_for_bit() {
        let mut rnd = crate::test_util::xorshift(0x48_0F_88);
        for (from, to) in [(DType::Q4K, DType::Q4KX8), (DType::Q6K, DType::Q6KX8)] {
            let rb = 3 * from.block_bytes();
            let random: Vec<u8> = (0..16 * rb).map(|_| rnd() as u8).collect();
            for file in [random, vec![0xFF; 8 * rb], vec![0; 8 * rb]] {
                let mut x8 = file.clone();
                assert!(rewrite(from, to, rb, &mut x8));
                let mut row = vec![0u8; rb];
                for r in 0..file.len() / rb {
                    source_row(to, &x8, rb, r, &mut row);
                    assert_eq!(row, file[r * rb..(r + 1) * rb], "{to} row {r}");
                }
            }
        }
    }

    #[test]
    fn only_whole_groups_of_whole_blocks_are_interleaved() {
        for (from, to) in [(DType::Q4K, DType::Q4KX8), (DType::Q6K, DType::Q6KX8)] {
            let bb = from.block_bytes();
            let mut b = vec![7u8; 8 * bb];
            assert!(!rewrite(from, to, bb, &mut b[..7 * bb]));
            assert!(!rewrite(from, to, 100, &mut b[..800]));
            assert!(!rewrite(from, to, 0, &mut b));
            assert!(!rewrite(DType::Q5K, to, bb, &mut b));
            assert!(b.iter().all(|&v| v == 7), "{to}");
        }
    }
}
