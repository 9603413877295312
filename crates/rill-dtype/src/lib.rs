//! The encodings a weight tensor can have on disk, and their block geometry.
//!
//! Both the file readers (which must size tensors to bounds-check them) and the
//! kernels (which decode them) need these facts, and neither should depend on
//! the other, so they live in this tiny crate.

use std::fmt;

/// A tensor element encoding, rill's own: a file format maps its type ids to
/// these (GGUF's ggml ids live in `rill-gguf`), so a new format adds its
/// encodings here without taking another format's numbering.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    Q8K,
    IQ2XXS,
    IQ2XS,
    IQ3XXS,
    IQ1S,
    IQ4NL,
    IQ3S,
    IQ2S,
    IQ4XS,
    I8,
    I16,
    I32,
    I64,
    F64,
    IQ1M,
    BF16,
    TQ1_0,
    TQ2_0,
    MXFP4,
    /// GGUF's NVFP4: blocks of 64 values, four unsigned-E4M3 scales (one
    /// per 16) then 32 bytes of E2M1 codes; a tensor's global scale is a
    /// separate `.scale` tensor (llama.cpp's converter of NVFP4 checkpoints).
    NVFP4,
    /// FP8 E4M3 (OCP "FN": no infinities, 0x7F/0xFF NaN), one byte per
    /// value: Hugging Face FP8 checkpoints, with block scales stored apart.
    F8E4M3,
    /// FP4 E2M1 codes two per byte, the low nibble first: NVFP4
    /// checkpoints (ModelOpt, compressed-tensors), with per-16 scales
    /// stored apart. Not GGUF's NVFP4 blocks (scales inside, another order).
    E2M1,
    /// Q6_K with its 6-bit codes rearranged at load for the AVX2 integer
    /// kernels (no file has it): the same 210-byte blocks, scales and `d`
    /// where Q6_K has them, but each half's 128 codes as three 32-byte
    /// planes — code `32k + l` (k < 3) in the low 6 bits of byte `32k + l`,
    /// and the three 2-bit parts of code `96 + l` in the bytes' top bits —
    /// so taking a code out is one mask (see `rill_kernels::layout`).
    Q6KPlanar,
    /// Q4_K with every 8 consecutive rows interleaved block by block, made
    /// at load for the AVX2 integer kernels (no file has it): a matrix's
    /// bytes and a row's length are Q4_K's, but block `b` of rows `8g..8g +
    /// 8` lies at `(8g · row_bytes) + 1152·b` as one 1152-byte block of the
    /// 8 rows — so one vector load holds 4 quant bytes of each of the 8
    /// rows (see `rill_kernels::layout`). A row's bytes are not contiguous:
    /// [`DType::interleaved_rows`].
    Q4KX8,
    /// Q6_K with every 8 consecutive rows interleaved block by block as
    /// [`DType::Q4KX8`] (1680-byte blocks of 8 rows), each row's codes in
    /// [`DType::Q6KPlanar`]'s planes; made at load, no file has it.
    Q6KX8,
}

/// Encodings rill makes at load for its kernels (no file has them); not in
/// [`ALL`].
pub const LOAD_ONLY: [DType; 3] = [DType::Q6KPlanar, DType::Q4KX8, DType::Q6KX8];

/// Encodings only Hugging Face checkpoints use (GGUF has no type id for
/// them); not in [`ALL`].
pub const CHECKPOINT_ONLY: [DType; 2] = [DType::F8E4M3, DType::E2M1];

/// Every known encoding of GGUF files, for iteration.
pub const ALL: [DType; 33] = [
    DType::F32,
    DType::F16,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
    DType::Q8_1,
    DType::Q2K,
    DType::Q3K,
    DType::Q4K,
    DType::Q5K,
    DType::Q6K,
    DType::Q8K,
    DType::IQ2XXS,
    DType::IQ2XS,
    DType::IQ3XXS,
    DType::IQ1S,
    DType::IQ4NL,
    DType::IQ3S,
    DType::IQ2S,
    DType::IQ4XS,
    DType::I8,
    DType::I16,
    DType::I32,
    DType::I64,
    DType::F64,
    DType::IQ1M,
    DType::BF16,
    DType::TQ1_0,
    DType::TQ2_0,
    DType::MXFP4,
    DType::NVFP4,
];

impl DType {
    /// Elements per block (1 for plain element types).
    pub fn block_len(self) -> usize {
        use DType::*;
        match self {
            F32 | F16 | BF16 | F64 | I8 | I16 | I32 | I64 | F8E4M3 => 1,
            E2M1 => 2,
            Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q8_1 | IQ4NL | MXFP4 => 32,
            Q2K | Q3K | Q4K | Q4KX8 | Q5K | Q6K | Q6KPlanar | Q6KX8 | Q8K | IQ2XXS | IQ2XS
            | IQ3XXS | IQ1S | IQ3S | IQ2S | IQ4XS | IQ1M | TQ1_0 | TQ2_0 => 256,
            NVFP4 => 64,
        }
    }

    /// Rows a matrix of this encoding stores together (1: row by row): its
    /// row count is a multiple of it, and a slice of its rows starts at one.
    pub fn interleaved_rows(self) -> usize {
        match self {
            DType::Q4KX8 | DType::Q6KX8 => 8,
            _ => 1,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        use DType::*;
        match self {
            F32 | I32 => 4,
            F16 | BF16 | I16 => 2,
            F64 | I64 => 8,
            I8 | F8E4M3 | E2M1 => 1,
            Q4_0 => 18,
            Q4_1 => 20,
            Q5_0 => 22,
            Q5_1 => 24,
            Q8_0 => 34,
            Q8_1 => 36,
            Q2K => 84,
            Q3K => 110,
            Q4K | Q4KX8 => 144,
            Q5K => 176,
            Q6K | Q6KPlanar | Q6KX8 => 210,
            Q8K => 292,
            IQ2XXS => 66,
            IQ2XS => 74,
            IQ3XXS => 98,
            IQ1S => 50,
            IQ4NL => 18,
            IQ3S => 110,
            IQ2S => 82,
            IQ4XS => 136,
            IQ1M => 56,
            TQ1_0 => 54,
            TQ2_0 => 66,
            MXFP4 => 17,
            NVFP4 => 36,
        }
    }

    /// Bytes taken by `n` elements, or `None` when `n` is not a whole number of
    /// blocks (or the size overflows).
    pub fn bytes_for(self, n: u64) -> Option<u64> {
        let bl = self.block_len() as u64;
        if !n.is_multiple_of(bl) {
            return None;
        }
        (n / bl).checked_mul(self.block_bytes() as u64)
    }

    /// The name llama.cpp uses (`Q4_K`, `IQ4_XS`, ...).
    pub fn name(self) -> &'static str {
        use DType::*;
        match self {
            F32 => "F32",
            F16 => "F16",
            Q4_0 => "Q4_0",
            Q4_1 => "Q4_1",
            Q5_0 => "Q5_0",
            Q5_1 => "Q5_1",
            Q8_0 => "Q8_0",
            Q8_1 => "Q8_1",
            Q2K => "Q2_K",
            Q3K => "Q3_K",
            Q4K => "Q4_K",
            Q5K => "Q5_K",
            Q6K => "Q6_K",
            Q8K => "Q8_K",
            IQ2XXS => "IQ2_XXS",
            IQ2XS => "IQ2_XS",
            IQ3XXS => "IQ3_XXS",
            IQ1S => "IQ1_S",
            IQ4NL => "IQ4_NL",
            IQ3S => "IQ3_S",
            IQ2S => "IQ2_S",
            IQ4XS => "IQ4_XS",
            I8 => "I8",
            I16 => "I16",
            I32 => "I32",
            I64 => "I64",
            F64 => "F64",
            IQ1M => "IQ1_M",
            BF16 => "BF16",
            TQ1_0 => "TQ1_0",
            TQ2_0 => "TQ2_0",
            MXFP4 => "MXFP4",
            NVFP4 => "NVFP4",
            F8E4M3 => "F8_E4M3",
            E2M1 => "E2M1",
            Q6KPlanar => "Q6_K (planar)",
            Q4KX8 => "Q4_K (8 rows interleaved)",
            Q6KX8 => "Q6_K (8 rows interleaved)",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique() {
        let mut names: Vec<&str> = ALL
            .iter()
            .chain(&CHECKPOINT_ONLY)
            .chain(&LOAD_ONLY)
            .map(|t| t.name())
            .collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(
            names.len(),
            ALL.len() + CHECKPOINT_ONLY.len() + LOAD_ONLY.len()
        );
    }

    #[test]
    fn sizes_follow_block_geometry() {
        assert_eq!(DType::Q4K.bytes_for(512), Some(288));
        assert_eq!(DType::Q8_0.bytes_for(64), Some(68));
        assert_eq!(DType::F32.bytes_for(3), Some(12));
        assert_eq!(DType::Q8_0.bytes_for(33), None);
        assert_eq!(DType::Q8_0.bytes_for(u64::MAX / 32 * 32), None, "overflow");
    }
}
