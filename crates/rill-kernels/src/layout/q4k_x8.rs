//! Q4_K → [`rill_dtype::DType::Q4KX8`]: 8 rows interleaved block by block.
//!
//! The AVX2 integer kernels multiply 8 rows at once with each row in an
//! i32 lane (a 4-value group of the 8 rows is one `vpmaddubsw` against 4
//! activations broadcast, summed in i16 over a sub-block before one
//! `vpmaddwd` applies its scale: about half the multiplies of a kernel that
//! holds one row's values in a vector, whose sub-block sums each take a
//! `vpmaddwd`). On Q4_K's row-major blocks that needs a transpose of every
//! 8 rows before use, which prefill amortises over many tokens but a decode
//! step cannot. This layout stores the transposed form, so no product
//! rewrites anything. Block `b` of rows `8g..8g + 8` is 1152 bytes at
//! `8g · row_bytes + 1152 b`:
//!
//! ```text
//!    0..16    d of rows 0..7 (f16)          16..32   dmin of rows 0..7 (f16)
//!   32..64    low 4 bits: U0 | U1 << 4      64..96   low 4 bits: U2 | U3 << 4
//!   96..128   top 2 bits: U0 | U1 << 2 | U2 << 4 | U3 << 6   (each >> 4)
//!  128..1152  quants: 32 vectors; vector 8m + k holds, at bytes 4r..4r + 4,
//!             bytes 4k..4k + 4 of row r's 32-byte run m of quants
//! ```
//!
//! where `U0..U3` are 32-byte vectors of the 6-bit scales (U0: sub-blocks
//! 0-3, U1: 4-7) and mins (U2: 0-3, U3: 4-7), byte `16L + 4j + i` holding
//! sub-block `j` (+4) of row `4L + i`: so one in-lane `vpshufb` makes the
//! 8 rows' `(sc, sc)` pairs of a sub-block. Same bytes as Q4_K (the 6-bit
//! fields fill 96 bytes as Q4_K's 12 a row), every bit kept.

use crate::quant::k_quants::scale_min_k4;

/// Rows of a group.
const ROWS: usize = 8;
/// Bytes of a Q4_K block.
const BLOCK: usize = 144;
/// Bytes of one block of a group of 8 rows.
pub(crate) const GROUP_BYTES: usize = ROWS * BLOCK;

/// Position in a `U` vector of sub-block `j` (mod 4) of row `r`.
const fn u_at(j: usize, r: usize) -> usize {
    16 * (r / 4) + 4 * (j % 4) + r % 4
}

/// Interleave `bytes` (whole groups of 8 rows of `row_bytes`) in place;
/// `false` (nothing written) when they are not whole groups of whole blocks.
pub(super) fn rewrite(row_bytes: usize, bytes: &mut [u8]) -> bool {
    super::interleave_groups(row_bytes, BLOCK, bytes, interleave)
}

/// One block of 8 rows (`blocks[r]`: row r's Q4_K block) as the layout's.
/// (Gigabytes of them at load: the quants move as 32-bit words.)
fn interleave(blocks: [&[u8]; ROWS], out: &mut [u8]) {
    let out: &mut [u8; GROUP_BYTES] = out.try_into().expect("a group's block");
    let mut u = [[0u8; 32]; 4];
    for (r, blk) in blocks.into_iter().enumerate() {
        let blk: &[u8; BLOCK] = blk.try_into().expect("a Q4_K block");
        out[2 * r..2 * r + 2].copy_from_slice(&blk[0..2]);
        out[16 + 2 * r..16 + 2 * r + 2].copy_from_slice(&blk[2..4]);
        let scales: &[u8; 12] = blk[4..16].try_into().expect("12 bytes");
        for j in 0..8 {
            let (sc, m) = scale_min_k4(scales, j);
            u[j / 4][u_at(j, r)] = sc;
            u[2 + j / 4][u_at(j, r)] = m;
        }
        // Word v of the row's quants to word 8v + r of the quants' part.
        for (v, word) in blk[16..].chunks_exact(4).enumerate() {
            let at = 128 + 32 * v + 4 * r;
            out[at..at + 4].copy_from_slice(word);
        }
    }
    for p in 0..32 {
        out[32 + p] = u[0][p] & 15 | (u[1][p] & 15) << 4;
        out[64 + p] = u[2][p] & 15 | (u[3][p] & 15) << 4;
        out[96 + p] =
            u[0][p] >> 4 | (u[1][p] >> 4) << 2 | (u[2][p] >> 4) << 4 | (u[3][p] >> 4) << 6;
    }
}

/// Row `r`'s Q4_K block (of 8) from one interleaved block `g` (1152 bytes).
pub(crate) fn block_of(g: &[u8], r: usize) -> [u8; BLOCK] {
    let mut b = [0u8; BLOCK];
    b[0..2].copy_from_slice(&g[2 * r..2 * r + 2]);
    b[2..4].copy_from_slice(&g[16 + 2 * r..16 + 2 * r + 2]);
    let field = |v: usize, j: usize| {
        let p = u_at(j, r);
        let low = g[32 + 32 * (v / 2) + p] >> (4 * (v % 2)) & 15;
        let top = g[96 + p] >> (2 * v) & 3;
        low | top << 4
    };
    let sc: [u8; 8] = std::array::from_fn(|j| field(j / 4, j));
    let mn: [u8; 8] = std::array::from_fn(|j| field(2 + j / 4, j));
    // Q4_K's 12 bytes of 6-bit scales and mins (`scale_min_k4` read back).
    let s = &mut b[4..16];
    for j in 0..4 {
        s[j] = sc[j] | (sc[j + 4] >> 4) << 6;
        s[j + 4] = mn[j] | (mn[j + 4] >> 4) << 6;
        s[j + 8] = sc[j + 4] & 15 | (mn[j + 4] & 15) << 4;
    }
    for m in 0..4 {
        for k in 0..8 {
            let at = 128 + 32 * (8 * m + k) + 4 * r;
            b[16 + 32 * m + 4 * k..][..4].copy_from_slice(&g[at..at + 4]);
        }
    }
    b
}
