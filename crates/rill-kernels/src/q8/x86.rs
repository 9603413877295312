//! x86-64 kernels of the 8-bit-activation products: AVX-512 (BW, with
//! VNNI's `vpdpwssd` / `vpdpbusd` where the CPU has them) and AVX2.
//!
//! Each call multiplies `R` ∈ {1, 4} consecutive weight rows by `T` ≤ 4
//! tokens: every weight vector is decoded once and used for all `T`
//! tokens, the `R` rows are interleaved (several DRAM streams) and
//! prefetched ahead. Results come back in lanes `4r + t` of a `[f32; 16]`;
//! `super::groups` walks a product's rows and tokens through these shapes.
//!
//! # Exactness
//! The integer part of every block term (see the module doc of `q8`) is
//! computed exactly, so any order of the integer additions gives the
//! reference's integers; the f32 part then runs the reference's operations
//! in the same order, lane by lane (`(d·dx)·f(i) − (dmin·dx)·f(m)`, no FMA),
//! so each output has the reference's bits. The bounds that keep the 16-bit
//! steps exact (`vpmaddubsw` saturates its i16 pair sums):
//! * Q4_K / Q5_K / Q6_K: unsigned quants ≤ 15 / 31 / 63 times |q| ≤ 127:
//!   pair sums ≤ 2·63·127 = 16002 < 32767. The i16 sub-block scales then
//!   multiply those (`vpmaddwd` / `vpdpwssd`, i32 results): a block's
//!   |i| ≤ 256·63·127·128 < 2³¹.
//! * Q8_0 (AVX2, AVX-512 without VNNI): |w| ≤ 128 against ±q (the sign of
//!   `w` moved onto `q`): pair sums ≤ 2·128·127 = 32512. With VNNI the
//!   quants are offset to `w + 128` (u8) for `vpdpbusd`, which sums four
//!   products into i32 without saturation, and `128·Σq` is subtracted.
//!
//! # Shape of the f32 tail
//! K encodings: one term per (row, token) pair and block, the pairs in the
//! lanes of one vector; `p[b mod 8]` is a vector of partials per pair.
//! Q8_0 (32-value blocks): the lanes are 8 consecutive blocks of one pair,
//! so each lane of the partials vector is one `p[k]` (AVX2: lane k;
//! AVX-512: in the order its reduction leaves them), and the canonical
//! tree ends the sum.
//!
//! The kernels themselves are in `avx512` and `avx2`; this file holds the
//! kernel tables, the entry points and the pieces both use.

// Index loops mirror the lanes and rows they compute.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;
use std::sync::OnceLock;

use super::groups::{self, Kernel, Table, Toks};
pub(super) use super::groups::{block_bytes, quants_at, NIB_DTYPES};
use super::Q8Rows;
use crate::matmul::MatRef;
use crate::threads::SharedMut;
use rill_dtype::DType;

/// Q4_K/Q5_K's packed 6-bit scales and mins (12 bytes at the start of each
/// 128-bit chunk of `v`) → bytes `[sc0..sc7, m0..m7]` per chunk (see
/// `scale_min_k4`): the low bits come from bytes 0..3 / 8..11 / 4..7, the
/// top 2 bits of scales and mins 4..7 from the top of bytes 0..3 / 4..7.
macro_rules! k4_unpack {
    ($v:expr, $bc:ident, $shuf:ident, $and:ident, $or:ident, $srli:ident) => {{
        let v = $v;
        let a = $shuf(
            v,
            $bc(_mm_setr_epi8(
                0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11,
            )),
        );
        let low = $and(
            a,
            $bc(_mm_setr_epi8(
                63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0,
            )),
        );
        let mhi = $and(
            $srli::<4>(a),
            $bc(_mm_setr_epi8(
                0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15,
            )),
        );
        let top = $shuf(
            v,
            $bc(_mm_setr_epi8(
                -1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7,
            )),
        );
        // Bits 6..7 to 4..5 (16-bit shifts: the mask drops what crossed bytes).
        let top = $and($srli::<2>(top), $bc(_mm_set1_epi8(0x30)));
        $or($or(low, mhi), top)
    }};
}

mod affine;
mod avx2;
mod avx2_decode;
mod avx512;
mod avx512_decode;
mod codebook;
mod iq4;
mod nvfp4;
mod panel;

use affine::{affine_y_body, affine_y_rows1};
use avx2::{kmin_y, q6k_y_body, q80_y_body};
use avx2_decode::{kmin_y1, q6k_body_y1};
use avx512::{kmin_z, q6k_z_body, q80_z_body};
use avx512_decode::{kmin_z1, q6k_body_z1};
use codebook::codebook_y;
use iq4::{iq4xs_y, iq4xs_z};
use nvfp4::decode32_checkpoint as nvfp4_decode32_checkpoint;
use nvfp4::decode32_gguf as nvfp4_decode32;
pub(super) use nvfp4::{offset_acts as nvfp4_offset_acts, row as nvfp4_row};
pub(super) use panel::interleaved_rows;
pub(super) use panel::MIN_PANEL_BUF as PANEL_BUF_MIN;

/// Whether the CPU has AVX-512 VNNI (detected once).
fn vnni() -> bool {
    static VNNI: OnceLock<bool> = OnceLock::new();
    *VNNI.get_or_init(|| is_x86_feature_detected!("avx512vnni"))
}

/// Rows `r0..r1` of `w` × every token of `acts` into `out` (as `q8::rows`).
/// `false`: no kernel for this encoding here (nothing written).
///
/// # Safety
/// As `q8::rows`; the CPU must run `isa`, an x86 class.
pub(super) unsafe fn rows(
    isa: crate::simd::Isa,
    w: MatRef<'_>,
    acts: Q8Rows<'_>,
    r0: usize,
    r1: usize,
    out: SharedMut<f32>,
    panel_buf: &mut Vec<u8>,
) -> bool {
    let Some(k) = table(isa.wide(), w.dtype) else {
        return false;
    };
    // Several tokens: row panels (the rows past the last whole panel on
    // the 4-row kernels). AVX-512 without VNNI keeps its 4-row kernels (not
    // measured).
    let mut r0 = r0;
    let panels = match (isa.wide(), vnni()) {
        (true, true) => Some(&panel::AVX512_VNNI),
        (false, _) => Some(&panel::AVX2),
        (true, false) => None,
    };
    if let Some(set) = panels.filter(|s| acts.n() >= s.min_tokens) {
        // SAFETY: as this function; the CPU runs `set`'s class.
        r0 = unsafe { panel::rows(set, w, acts, r0, r1, out, panel_buf) };
    }
    groups::run(k, w, acts, r0, r1, out, w.rows, 0);
    true
}

/// Rows `r0..r1` of an NVFP4 matrix (GGUF's blocks, or a checkpoint's
/// codes with their scales apart) × several tokens on the AVX2 row panels
/// (every x86 class runs them); returns the first row left (past the last
/// whole panel) for the per-row kernels. Few tokens, a checkpoint's rows
/// not whole blocks of 64 or a NaN scale among the rows: none done.
///
/// # Safety
/// As [`rows`]; `w` is NVFP4 ([`super::nvfp4_rows`]).
pub(super) unsafe fn nvfp4_panels(
    w: MatRef<'_>,
    acts: Q8Rows<'_>,
    r0: usize,
    r1: usize,
    out: SharedMut<f32>,
    panel_buf: &mut Vec<u8>,
) -> usize {
    if acts.n() < panel::AVX2.min_tokens {
        return r0;
    }
    if w.dtype == DType::NVFP4 {
        // SAFETY: as this function; every x86 class runs AVX2.
        return unsafe { panel::rows(&panel::AVX2, w, acts, r0, r1, out, panel_buf) };
    }
    let Some((scales, global)) = super::nvfp4_parts(&w) else {
        return r0;
    };
    let (rb, sb) = (w.cols / 2, w.cols / 16);
    if !w.cols.is_multiple_of(64) || crate::quant::nvfp4::any_nan_scale(&scales[r0 * sb..r1 * sb]) {
        return r0;
    }
    // SAFETY: as this function; the rows are whole blocks of 64 and no
    // scale is NaN (checked).
    unsafe {
        panel::nvfp4_checkpoint_rows(
            (w.data, rb),
            (scales, sb),
            global,
            (w.rows, w.cols),
            acts,
            r0,
            r1,
            out,
            panel_buf,
        )
    }
}

static Z_VNNI: [Table; 19] = [
    with_decode(shapes!(q4k_zv), q4k_zv1),
    with_decode(shapes!(q5k_zv), q5k_zv1),
    with_decode(shapes!(q6k_zv), q6k_zv1),
    shapes!(q80_zv),
    shapes!(iq4xs_zv),
    shapes!(q40_zv),
    shapes!(iq4nl_zv),
    shapes!(mxfp4_zv),
    shapes!(q50_zv),
    with_decode(shapes!(q41_y), q41_y1),
    with_decode(shapes!(q51_y), q51_y1),
    shapes!(iq2xxs_y),
    shapes!(iq2xs_y),
    shapes!(iq2s_y),
    shapes!(iq3xxs_y),
    shapes!(iq3s_y),
    shapes!(iq1s_y),
    shapes!(iq1m_y),
    with_decode(shapes!(q6kp_y), q6kp_y1),
];
static Z: [Table; 19] = [
    with_decode(shapes!(q4k_z), q4k_z1),
    with_decode(shapes!(q5k_z), q5k_z1),
    with_decode(shapes!(q6k_z), q6k_z1),
    shapes!(q80_z),
    shapes!(iq4xs_zn),
    shapes!(q40_z),
    shapes!(iq4nl_z),
    shapes!(mxfp4_z),
    shapes!(q50_z),
    with_decode(shapes!(q41_y), q41_y1),
    with_decode(shapes!(q51_y), q51_y1),
    shapes!(iq2xxs_y),
    shapes!(iq2xs_y),
    shapes!(iq2s_y),
    shapes!(iq3xxs_y),
    shapes!(iq3s_y),
    shapes!(iq1s_y),
    shapes!(iq1m_y),
    with_decode(shapes!(q6kp_y), q6kp_y1),
];
static Y: [Table; 19] = [
    with_decode(shapes!(q4k_y), q4k_y1),
    with_decode(shapes!(q5k_y), q5k_y1),
    with_decode(shapes!(q6k_y), q6k_y1),
    with_decode(shapes!(q80_y), q80_y_rows1::<0>),
    shapes!(iq4xs_yk),
    with_decode(shapes!(q40_y), q80_y_rows1::<1>),
    with_decode(shapes!(iq4nl_y), q80_y_rows1::<2>),
    with_decode(shapes!(mxfp4_y), q80_y_rows1::<3>),
    with_decode(shapes!(q50_y), q80_y_rows1::<4>),
    with_decode(shapes!(q41_y), q41_y1),
    with_decode(shapes!(q51_y), q51_y1),
    shapes!(iq2xxs_y),
    shapes!(iq2xs_y),
    shapes!(iq2s_y),
    shapes!(iq3xxs_y),
    shapes!(iq3s_y),
    shapes!(iq1s_y),
    shapes!(iq1m_y),
    with_decode(shapes!(q6kp_y), q6kp_y1),
];

/// The 4-row, 1-token shape of the AVX2 Q8_0 kernels (`NIB` as
/// [`q80_y_body`]) as four 1-row passes: with 4 rows the accumulators and
/// the token's 8 activation vectors leave the 16 registers, and on AMD
/// Zen 1 the row-by-row loop is faster (in-cache 1-token Q8_0 product,
/// best of runs: 18.0 → 19.7 GFLOP/s). Same bits: each row's order is
/// its own.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q80_y_rows1<const NIB: usize>(w: *const u8, rb: usize, x: &Toks, nb: usize) -> [f32; 16] {
    let mut out = [0f32; 16];
    for i in 0..4 {
        out[4 * i] = q80_y_body::<1, 1, NIB>(w.add(i * rb), rb, x, nb)[0];
    }
    out
}

/// `t` with its 4-row, 1-token shape (decode) run by `k`.
const fn with_decode(mut t: Table, k: Kernel) -> Table {
    t[1][0] = k;
    t
}

/// The kernels of `dtype` on this path, if any.
fn table(avx512: bool, dtype: DType) -> Option<&'static Table> {
    let set = match (avx512, avx512 && vnni()) {
        (true, true) => &Z_VNNI,
        (true, false) => &Z,
        _ => &Y,
    };
    TABLE_DTYPES
        .iter()
        .position(|&d| d == dtype)
        .map(|i| &set[i])
}

/// The encodings of each kernel table, in its order.
const TABLE_DTYPES: [DType; 19] = [
    DType::Q4K,
    DType::Q5K,
    DType::Q6K,
    DType::Q8_0,
    DType::IQ4XS,
    DType::Q4_0,
    DType::IQ4NL,
    DType::MXFP4,
    DType::Q5_0,
    DType::Q4_1,
    DType::Q5_1,
    DType::IQ2XXS,
    DType::IQ2XS,
    DType::IQ2S,
    DType::IQ3XXS,
    DType::IQ3S,
    DType::IQ1S,
    DType::IQ1M,
    DType::Q6KPlanar,
];

entry! {"avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c":
    q4k_zv = kmin_z::<false, true>;
    q5k_zv = kmin_z::<true, true>;
    q6k_zv = q6k_z_body::<true>;
    q80_zv = q80_z_body::<true, 0>;
    q40_zv = q80_z_body::<true, 1>;
    iq4nl_zv = q80_z_body::<true, 2>;
    mxfp4_zv = q80_z_body::<true, 3>;
    q50_zv = q80_z_body::<true, 4>;
    iq4xs_zv = iq4xs_z::<true>;
}
entry! {"avx512f,avx512bw,avx512vl,avx2,fma,f16c":
    q4k_z = kmin_z::<false, false>;
    q5k_z = kmin_z::<true, false>;
    q6k_z = q6k_z_body::<false>;
    q80_z = q80_z_body::<false, 0>;
    q40_z = q80_z_body::<false, 1>;
    iq4nl_z = q80_z_body::<false, 2>;
    mxfp4_z = q80_z_body::<false, 3>;
    q50_z = q80_z_body::<false, 4>;
    iq4xs_zn = iq4xs_z::<false>;
}
decode_entry! {"avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c":
    q4k_zv1 = kmin_z1::<false, true>;
    q5k_zv1 = kmin_z1::<true, true>;
    q6k_zv1 = q6k_body_z1::<true>;
}
decode_entry! {"avx512f,avx512bw,avx512vl,avx2,fma,f16c":
    q4k_z1 = kmin_z1::<false, false>;
    q5k_z1 = kmin_z1::<true, false>;
    q6k_z1 = q6k_body_z1::<false>;
}
decode_entry! {"avx2,fma,f16c":
    q4k_y1 = kmin_y1::<false>;
    q5k_y1 = kmin_y1::<true>;
    q6k_y1 = q6k_body_y1::<false>;
    q6kp_y1 = q6k_body_y1::<true>;
}
entry! {"avx2,fma,f16c":
    q4k_y = kmin_y::<false>;
    q5k_y = kmin_y::<true>;
    q6k_y = q6k_y_body::<false>;
    q6kp_y = q6k_y_body::<true>;
    q80_y = q80_y_body::<0>;
    q40_y = q80_y_body::<1>;
    iq4nl_y = q80_y_body::<2>;
    mxfp4_y = q80_y_body::<3>;
    q50_y = q80_y_body::<4>;
    iq4xs_yk = iq4xs_y::<>;
    q41_y = affine_y_body::<false>;
    q51_y = affine_y_body::<true>;
    iq2xxs_y = codebook_y::<0>;
    iq2xs_y = codebook_y::<1>;
    iq2s_y = codebook_y::<2>;
    iq3xxs_y = codebook_y::<3>;
    iq3s_y = codebook_y::<4>;
    iq1s_y = codebook_y::<5>;
    iq1m_y = codebook_y::<6>;
}
decode_entry! {"avx2,fma,f16c":
    q41_y1 = affine_y_rows1::<false>;
    q51_y1 = affine_y_rows1::<true>;
}

// ---------------------------------------------------------------------------
// Shared pieces.

// Bytes ahead of the read position that are prefetched, in the stream of
// a kernel's rows taken together (`prefetch`). Prefetched into L2
// only (`prefetcht2`): with `prefetcht0` every line in flight holds one of
// the few L1 miss buffers, which caps a core's stream well below the memory
// bus (the kernels stalled on the first load of each block). Measured on
// AMD EPYC Zen 4, 2 threads, q8 decode of the 8-layer
// Qwen3.5-35B-A3B-geometry Q4_K_M model (2026-12-02), when each row was
// prefetched that far ahead on its own: `prefetcht0` 2048 ahead 20.8 t/s
// (AVX-512) / 19.2 (AVX2); `prefetcht2` 4096: 32.3 / 31.7, 6144: 41.0 /
// 38.4, 8192: 35.2 / 28.8. Prefetching the rows as one stream instead
// (2026-12-06, AMD EPYC Zen 3, AVX2, `matmul_bench`, 1 token, 2 threads,
// out of cache, GFLOP/s per rows / stream): 248,320 × 2048 Q6_K (the LM
// head) 49 / 72-88, 131,072 × 2048 Q4_K 85-89 / 120-123, 2048-column Q8_0
// and 512-column Q4_K level; 3072 ahead gave less, 12288 the same.
// The distance is `simd::x86::STREAM_AHEAD`; the exact in-register kernels
// prefetch with the same function.
pub(super) use crate::simd::x86::prefetch_stream as prefetch;

/// The f16 scales of `R` rows' blocks as one xmm: row `r`'s 32 bits at
/// `blk(r)` (Q4_K/Q5_K: `d`, `dmin`) or its 16 (`d` then 0).
#[inline(always)]
pub(super) unsafe fn halves<const R: usize>(
    blk: impl Fn(usize) -> *const u8,
    two: bool,
) -> __m128i {
    let v = |r: usize| -> i32 {
        if r >= R {
            0
        } else if two {
            (blk(r) as *const i32).read_unaligned()
        } else {
            (blk(r) as *const u16).read_unaligned() as i32
        }
    };
    _mm_setr_epi32(v(0), v(1), v(2), v(3))
}

/// Four tokens' scales of block `b` (tokens past `T` read 0).
#[inline(always)]
pub(super) unsafe fn dx4<const T: usize>(x: &Toks, b: usize) -> __m128 {
    let v = |t: usize| if t < T { *x.d[t].add(b) } else { 0.0 };
    _mm_setr_ps(v(0), v(1), v(2), v(3))
}

/// The sums of each 32 activations of block `b` of token `t` (i16; at most
/// 32·127 in magnitude), from the sums of each 16.
#[inline(always)]
pub(super) unsafe fn sums32(x: &Toks, t: usize, b: usize) -> __m128i {
    let s = x.sums[t].add(16 * b) as *const __m128i;
    _mm_hadd_epi16(_mm_loadu_si128(s), _mm_loadu_si128(s.add(1)))
}

/// Row `i`'s index vector of [`K4_IDX`]-style tables: i16 lanes 0..15 pick
/// word `lo`, lanes 16..31 word `hi`.
const fn idx2(lo: i16, hi: i16) -> [i16; 32] {
    let mut a = [lo; 32];
    let mut i = 16;
    while i < 32 {
        a[i] = hi;
        i += 1;
    }
    a
}

/// `vpermw` indices of Q4_K/Q5_K's scale vectors: row `r`, 64-value chunk
/// `c` (sub-blocks 2c, 2c+1): its scales are words `8r + 2c`, `8r + 2c + 1`.
pub(super) static K4_IDX: [[[i16; 32]; 4]; 4] = {
    let mut a = [[[0i16; 32]; 4]; 4];
    let mut r = 0;
    while r < 4 {
        let mut c = 0;
        while c < 4 {
            a[r][c] = idx2((8 * r + 2 * c) as i16, (8 * r + 2 * c + 1) as i16);
            c += 1;
        }
        r += 1;
    }
    a
};

/// `vpermw` indices of Q6_K's scale vectors: 64-value chunk `k`, lane `l`
/// (16-value sub-block `4k + l/8` after `vpmaddubsw`).
pub(super) static Q6_IDX: [[i16; 32]; 4] = {
    let mut a = [[0i16; 32]; 4];
    let mut k = 0;
    while k < 4 {
        let mut l = 0;
        while l < 32 {
            a[k][l] = (4 * k + l / 8) as i16;
            l += 1;
        }
        k += 1;
    }
    a
};

/// The 16 signed levels of encoding `NIB` (1..=3; Q5_0 has none), for
/// `pshufb`.
#[inline(always)]
pub(super) unsafe fn nib_levels<const NIB: usize>() -> __m128i {
    let t = crate::q8::reference::nibble_levels(NIB_DTYPES[NIB]);
    t.map_or(_mm_setzero_si128(), |t| _mm_loadu_si128(t.as_ptr().cast()))
}

/// The scales of 8 blocks of encoding `NIB` at `g` (`bb` bytes apart),
/// block `order[k]` in lane `k`, as f32: f16 ([`q80_scales`]), or half the
/// E8M0 scale of MXFP4 (its levels are doubled).
#[inline(always)]
pub(super) unsafe fn block_scales<const NIB: usize>(
    g: *const u8,
    bb: usize,
    order: [usize; 8],
) -> __m256 {
    if NIB != 3 {
        return q80_scales(g, bb, order);
    }
    let s = |k: usize| block_scale::<NIB>(g.add(bb * order[k]));
    _mm256_setr_ps(s(0), s(1), s(2), s(3), s(4), s(5), s(6), s(7))
}

/// The scale of the block at `blk` of encoding `NIB` as f32: its f16, or
/// (MXFP4) half its E8M0 byte, as the reference takes it.
#[inline(always)]
pub(super) unsafe fn block_scale<const NIB: usize>(blk: *const u8) -> f32 {
    if NIB == 3 {
        crate::quant::mxfp4::e8m0_to_f32_half(*blk)
    } else {
        half::f16::from_bits((blk as *const u16).read_unaligned()).to_f32()
    }
}

/// The 32 quants of the block at `blk` as signed bytes: Q8_0's own, or the
/// levels of a Q4_0 / IQ4_NL / MXFP4 / Q5_0 block (byte `j`: element `j`
/// in its low nibble, `j + 16` in its high one; Q5_0: bit `i` of its
/// little-endian `qh` is bit 4 of element `i`, and the level is the 5-bit
/// quant − 16).
#[inline(always)]
pub(super) unsafe fn q80_quants<const NIB: usize>(blk: *const u8, levels: __m128i) -> __m256i {
    if NIB == 0 {
        return _mm256_loadu_si256(blk.add(2) as *const __m256i);
    }
    if NIB == 4 {
        // quant − 16: the nibble as is where bit 4 is set, else the nibble
        // with its top half all ones (nibble − 16 as i8).
        let (nibbles, set) = q5_parts(blk);
        return _mm256_or_si256(nibbles, _mm256_andnot_si256(set, _mm256_set1_epi8(-16)));
    }
    let q = _mm_loadu_si128(blk.add(quants_at(NIB)) as *const __m128i);
    let nib = _mm_set1_epi8(0x0F);
    let (lo, hi) = (
        _mm_and_si128(q, nib),
        _mm_and_si128(_mm_srli_epi16::<4>(q), nib),
    );
    _mm256_set_m128i(_mm_shuffle_epi8(levels, hi), _mm_shuffle_epi8(levels, lo))
}

/// A Q5_0 block at `blk` as its 32 low nibbles (byte `i`: element `i`'s)
/// and a mask of the elements whose bit 4 (bit `i` of the little-endian
/// `qh`) is set (byte `i`: all ones).
#[inline(always)]
pub(super) unsafe fn q5_parts(blk: *const u8) -> (__m256i, __m256i) {
    let q = _mm_loadu_si128(blk.add(6) as *const __m128i);
    let nib = _mm_set1_epi8(0x0F);
    let (lo, hi) = (
        _mm_and_si128(q, nib),
        _mm_and_si128(_mm_srli_epi16::<4>(q), nib),
    );
    // Byte k of each 128-bit lane gets byte k/8 of its half of qh (the low
    // lane bits 0..15, the high lane 16..31), then its own bit.
    let qh = _mm256_set1_epi32((blk.add(2) as *const i32).read_unaligned());
    let spread = _mm256_shuffle_epi8(
        qh,
        _mm256_setr_epi8(
            0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, //
            2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
        ),
    );
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201_u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    (_mm256_set_m128i(hi, lo), set)
}

/// Blocks in their own order: lane `k` holds block `k`.
pub(super) const IN_ORDER: [usize; 8] = [0, 1, 2, 3, 4, 5, 6, 7];

/// The f16 scales of 8 blocks at `g` (`bb` bytes apart), block `order[k]`
/// in lane `k`, as f32. Put together in general registers: a chain of 8
/// `vpinsrw` costs 16 vector µops on Zen 1 and 2, where the decode kernels
/// are bound by them, and would load port 5, which the AVX-512 shuffles need.
#[inline(always)]
pub(super) unsafe fn q80_scales(g: *const u8, bb: usize, order: [usize; 8]) -> __m256 {
    let h = |k: usize| (g.add(bb * order[k]) as *const u16).read_unaligned() as u64;
    let four = |k: usize| h(k) | h(k + 1) << 16 | h(k + 2) << 32 | h(k + 3) << 48;
    _mm256_cvtph_ps(_mm_set_epi64x(four(4) as i64, four(0) as i64))
}

/// Add the terms of leftover blocks `b0..nb` into `p` (lane `b mod 8` of
/// each pair's partials, as the reference's `p[b % 8] += t`), a block at a
/// time: its integer from one vector product (AVX2 instructions, which
/// the AVX-512 kernels run too), the f32 tail in scalar.
#[inline(always)]
pub(super) unsafe fn q80_rest<const R: usize, const T: usize, const NIB: usize>(
    w: *const u8,
    rb: usize,
    x: &Toks,
    b0: usize,
    nb: usize,
    p: &mut [[[f32; 8]; T]; R],
) {
    let ones = _mm256_set1_epi16(1);
    let (bb, levels) = (block_bytes(NIB), nib_levels::<NIB>());
    for b in b0..nb {
        for r in 0..R {
            let blk = w.add(r * rb + bb * b);
            let wv = q80_quants::<NIB>(blk, levels);
            let wa = _mm256_abs_epi8(wv);
            let d = block_scale::<NIB>(blk);
            for t in 0..T {
                let xv = _mm256_loadu_si256(x.qs[t].add(32 * b) as *const __m256i);
                let v = _mm256_madd_epi16(_mm256_maddubs_epi16(wa, _mm256_sign_epi8(xv, wv)), ones);
                let i = hsum_i32(v);
                p[r][t][b % 8] += (d * *x.d[t].add(b)) * i as f32;
            }
        }
    }
}

/// Σ of the 8 i32 lanes of `v` (exact: integer adds).
#[inline(always)]
pub(super) unsafe fn hsum_i32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0x4E>(s));
    _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32::<0xB1>(s)))
}

/// The canonical tree of one pair's 8 partials (lane k = `p[k]`).
#[inline(always)]
pub(super) unsafe fn tree8(p: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(p), _mm256_extractf128_ps::<1>(p));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

/// One pair's partials, stored as the reference's `p`.
#[inline(always)]
pub(super) unsafe fn to_partials<const R: usize, const T: usize>(
    p: &[[__m256; T]; R],
) -> [[[f32; 8]; T]; R] {
    std::mem::transmute_copy(p)
}

/// The final sums of each pair into lanes `4r + t`.
#[inline(always)]
pub(super) unsafe fn q80_finish<const R: usize, const T: usize>(
    p: [[[f32; 8]; T]; R],
) -> [f32; 16] {
    let mut out = [0f32; 16];
    for r in 0..R {
        for t in 0..T {
            out[4 * r + t] = tree8(_mm256_loadu_ps(p[r][t].as_ptr()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kernel of every path this CPU runs (AVX-512 with and without
    /// VNNI included) gives the reference's bits, for every shape.
    #[test]
    fn kernels_give_the_reference_bits() {
        if !crate::simd::Isa::Avx2.is_available() {
            return;
        }
        let mut sets = vec![&Y];
        if crate::simd::Isa::Avx512.is_available() {
            sets.push(&Z);
            if vnni() {
                sets.push(&Z_VNNI);
            }
        }
        let at = |d: DType| TABLE_DTYPES.iter().position(|&x| x == d);
        for set in sets {
            // SAFETY: the CPU runs the set (checked above).
            unsafe { groups::check_kernels(|d| at(d).map(|i| &set[i])) }
        }
    }
}
