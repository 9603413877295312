//! Instruction-set dispatch for the weight kernels.
//!
//! Every kernel has a portable scalar reference (in [`crate::quant`] and
//! [`crate::ops`]) and, where the CPU allows, hand-written SIMD versions. Which
//! one runs is an [`Isa`], the kernel class: chosen once by the caller (the
//! user's `--kernels`, else [`Isa::best`], the fastest class the CPU runs)
//! and passed to every kernel call, so that tests and benchmarks can run
//! every class available on one machine against the scalar one. No kernel
//! picks a class by itself.
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

/// `s + Σ w[c]·x[c]` over `from..cols`, element by element in order: the
/// columns past the last whole vector of every microkernel output
/// (`gemm` of each SIMD path).
#[allow(dead_code)]
#[inline(always)]
pub(crate) unsafe fn gemm_tail(
    w: *const f32,
    x: *const f32,
    from: usize,
    cols: usize,
    mut s: f32,
) -> f32 {
    for c in from..cols {
        s += *w.add(c) * *x.add(c);
    }
    s
}

/// The end of a microkernel tile (`gemm` of each SIMD path): output
/// `(r, t)` of `R × T` is `$sum` (its accumulators' horizontal sum, with
/// `$r`, `$t` bound) plus [`gemm_tail`] from column `$full`, row-major
/// into `$out`.
macro_rules! gemm_finish {
    ($R:ident, $T:ident, ($w:ident, $x:ident, $cols:ident, $full:ident, $out:ident), |$r:ident, $t:ident| $sum:expr) => {
        for $r in 0..$R {
            for $t in 0..$T {
                let s = $sum;
                $out[$r * $T + $t] = $crate::simd::gemm_tail(
                    $w.add($r * $cols),
                    $x.add($t * $cols),
                    $full,
                    $cols,
                    s,
                );
            }
        }
    };
}
#[allow(unused_imports)]
pub(crate) use gemm_finish;

/// `$f::<nr, 1>($args)` for a run-time `nr` in 1..=8 (8 for larger): the
/// one-token microkernel tiles of each SIMD path's `gemm`.
macro_rules! one_token_tile {
    ($f:ident, $nr:expr, $args:tt) => {
        match $nr {
            1 => $f::<1, 1> $args,
            2 => $f::<2, 1> $args,
            3 => $f::<3, 1> $args,
            4 => $f::<4, 1> $args,
            5 => $f::<5, 1> $args,
            6 => $f::<6, 1> $args,
            7 => $f::<7, 1> $args,
            _ => $f::<8, 1> $args,
        }
    };
}
#[allow(unused_imports)]
pub(crate) use one_token_tile;

/// `$f::<nr>($args)` for a run-time `nr` in 1..=4 (4 for larger): the
/// row counts of each SIMD path's `gemm` tiles.
macro_rules! by_rows {
    ($f:ident, $nr:expr, $args:tt) => {
        match $nr {
            1 => $f::<1> $args,
            2 => $f::<2> $args,
            3 => $f::<3> $args,
            _ => $f::<4> $args,
        }
    };
}
#[allow(unused_imports)]
pub(crate) use by_rows;

/// Run `$body` (which calls `#[inline(always)]` code on the named
/// parameters) compiled for the widest vectors `$isa` has, returning from
/// the enclosing function: an AVX-512F build or an AVX2 one (with FMA),
/// from the same source. On other instruction sets it does nothing, and
/// the caller's portable code that follows runs. The builds run the same
/// IEEE operations in the same order (Rust never fuses a multiply and an
/// add by itself), so element-wise code gives the same bits on every path.
/// The caller must have checked that the CPU runs `$isa` (`Isa::check`).
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
                $crate::simd::Isa::Avx512 | $crate::simd::Isa::Amx => {
                    return unsafe { wide($($a),*) }
                }
                // SAFETY: as above.
                $crate::simd::Isa::Avx2 | $crate::simd::Isa::AvxVnni => {
                    return unsafe { mid($($a),*) }
                }
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

/// A kernel class: the family of kernels every product and element-wise
/// loop runs, chosen once (by the user, or [`Isa::best`] by default) and
/// passed down to every kernel call as a value.
///
/// The float kernels know two x86 vector widths: [`Isa::Avx2`] and
/// [`Isa::AvxVnni`] run the 256-bit ones, [`Isa::Avx512`] and [`Isa::Amx`]
/// the 512-bit ones. The classes differ further in the integer products
/// of [`crate::q8`]: `vpmaddubsw`/`vpmaddwd` (AVX2), 256-bit `vpdpbusd`
/// (AVX-VNNI), AVX-512 with VNNI where the CPU has it, and AMX tiles for
/// many-token products (AMX).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Isa {
    /// The portable reference code (auto-vectorised where the compiler can).
    Scalar,
    /// x86-64 with AVX2, FMA and F16C.
    Avx2,
    /// [`Isa::Avx2`] plus the VEX-encoded AVX-VNNI dot products (Intel
    /// Alder Lake and later clients, AMD Zen 5).
    AvxVnni,
    /// x86-64 with AVX-512F/BW/VL on top of [`Isa::Avx2`] (and AVX-512
    /// VNNI's dot products where the CPU has them). Encodings without an
    /// AVX-512 kernel use the AVX2 one.
    Avx512,
    /// [`Isa::Avx512`] plus AMX-INT8 tiles for the many-token integer
    /// products (Intel Sapphire Rapids and later).
    Amx,
    /// aarch64 with NEON (Advanced SIMD). Matmul outputs are bit-identical
    /// to [`Isa::Avx2`]'s (the same canonical order); encodings without a
    /// NEON decoder use the scalar one.
    #[cfg(target_arch = "aarch64")]
    Neon,
}

/// The names `--kernels` takes, in the order of [`Isa::available`].
pub const CLASS_NAMES: [&str; 6] = ["scalar", "avx2", "avx-vnni", "avx512", "amx", "neon"];

impl Isa {
    /// The fastest class this CPU supports, detected on first use.
    #[inline]
    pub fn best() -> Isa {
        *available().last().unwrap_or(&Isa::Scalar)
    }

    /// Every class this CPU can run, slowest (scalar) first.
    pub fn available() -> Vec<Isa> {
        available().to_vec()
    }

    /// Whether this CPU can run the class.
    pub fn is_available(self) -> bool {
        available().contains(&self)
    }

    /// The class's name, as `--kernels` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::AvxVnni => "avx-vnni",
            Isa::Avx512 => "avx512",
            Isa::Amx => "amx",
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => "neon",
        }
    }

    /// The class of a name this build knows (whether or not this CPU runs
    /// it: see [`Isa::require`]).
    pub fn from_name(name: &str) -> Result<Isa, String> {
        Ok(match name {
            "scalar" => Isa::Scalar,
            "avx2" => Isa::Avx2,
            "avx-vnni" | "avxvnni" => Isa::AvxVnni,
            "avx512" => Isa::Avx512,
            "amx" => Isa::Amx,
            #[cfg(target_arch = "aarch64")]
            "neon" => Isa::Neon,
            #[cfg(not(target_arch = "aarch64"))]
            "neon" => return Err("the neon kernels run only on aarch64 CPUs".to_string()),
            _ => {
                return Err(format!(
                    "unknown kernel class {name:?} (expected one of {})",
                    CLASS_NAMES.join(", ")
                ))
            }
        })
    }

    /// The class itself if this CPU runs it, else an error naming the CPU,
    /// what the class needs and the classes it does run.
    pub fn require(self) -> Result<Isa, String> {
        if self.is_available() {
            return Ok(self);
        }
        let have: Vec<&str> = available().iter().map(|i| i.name()).collect();
        Err(format!(
            "this CPU ({}) cannot run the {} kernels (they need {}); it runs: {}",
            cpu_name(),
            self.name(),
            self.needs(),
            have.join(", ")
        ))
    }

    /// What the class needs of the CPU, in words.
    pub fn needs(self) -> &'static str {
        match self {
            Isa::Scalar => "nothing",
            Isa::Avx2 => "x86-64 with AVX2, FMA and F16C",
            Isa::AvxVnni => "x86-64 with AVX2, FMA, F16C and AVX-VNNI",
            Isa::Avx512 => "x86-64 with AVX2, FMA, F16C and AVX-512 F/BW/VL",
            Isa::Amx => {
                "x86-64 with AVX-512 F/BW/VL/VBMI/VNNI and AMX-INT8, and an OS that grants the tiles"
            }
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => "aarch64 with NEON",
        }
    }

    /// Whether the float kernels of this class use 512-bit vectors.
    /// (Only the x86 kernels ask.)
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    #[inline]
    pub(crate) fn wide(self) -> bool {
        matches!(self, Isa::Avx512 | Isa::Amx)
    }

    /// Panics unless the CPU supports this class: the SIMD kernels must
    /// never run on a CPU without their instructions.
    #[inline]
    pub(crate) fn check(self) {
        if self != Isa::Scalar && !self.is_available() {
            unavailable(self);
        }
    }
}

impl std::fmt::Display for Isa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Isa {
    type Err = String;
    /// A class this CPU runs ([`Isa::from_name`], then [`Isa::require`]).
    fn from_str(s: &str) -> Result<Isa, String> {
        Isa::from_name(s)?.require()
    }
}

/// The classes this CPU runs, slowest first (detected once: a fact about
/// the CPU, not a setting).
fn available() -> &'static [Isa] {
    static AVAILABLE: OnceLock<Vec<Isa>> = OnceLock::new();
    AVAILABLE.get_or_init(|| {
        [
            Isa::Scalar,
            Isa::Avx2,
            Isa::AvxVnni,
            Isa::Avx512,
            Isa::Amx,
            #[cfg(target_arch = "aarch64")]
            Isa::Neon,
        ]
        .into_iter()
        .filter(|i| detect(*i))
        .collect()
    })
}

#[cold]
#[inline(never)]
fn unavailable(isa: Isa) -> ! {
    panic!(
        "rill-kernels: this CPU cannot run the {} kernels",
        isa.name()
    )
}

/// Runtime CPU-feature detection of one class (no environment variable is
/// consulted: the class is a value the caller passes down).
fn detect(isa: Isa) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        let avx2 = has!("avx2") && has!("fma") && has!("f16c");
        let avx512 = avx2 && has!("avx512f") && has!("avx512bw") && has!("avx512vl");
        match isa {
            Isa::Scalar => true,
            Isa::Avx2 => avx2,
            Isa::AvxVnni => avx2 && has!("avxvnni"),
            Isa::Avx512 => avx512,
            Isa::Amx => avx512 && crate::q8::amx_usable(),
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        match isa {
            Isa::Neon => std::arch::is_aarch64_feature_detected!("neon"),
            Isa::Scalar => true,
            _ => false,
        }
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        isa == Isa::Scalar
    }
}

/// The CPU's model name (the x86 brand string, or `/proc/cpuinfo`'s), for
/// logs and benchmark reports. On x86-64 the family and model numbers
/// follow it: virtual machines often report a bare "AMD EPYC" for every
/// generation, and Zen 1 (family 23) or Zen 3 (family 25, model 0-15)
/// differ in what the kernels can reach.
pub fn cpu_name() -> String {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(read_cpu_name).clone()
}

/// The display family and model of CPUID leaf 1's `eax` (the extended
/// fields count where the base family is 15, and for the model also 6).
#[cfg(target_arch = "x86_64")]
fn x86_family_model(eax: u32) -> (u32, u32) {
    let base_family = (eax >> 8) & 0xF;
    let base_model = (eax >> 4) & 0xF;
    let family = if base_family == 0xF {
        base_family + ((eax >> 20) & 0xFF)
    } else {
        base_family
    };
    let model = if base_family == 0xF || base_family == 6 {
        base_model | ((eax >> 16) & 0xF) << 4
    } else {
        base_model
    };
    (family, model)
}

fn read_cpu_name() -> String {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::__cpuid;
        // Leaves 0x8000_0002..4 hold the 48-byte brand string, where the
        // extended leaves reach that far.
        if __cpuid(0x8000_0000).eax >= 0x8000_0004 {
            let mut bytes = Vec::with_capacity(48);
            for leaf in 0x8000_0002u32..=0x8000_0004 {
                let r = __cpuid(leaf);
                for v in [r.eax, r.ebx, r.ecx, r.edx] {
                    bytes.extend_from_slice(&v.to_le_bytes());
                }
            }
            let s = String::from_utf8_lossy(&bytes);
            let s = s.trim_matches(char::from(0)).trim();
            if !s.is_empty() {
                let (family, model) = x86_family_model(__cpuid(1).eax);
                let name = s.split_whitespace().collect::<Vec<_>>().join(" ");
                return format!("{name} (family {family} model {model})");
            }
        }
    }
    if let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") {
        for line in info.lines() {
            let (key, value) = line.split_once(':').unwrap_or((line, ""));
            let key = key.trim();
            if matches!(key, "model name" | "Model" | "Hardware") && !value.trim().is_empty() {
                return value.trim().to_string();
            }
        }
    }
    format!("unknown {} CPU", std::env::consts::ARCH)
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::x86_family_model;

    #[test]
    fn family_and_model_read_the_extended_fields() {
        // CPUID signatures of real parts: EPYC 7551 (Zen 1), EPYC 7763
        // (Zen 3), EPYC 9654 (Zen 4), Xeon Sapphire Rapids.
        assert_eq!(x86_family_model(0x0080_0F12), (23, 1));
        assert_eq!(x86_family_model(0x00A0_0F11), (25, 1));
        assert_eq!(x86_family_model(0x00A1_0F11), (25, 17));
        assert_eq!(x86_family_model(0x0008_06F8), (6, 143));
    }
}
