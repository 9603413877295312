//! The driver of the in-register kernels (x86 `x86`, aarch64 `neon`): a
//! kernel multiplies `R` ∈ {1, 4} consecutive weight rows by `T` ≤
//! [`TOKENS`] tokens, decoding every weight vector once for all `T`, and
//! returns its results in lanes `4r + t` of a `[f32; 16]`. [`run`] walks a
//! product's rows and tokens through those shapes.

use super::Q8Acts;
use crate::matmul::MatRef;
use crate::threads::SharedMut;

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

/// Up to four tokens' quantized activations (unused slots repeat the last).
pub(super) struct Toks {
    pub(super) qs: [*const i8; TOKENS],
    pub(super) d: [*const f32; TOKENS],
    pub(super) sums: [*const i16; TOKENS],
}

impl Toks {
    pub(super) fn new(acts: &Q8Acts, t0: usize, nt: usize) -> Toks {
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
/// with the kernels `k` of `w`'s encoding.
///
/// # Safety
/// As `q8::rows`; the CPU runs the kernels of `k`.
pub(super) unsafe fn run(
    k: &Table,
    w: MatRef<'_>,
    acts: &Q8Acts,
    r0: usize,
    r1: usize,
    out: SharedMut<f32>,
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
                        *out.at((t0 + t) * w.rows + r + i) = res[4 * i + t];
                    }
                }
                r += nr;
            }
            t0 += nt;
        }
        pa = pe;
    }
}
