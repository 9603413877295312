//! Separate scale tensors ([`Scales`]) multiplied into a decoded row: the
//! block scales of FP8 checkpoints and the per-16 scales (times a global
//! one) of NVFP4 checkpoints, read where they lie in the file.
//!
//! The products are the ones the checkpoints define and transformers'
//! dequantization computes in f32: `code · scale` for FP8 tiles,
//! `(code · scale) · global` for NVFP4 groups.

use crate::quant::fp8::E4M3;
use crate::simd::Isa;
use crate::{MatRef, Scales};
use rill_dtype::DType;

/// Scale `i` of a row of scales stored as `dtype`.
#[inline(always)]
pub(crate) fn scale_at(data: &[u8], dtype: DType, i: usize) -> f32 {
    match dtype {
        DType::F32 => f32::from_le_bytes(data[4 * i..4 * i + 4].try_into().unwrap()),
        DType::BF16 => {
            f32::from_bits((u16::from_le_bytes([data[2 * i], data[2 * i + 1]]) as u32) << 16)
        }
        DType::F16 => {
            half::f16::from_bits(u16::from_le_bytes([data[2 * i], data[2 * i + 1]])).to_f32()
        }
        DType::F8E4M3 => E4M3[data[i] as usize],
        other => panic!("rill-kernels: scales stored as {other}"),
    }
}

/// Row `r` of `w` (a matrix with separate scales) decoded with them into
/// `out` by a SIMD kernel of `isa`, the values [`apply`] gives after the
/// scalar decoder. `false`: no such kernel (nothing written).
pub(crate) fn dequantize_row_with(isa: Isa, w: &MatRef<'_>, r: usize, out: &mut [f32]) -> bool {
    if matches!(w.scales, Scales::None | Scales::Rows { .. }) || r >= w.rows || out.len() != w.cols
    {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    if isa != Isa::Scalar {
        isa.check();
        // SAFETY: the CPU runs `isa` (checked), every x86 class has
        // AVX2+FMA+F16C; `r` and `out` are in range (checked above).
        return unsafe { crate::simd::x86::dequantize_scaled_row(w, r, out) };
    }
    let _ = isa;
    false
}

/// Multiply row `r`'s scales into its decoded values `out`.
pub(crate) fn apply(scales: Scales<'_>, r: usize, out: &mut [f32]) {
    match scales {
        Scales::None => {}
        Scales::Rows { .. } => {
            let f = scales.row_factor(r).unwrap_or(1.0);
            out.iter_mut().for_each(|v| *v *= f);
        }
        Scales::Tiles {
            data,
            dtype,
            tile_rows,
            tile_cols,
            row0,
        } => {
            let per_row = out.len().div_ceil(tile_cols);
            let bb = dtype.block_bytes();
            let t = (row0 + r) / tile_rows;
            let row = &data[t * per_row * bb..(t + 1) * per_row * bb];
            for (i, chunk) in out.chunks_mut(tile_cols).enumerate() {
                let s = scale_at(row, dtype, i);
                chunk.iter_mut().for_each(|v| *v *= s);
            }
        }
        Scales::Groups {
            data,
            dtype,
            group,
            global,
        } => {
            let per_row = out.len().div_ceil(group);
            let bb = dtype.block_bytes();
            let row = &data[r * per_row * bb..(r + 1) * per_row * bb];
            for (i, chunk) in out.chunks_mut(group).enumerate() {
                let s = scale_at(row, dtype, i);
                chunk.iter_mut().for_each(|v| *v = (*v * s) * global);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{MatRef, Scales};
    use rill_dtype::DType;

    /// A 5 × 3 FP8 matrix with 2 × 2 tiles (the last tile row and column
    /// partial), decoded whole and as a view cut inside a tile.
    #[test]
    fn tiles_scale_their_rows_and_columns_even_when_partial() {
        let codes = [0x38u8; 15]; // 1.0 each
        let scales: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let m = MatRef {
            scales: Scales::Tiles {
                data: &scales,
                dtype: DType::F32,
                tile_rows: 2,
                tile_cols: 2,
                row0: 0,
            },
            ..MatRef::new(DType::F8E4M3, 5, 3, &codes)
        };
        let mut row = [0f32; 3];
        let want = [
            [1.0, 1.0, 2.0],
            [1.0, 1.0, 2.0],
            [3.0, 3.0, 4.0],
            [3.0, 3.0, 4.0],
            [5.0, 5.0, 6.0],
        ];
        for (r, w) in want.iter().enumerate() {
            m.dequantize_row(crate::simd::Isa::Scalar, r, &mut row);
            assert_eq!(&row, w, "row {r}");
        }
        let cut = m.slice_rows(1, 4);
        for (r, w) in want[1..4].iter().enumerate() {
            cut.dequantize_row(crate::simd::Isa::Scalar, r, &mut row);
            assert_eq!(&row, w, "view row {r}");
        }
    }

    #[test]
    fn groups_multiply_their_scale_then_the_global_one() {
        // one row of 4 E2M1 codes (1, 6, -6, -0.5), groups of 2, E4M3 scales 2 and 1.5
        let m = MatRef {
            scales: Scales::Groups {
                data: &[0x40, 0x3C],
                dtype: DType::F8E4M3,
                group: 2,
                global: 0.25,
            },
            ..MatRef::new(DType::E2M1, 1, 4, &[0x72, 0x9F])
        };
        let mut row = [0f32; 4];
        m.dequantize_row(crate::simd::Isa::Scalar, 0, &mut row);
        assert_eq!(row, [0.5, 3.0, -2.25, -0.1875]);
    }
}
