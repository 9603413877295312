//! The driver of the in-register kernels (x86 `x86`, aarch64 `neon`): a
//! kernel multiplies `R` ∈ {1, 4} consecutive weight rows by `T` ≤
//! [`TOKENS`] tokens, decoding every weight vector once for all `T`, and
//! returns its results in lanes `4r + t` of a `[f32; 16]`. [`run`] walks a
//! product's rows and tokens through those shapes.

use super::Q8Rows;
use crate::matmul::MatRef;
use crate::threads::SharedMut;
use rill_dtype::DType;

/// Tokens of one kernel call at most.
pub(super) const TOKENS: usize = 4;
/// Bytes of weight rows that see every token group before the next rows
/// when there are more than [`TOKENS`] tokens: they stay in L1/L2.
const PASS_BYTES: usize = 32 * 1024;

/// `[e(0), .., e(n − 1)]`, built by a plain loop: closures handed to
/// `array::from_fn` / `map` lose the target features and are not inlined,
/// so intrinsics inside them would become calls.
macro_rules! arr {
    ($n:expr, |$i:ident| $e:expr) => {{
        let mut a = [std::mem::zeroed(); $n];
        for $i in 0..$n {
            a[$i] = $e;
        }
        a
    }};
}

/// A kernel [`Table`] of the entry point `$f::<R, T>`.
macro_rules! shapes {
    ($f:ident) => {
        [
            [$f::<1, 1>, $f::<1, 2>, $f::<1, 3>, $f::<1, 4>],
            [$f::<4, 1>, $f::<4, 2>, $f::<4, 3>, $f::<4, 4>],
        ]
    };
}

/// Kernel entry points with the target features `$feat`: `$name::<R, T>`
/// runs `$body` (an `#[inline(always)]` function) with its extra arguments.
macro_rules! entry {
    ($feat:literal: $($name:ident = $body:ident::<$($arg:literal),*>;)*) => {$(
        #[target_feature(enable = $feat)]
        unsafe fn $name<const R: usize, const T: usize>(
            w: *const u8,
            rb: usize,
            x: &Toks,
            nb: usize,
        ) -> [f32; 16] {
            $body::<R, T, $($arg),*>(w, rb, x, nb)
        }
    )*};
}

/// As [`entry!`], for kernels of one shape (4 rows × 1 token): `$name`
/// runs `$body` with its extra arguments. (Only the x86 path has them.)
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_macros))]
macro_rules! decode_entry {
    ($feat:literal: $($name:ident = $body:ident::<$($arg:literal),*>;)*) => {$(
        #[target_feature(enable = $feat)]
        unsafe fn $name(w: *const u8, rb: usize, x: &Toks, nb: usize) -> [f32; 16] {
            $body::<$($arg),*>(w, rb, x, nb)
        }
    )*};
}

/// The encodings of the Q8_0-shaped kernels, by `NIB`: Q8_0 (0), or Q4_0
/// (1) / IQ4_NL (2) / MXFP4 (3) / Q5_0 (4), whose blocks the kernels widen
/// in registers to the Q8_0 blocks of their levels, and (NEON) Q4_1 (5) /
/// Q5_1 (6), whose unsigned quants take their mins apart.
pub(super) const NIB_DTYPES: [DType; 7] = [
    DType::Q8_0,
    DType::Q4_0,
    DType::IQ4NL,
    DType::MXFP4,
    DType::Q5_0,
    DType::Q4_1,
    DType::Q5_1,
];

/// Bytes of a block of encoding `nib`.
pub(super) const fn block_bytes(nib: usize) -> usize {
    match nib {
        0 => 34,
        3 => 17,
        4 => 22,
        5 => 20,
        6 => 24,
        _ => 18,
    }
}

/// Where a block of encoding `nib` keeps its quants: after its f16 scale,
/// its E8M0 byte (MXFP4), its f16 scale and 32 fifth bits (Q5_0), its f16
/// scale and min (Q4_1), or those and 32 fifth bits (Q5_1).
pub(super) const fn quants_at(nib: usize) -> usize {
    match nib {
        3 => 1,
        4 => 6,
        5 => 4,
        6 => 8,
        _ => 2,
    }
}

/// Up to four tokens' quantized activations (unused slots repeat the last).
pub(super) struct Toks {
    pub(super) qs: [*const i8; TOKENS],
    pub(super) d: [*const f32; TOKENS],
    pub(super) sums: [*const i16; TOKENS],
}

impl Toks {
    pub(super) fn new(acts: Q8Rows<'_>, t0: usize, nt: usize) -> Toks {
        let row = |t: usize| acts.row(t0 + t.min(nt - 1));
        Toks {
            qs: std::array::from_fn(|t| row(t).qs.as_ptr()),
            d: std::array::from_fn(|t| row(t).d.as_ptr()),
            sums: std::array::from_fn(|t| row(t).sums.as_ptr()),
        }
    }
}

/// `R` rows from `w` (`row_bytes` apart, `nb` blocks each) × `T` tokens.
pub(super) type Kernel = unsafe fn(*const u8, usize, &Toks, usize) -> [f32; 16];
/// A kernel for each shape: `[R = 1, R = 4][T − 1]`.
pub(super) type Table = [[Kernel; TOKENS]; 2];

/// Rows `r0..r1` of `w` × every token of `acts` into `out` (as `q8::rows`),
/// with the kernels `k` of `w`'s encoding. Row `r` of `w` is row
/// `out_row0 + r` of the output, which has `out_rows` rows per token (`w`
/// may be a slab of a larger matrix: `0` and `w.rows` when it is not).
///
/// # Safety
/// As `q8::rows`; the CPU runs the kernels of `k`.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn run(
    k: &Table,
    w: MatRef<'_>,
    acts: Q8Rows<'_>,
    r0: usize,
    r1: usize,
    out: SharedMut<f32>,
    out_rows: usize,
    out_row0: usize,
) {
    let (rb, nb, n) = (w.row_bytes(), w.cols / w.dtype.block_len(), acts.n());
    if n == 0 || nb == 0 {
        return;
    }
    // One token group: one pass. More: passes over rows that stay cached
    // while every group goes by, so the weights come from DRAM once.
    let pass = if n <= TOKENS {
        r1 - r0
    } else {
        (PASS_BYTES / rb).max(4) / 4 * 4
    };
    let mut pa = r0;
    while pa < r1 {
        let pe = (pa + pass).min(r1);
        let mut t0 = 0;
        while t0 < n {
            let nt = (n - t0).min(TOKENS);
            let toks = Toks::new(acts, t0, nt);
            let mut r = pa;
            while r < pe {
                let nr = if pe - r >= 4 { 4 } else { 1 };
                // SAFETY: rows r..r + nr are whole rows of `w`; `toks`
                // holds nt tokens of nb blocks in the weights' format.
                let res = k[nr / 4][nt - 1](w.data.as_ptr().add(r * rb), rb, &toks, nb);
                for i in 0..nr {
                    for t in 0..nt {
                        // SAFETY: inside the output; row r + i is ours.
                        *out.at((t0 + t) * out_rows + out_row0 + r + i) = res[4 * i + t];
                    }
                }
                r += nr;
            }
            t0 += nt;
        }
        pa = pe;
    }
}

/// Test weights of `dtype`: `rows` rows of `cols` values, every byte
/// random (or all `fill`: with 0xFF the largest quants, scales and mins,
/// Q6_K scale −1, Q8_0 −1; 0x80 Q6_K scales −128, Q8_0 quants −128; 0x00
/// Q6_K quants −32), then each block's f16 scale set to a small random
/// value (and Q4_K / Q5_K's `dmin`, Q4_1 / Q5_1's min: 0.3 of it; MXFP4 an
/// E8M0 among the subnormal halves, unit and large scales; IQ1_M its `d` in
/// the scale words' top nibbles).
#[cfg(test)]
pub(super) fn test_blocks(
    dtype: DType,
    rows: usize,
    cols: usize,
    fill: Option<u8>,
    rnd: &mut impl FnMut() -> u64,
) -> Vec<u8> {
    let f16 = |v: f32| half::f16::from_f32(v).to_bits().to_le_bytes();
    let (bb, bl) = (dtype.block_bytes(), dtype.block_len());
    let mut data: Vec<u8> = (0..rows * cols / bl * bb)
        .map(|_| fill.unwrap_or(rnd() as u8))
        .collect();
    for blk in data.chunks_exact_mut(bb) {
        if dtype == DType::MXFP4 {
            blk[0] = [0u8, 1, 2, 100, 120, 127, 134, 160][(rnd() % 8) as usize];
            continue;
        }
        let s = (rnd() % 1000) as f32 / 1e4;
        if dtype == DType::IQ1M {
            let d = half::f16::from_f32(s).to_bits();
            for k in 0..4 {
                let nib = ((d >> (4 * k)) & 0xF) as u8;
                blk[49 + 2 * k] = (blk[49 + 2 * k] & 0x0F) | nib << 4;
            }
            continue;
        }
        let d_at = if matches!(dtype, DType::Q6K | DType::Q6KPlanar) {
            208
        } else {
            0
        };
        blk[d_at..d_at + 2].copy_from_slice(&f16(s));
        if matches!(dtype, DType::Q4K | DType::Q5K | DType::Q4_1 | DType::Q5_1) {
            blk[2..4].copy_from_slice(&f16(s * 0.3));
        }
    }
    data
}

/// Test activations: `n` rows of `cols` values, random in ±10, or (with a
/// `fill`, the bounds' test) rows of +1, −1 and random values in turn.
#[cfg(test)]
pub(super) fn test_acts(
    n: usize,
    cols: usize,
    fill: Option<u8>,
    rnd: &mut impl FnMut() -> u64,
) -> Vec<f32> {
    (0..n * cols)
        .map(|i| match (fill, (i / cols) % 3) {
            (Some(_), 0) => 1.0,
            (Some(_), 1) => -1.0,
            _ => (rnd() % 2001) as f32 / 100.0 - 10.0,
        })
        .collect()
}

/// Every kernel of `table(dtype)` gives the reference's bits, for every
/// shape: on random blocks and on blocks at the extremes of the kernels'
/// bounds (largest quants, scales and mins; activations all ±127).
///
/// # Safety
/// The CPU runs the kernels `table` returns.
#[cfg(test)]
pub(super) unsafe fn check_kernels(table: impl Fn(rill_dtype::DType) -> Option<&'static Table>) {
    use super::{dot_ref, ActFormat};
    use rill_dtype::DType;
    let mut rnd = crate::test_util::xorshift(0x9E37_79B9_7F4A_7C15);
    for (dtype, cols) in [
        (DType::Q4K, 2304),
        (DType::Q5K, 512),
        (DType::Q6K, 2560),
        (DType::Q6KPlanar, 2560),
        (DType::Q8_0, 352),
        (DType::Q8_0, 96),
        (DType::Q4_0, 352),
        (DType::IQ4NL, 288),
        (DType::MXFP4, 288),
        (DType::MXFP4, 96),
        (DType::IQ4XS, 768),
        (DType::Q5_0, 352),
        (DType::Q5_0, 96),
        (DType::Q4_1, 352),
        (DType::Q5_1, 288),
        (DType::Q5_1, 64),
    ] {
        // a path without kernels for an encoding runs the reference
        let Some(k) = table(dtype) else { continue };
        let rows = 4;
        let bl = dtype.block_len();
        for fill in [None, Some(0xFFu8), Some(0x80), Some(0x00)] {
            let data = test_blocks(dtype, rows, cols, fill, &mut rnd);
            let w = MatRef::new(dtype, rows, cols, &data);
            let n = 4;
            let xf = test_acts(n, cols, fill, &mut rnd);
            let mut acts = crate::q8::Q8Acts::default();
            acts.quantize(ActFormat::for_weights(dtype).unwrap(), &xf, n, cols);
            let nb = cols / bl;
            for (ri, nr) in [(0, 1), (1, 4)] {
                for nt in 1..=n {
                    let toks = Toks::new((&acts).into(), 0, nt);
                    // SAFETY: the CPU runs the kernels (caller); whole
                    // rows and blocks.
                    let res = unsafe { k[ri][nt - 1](data.as_ptr(), w.row_bytes(), &toks, nb) };
                    for r in 0..nr {
                        for t in 0..nt {
                            let want = dot_ref(dtype, w.row(r), acts.row(t));
                            assert_eq!(
                                res[4 * r + t].to_bits(),
                                want.to_bits(),
                                "{dtype} fill {fill:?} R{nr} T{nt} r{r} t{t}"
                            );
                        }
                    }
                }
            }
        }
    }
}
