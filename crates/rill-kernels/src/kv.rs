//! Encodings of an attention KV cache, and the view the attention kernel
//! reads a cache through.
//!
//! A cache holds, per position, the `n_head_kv × head_dim` values of every
//! KV head (K and V apart, each in its own encoding). Besides f32 the rows
//! are stored in ggml's block formats (`rill_dtype::DType`'s layouts): f16,
//! bf16, q8_0, q4_0, q5_1. [`encode`] writes them, as ggml's reference
//! quantizers define them (so a row decodes with the weight decoders of
//! [`crate::quant`] and is interchangeable with llama.cpp's cache rows);
//! the attention kernel decodes one key tile at a time into its scratch,
//! never the whole cache.
//!
//! A 4-bit cache can keep f16 copies of the first positions (attention
//! sinks) and of a recent window ([`ExactRows`]): a query at position `i`
//! reads key `j` from them when `j < sinks` or `i − j < window`. The rule
//! depends on the two positions only, so a query's result still does not
//! depend on the step's other rows, its chunking or its batch.

use crate::simd::Isa;
use rill_dtype::DType;
use std::sync::Arc;

/// The encodings a KV cache can be stored in.
pub const KV_DTYPES: [DType; 6] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::Q8_0,
    DType::Q5_1,
    DType::Q4_0,
];

/// Whether [`encode`] writes `dtype`.
pub fn is_kv_dtype(dtype: DType) -> bool {
    KV_DTYPES.contains(&dtype)
}

/// Bytes of `n` values in `dtype` (`n` a whole number of blocks).
pub fn encoded_len(dtype: DType, n: usize) -> usize {
    n / dtype.block_len() * dtype.block_bytes()
}

/// Encode `src` (a whole number of `dtype`'s blocks) into `dst`
/// (exactly [`encoded_len`] bytes). Panics for a `dtype` that is not
/// [`is_kv_dtype`] or on a size mismatch.
pub fn encode(dtype: DType, src: &[f32], dst: &mut [u8]) {
    assert!(is_kv_dtype(dtype), "{dtype} is not a KV cache encoding");
    assert!(src.len().is_multiple_of(dtype.block_len()));
    assert_eq!(dst.len(), encoded_len(dtype, src.len()));
    match dtype {
        DType::F32 => {
            for (d, &x) in dst.chunks_exact_mut(4).zip(src) {
                d.copy_from_slice(&x.to_le_bytes());
            }
        }
        DType::F16 => {
            for (d, &x) in dst.chunks_exact_mut(2).zip(src) {
                d.copy_from_slice(&half::f16::from_f32(x).to_le_bytes());
            }
        }
        DType::BF16 => {
            for (d, &x) in dst.chunks_exact_mut(2).zip(src) {
                d.copy_from_slice(&bf16_bits(x).to_le_bytes());
            }
        }
        DType::Q8_0 => blocks(src, dst, 34, encode_q8_0),
        DType::Q4_0 => blocks(src, dst, 18, encode_q4_0),
        DType::Q5_1 => blocks(src, dst, 24, encode_q5_1),
        _ => unreachable!("checked above"),
    }
}

fn blocks(src: &[f32], dst: &mut [u8], bytes: usize, f: fn(&[f32; 32], &mut [u8])) {
    for (x, d) in src.chunks_exact(32).zip(dst.chunks_exact_mut(bytes)) {
        f(x.try_into().expect("32 values"), d);
    }
}

/// f32 → bf16 rounded to nearest even; a NaN stays a (quiet) NaN.
fn bf16_bits(x: f32) -> u16 {
    let u = x.to_bits();
    if x.is_nan() {
        return ((u >> 16) | 64) as u16;
    }
    ((u + (0x7fff + ((u >> 16) & 1))) >> 16) as u16
}

fn put_f16(d: &mut [u8], x: f32) {
    d[..2].copy_from_slice(&half::f16::from_f32(x).to_le_bytes());
}

/// Q8_0: `d = max|x| / 127`, `q = round(x / d)` (half away from zero).
fn encode_q8_0(x: &[f32; 32], out: &mut [u8]) {
    let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    put_f16(out, d);
    for (o, &v) in out[2..].iter_mut().zip(x) {
        *o = (v * id).round() as i8 as u8;
    }
}

/// Q4_0: `d = m / −8` for the value `m` of largest magnitude (the first
/// one), `q = min(15, ⌊x / d + 8.5⌋)`; element `j` in the low nibble of
/// byte `j`, element `j + 16` in its high nibble.
fn encode_q4_0(x: &[f32; 32], out: &mut [u8]) {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    let d = max / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    put_f16(out, d);
    let q = |v: f32| ((v * id + 8.5) as i8).min(15) as u8;
    for j in 0..16 {
        out[2 + j] = q(x[j]) | (q(x[j + 16]) << 4);
    }
}

/// Q5_1: `d = (max − min) / 31`, `m = min`, `q = ⌊(x − min) / d + 0.5⌋`;
/// the low nibbles as Q4's, bit 4 of element `i` as bit `i` of `qh`.
fn encode_q5_1(x: &[f32; 32], out: &mut [u8]) {
    let min = x.iter().fold(f32::INFINITY, |a, &v| a.min(v));
    let max = x.iter().fold(f32::NEG_INFINITY, |a, &v| a.max(v));
    let d = (max - min) / 31.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    put_f16(&mut out[0..], d);
    put_f16(&mut out[2..], min);
    let q = |v: f32| (((v - min) * id + 0.5) as u32).min(31);
    let mut qh = 0u32;
    for j in 0..16 {
        let (a, b) = (q(x[j]), q(x[j + 16]));
        out[8 + j] = ((a & 0xf) | ((b & 0xf) << 4)) as u8;
        qh |= ((a >> 4) & 1) << j;
        qh |= ((b >> 4) & 1) << (j + 16);
    }
    out[4..8].copy_from_slice(&qh.to_le_bytes());
}

/// The orthonormal Walsh–Hadamard transform of every block of `n` values
/// of `x` (`n` a power of two), in place: `x ← H x / √n`. It is its own
/// inverse and keeps dot products, so keys and queries rotated alike give
/// the same scores, and values rotated before the cache are rotated back in
/// the attention's output. Rotated rows spread an outlier channel over the
/// block, which a block quantizer's shared scale then rounds far better.
pub fn hadamard(x: &mut [f32], n: usize) {
    assert!(n.is_power_of_two() && x.len().is_multiple_of(n));
    let norm = 1.0 / (n as f32).sqrt();
    for b in x.chunks_exact_mut(n) {
        let mut h = 1;
        while h < n {
            for i in (0..n).step_by(2 * h) {
                for j in i..i + h {
                    let (a, c) = (b[j], b[j + h]);
                    b[j] = a + c;
                    b[j + h] = a - c;
                }
            }
            h *= 2;
        }
        b.iter_mut().for_each(|v| *v *= norm);
    }
}

/// The Hadamard block for a head of `head_dim` values: the largest power of
/// two dividing it, at most `max`.
pub fn hadamard_block(head_dim: usize, max: usize) -> usize {
    let mut n = 1;
    while head_dim.is_multiple_of(2 * n) && 2 * n <= max {
        n *= 2;
    }
    n
}

/// Positions per page of a paged cache ([`KvRows::PagedF32`],
/// [`KvRows::PagedCoded`]): a multiple of the attention kernel's key tile,
/// so that a tile (at absolute positions 0, 64, 128, …) never straddles
/// two pages and the kernel reads it in place.
pub const KV_PAGE_POSITIONS: usize = 256;
const _: () = assert!(KV_PAGE_POSITIONS.is_multiple_of(crate::attention::KEY_TILE));

/// The rows of one side (K or V) of a cache: f32 values, or encoded rows
/// of `n_head_kv × head_dim` values per position; in one run, or in pages
/// of `page_positions` positions each (every page full but the last),
/// which sequences and snapshots share by reference count.
#[derive(Clone, Copy, Debug)]
pub enum KvRows<'a> {
    F32(&'a [f32]),
    Coded {
        dtype: DType,
        bytes: &'a [u8],
    },
    PagedF32 {
        pages: &'a [Arc<Vec<f32>>],
        page_positions: usize,
    },
    PagedCoded {
        dtype: DType,
        pages: &'a [Arc<Vec<u8>>],
        page_positions: usize,
    },
}

impl<'a> KvRows<'a> {
    /// The run of rows (one page, or the whole of an unpaged side) that
    /// holds position `p`, and the position its first row is.
    #[inline]
    pub fn run_of(&self, p: usize) -> (KvRows<'a>, usize) {
        match *self {
            KvRows::F32(_) | KvRows::Coded { .. } => (*self, 0),
            KvRows::PagedF32 {
                pages,
                page_positions,
            } => {
                let i = p / page_positions;
                (KvRows::F32(&pages[i][..]), i * page_positions)
            }
            KvRows::PagedCoded {
                dtype,
                pages,
                page_positions,
            } => {
                let i = p / page_positions;
                let bytes = &pages[i][..];
                (KvRows::Coded { dtype, bytes }, i * page_positions)
            }
        }
    }

    /// Positions per page (`None`: one run).
    pub fn page_positions(&self) -> Option<usize> {
        match *self {
            KvRows::F32(_) | KvRows::Coded { .. } => None,
            KvRows::PagedF32 { page_positions, .. } | KvRows::PagedCoded { page_positions, .. } => {
                Some(page_positions)
            }
        }
    }

    /// Positions of `per_pos` values held.
    pub fn positions(&self, per_pos: usize) -> usize {
        let paged = |n: usize, last: usize, pp: usize| if n == 0 { 0 } else { (n - 1) * pp + last };
        match *self {
            KvRows::F32(r) => r.len() / per_pos,
            KvRows::Coded { dtype, bytes } => bytes.len() / encoded_len(dtype, per_pos),
            KvRows::PagedF32 {
                pages,
                page_positions,
            } => paged(
                pages.len(),
                pages.last().map_or(0, |p| p.len() / per_pos),
                page_positions,
            ),
            KvRows::PagedCoded {
                dtype,
                pages,
                page_positions,
            } => paged(
                pages.len(),
                pages
                    .last()
                    .map_or(0, |p| p.len() / encoded_len(dtype, per_pos)),
                page_positions,
            ),
        }
    }
}

/// f16 copies of a 4-bit side's attention-sink rows and recent rows, read
/// instead of its coded rows where [`reads_exact`](Self::reads_exact) says.
#[derive(Clone, Copy, Debug)]
pub struct ExactRows<'a> {
    /// Positions `0..sinks` read from `sink_rows`.
    pub sinks: usize,
    /// f16 rows of positions `0..min(sinks, len)`.
    pub sink_rows: &'a [u8],
    /// Query `i` reads key `j` here when `i − j < window`.
    pub window: usize,
    /// f16 rows of a ring: position `p` at slot `p % ring_rows`, valid for
    /// the last `ring_rows` positions before `len`.
    pub ring: &'a [u8],
    pub ring_rows: usize,
    /// Positions the cache holds.
    pub len: usize,
}

impl ExactRows<'_> {
    /// Whether the query at position `query` reads the key at `key`
    /// (`key ≤ query`) from the f16 rows.
    #[inline]
    pub fn reads_exact(&self, query: usize, key: usize) -> bool {
        key < self.sinks || query - key < self.window
    }

    /// Position `p`'s f16 row, if held.
    fn row(&self, p: usize, row_bytes: usize) -> Option<&[u8]> {
        if p < self.sinks {
            return self.sink_rows.get(p * row_bytes..(p + 1) * row_bytes);
        }
        if p < self.len && p + self.ring_rows >= self.len {
            let s = p % self.ring_rows;
            return self.ring.get(s * row_bytes..(s + 1) * row_bytes);
        }
        None
    }
}

/// One side (K or V) of a KV cache as the attention kernel reads it.
#[derive(Clone, Copy, Debug)]
pub struct KvSide<'a> {
    pub rows: KvRows<'a>,
    pub exact: Option<ExactRows<'a>>,
}

impl<'a> KvSide<'a> {
    /// A plain f32 cache.
    pub fn f32(rows: &'a [f32]) -> KvSide<'a> {
        KvSide {
            rows: KvRows::F32(rows),
            exact: None,
        }
    }

    /// Positions of `per_pos` values the rows hold.
    pub fn positions(&self, per_pos: usize) -> usize {
        self.rows.positions(per_pos)
    }

    /// KV head `kvh`'s `hd` values of positions `p0..p0 + n` (one run:
    /// a tile never straddles pages), transposed into `dst`:
    /// `dst[c·ld + i]` is value `c` of position `p0 + i`. f32 / f16 / bf16
    /// rows go straight from the cache on x86 vectors; other encodings
    /// decode into `tmp` (`n · hd` floats) first. Every path gives the
    /// same bits (decoding is exact arithmetic on the stored values).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn decode_rows_transposed(
        &self,
        isa: Isa,
        geo: (usize, usize, usize),
        p0: usize,
        n: usize,
        (dst, ld): (&mut [f32], usize),
        tmp: &mut [f32],
    ) {
        let (nkv, hd, kvh) = geo;
        let (run, base) = self.rows.run_of(p0);
        #[cfg(target_arch = "x86_64")]
        if isa != Isa::Scalar && n > 0 {
            let (bytes, dtype): (&[u8], DType) = match run {
                KvRows::F32(r) => (bytemuck_f32(r), DType::F32),
                KvRows::Coded { dtype, bytes } => (bytes, dtype),
                _ => unreachable!("a run is not paged"),
            };
            let (row, head) = (encoded_len(dtype, nkv * hd), encoded_len(dtype, hd));
            let at = (p0 - base) * row + kvh * head;
            if at < bytes.len() {
                // SAFETY: `isa` is checked (an x86 class has AVX2+FMA+F16C);
                // `widen_transposed` checks the rows and outputs lie inside.
                if unsafe {
                    crate::simd::x86::widen_transposed(dtype, &bytes[at..], row, (n, hd), dst, ld)
                } {
                    return;
                }
            }
        }
        match run {
            KvRows::F32(c) => {
                let at = ((p0 - base) * nkv + kvh) * hd;
                crate::small::transpose(&c[at..], nkv * hd, (n, hd), dst, ld)
            }
            _ => {
                self.decode_rows(isa, geo, p0, n, tmp, hd);
                crate::small::transpose(tmp, hd, (n, hd), dst, ld);
            }
        }
    }

    /// Decode KV head `kvh`'s `hd` values of positions `p0..p0 + n` into
    /// `dst` (`n` rows of stride `ld`), from the coded rows.
    pub(crate) fn decode_rows(
        &self,
        isa: Isa,
        (nkv, hd, kvh): (usize, usize, usize),
        p0: usize,
        n: usize,
        dst: &mut [f32],
        ld: usize,
    ) {
        for i in 0..n {
            let (run, base) = self.rows.run_of(p0 + i);
            let p = p0 + i - base;
            let d = &mut dst[i * ld..i * ld + hd];
            match run {
                KvRows::F32(r) => {
                    let src = (p * nkv + kvh) * hd;
                    d.copy_from_slice(&r[src..src + hd]);
                }
                KvRows::Coded { dtype, bytes } => {
                    let (row, head) = (encoded_len(dtype, nkv * hd), encoded_len(dtype, hd));
                    let src = p * row + kvh * head;
                    crate::quant::dequantize_with(isa, dtype, &bytes[src..src + head], d);
                }
                _ => unreachable!("a run is not paged"),
            }
        }
    }

    /// As [`decode_rows`](Self::decode_rows) from the f16 rows; a position
    /// they do not hold (no query reads it from them) decodes as zeros.
    pub(crate) fn decode_exact_rows(
        &self,
        isa: Isa,
        (nkv, hd, kvh): (usize, usize, usize),
        p0: usize,
        n: usize,
        dst: &mut [f32],
        ld: usize,
    ) {
        let Some(e) = &self.exact else { return };
        let (row, head) = (2 * nkv * hd, 2 * hd);
        for i in 0..n {
            let d = &mut dst[i * ld..i * ld + hd];
            match e.row(p0 + i, row) {
                Some(r) => crate::quant::dequantize_with(
                    isa,
                    DType::F16,
                    &r[kvh * head..(kvh + 1) * head],
                    d,
                ),
                None => d.fill(0.0),
            }
        }
    }
}

/// The bytes of f32 values (the x86 transposing decoder reads rows as bytes).
#[cfg(target_arch = "x86_64")]
fn bytemuck_f32(v: &[f32]) -> &[u8] {
    // SAFETY: any f32 slice is a valid byte slice of 4× its length.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast(), 4 * v.len()) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::noise;

    fn roundtrip(dtype: DType, x: &[f32]) -> Vec<f32> {
        let mut bytes = vec![0u8; encoded_len(dtype, x.len())];
        encode(dtype, x, &mut bytes);
        let mut back = vec![0f32; x.len()];
        crate::quant::dequantize_with(Isa::Scalar, dtype, &bytes, &mut back);
        back
    }

    #[test]
    fn every_encoding_decodes_to_within_its_step() {
        let x: Vec<f32> = noise(7, 32 * 64).iter().map(|v| 3.0 * v).collect();
        for dtype in KV_DTYPES {
            let back = roundtrip(dtype, &x);
            for (bx, bb) in x.chunks(32).zip(back.chunks(32)) {
                let amax = bx.iter().fold(0f32, |a, v| a.max(v.abs()));
                let (lo, hi) = bx
                    .iter()
                    .fold((f32::MAX, f32::MIN), |(a, b), &v| (a.min(v), b.max(v)));
                // Half a quantization step, plus the f16 scale's rounding.
                let tol = match dtype {
                    DType::F32 => 0.0,
                    DType::F16 => amax * 2f32.powi(-11),
                    DType::BF16 => amax * 2f32.powi(-8),
                    DType::Q8_0 => amax / 127.0 * 0.5 + amax * 1e-3,
                    DType::Q5_1 => (hi - lo) / 31.0 * 0.5 + amax * 2e-3,
                    DType::Q4_0 => amax / 8.0 * 1.0 + amax * 2e-3,
                    _ => unreachable!(),
                };
                for (a, b) in bx.iter().zip(bb) {
                    assert!((a - b).abs() <= tol, "{dtype}: {a} -> {b} (tol {tol})");
                }
            }
        }
    }

    #[test]
    fn quantizers_hit_their_grid_exactly() {
        // Values on a block's grid come back exactly.
        let mut x = [0f32; 32];
        for (i, v) in x.iter_mut().enumerate() {
            *v = (i as f32 - 16.0) * 0.25; // −4 .. 3.75, step 0.25
        }
        // Q4_0: max magnitude −4 → d = 0.5, q ∈ 0..15 covers −4..3.5.
        let q4: Vec<f32> = x.iter().map(|v| (v / 0.5).round().min(7.0) * 0.5).collect();
        assert_eq!(roundtrip(DType::Q4_0, &q4), q4);
        // Q5_1: min −4, max 3.75, d = 7.75/31 = 0.25: every value on the grid.
        assert_eq!(roundtrip(DType::Q5_1, &x), x);
        // Q8_0: amax 4 → q = −127 for it, decoded as f16(4/127)·(−127).
        let back = roundtrip(DType::Q8_0, &x);
        assert!(back.iter().zip(&x).all(|(a, b)| (a - b).abs() < 0.02));
        let d = half::f16::from_f32(4.0 / 127.0).to_f32();
        assert_eq!(back[0], d * -127.0);
    }

    #[test]
    fn hadamard_is_orthonormal_and_its_own_inverse() {
        let x = noise(3, 4 * 64);
        // Against the Sylvester matrix: H[i][j] = (−1)^popcount(i & j) / √n.
        let n = 64;
        let mut y = x.clone();
        hadamard(&mut y, n);
        for (b, yb) in x.chunks(n).zip(y.chunks(n)) {
            for (i, &yi) in yb.iter().enumerate() {
                let want: f32 = (0..n)
                    .map(|j| {
                        if (i & j).count_ones() % 2 == 0 {
                            b[j]
                        } else {
                            -b[j]
                        }
                    })
                    .sum::<f32>()
                    / (n as f32).sqrt();
                assert!((yi - want).abs() < 1e-5);
            }
        }
        let norm = |v: &[f32]| v.iter().map(|a| a * a).sum::<f32>();
        assert!((norm(&x) - norm(&y)).abs() < 1e-3);
        hadamard(&mut y, n);
        assert!(x.iter().zip(&y).all(|(a, b)| (a - b).abs() < 1e-6));
        assert_eq!(hadamard_block(256, 256), 256);
        assert_eq!(hadamard_block(256, 64), 64);
        assert_eq!(hadamard_block(96, 256), 32);
    }

    #[test]
    fn bf16_rounds_to_nearest_even() {
        for x in [1.0f32, -2.5, 3.3e7 + 1.0, 1e-30, 65504.0, f32::INFINITY] {
            let b = bf16_bits(x);
            assert_eq!(b, half::bf16::from_f32(x).to_bits(), "{x}");
        }
        assert!(f32::from_bits((bf16_bits(f32::NAN) as u32) << 16).is_nan());
    }
}
