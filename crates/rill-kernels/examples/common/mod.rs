//! What the kernel benchmarks share.

use std::path::PathBuf;

use rill_dtype::DType;

/// A `rows × cols` matrix of `dtype` built from blocks of the committed test
/// fixtures, drawn with a fixed seed.
pub fn matrix(dtype: DType, rows: usize, cols: usize) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(format!("{}.bin", dtype.name()));
    let raw = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let bb = dtype.block_bytes();
    let blocks = raw.len() / bb;
    let need = rows * cols / dtype.block_len();
    let mut s = 0x1234_5678u64;
    let mut out = Vec::with_capacity(need * bb);
    for _ in 0..need {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let b = (s >> 33) as usize % blocks;
        out.extend_from_slice(&raw[b * bb..(b + 1) * bb]);
    }
    // The fixtures hold extreme values (subnormals, huge scales) that would
    // time the CPU's slow paths, not the kernels: use realistic ones.
    match dtype {
        DType::F32 | DType::F16 | DType::BF16 => {
            for (i, e) in out.chunks_exact_mut(bb).enumerate() {
                let v = ((i * 7919 % 2001) as f32 - 1000.0) * 1e-4;
                let bits = match dtype {
                    DType::F32 => v.to_bits().to_le_bytes().to_vec(),
                    DType::F16 => half::f16::from_f32(v).to_bits().to_le_bytes().to_vec(),
                    _ => half::bf16::from_f32(v).to_bits().to_le_bytes().to_vec(),
                };
                e.copy_from_slice(&bits);
            }
        }
        DType::MXFP4 => {
            for (i, blk) in out.chunks_exact_mut(bb).enumerate() {
                blk[0] = 118 + (i % 8) as u8;
            }
        }
        _ => {}
    }
    out
}
