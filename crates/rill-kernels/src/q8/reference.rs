//! The scalar reference of the 8-bit-activation products: the canonical
//! order of the module doc, written out plainly. The SIMD kernels are
//! tested bit for bit against it.

use super::ActRow;
use crate::quant::fp8::E4M3;
use crate::quant::iq4::IQ4_NL_VALUES;
use crate::quant::iq_grid::int_block;
use crate::quant::k_quants::scale_min_k4;
use crate::quant::mxfp4::{e8m0_to_f32_half, E2M1_DOUBLED};
use crate::quant::nvfp4::ue4m3_to_f32;
use crate::quant::{f16_at, QK_K};
use rill_dtype::DType;

/// One weight row (`dtype`-encoded) · one quantized activation row.
/// Panics for encodings without integer kernels.
pub fn dot_ref(dtype: DType, row: &[u8], a: ActRow<'_>) -> f32 {
    if dtype == DType::NVFP4 {
        // Scales per 16 values: the groups' order, not one term per block.
        return dot_nvfp4_gguf_ref(row, a);
    }
    let mut p = [0f32; 8];
    let (bb, bl) = (dtype.block_bytes(), dtype.block_len());
    for (b, block) in row.chunks_exact(bb).enumerate() {
        let x = &a.qs[b * bl..(b + 1) * bl];
        let dx = a.d[b];
        let t = match dtype {
            DType::Q8_0 => term_q8_0(block, x, dx),
            DType::Q4K => term_q4_k(block, x, dx, &a.sums[16 * b..16 * b + 16]),
            DType::Q5K => term_q5_k(block, x, dx, &a.sums[16 * b..16 * b + 16]),
            DType::Q6K => term_q6_k(block, x, dx, &a.sums[16 * b..16 * b + 16]),
            DType::Q6KPlanar => {
                let q6k = crate::layout::to_q6k(block);
                term_q6_k(&q6k, x, dx, &a.sums[16 * b..16 * b + 16])
            }
            DType::IQ4XS => term_iq4_xs(block, x, dx),
            DType::IQ2XXS
            | DType::IQ2XS
            | DType::IQ2S
            | DType::IQ3XXS
            | DType::IQ3S
            | DType::IQ1S
            | DType::IQ1M => term_codebook(dtype, block, x, dx),
            DType::Q4_0 | DType::IQ4NL | DType::Q5_0 => {
                term_q8_0(&widen_to_q8_0(dtype, block), x, dx)
            }
            DType::MXFP4 => term_mxfp4(block, x, dx),
            DType::Q4_1 | DType::Q5_1 => {
                let s32 = a.sums[2 * b] as i32 + a.sums[2 * b + 1] as i32;
                term_affine(dtype, block, x, dx, s32)
            }
            _ => panic!("rill-kernels: no 8-bit-activation kernel for {dtype}"),
        };
        p[b % 8] += t;
    }
    sum_partials(&p)
}

/// One NVFP4 row (`codes`: E2M1 codes two a byte, low nibble first;
/// `scales`: its E4M3 scale per 16 values; `global`) · one activation row
/// in the B32 format. Per group `g` of 16 values: `i = Σ 2E(w)·q` (twice
/// the level is an integer), term `(s_g · d_x) · f(i)` into `p[g mod 8]`;
/// the tree, then times `global / 2`.
pub fn dot_nvfp4_ref(codes: &[u8], scales: &[u8], global: f32, a: ActRow<'_>) -> f32 {
    let mut p = [0f32; 8];
    for (g, (c8, &sb)) in codes.chunks_exact(8).zip(scales).enumerate() {
        let x = &a.qs[16 * g..16 * g + 16];
        let mut i = 0i32;
        for (k, &b) in c8.iter().enumerate() {
            i += E2M1_DOUBLED[(b & 0x0F) as usize] as i32 * x[2 * k] as i32;
            i += E2M1_DOUBLED[(b >> 4) as usize] as i32 * x[2 * k + 1] as i32;
        }
        p[g % 8] += (E4M3[sb as usize] * a.d[g / 2]) * i as f32;
    }
    sum_partials(&p) * (global * 0.5)
}

/// One GGUF NVFP4 row (blocks of four unsigned-E4M3 group scales and 32
/// code bytes; group byte `j`: values `j` and `j + 8`) · one activation
/// row in the B32 format, in [`dot_nvfp4_ref`]'s order: per group `g` of
/// 16, `(s_g · d_x) · f(i)` into `p[g mod 8]`, the tree, then times 1/2
/// (the scales' halving). The tensor's `.scale` is applied by the caller.
pub fn dot_nvfp4_gguf_ref(row: &[u8], a: ActRow<'_>) -> f32 {
    let mut p = [0f32; 8];
    for (b, block) in row.chunks_exact(36).enumerate() {
        for s in 0..4 {
            let g = 4 * b + s;
            let x = &a.qs[16 * g..16 * g + 16];
            let mut i = 0i32;
            for (j, &q) in block[4 + 8 * s..12 + 8 * s].iter().enumerate() {
                i += E2M1_DOUBLED[(q & 0x0F) as usize] as i32 * x[j] as i32;
                i += E2M1_DOUBLED[(q >> 4) as usize] as i32 * x[j + 8] as i32;
            }
            p[g % 8] += (ue4m3_to_f32(block[s]) * a.d[g / 2]) * i as f32;
        }
    }
    sum_partials(&p) * 0.5
}

/// The fixed tree that ends every canonical sum.
#[inline(always)]
pub(crate) fn sum_partials(p: &[f32; 8]) -> f32 {
    ((p[0] + p[4]) + (p[2] + p[6])) + ((p[1] + p[5]) + (p[3] + p[7]))
}

fn idot(w: &[u8], x: &[i8]) -> i32 {
    w.iter().zip(x).map(|(&w, &x)| w as i32 * x as i32).sum()
}

fn term_q8_0(block: &[u8], x: &[i8], dx: f32) -> f32 {
    let d = f16_at(block, 0);
    // Q8_0's quants are signed: Σ w·q over the i8 values.
    let i: i32 = block[2..34]
        .iter()
        .zip(x)
        .map(|(&w, &x)| (w as i8) as i32 * x as i32)
        .sum();
    (d * dx) * i as f32
}

/// MXFP4: twice each E2M1 level is an integer (−12..=12): `i = Σ 2E(w)·q`
/// exactly, then `(d_w·d_x)·f(i)` with `d_w` half the block's E8M0 scale
/// (llama.cpp's `GGML_E8M0_TO_FP32_HALF`, the same product).
fn term_mxfp4(block: &[u8], x: &[i8], dx: f32) -> f32 {
    let d = e8m0_to_f32_half(block[0]);
    let mut i = 0i32;
    for (j, &q) in block[1..17].iter().enumerate() {
        i += E2M1_DOUBLED[(q & 0x0F) as usize] as i32 * x[j] as i32;
        i += E2M1_DOUBLED[(q >> 4) as usize] as i32 * x[j + 16] as i32;
    }
    (d * dx) * i as f32
}

/// The codebook encodings (IQ1 / IQ2 / IQ3) in their integer view: `i =
/// Σ_j s_j·Σ_{k∈j} L_k·q_k` over the 16 sub-blocks of 16 (odd scales `s_j`,
/// signed levels `L`), term `((d·u)·d_x)·f(i)` with `u` the encoding's unit
/// (a power of two).
fn term_codebook(dtype: DType, block: &[u8], x: &[i8], dx: f32) -> f32 {
    let v = int_block(dtype, block).expect("a codebook encoding");
    let mut i = 0i32;
    for (j, (l16, x16)) in v
        .levels
        .chunks_exact(16)
        .zip(x.chunks_exact(16))
        .enumerate()
    {
        let s: i32 = l16
            .iter()
            .zip(x16)
            .map(|(&l, &q)| l as i32 * q as i32)
            .sum();
        i += v.scales[j] as i32 * s;
    }
    ((v.d * v.unit) * dx) * i as f32
}

/// Q4_1 / Q5_1 (`d·q + m` with unsigned quants): `i = Σ q·x` and the
/// activations' sum `S`, term `(d_w·d_x)·f(i) + (m_w·d_x)·f(S)`.
fn term_affine(dtype: DType, block: &[u8], x: &[i8], dx: f32, s32: i32) -> f32 {
    let (d, m) = (f16_at(block, 0), f16_at(block, 2));
    let q = unsigned_quants(dtype, block);
    (d * dx) * idot(&q, x) as f32 + (m * dx) * s32 as f32
}

/// The unsigned quants of a Q4_1 / Q5_1 block in element order: nibble
/// `j` of byte `j mod 16` (low for `j < 16`), Q5_1 adding bit `j` of its
/// little-endian `qh` as bit 4.
fn unsigned_quants(dtype: DType, block: &[u8]) -> [u8; 32] {
    let five = dtype == DType::Q5_1;
    let qs = &block[if five { 8 } else { 4 }..];
    let qh = if five {
        u32::from_le_bytes([block[4], block[5], block[6], block[7]])
    } else {
        0
    };
    std::array::from_fn(|j| {
        let nibble = (qs[j % 16] >> (4 * (j / 16))) & 0x0F;
        nibble | (((qh >> j) & 1) as u8) << 4
    })
}

/// The 4-bit quants of a Q4_K block, in element order.
pub(crate) fn unpack_q4_k(qs: &[u8]) -> [u8; QK_K] {
    let mut q = [0u8; QK_K];
    for (g, q32) in q.chunks_exact_mut(32).enumerate() {
        let run = &qs[32 * (g / 2)..32 * (g / 2) + 32];
        for (o, &v) in q32.iter_mut().zip(run) {
            *o = (v >> (4 * (g % 2))) & 0x0F;
        }
    }
    q
}

/// The term of a Q4_K or Q5_K block whose quants (element order) are `q`.
fn term_k_min(block: &[u8], q: &[u8; QK_K], x: &[i8], dx: f32, sums: &[i16]) -> f32 {
    let (d, dmin) = (f16_at(block, 0), f16_at(block, 2));
    let (mut i, mut m) = (0i32, 0i32);
    for j in 0..8 {
        let (sc, mn) = scale_min_k4(&block[4..16], j);
        i += sc as i32 * idot(&q[32 * j..32 * j + 32], &x[32 * j..32 * j + 32]);
        m += mn as i32 * (sums[2 * j] as i32 + sums[2 * j + 1] as i32);
    }
    (d * dx) * i as f32 - (dmin * dx) * m as f32
}

fn term_q4_k(block: &[u8], x: &[i8], dx: f32, sums: &[i16]) -> f32 {
    term_k_min(block, &unpack_q4_k(&block[16..144]), x, dx, sums)
}

/// The 5-bit quants of a Q5_K block, in element order.
pub(crate) fn unpack_q5_k(block: &[u8]) -> [u8; QK_K] {
    let mut q = unpack_q4_k(&block[48..176]);
    let qh = &block[16..48];
    for (e, v) in q.iter_mut().enumerate() {
        *v |= ((qh[e % 32] >> (e / 32)) & 1) << 4;
    }
    q
}

fn term_q5_k(block: &[u8], x: &[i8], dx: f32, sums: &[i16]) -> f32 {
    term_k_min(block, &unpack_q5_k(block), x, dx, sums)
}

/// The 6-bit quants of a Q6_K block (unsigned, before the −32 offset), in
/// element order.
pub(crate) fn unpack_q6_k(block: &[u8]) -> [u8; QK_K] {
    let (ql, qh) = (&block[0..128], &block[128..192]);
    let mut q = [0u8; QK_K];
    for (e, v) in q.iter_mut().enumerate() {
        let (h, t) = (e / 128, e % 128);
        let lo = (ql[64 * h + t % 64] >> (4 * (t / 64))) & 0x0F;
        let hi = (qh[32 * h + t % 32] >> (2 * (t / 32))) & 3;
        *v = lo | (hi << 4);
    }
    q
}

fn term_q6_k(block: &[u8], x: &[i8], dx: f32, sums: &[i16]) -> f32 {
    let q = unpack_q6_k(block);
    let d = f16_at(block, 208);
    let mut i = 0i32;
    for j in 0..16 {
        let sc = block[192 + j] as i8 as i32;
        let s = idot(&q[16 * j..16 * j + 16], &x[16 * j..16 * j + 16]);
        i += sc * (s - 32 * sums[j] as i32);
    }
    (d * dx) * i as f32
}

/// IQ4_XS sub-block `ib`'s signed 6-bit scale (−32..=31).
pub(crate) fn iq4_xs_scale(block: &[u8], ib: usize) -> i32 {
    let scales_h = u16::from_le_bytes([block[2], block[3]]);
    let low = (block[4 + ib / 2] >> (4 * (ib % 2))) & 0x0F;
    let high = ((scales_h >> (2 * ib)) & 3) as u8;
    (low | (high << 4)) as i32 - 32
}

fn term_iq4_xs(block: &[u8], x: &[i8], dx: f32) -> f32 {
    let d = f16_at(block, 0);
    let mut i = 0i32;
    for ib in 0..8 {
        let qs = &block[8 + 16 * ib..8 + 16 * ib + 16];
        let x = &x[32 * ib..32 * ib + 32];
        let mut s = 0i32;
        for (j, &q) in qs.iter().enumerate() {
            s += IQ4_NL_VALUES[(q & 0x0F) as usize] as i32 * x[j] as i32;
            s += IQ4_NL_VALUES[(q >> 4) as usize] as i32 * x[j + 16] as i32;
        }
        i += iq4_xs_scale(block, ib) * s;
    }
    (d * dx) * i as f32
}

/// Q4_0's levels: index − 8.
static Q4_0_LEVELS: [i8; 16] = [-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7];

/// The 16 signed levels of a 4-bit block encoding of 32 values with one
/// scale at its start (Q4_0, IQ4_NL: f16; MXFP4: E8M0, its levels doubled):
/// the integer kernels run such a block as the Q8_0 block of its levels.
pub(crate) fn nibble_levels(dtype: DType) -> Option<&'static [i8; 16]> {
    match dtype {
        DType::Q4_0 => Some(&Q4_0_LEVELS),
        DType::IQ4NL => Some(&IQ4_NL_VALUES),
        DType::MXFP4 => Some(&E2M1_DOUBLED),
        _ => None,
    }
}

/// A Q4_0 / IQ4_NL / Q5_0 block as the Q8_0 block of its levels (byte
/// `j` of the nibbles holds element `j` in its low nibble and `j + 16` in
/// its high one; Q5_0 adds bit `i` of its little-endian `qh` as bit 4 of
/// element `i`, and its level is the 5-bit quant − 16).
fn widen_to_q8_0(dtype: DType, block: &[u8]) -> [u8; 34] {
    let mut out = [0u8; 34];
    out[..2].copy_from_slice(&block[..2]);
    if dtype == DType::Q5_0 {
        let qh = u32::from_le_bytes([block[2], block[3], block[4], block[5]]);
        let level = |i: usize, nibble: u8| (nibble | (((qh >> i) & 1) as u8) << 4) as i8 - 16;
        for (j, &q) in block[6..22].iter().enumerate() {
            out[2 + j] = level(j, q & 0x0F) as u8;
            out[18 + j] = level(j + 16, q >> 4) as u8;
        }
        return out;
    }
    let levels = nibble_levels(dtype).expect("a 4-bit level encoding");
    for (j, &q) in block[2..18].iter().enumerate() {
        out[2 + j] = levels[(q & 0x0F) as usize] as u8;
        out[18 + j] = levels[(q >> 4) as usize] as u8;
    }
    out
}
