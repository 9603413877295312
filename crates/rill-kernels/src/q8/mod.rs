//! Matrix products with 8-bit activations: the opt-in fast numerics
//! ([`Precision::Q8`]).
//!
//! The exact path ([`Precision::Exact`], the default) decodes every weight
//! to f32 and multiplies it with f32 activations. Here, as llama.cpp does
//! on CPUs, each activation row is first quantized to 8-bit integers with
//! one scale per block, and the products of the weights' small integers
//! with those run in integer arithmetic (AVX-512 VNNI / AMX on x86, the
//! dot-product instructions on aarch64). The result differs from the exact
//! one by the activations' rounding (about 0.4% of a block's largest
//! value), so this is a choice the user makes (`--precision q8`), never a
//! silent one.
//!
//! # Activation formats ([`ActFormat`])
//! * [`ActFormat::K256`], for the K encodings (Q4_K, Q5_K, Q6_K), IQ4_XS and the
//!   IQ1 / IQ2 / IQ3 codebook encodings: one f32
//!   scale per 256 values, and the sum of each 16 quantized values (the
//!   weights' mins and offsets act on those sums).
//! * [`ActFormat::B32`], for Q8_0 (and Q4_0 / Q4_1 / Q5_0 / Q5_1 / IQ4_NL / MXFP4, and NVFP4): one scale per 32 values, rounded to f16
//!   (llama.cpp's Q8_0 activations).
//!
//! A block of values `x` becomes `q = round(x · 127 / amax)` (half to
//! even) with scale `d = amax / 127`, where `amax = max |x|`; an
//! all-zero block gets `d = 0`. Quantization always runs in the scalar code
//! below, the same on every CPU.
//!
//! # Canonical order (batch invariance)
//! An output `out[t][r]` is a sum over the weight row's blocks `b` (256
//! values for K encodings, 32 for Q8_0). Each block contributes one term
//! `t_b`, from exact integer sums (so any kernel may add the integer
//! products in any order) and a fixed sequence of f32 operations:
//!
//! | weights | integers | term `t_b` |
//! |---|---|---|
//! | Q8_0 | `i = Σ w·q` | `(d_w·d_x) · f(i)` |
//! | Q6_K | `i = Σ_j sc_j·(Σ_{j} w·q − 32·S16_j)` | `(d_w·d_x) · f(i)` |
//! | Q4_K, Q5_K | `i = Σ_j sc_j·Σ_{j} w·q`, `m = Σ_j min_j·S32_j` | `(d_w·d_x)·f(i) − (dmin_w·d_x)·f(m)` |
//! | Q4_0, Q5_0, IQ4_NL | as Q8_0 with `w` the block's signed levels (Q4_0: index − 8, Q5_0: 5-bit quant − 16) | `(d_w·d_x) · f(i)` |
//! | Q4_1, Q5_1 | `i = Σ w·q` (unsigned quants), `S = S16_{2b} + S16_{2b+1}` | `(d_w·d_x)·f(i) + (m_w·d_x)·f(S)` |
//! | MXFP4 | `i = Σ 2E(w)·q` (twice the E2M1 level: an integer in −12..=12) | `(d_w·d_x) · f(i)`, `d_w` half the E8M0 scale (llama.cpp's `GGML_E8M0_TO_FP32_HALF`) |
//! | IQ4_XS | `i = Σ_j ls_j·Σ_{j} L(w)·q` (`L` the signed level of index `w`, `ls_j` in −32..=31) | `(d_w·d_x) · f(i)` |
//! | IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S (x86) | `i = Σ_j s_j·Σ_{j} L(w)·q` over sub-blocks of 16 (`L` the signed codebook level — IQ1: `8g ± 1` —, `s_j` the odd scale `2s + 1`) | `((d_w·u)·d_x) · f(i)`, `u` a power of two: 1/8 (IQ1, IQ2), 1/4 (IQ3_XXS), 1 (IQ3_S) |
//! | NVFP4 (16-value blocks, E4M3 scale `s` each) | `i = Σ 2E(w)·q` (twice the E2M1 level: an integer in −12..=12) | `(s·d_x) · f(i)`, and the tree's sum times `global / 2` |
//!
//! where `w` are the unsigned stored quants, `f` the conversion to f32
//! (round to nearest even), and `S16_j`/`S32_j` the sums of the quantized
//! activations of sub-block `j`. Terms go into 8 partial sums,
//! `p[b mod 8] += t_b` (from +0), and the result is
//! `((p0+p4) + (p2+p6)) + ((p1+p5) + (p3+p7))`. Every kernel (scalar
//! reference, AVX2, VNNI, AMX, NEON) follows this, so a token gets the same
//! bits alone or in any batch, on any kernel path of the machine.

#[cfg(target_arch = "x86_64")]
mod amx;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[macro_use]
mod groups;
#[cfg(target_arch = "aarch64")]
mod neon;
mod quantize;
mod reference;
#[cfg(target_arch = "x86_64")]
mod x86;

use crate::matmul::MatRef;
use crate::simd::Isa;
use crate::threads::SharedMut;
use rill_dtype::DType;

pub use reference::dot_ref;
#[cfg(test)]
pub(crate) use reference::unpack_q6_k;

/// How matrix products treat their activations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Precision {
    /// f32 activations times exactly decoded weights: the reference
    /// numerics (within f32 rounding of transformers on the same weights).
    #[default]
    Exact,
    /// 8-bit activations for the encodings that have integer kernels
    /// (Q4_K, Q5_K, Q6_K, Q8_0, IQ4_XS, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4 and NVFP4; on x86 also the IQ1 / IQ2 / IQ3 codebooks; the others stay exact): llama.cpp's
    /// numerics, and faster.
    Q8,
}

impl Precision {
    /// The fastest precision at least as accurate as llama.cpp on this CPU:
    /// 8-bit activations (llama.cpp's own numerics) where the integer
    /// kernels run, else the exact path (the q8 scalar reference would be
    /// slower than it).
    pub fn fastest(isa: Isa) -> Precision {
        if has_integer_kernels(isa) {
            Precision::Q8
        } else {
            Precision::Exact
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Precision::Exact => "exact",
            Precision::Q8 => "q8",
        }
    }
}

impl std::str::FromStr for Precision {
    type Err = String;
    fn from_str(s: &str) -> Result<Precision, String> {
        match s {
            "exact" | "f32" => Ok(Precision::Exact),
            "q8" => Ok(Precision::Q8),
            _ => Err(format!("unknown precision {s:?} (expected exact or q8)")),
        }
    }
}

/// Whether kernel class `isa` has SIMD kernels for [`Precision::Q8`] on
/// this CPU (every x86-64 class, aarch64 with the dot-product
/// instructions; the scalar class runs the scalar reference).
pub fn has_integer_kernels(isa: Isa) -> bool {
    match isa {
        Isa::Scalar => false,
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => neon::usable(),
        Isa::Avx2 | Isa::AvxVnni | Isa::Avx512 | Isa::Amx => true,
    }
}

/// Whether this CPU and OS run AMX-INT8 tiles (what [`Isa::Amx`] needs
/// beyond AVX-512).
#[cfg(target_arch = "x86_64")]
pub(crate) fn amx_usable() -> bool {
    amx::usable()
}

/// Whether this build has SIMD kernels for the 4- and 5-bit level
/// encodings (IQ4_XS, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4): x86-64 and
/// aarch64 (NEON with the dot-product instructions).
const KERNELS_FOR_LEVELS: bool = cfg!(any(target_arch = "x86_64", target_arch = "aarch64"));

/// How activations are quantized for one weight encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ActFormat {
    /// One scale per 256 values, plus per-16 sums (K encodings).
    K256,
    /// One scale per 32 values (Q8_0).
    B32,
}

impl ActFormat {
    /// The format the integer kernels of `dtype` take, if it has them.
    pub fn for_weights(dtype: DType) -> Option<ActFormat> {
        match dtype {
            DType::Q4K
            | DType::Q4KX8
            | DType::Q5K
            | DType::Q6K
            | DType::Q6KPlanar
            | DType::Q6KX8 => Some(ActFormat::K256),
            // x86 and aarch64 have kernels; elsewhere the exact SIMD product
            // beats the scalar integer reference
            DType::IQ4XS if KERNELS_FOR_LEVELS => Some(ActFormat::K256),
            // the codebook encodings, as llama.cpp (its Q8_K activations)
            DType::IQ2XXS
            | DType::IQ2XS
            | DType::IQ2S
            | DType::IQ3XXS
            | DType::IQ3S
            | DType::IQ1S
            | DType::IQ1M
                if cfg!(target_arch = "x86_64") =>
            {
                Some(ActFormat::K256)
            }
            DType::Q8_0 => Some(ActFormat::B32),
            // GGUF's NVFP4: the checkpoints' NVFP4 kernels (x86 and aarch64)
            DType::NVFP4 if KERNELS_FOR_LEVELS => Some(ActFormat::B32),
            // run as the Q8_0 blocks of their levels (x86 and aarch64)
            DType::Q4_0 | DType::IQ4NL | DType::MXFP4 | DType::Q5_0 | DType::Q4_1 | DType::Q5_1
                if KERNELS_FOR_LEVELS =>
            {
                Some(ActFormat::B32)
            }
            _ => None,
        }
    }

    /// The format the integer kernels of matrix `w` take, if it has them:
    /// as [`for_weights`](Self::for_weights), and NVFP4 (E2M1 codes with
    /// E4M3 scales per 16) in the B32 format, on x86 and aarch64.
    pub fn for_mat(w: &MatRef<'_>) -> Option<ActFormat> {
        // Per-row output scales are applied after the product.
        if matches!(w.scales, crate::Scales::None | crate::Scales::Rows { .. }) {
            return ActFormat::for_weights(w.dtype);
        }
        (KERNELS_FOR_LEVELS && nvfp4_parts(w).is_some()).then_some(ActFormat::B32)
    }

    /// Values per scale.
    pub fn block(self) -> usize {
        match self {
            ActFormat::K256 => 256,
            ActFormat::B32 => 32,
        }
    }
}

/// `n` rows of `cols` activations, quantized to 8 bits.
///
/// Each row's quants start on a 64-byte boundary. Buffers are only ever
/// grown, so one value reused across products allocates nothing once it
/// has seen the largest.
#[derive(Default)]
pub struct Q8Acts {
    format: Option<ActFormat>,
    n: usize,
    cols: usize,
    /// Bytes between rows in `qs` (a multiple of 64).
    stride: usize,
    qs: Vec<i8>,
    /// Where `qs` reaches a 64-byte boundary.
    base: usize,
    /// Scales, `n × cols / block`.
    d: Vec<f32>,
    /// Sums of each 16 quants, `n × cols / 16` (the K encodings' mins and
    /// offsets act on them; Q8_0's panels take their +128 offset off with them).
    sums: Vec<i16>,
}

/// The activation rows one product takes: every row of a [`Q8Acts`], or
/// those `pick` names, in its order. A MoE step quantizes its input once
/// and each expert picks the rows of its tokens (a row's quantization
/// depends on that row alone, so picking gives the bits a copy would).
#[derive(Clone, Copy)]
pub struct Q8Rows<'a> {
    acts: &'a Q8Acts,
    pick: Option<&'a [usize]>,
}

impl<'a> Q8Rows<'a> {
    /// Rows `pick[0], pick[1], ..` of `acts`. A row out of range panics
    /// when it is read ([`row`](Self::row) slices are checked); not scanned
    /// here, since `matmul_many` builds a view per task and job and has
    /// checked the picks once already.
    pub fn picked(acts: &'a Q8Acts, pick: &'a [usize]) -> Q8Rows<'a> {
        debug_assert!(
            pick.iter().all(|&t| t < acts.n),
            "q8: picked row out of range"
        );
        Q8Rows {
            acts,
            pick: Some(pick),
        }
    }

    pub fn format(&self) -> Option<ActFormat> {
        self.acts.format
    }

    pub fn n(&self) -> usize {
        self.pick.map_or(self.acts.n, <[usize]>::len)
    }

    pub fn cols(&self) -> usize {
        self.acts.cols
    }

    /// Row `t` of this view.
    #[inline]
    pub fn row(&self, t: usize) -> ActRow<'a> {
        self.acts.row(self.pick.map_or(t, |p| p[t]))
    }
}

impl<'a> From<&'a Q8Acts> for Q8Rows<'a> {
    fn from(acts: &'a Q8Acts) -> Q8Rows<'a> {
        Q8Rows { acts, pick: None }
    }
}

/// Where [`Q8Acts::prepare`] lets the rows of one input be quantized:
/// raw pointers into its buffers, so that several threads may each fill
/// their own rows.
#[derive(Clone, Copy)]
pub(crate) struct RowSink {
    /// The kernel class that quantizes (every class gives the same bits).
    isa: Isa,
    format: ActFormat,
    cols: usize,
    stride: usize,
    qs: *mut i8,
    d: *mut f32,
    sums: *mut i16,
}

// SAFETY: a sink only hands out writes to the row its caller names, and
// `row`'s contract keeps rows to one writer.
unsafe impl Send for RowSink {}
unsafe impl Sync for RowSink {}

impl RowSink {
    /// Quantize `xr` (`cols` values) into row `t`.
    ///
    /// # Safety
    /// `t` is below the prepared row count, the [`Q8Acts`] is not touched
    /// otherwise meanwhile, and no other thread writes row `t` meanwhile.
    pub(crate) unsafe fn row(&self, t: usize, xr: &[f32]) {
        let (cols, block) = (self.cols, self.format.block());
        assert_eq!(xr.len(), cols, "q8: activation row size");
        let nb = cols / block;
        let qr = std::slice::from_raw_parts_mut(self.qs.add(t * self.stride), cols);
        let d = std::slice::from_raw_parts_mut(self.d.add(t * nb), nb);
        for ((xb, qb), db) in xr
            .chunks_exact(block)
            .zip(qr.chunks_exact_mut(block))
            .zip(d.iter_mut())
        {
            let v = quantize::block(self.isa, xb, qb);
            *db = match self.format {
                ActFormat::K256 => v,
                // As llama.cpp's Q8_0 activations: the scale kept as f16.
                ActFormat::B32 => half::f16::from_f32(v).to_f32(),
            };
        }
        let ns = cols / 16;
        let sums = std::slice::from_raw_parts_mut(self.sums.add(t * ns), ns);
        for (s, q16) in sums.iter_mut().zip(qr.chunks_exact(16)) {
            *s = q16.iter().map(|&v| v as i16).sum();
        }
    }
}

/// One quantized activation row.
#[derive(Clone, Copy)]
pub struct ActRow<'a> {
    pub qs: &'a [i8],
    pub d: &'a [f32],
    pub sums: &'a [i16],
}

impl Q8Acts {
    /// Quantize `x` (`n` rows of `cols`) into `format` (in the scalar
    /// code: every kernel class gives its bits). `cols` must be a whole
    /// number of the format's blocks.
    pub fn quantize(&mut self, format: ActFormat, x: &[f32], n: usize, cols: usize) {
        assert_eq!(x.len(), n * cols, "q8: activation size");
        let sink = self.prepare(Isa::Scalar, format, n, cols);
        for (t, xr) in x.chunks_exact(cols.max(1)).enumerate().take(n) {
            // SAFETY: t < n, rows written one at a time.
            unsafe { sink.row(t, xr) };
        }
    }

    /// Room for `n` rows of `cols` values in `format`, to be filled row by
    /// row through the returned sink (from any threads: rows are disjoint),
    /// on kernel class `isa` (which the caller checked the CPU runs).
    pub(crate) fn prepare(
        &mut self,
        isa: Isa,
        format: ActFormat,
        n: usize,
        cols: usize,
    ) -> RowSink {
        let block = format.block();
        assert!(
            cols.is_multiple_of(block),
            "q8: {cols} values is not whole blocks of {block}"
        );
        self.format = Some(format);
        self.n = n;
        self.cols = cols;
        self.stride = cols.next_multiple_of(64);
        if self.qs.len() < n * self.stride + 64 {
            self.qs.resize(n * self.stride + 64, 0);
        }
        self.base = self.qs.as_ptr().align_offset(64).min(64);
        let nb = cols / block;
        self.d.resize(n * nb, 0.0);
        let ns = cols / 16;
        self.sums.resize(n * ns, 0);
        RowSink {
            isa,
            format,
            cols,
            stride: self.stride,
            // SAFETY: `base` < 64 and `qs` holds more than that.
            qs: unsafe { self.qs.as_mut_ptr().add(self.base) },
            d: self.d.as_mut_ptr(),
            sums: self.sums.as_mut_ptr(),
        }
    }

    pub fn format(&self) -> Option<ActFormat> {
        self.format
    }

    pub fn n(&self) -> usize {
        self.n
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Row `t`.
    #[inline]
    pub fn row(&self, t: usize) -> ActRow<'_> {
        // Kernels ask per weight row and token: shifts (the blocks are
        // 32 and 256 values), not two integer divisions.
        let block = self.format.map_or(32usize, |f| f.block());
        let nb = self.cols >> block.trailing_zeros();
        let ns = self.cols >> 4;
        let q0 = self.base + t * self.stride;
        ActRow {
            qs: &self.qs[q0..q0 + self.cols],
            d: &self.d[t * nb..(t + 1) * nb],
            sums: &self.sums[t * ns..(t + 1) * ns],
        }
    }
}

/// An NVFP4 matrix's group scales (E4M3, one per 16 values) and global
/// scale, when `w` is one whose rows are whole activation blocks.
pub(crate) fn nvfp4_parts<'a>(w: &MatRef<'a>) -> Option<(&'a [u8], f32)> {
    match (w.dtype, w.scales) {
        (
            DType::E2M1,
            crate::Scales::Groups {
                data,
                dtype: DType::F8E4M3,
                group: 16,
                global,
            },
        ) if w.cols.is_multiple_of(32) => Some((data, global)),
        _ => None,
    }
}

/// Rows `r0..r1` of an NVFP4 matrix (a checkpoint's E2M1 codes with their
/// scales apart, or GGUF's NVFP4 blocks) · every row of `acts` (as
/// [`rows`]).
///
/// # Safety
/// As [`rows`].
unsafe fn nvfp4_rows(
    isa: Isa,
    w: MatRef<'_>,
    acts: Q8Rows<'_>,
    r0: usize,
    r1: usize,
    out: SharedMut<f32>,
    scratch: &mut RowScratch,
) {
    let gguf = w.dtype == DType::NVFP4;
    let (scales, global) = match gguf {
        true => (&[][..], 1.0),
        false => nvfp4_parts(&w).expect("q8: not an NVFP4 matrix"),
    };
    let gb = if gguf { 0 } else { w.cols / 16 };
    // Several tokens: the row panels first.
    #[cfg(target_arch = "x86_64")]
    let r0 = match isa != Isa::Scalar {
        // SAFETY: this function's contract; the CPU runs `isa` (checked by
        // the caller), an x86 class, so AVX2.
        true => unsafe { x86::nvfp4_panels(w, acts, r0, r1, out, &mut scratch.panel) },
        false => r0,
    };
    // Many tokens: the activations plus 128, once for this task's rows.
    #[cfg(target_arch = "x86_64")]
    let offset = (isa != Isa::Scalar && acts.n() > 4).then(|| {
        x86::nvfp4_offset_acts(acts, &mut scratch.panel);
        &scratch.panel[..]
    });
    #[cfg(not(target_arch = "x86_64"))]
    let _ = scratch;
    for r in r0..r1 {
        let (codes, sc) = (w.row(r), &scales[r * gb..(r + 1) * gb]);
        // SAFETY: the caller checked that the CPU runs `isa`; `out` as
        // this function's contract.
        #[cfg(target_arch = "x86_64")]
        if isa != Isa::Scalar
            && unsafe {
                let put = |t, v| *out.at(t * w.rows + r) = v;
                match gguf {
                    true => x86::nvfp4_row::<true>(codes, sc, global, acts, offset, put),
                    false => x86::nvfp4_row::<false>(codes, sc, global, acts, offset, put),
                }
            }
        {
            continue;
        }
        // aarch64: NEON with the dot-product instructions (a checkpoint's
        // rows with a NaN scale take the reference).
        #[cfg(target_arch = "aarch64")]
        if isa == Isa::Neon && neon::usable() && (gguf || !crate::quant::nvfp4::any_nan_scale(sc)) {
            for t in 0..acts.n() {
                // SAFETY: the CPU has NEON and the dot-product instructions
                // (checked); the row and the activations hold `cols` values.
                let v = unsafe {
                    match gguf {
                        true => neon::nvfp4_dot::<true>(codes, sc, global, acts.row(t), w.cols),
                        false => neon::nvfp4_dot::<false>(codes, sc, global, acts.row(t), w.cols),
                    }
                };
                // SAFETY: `out` as this function's contract.
                unsafe { *out.at(t * w.rows + r) = v };
            }
            continue;
        }
        let _ = isa;
        for t in 0..acts.n() {
            *out.at(t * w.rows + r) = match gguf {
                true => reference::dot_nvfp4_gguf_ref(codes, acts.row(t)),
                false => reference::dot_nvfp4_ref(codes, sc, global, acts.row(t)),
            };
        }
    }
}

/// One pool thread's working buffers for the integer kernels (the AMX
/// kernel's tile layouts; nothing on other machines), owned by the staging
/// of the product that runs them and only ever grown.
pub(crate) struct RowScratch {
    #[cfg(target_arch = "x86_64")]
    amx: amx::Scratch,
    /// Rows rewritten as a panel (x86 in-register path, many tokens).
    #[cfg(target_arch = "x86_64")]
    panel: Vec<u8>,
    /// The `smmla` panels and interleaved activations (aarch64 with i8mm).
    #[cfg(target_arch = "aarch64")]
    neon: neon::Scratch,
}

impl Default for RowScratch {
    /// The panel buffer is made at its usual size at once, for every slot:
    /// which slot runs which rows changes from step to step, and one that
    /// met no panel before would otherwise allocate in a later decode step.
    fn default() -> RowScratch {
        RowScratch {
            #[cfg(target_arch = "x86_64")]
            amx: amx::Scratch::default(),
            #[cfg(target_arch = "x86_64")]
            panel: vec![0; x86::PANEL_BUF_MIN],
            #[cfg(target_arch = "aarch64")]
            neon: neon::Scratch::default(),
        }
    }
}

/// Rows `r0..r1` of a matrix in an interleaved layout made from `source`
/// (as [`rows`]): the whole groups of 8 rows on the AVX2 kernel of the
/// layout, rows of a group cut by the range (no product of a loaded model
/// cuts one) or a class without AVX2 through the rows of `source` they
/// were made from, on the reference.
///
/// # Safety
/// As [`rows`].
#[allow(clippy::too_many_arguments)]
unsafe fn interleaved_rows(
    isa: Isa,
    w: MatRef<'_>,
    source: DType,
    acts: Q8Rows<'_>,
    r0: usize,
    r1: usize,
    out: SharedMut<f32>,
    scratch: &mut RowScratch,
) {
    let (a0, a1) = (r0.next_multiple_of(8), r1 / 8 * 8);
    let mut whole = 0..0;
    #[cfg(target_arch = "x86_64")]
    if isa != Isa::Scalar && a0 < a1 {
        // SAFETY: this function's contract; the CPU runs AVX2 (every x86
        // class does); rows a0..a1 are whole groups inside r0..r1.
        unsafe { x86::interleaved_rows(w, acts, a0, a1, out, &mut scratch.panel) };
        whole = a0..a1;
    }
    let _ = (isa, a0, a1);
    let rb = w.row_bytes();
    let mut row = Vec::new();
    for r in (r0..r1).filter(|r| !whole.contains(r)) {
        row.resize(rb, 0);
        crate::layout::source_row(w.dtype, w.data, rb, r, &mut row);
        for t in 0..acts.n() {
            *out.at(t * w.rows + r) = dot_ref(source, &row, acts.row(t));
        }
    }
}

/// `out[t·rows + r] = row r · activations t` for rows `r0..r1` of `w` and
/// every row of `acts`, on kernel path `isa`, in the canonical order,
/// with `scratch` the calling task's own buffers.
///
/// # Safety
/// `out` must hold `acts.n() · w.rows` values, rows `r0..r1` of which are
/// this caller's alone; `isa` must be runnable on this CPU; `acts` must be
/// quantized in `ActFormat::for_weights(w.dtype)` from `w.cols` values.
pub(crate) unsafe fn rows(
    isa: Isa,
    w: MatRef<'_>,
    acts: Q8Rows<'_>,
    r0: usize,
    r1: usize,
    out: SharedMut<f32>,
    scratch: &mut RowScratch,
) {
    debug_assert_eq!(acts.format(), ActFormat::for_mat(&w));
    debug_assert_eq!(acts.cols(), w.cols);
    if matches!(w.dtype, DType::E2M1 | DType::NVFP4) {
        // SAFETY: this function's contract.
        unsafe { nvfp4_rows(isa, w, acts, r0, r1, out, scratch) };
        return;
    }
    if let Some(source) = crate::layout::interleaved_source(w.dtype) {
        // SAFETY: this function's contract.
        unsafe { interleaved_rows(isa, w, source, acts, r0, r1, out, scratch) };
        return;
    }
    // Prefill batches on AMX-INT8 tiles (the AMX class).
    // SAFETY: the caller checked that the CPU runs `isa`, which for AMX
    // includes `amx::usable()`; the rest is this function's contract. It
    // returns false having written nothing.
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Amx
        && acts.n() >= amx::MIN_TOKENS
        && unsafe { amx::rows(w, acts, r0, r1, out, &mut scratch.amx) }
    {
        return;
    }
    // SAFETY: the caller checked that the CPU runs `isa` (AVX2+FMA+F16C,
    // plus AVX-512F/BW/VL for the wide classes); the rest is this
    // function's own contract.
    #[cfg(target_arch = "x86_64")]
    if isa != Isa::Scalar && unsafe { x86::rows(isa, w, acts, r0, r1, out, &mut scratch.panel) } {
        return;
    }
    // SAFETY: the caller checked that the CPU runs NEON, `usable()` that it
    // has the dot-product instructions; the rest is this function's
    // contract.
    #[cfg(target_arch = "aarch64")]
    if isa == Isa::Neon
        && neon::usable()
        && unsafe { neon::rows(w, acts, r0, r1, out, &mut scratch.neon) }
    {
        return;
    }
    let _ = (isa, scratch);
    for r in r0..r1 {
        let row = w.row(r);
        for t in 0..acts.n() {
            *out.at(t * w.rows + r) = dot_ref(w.dtype, row, acts.row(t));
        }
    }
}

#[cfg(test)]
mod tests;
