//! Q6_K → [`rill_dtype::DType::Q6KX8`]: 8 rows interleaved block by block,
//! each row's codes in the planar form of `q6k_planar`.
//!
//! As `q4k_x8` for Q4_K: the AVX2 integer kernels keep 8 rows in the
//! lanes of a vector (one `vpmaddubsw` per 4-value group of the 8 rows, a
//! `vpmaddwd` per two of them), reading the matrix where it lies. Block `b`
//! of rows `8g..8g + 8` is 1680 bytes at `8g · row_bytes + 1680 b`:
//!
//! ```text
//!     0..16    d of rows 0..7 (f16)
//!    16..144   scales: 4 vectors; vector q holds sub-block 4q + j of row
//!              4L + i (i8) at byte 16L + 4j + i
//!   144..1680  codes: 48 vectors; vector 24h + 8p + k holds, at bytes
//!              4r..4r + 4, bytes 4k..4k + 4 of plane p of half h of row r's
//!              planar block
//! ```
//!
//! so that the planar unpack works on a vector of 8 rows as on one row's,
//! and one in-lane `vpshufb` puts a sub-block's 8 scales where a `vpmaddwd`
//! wants them. Same bytes as Q6_K, every bit kept.

use super::q6k_planar::{planes, to_q6k};

/// Rows of a group.
const ROWS: usize = 8;
/// Bytes of a Q6_K block.
const BLOCK: usize = 210;
/// Bytes of one block of a group of 8 rows.
pub(crate) const GROUP_BYTES: usize = ROWS * BLOCK;

/// Position in a scale vector of sub-block `j` (mod 4) of row `r`.
const fn s_at(j: usize, r: usize) -> usize {
    16 * (r / 4) + 4 * (j % 4) + r % 4
}

/// Where word `v` (4 bytes) of row `r`'s 192 planar bytes lies in a block.
const fn code_at(v: usize, r: usize) -> usize {
    144 + 32 * v + 4 * r
}

/// Interleave `bytes` (whole groups of 8 rows of `row_bytes`) in place;
/// `false` (nothing written) when they are not whole groups of whole blocks.
pub(super) fn rewrite(row_bytes: usize, bytes: &mut [u8]) -> bool {
    super::interleave_groups(row_bytes, BLOCK, bytes, interleave)
}

/// One block of 8 rows (`blocks[r]`: row r's Q6_K block) as the layout's.
fn interleave(blocks: [&[u8]; ROWS], out: &mut [u8]) {
    let out: &mut [u8; GROUP_BYTES] = out.try_into().expect("a group's block");
    for (r, blk) in blocks.into_iter().enumerate() {
        let blk: &[u8; BLOCK] = blk.try_into().expect("a Q6_K block");
        out[2 * r..2 * r + 2].copy_from_slice(&blk[208..210]);
        for j in 0..16 {
            out[16 + 32 * (j / 4) + s_at(j, r)] = blk[192 + j];
        }
        let p = planes(blk[..192].try_into().expect("192 bytes"));
        for (v, word) in p.chunks_exact(4).enumerate() {
            out[code_at(v, r)..][..4].copy_from_slice(word);
        }
    }
}

/// Row `r`'s Q6_K block (of 8) from one interleaved block `g` (1680 bytes).
pub(crate) fn block_of(g: &[u8], r: usize) -> [u8; BLOCK] {
    let mut planar = [0u8; BLOCK];
    for v in 0..48 {
        planar[4 * v..4 * v + 4].copy_from_slice(&g[code_at(v, r)..][..4]);
    }
    for j in 0..16 {
        planar[192 + j] = g[16 + 32 * (j / 4) + s_at(j, r)];
    }
    planar[208..210].copy_from_slice(&g[2 * r..2 * r + 2]);
    to_q6k(&planar)
}
