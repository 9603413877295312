//! Instruction-set dispatch for the weight kernels.
//!
//! Every kernel has a portable scalar reference (in [`crate::quant`] and
//! [`crate::ops`]) and, where the CPU allows, hand-written SIMD versions. Which
//! one runs is an [`Isa`]: [`Isa::best`] is detected once per process (a cached
//! fact about the CPU, not a setting) and used by the plain entry points
//! (`quant::dot`, `quant::dequantize`, `ops::dot_f32`, ...); the `*_with`
//! variants take the [`Isa`] explicitly so tests and benchmarks can run every
//! path available on one machine against the scalar one.
//!
//! Layout: `x86` holds the x86-64 kernels (AVX2+FMA+F16C, plus AVX-512 for the
//! hottest encodings), compiled only on x86-64; `neon` holds the aarch64 ones
//! (exact decoders, the matmul microkernel in the AVX2 order, f32 dot / axpy),
//! compiled only on aarch64, where [`Isa`] has its `Neon` variant. Each
//! dispatching function (`quant::dot_with`, ...) has one arm per family.

use std::sync::OnceLock;

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;

#[cfg(target_arch = "aarch64")]
pub(crate) mod neon;

/// Rows and most tokens of one in-register canonical kernel call
/// (`canon_tile` of a SIMD path; see `crate::gemm::fused_rows`).
pub(crate) const CANON_ROWS: usize = 4;
pub(crate) const CANON_TOKENS: usize = 4;

/// Call the in-register kernel `$f::<R, T>(w, x, cols)` of a SIMD path for
/// `nr` encoded rows (`row_bytes` each) at the raw pointer `w` and `nt`
/// tokens at `x`: four rows at a time, or one at a time at the end of a
/// task's range; results row-major into `out`. Evaluates to `true`.
macro_rules! canon_shapes {
    ($m:ident :: $f:ident, $w:expr, $x:expr, $cols:expr, $nr:expr, $nt:expr, $row_bytes:expr, $out:expr) => {{
        let (w, x, cols, nt, out): (*const u8, *const f32, usize, usize, &mut [f32]) =
            ($w, $x, $cols, $nt, $out);
        if $nr == $crate::simd::CANON_ROWS {
            match nt {
                1 => $crate::simd::flat(&$m::$f::<4, 1>(w, x, cols), out),
                2 => $crate::simd::flat(&$m::$f::<4, 2>(w, x, cols), out),
                3 => $crate::simd::flat(&$m::$f::<4, 3>(w, x, cols), out),
                _ => $crate::simd::flat(&$m::$f::<4, 4>(w, x, cols), out),
            }
        } else {
            for r in 0..$nr {
                let (wr, o) = (w.add(r * $row_bytes), &mut out[r * nt..]);
                match nt {
                    1 => $crate::simd::flat(&$m::$f::<1, 1>(wr, x, cols), o),
                    2 => $crate::simd::flat(&$m::$f::<1, 2>(wr, x, cols), o),
                    3 => $crate::simd::flat(&$m::$f::<1, 3>(wr, x, cols), o),
                    _ => $crate::simd::flat(&$m::$f::<1, 4>(wr, x, cols), o),
                }
            }
        }
        true
    }};
}
#[allow(unused_imports)]
pub(crate) use canon_shapes;

/// Run `$body` (which calls `#[inline(always)]` code on the named
/// parameters) compiled for the widest vectors `$isa` has, returning from
/// the enclosing function: an AVX-512F build or an AVX2 one (with FMA),
/// from the same source. On other instruction sets it does nothing, and
/// the caller's portable code that follows runs. The builds run the same
/// IEEE operations in the same order (Rust never fuses a multiply and an
/// add by itself), so element-wise code gives the same bits on every path.
/// The caller must have checked that the CPU runs `$isa` (`Isa::best`,
/// `Isa::check`).
macro_rules! on_widest_vectors {
    ($isa:expr, ($($p:ident: $t:ty = $a:expr),* $(,)?) => $body:expr) => {
        #[cfg(target_arch = "x86_64")]
        {
            #[target_feature(enable = "avx512f,fma")]
            unsafe fn wide($($p: $t),*) {
                $body
            }
            #[target_feature(enable = "avx2,fma")]
            unsafe fn mid($($p: $t),*) {
                $body
            }
            match $isa {
                // SAFETY: the caller checked that the CPU runs `$isa`.
                $crate::simd::Isa::Avx512 => return unsafe { wide($($a),*) },
                // SAFETY: as above.
                $crate::simd::Isa::Avx2 => return unsafe { mid($($a),*) },
                _ => {}
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = $isa;
    };
}
pub(crate) use on_widest_vectors;

/// A kernel's `R × T` results into `out` (row-major).
#[allow(dead_code)]
pub(crate) fn flat<const R: usize, const T: usize>(v: &[[f32; T]; R], out: &mut [f32]) {
    for r in 0..R {
        out[r * T..(r + 1) * T].copy_from_slice(&v[r]);
    }
}

/// A kernel implementation family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Isa {
    /// The portable reference code (auto-vectorised where the compiler can).
    Scalar,
    /// x86-64 with AVX2, FMA and F16C.
    Avx2,
    /// x86-64 with AVX-512F/BW/VL on top of [`Isa::Avx2`]. Encodings without
    /// an AVX-512 kernel use the AVX2 one.
    Avx512,
    /// aarch64 with NEON (Advanced SIMD). Matmul outputs are bit-identical
    /// to [`Isa::Avx2`]'s (the same canonical order); encodings without a
    /// NEON decoder use the scalar one.
    #[cfg(target_arch = "aarch64")]
    Neon,
}

impl Isa {
    /// The fastest path this CPU supports, detected on first use.
    #[inline]
    pub fn best() -> Isa {
        static BEST: OnceLock<Isa> = OnceLock::new();
        *BEST.get_or_init(detect)
    }

    /// Every path this CPU can run, slowest (scalar) first.
    pub fn available() -> Vec<Isa> {
        [
            Isa::Scalar,
            Isa::Avx2,
            Isa::Avx512,
            #[cfg(target_arch = "aarch64")]
            Isa::Neon,
        ]
        .into_iter()
        .filter(|i| i.is_available())
        .collect()
    }

    /// Whether this CPU can run the path.
    pub fn is_available(self) -> bool {
        match self {
            Isa::Scalar => true,
            Isa::Avx2 => matches!(Isa::best(), Isa::Avx2 | Isa::Avx512),
            Isa::Avx512 => Isa::best() == Isa::Avx512,
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => Isa::best() == Isa::Neon,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => "neon",
        }
    }

    /// Panics unless the CPU supports this path: the SIMD kernels must never
    /// run on a CPU without their instructions.
    #[inline]
    pub(crate) fn check(self) {
        if self != Isa::Scalar && !self.is_available() {
            unavailable(self);
        }
    }
}

#[cold]
#[inline(never)]
fn unavailable(isa: Isa) -> ! {
    panic!(
        "rill-kernels: this CPU cannot run the {} kernels",
        isa.name()
    )
}

/// Runtime CPU-feature detection. `RILL_ISA` is deliberately not consulted:
/// tests and benchmarks pick a path with the `*_with` functions instead.
fn detect() -> Isa {
    #[cfg(target_arch = "x86_64")]
    {
        let avx2 = std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("f16c");
        let avx512 = std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vl");
        if avx2 && avx512 {
            return Isa::Avx512;
        }
        if avx2 {
            return Isa::Avx2;
        }
    }
    #[cfg(target_arch = "aarch64")]
    if std::arch::is_aarch64_feature_detected!("neon") {
        return Isa::Neon;
    }
    Isa::Scalar
}
