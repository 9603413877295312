//! Prefill products of the K encodings (Q4_K, Q5_K, Q6_K), Q8_0, IQ4_XS,
//! Q4_0 / Q5_0 / IQ4_NL / MXFP4 (as the Q8_0 blocks of their levels, or on
//! AVX2 Q4_0 / Q5_0 as unsigned quants), and Q4_1 / Q5_1 (AVX2) on row
//! panels:
//! the i32 lanes of a vector are weight rows (16 with AVX-512 VNNI in
//! `zmm`, 8 with AVX2 in `ymm`).
//!
//! The 4-row × 4-token kernels of `avx512` / `avx2` put the values of one
//! row in a vector, so every block's sums end in a horizontal reduction,
//! and every weight vector is decoded again for each group of 4 tokens.
//! With many tokens it pays to rewrite a few rows once into a panel in the
//! task's scratch (it stays in L2 while every token goes by):
//! * the quants, unpacked to bytes: per 4-value group `k` of a block, a
//!   vector of the rows' 4 quants (row `r` in lane `r`);
//! * per sub-block, the rows' scales (as i32 lanes for AVX-512's
//!   `vpmulld`, as i16 pairs `(sc, sc)` for AVX2's `vpmaddwd`), and the
//!   mins (Q4_K / Q5_K) or the −32 offsets times the scales (Q6_K) as i16
//!   pairs against the activations' sums of 16;
//! * `d` (and `dmin`) as f32.
//!
//! A token then costs, per 4-value group, one `vpdpbusd` (AVX-512 VNNI) or
//! one `vpmaddubsw` and an i16 add (AVX2), its 4 activations broadcast from
//! memory, for all the rows at once, with no reduction: lane `r` holds row
//! `r`'s integers. They are the reference's (exact integer sums, in any
//! order; the AVX2 i16 chains are short enough never to overflow), and the
//! f32 tail runs the reference's operations lane by lane, so the bits are
//! the reference's (module doc of `q8`).

use std::arch::x86_64::_mm_prefetch;
use std::arch::x86_64::_MM_HINT_T2;

use crate::matmul::MatRef;
use crate::q8::Q8Rows;
use crate::threads::SharedMut;
use rill_dtype::DType;

mod b32;
mod codebook;
mod nvfp4;
mod x8;
mod ymm;
mod zmm;

/// Tokens of one kernel call at most.
const TOKENS: usize = 8;
/// Token groups of one pass over the rows: more tokens than this many
/// groups hold pack every panel again per pass (512 tokens on AVX-512, 576
/// on AVX2 fit one).
const GROUPS: usize = 96;

/// What a panel holds of each block, by encoding: byte offsets within the
/// block's part of the panel (every vector `v` bytes: 64 for AVX-512, 32 for AVX2).
#[derive(Clone, Copy)]
struct Layout {
    /// Source block bytes.
    block: usize,
    /// 64 vectors of quants (4-value group `k` at `64k`) come first.
    /// Per sub-block scales, i32 lanes.
    sc: usize,
    /// Sub-blocks (and their values each).
    subs: usize,
    /// 8 vectors of i16 pairs against the activations' sums of 16: Q4_K /
    /// Q5_K `(min_j, min_j)` (AVX2: the first 4, `(min_2q, min_2q+1)`
    /// against the sums of 32), Q6_K `(−32·sc_2p, −32·sc_2p+1)`.
    pairs: usize,
    /// f32 `d`, then (Q4_K / Q5_K) f32 `dmin`.
    d: usize,
    /// Panel bytes per block.
    bytes: usize,
}

const fn layout(block: usize, subs: usize, mins: bool, v: usize) -> Layout {
    let sc = 64 * v;
    let pairs = sc + v * subs;
    let d = pairs + v * 8;
    Layout {
        block,
        sc,
        subs,
        pairs,
        d,
        bytes: d + if mins { 2 * v } else { v },
    }
}

/// Entry of the encodings with panel kernels in [`Set::kinds`].
fn kind(dtype: DType) -> Option<usize> {
    match dtype {
        DType::Q4K => Some(0),
        DType::Q5K => Some(1),
        DType::Q6K => Some(2),
        DType::Q8_0 => Some(3),
        DType::Q4_0 => Some(4),
        DType::IQ4NL => Some(5),
        DType::IQ4XS => Some(6),
        DType::MXFP4 => Some(7),
        DType::Q5_0 => Some(8),
        DType::Q4_1 => Some(9),
        DType::Q5_1 => Some(10),
        DType::IQ2XXS => Some(11),
        DType::IQ2XS => Some(12),
        DType::IQ2S => Some(13),
        DType::IQ3XXS => Some(14),
        DType::IQ3S => Some(15),
        DType::IQ1S => Some(16),
        DType::IQ1M => Some(17),
        DType::NVFP4 => Some(18),
        DType::Q6KPlanar => Some(19),
        _ => None,
    }
}

/// Up to [`TOKENS`] tokens' quantized activations (unused slots repeat the last).
#[derive(Clone, Copy)]
struct Toks8 {
    qs: [*const i8; TOKENS],
    d: [*const f32; TOKENS],
    sums: [*const i16; TOKENS],
}

impl Toks8 {
    fn new(acts: Q8Rows<'_>, t0: usize, nt: usize) -> Toks8 {
        let row = |t: usize| acts.row(t0 + t.min(nt - 1));
        Toks8 {
            qs: std::array::from_fn(|t| row(t).qs.as_ptr()),
            d: std::array::from_fn(|t| row(t).d.as_ptr()),
            sums: std::array::from_fn(|t| row(t).sums.as_ptr()),
        }
    }
}

/// A kernel call's results: lanes `0..rows` of entry `t` are the panel
/// rows' outputs for token `t`. Kernels of `T` tokens write entries `0..T`
/// alone, into a buffer the driver keeps (returned by value, the array was
/// zeroed by a `memset` call per kernel call: ~2.5% of a Q8_0 prefill).
type Res = [[f32; 16]; TOKENS];
/// Kernel of one encoding and token count: the panel (`nb` blocks) × the
/// tokens into [`Res`].
type PanelKernel = unsafe fn(*const u8, usize, &Toks8, &mut Res);
/// Rewrite the panel's rows (`rb` bytes apart, `nb` blocks each) at `dst`.
type Packer = unsafe fn(*const u8, usize, usize, *mut u8);

/// The panel kernels of one encoding on one class.
pub(super) struct Kind {
    /// Values of a source block.
    values: usize,
    /// Panel bytes per source block.
    bytes: usize,
    pack: Packer,
    kernels: [PanelKernel; TOKENS],
}

/// The panel kernels of one class.
pub(super) struct Set {
    /// Rows of a panel (i32 lanes of the class's vectors).
    rows: usize,
    /// Tokens of one kernel call.
    tokens: usize,
    /// Fewer tokens than this run on the 4-row kernels: the panel's rewrite
    /// does not pay for itself (`matmul_bench`, 512 × 2048 Q4_K on Zen 4,
    /// 1 thread: AVX-512 panels lose at 2 tokens, tie at 4, win by 20-27%
    /// from 5). AVX2 panels won from 3 tokens there, and still do on
    /// matrices in cache; but a model's weights stream from DRAM, where the
    /// 4-row kernels (their rows prefetched as one stream) win at 3 and 4
    /// tokens (Zen 3, 2 threads, 131,072 × 2048, GFLOP/s panel / 4-row, 3
    /// tokens: Q6_K 79-86 / 97-124, Q4_K 112-116 / 156-159, Q8_0 77-78 /
    /// 116-124; 4 tokens: 115 / 138, 147 / 173, 92 / 128) and panels from 5
    /// or 6 (8 tokens: 173 / 132, 205 / 171, 138 / 124). Since the AVX2
    /// 4-row kernels take one `vpmaddwd` per sub-block (0fe30f3) they win at
    /// 5 tokens too: the 8-layer model's 5-position verify step costs
    /// 2.34-2.53 decode steps with them, 2.89 on panels (`rill bench
    /// --verify-costs`, shapes interleaved, Zen 3, 2 threads). What this gives up:
    /// on a model inside the last-level cache (the 17 MB demo model, Q8_0)
    /// the 3- and 4-position MTP verify steps take 0.78-0.92 / 1.00-1.11 ms
    /// against 0.70-0.74 / 0.87-0.89 with panels from 3. Choosing by whether
    /// the weights stream would keep both; the kernels do not know the
    /// model's size (the engine does: a value to pass down, not done yet).
    pub(super) min_tokens: usize,
    /// Q4_K, Q5_K, Q6_K, Q8_0, Q4_0, IQ4_NL, IQ4_XS, MXFP4, Q5_0, Q4_1, Q5_1
    /// (Q4_0 and Q5_0 on AVX-512 VNNI, IQ4_NL and MXFP4 as the Q8_0 blocks
    /// of their levels), then IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S,
    /// IQ1_M, GGUF's NVFP4, Q6_K's planar layout, where the class has them.
    kinds: [Option<Kind>; 20],
}

/// `[f(1), .., f(8)]`: a kernel for each token count.
macro_rules! by_tokens {
    ($f:ident) => {
        [
            $f::<1>, $f::<2>, $f::<3>, $f::<4>, $f::<5>, $f::<6>, $f::<7>, $f::<8>,
        ]
    };
}
use by_tokens;

/// Smallest panel buffer a slot allocates: a panel of 16 rows of 4096
/// values (and their scales) fits.
pub(in crate::q8) const MIN_PANEL_BUF: usize = 80 * 1024;

pub(super) use ymm::SET as AVX2;
pub(super) use zmm::SET as AVX512_VNNI;

/// Rows `r0..r1` of `w` × every token of `acts` into `out` (as `q8::rows`),
/// a panel of `set.rows` rows at a time in `buf`; returns the first row it
/// left (the rows past the last whole panel) for the 4-row kernels.
///
/// # Safety
/// As `q8::rows`; the CPU runs `set`'s class. Encodings without panel
/// kernels are all left to the caller (`r0` comes back).
pub(super) unsafe fn rows(
    set: &'static Set,
    w: MatRef<'_>,
    acts: Q8Rows<'_>,
    r0: usize,
    r1: usize,
    out: SharedMut<f32>,
    buf: &mut Vec<u8>,
) -> usize {
    // An encoding without panels of this class takes the AVX2 ones (every
    // x86 class runs AVX2 instructions).
    let Some((set, k)) = kind(w.dtype).and_then(|i| {
        let of = |s: &'static Set| s.kinds[i].as_ref().map(|k| (s, k));
        of(set).or_else(|| of(&AVX2))
    }) else {
        return r0;
    };
    let (rb, nb) = (w.row_bytes(), w.cols / k.values);
    let data = w.data.as_ptr();
    let rows = set.rows;
    let src = Source {
        // SAFETY (of the calls): rows r..r + rows are whole rows of `w`.
        place: &|r, dst| unsafe {
            (k.pack)(data.add(r * rb), rb, nb, dst);
            dst
        },
        next: &|r| (data.wrapping_add(r * rb), rows * rb),
        out_scale: None,
    };
    // SAFETY: as this function.
    unsafe {
        drive(
            set,
            nb,
            nb * k.bytes,
            &k.kernels,
            &src,
            w.rows,
            acts,
            r0,
            r1,
            out,
            buf,
        )
    }
}

/// Rows `r0..r1` of a checkpoint's NVFP4 matrix (E2M1 `codes`, `rb` bytes
/// a row; E4M3 `scales`, `sb` bytes a row; `global`) × every token of
/// `acts` on AVX2 row panels; returns the first row it left. The caller
/// checked that `cols` is whole blocks of 64 and that no scale is NaN.
///
/// # Safety
/// As `q8::rows`; the CPU runs AVX2.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn nvfp4_checkpoint_rows(
    (codes, rb): (&[u8], usize),
    (scales, sb): (&[u8], usize),
    global: f32,
    (n_rows, cols): (usize, usize),
    acts: Q8Rows<'_>,
    r0: usize,
    r1: usize,
    out: SharedMut<f32>,
    buf: &mut Vec<u8>,
) -> usize {
    let nb = cols / 64;
    let (c, s) = (codes.as_ptr(), scales.as_ptr());
    let src = Source {
        // SAFETY (of the calls): rows r..r + 8 are whole rows of the matrix.
        place: &|r, dst| unsafe {
            nvfp4::pack_checkpoint(c.add(r * rb), rb, s.add(r * sb), sb, nb, dst);
            dst
        },
        next: &|r| (c.wrapping_add(r * rb), 8 * rb),
        // the reference's `tree · (global / 2)`
        out_scale: Some(global * 0.5),
    };
    let kernels = by_tokens!(nvfp4_checkpoint_kernel);
    // SAFETY: as this function.
    unsafe {
        drive(
            &AVX2,
            nb,
            nb * nvfp4::BYTES,
            &kernels,
            &src,
            n_rows,
            acts,
            r0,
            r1,
            out,
            buf,
        )
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn nvfp4_checkpoint_kernel<const T: usize>(
    panel: *const u8,
    nb: usize,
    x: &Toks8,
    out: &mut Res,
) {
    nvfp4::panel_checkpoint::<T>(panel, nb, x, out)
}

/// Rows `r0..r1` (multiples of 8) of a matrix in an 8-row interleaved
/// layout ([`DType::Q4KX8`], [`DType::Q6KX8`]) × every token of `acts` into
/// `out` (as `q8::rows`), 8 rows at a time where the matrix holds them, for
/// any number of tokens.
///
/// # Safety
/// As `q8::rows`; the CPU runs AVX2.
pub(in crate::q8) unsafe fn interleaved_rows(
    w: MatRef<'_>,
    acts: Q8Rows<'_>,
    r0: usize,
    r1: usize,
    out: SharedMut<f32>,
    buf: &mut Vec<u8>,
) {
    debug_assert!(r0.is_multiple_of(8) && r1.is_multiple_of(8));
    let (rb, nb) = (w.row_bytes(), w.cols / 256);
    let data = w.data.as_ptr();
    let src = Source {
        // Rows r..r + 8 are a whole group of the layout (r a multiple of 8).
        place: &|r, _| data.wrapping_add(r * rb),
        // The kernels prefetch as they stream.
        next: &|r| (data.wrapping_add(r * rb), 0),
        out_scale: None,
    };
    let kernels = match w.dtype {
        DType::Q4KX8 => by_tokens!(q4k_x8_kernel),
        _ => by_tokens!(q6k_x8_kernel),
    };
    // SAFETY: as this function.
    unsafe { drive(&AVX2, nb, 0, &kernels, &src, w.rows, acts, r0, r1, out, buf) };
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4k_x8_kernel<const T: usize>(w: *const u8, nb: usize, x: &Toks8, out: &mut Res) {
    x8::q4k::<T>(w, nb, x, out)
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6k_x8_kernel<const T: usize>(w: *const u8, nb: usize, x: &Toks8, out: &mut Res) {
    x8::q6k::<T>(w, nb, x, out)
}

/// Where a panel's rows come from.
struct Source<'a> {
    /// The panel of rows `r..r + rows`: rewritten into the buffer at the
    /// pointer (and that returned), or where the matrix holds it.
    place: &'a dyn Fn(usize, *mut u8) -> *const u8,
    /// The bytes of rows `r..` that the next panel reads (to prefetch).
    next: &'a dyn Fn(usize) -> (*const u8, usize),
    /// A factor every output is multiplied by after the kernel.
    out_scale: Option<f32>,
}

/// The panel loop: `rows` rows of `set` at a time, placed by `src` (packed
/// into `buf`, `bytes` a panel), then every token group of `acts` through
/// `kernels`; returns the first row past the last whole panel.
///
/// # Safety
/// As `q8::rows`; `src` packs whole rows of a matrix of `n_rows` rows.
#[allow(clippy::too_many_arguments)]
unsafe fn drive(
    set: &Set,
    nb: usize,
    bytes: usize,
    kernels: &[PanelKernel; TOKENS],
    src: &Source,
    n_rows: usize,
    acts: Q8Rows<'_>,
    r0: usize,
    r1: usize,
    out: SharedMut<f32>,
    buf: &mut Vec<u8>,
) -> usize {
    let (rows, n) = (set.rows, acts.n());
    // Every slot's buffer starts at MIN_PANEL_BUF (`RowScratch`); a wider
    // panel grows it.
    if buf.len() < bytes + 64 {
        buf.resize(bytes + 64, 0);
    }
    let at = buf.as_ptr().align_offset(64).min(64);
    let panel = buf.as_mut_ptr().add(at);
    // The token groups' activations, found once for every panel (finding
    // them per panel cost ~15% of the experts' time), for up to
    // [`GROUPS`] groups at a time: on the stack, since a decode step must
    // not allocate, and not initialised past what is used (zeroing all 20
    // KiB cost ~2% of a Q8_0 MoE prefill, whose experts take few tokens).
    let mut groups = [const { std::mem::MaybeUninit::<(usize, usize, Toks8)>::uninit() }; GROUPS];
    let mut res: Res = [[0.0; 16]; TOKENS];
    let mut c0 = 0;
    while c0 < n {
        let c1 = (c0 + GROUPS * set.tokens).min(n);
        let mut ng = 0;
        let mut t0 = c0;
        while t0 < c1 {
            let nt = (c1 - t0).min(set.tokens);
            groups[ng].write((t0, nt, Toks8::new(acts, t0, nt)));
            ng += 1;
            t0 += nt;
        }
        let mut r = r0;
        while r + rows <= r1 {
            let at = (src.place)(r, panel);
            // The next panel's rows come from DRAM while this one is used:
            // packing waited on them (~85% of its time) without this.
            let (next, len) = (src.next)(r + rows);
            for o in (0..len).step_by(64) {
                _mm_prefetch(next.wrapping_add(o) as *const i8, _MM_HINT_T2);
            }
            for group in &groups[..ng] {
                // SAFETY: groups 0..ng were written above.
                let &(t0, nt, ref toks) = unsafe { group.assume_init_ref() };
                (kernels[nt - 1])(at, nb, toks, &mut res);
                for t in 0..nt {
                    if let Some(f) = src.out_scale {
                        res[t][..rows].iter_mut().for_each(|v| *v *= f);
                    }
                    let dst = out.at((t0 + t) * n_rows + r);
                    // SAFETY: rows r..r + rows of the output are this
                    // caller's. A copy of a constant length (a length known
                    // only at run time was a call into `memcpy` for 32
                    // bytes, ~1.5% of a Q8_0 prefill).
                    match rows {
                        8 => {
                            (dst as *mut [f32; 8]).write_unaligned(res[t][..8].try_into().unwrap())
                        }
                        16 => (dst as *mut [f32; 16]).write_unaligned(res[t]),
                        _ => std::ptr::copy_nonoverlapping(res[t].as_ptr(), dst, rows),
                    }
                }
            }
            r += rows;
        }
        c0 = c1;
    }
    r0 + (r1 - r0) / rows * rows
}

#[cfg(test)]
mod tests {
    use crate::matmul::MatRef;
    use crate::q8::{dot_ref, ActFormat, Q8Acts};
    use crate::simd::Isa;
    use crate::threads::SharedMut;
    use rill_dtype::DType;

    /// Every output of the panel path (through `x86::rows`, so whole
    /// panels, the rows after them and starts inside a panel) has the
    /// reference's bits: random blocks and blocks at the bounds (largest
    /// quants, scales and mins; Q6_K scales −1 and −128), activations random
    /// or all ±1, 3 to 19 tokens.
    #[test]
    fn panels_give_the_reference_bits() {
        let mut classes = vec![];
        if Isa::Avx2.is_available() {
            classes.push(Isa::Avx2);
        }
        if Isa::Avx512.is_available() && super::super::vnni() {
            classes.push(Isa::Avx512);
        }
        for isa in classes {
            check_panels(isa);
        }
    }

    /// More tokens than one pass over the rows holds ([`super::GROUPS`]
    /// groups): every pass gives the reference's bits too.
    #[test]
    fn long_batches_pass_over_the_rows_again() {
        let mut rnd = crate::test_util::xorshift(0x0DD_BA11);
        let (rows, cols, n) = (20, 256, 800);
        let mut data: Vec<u8> = (0..rows * 144).map(|_| rnd() as u8).collect();
        for blk in data.chunks_exact_mut(144) {
            blk[..2].copy_from_slice(&half::f16::from_f32(0.01).to_bits().to_le_bytes());
        }
        let w = MatRef::new(DType::Q4K, rows, cols, &data);
        let xf: Vec<f32> = (0..n * cols)
            .map(|_| (rnd() % 2001) as f32 / 100.0 - 10.0)
            .collect();
        let mut acts = Q8Acts::default();
        acts.quantize(ActFormat::K256, &xf, n, cols);
        for isa in [Isa::Avx2, Isa::Avx512] {
            if !(isa.is_available() && (isa == Isa::Avx2 || super::super::vnni())) {
                continue;
            }
            let mut out = vec![f32::NAN; n * rows];
            // SAFETY: the CPU runs `isa` (checked); the output holds n · rows.
            unsafe {
                super::super::rows(
                    isa,
                    w,
                    (&acts).into(),
                    0,
                    rows,
                    SharedMut::new(&mut out),
                    &mut Vec::new(),
                )
            };
            for t in 0..n {
                for r in 0..rows {
                    let want = dot_ref(DType::Q4K, w.row(r), acts.row(t));
                    assert_eq!(
                        out[t * rows + r].to_bits(),
                        want.to_bits(),
                        "{isa:?} {t} {r}"
                    );
                }
            }
        }
    }

    fn check_panels(isa: Isa) {
        let mut rnd = crate::test_util::xorshift(0x5EED_0F9A_4E15);
        for (dtype, cols) in [
            (DType::Q4K, 768),
            (DType::Q5K, 512),
            (DType::Q6K, 1280),
            (DType::Q6KPlanar, 1280),
            (DType::Q8_0, 352),
            (DType::Q8_0, 64),
            (DType::Q4_0, 352),
            (DType::IQ4NL, 96),
            (DType::IQ4XS, 768),
            (DType::MXFP4, 288),
            (DType::Q5_0, 352),
            (DType::Q4_1, 352),
            (DType::Q5_1, 96),
            (DType::IQ2XXS, 512),
            (DType::IQ2XS, 256),
            (DType::IQ2S, 768),
            (DType::IQ3XXS, 512),
            (DType::IQ3S, 256),
            (DType::IQ1S, 512),
            (DType::IQ1M, 768),
            (DType::NVFP4, 192),
            (DType::NVFP4, 2048),
        ] {
            for fill in [None, Some(0xFFu8), Some(0x80), Some(0x00)] {
                let rows = 37;
                let data = crate::q8::groups::test_blocks(dtype, rows, cols, fill, &mut rnd);
                let w = MatRef::new(dtype, rows, cols, &data);
                for n in [3, 5, 8, 13, 19] {
                    let xf = crate::q8::groups::test_acts(n, cols, fill, &mut rnd);
                    let mut acts = Q8Acts::default();
                    acts.quantize(ActFormat::for_weights(dtype).unwrap(), &xf, n, cols);
                    for r0 in [0, 3] {
                        let mut out = vec![f32::NAN; n * rows];
                        let mut buf = Vec::new();
                        // SAFETY: the CPU runs `isa` (checked); the
                        // output holds n · rows values.
                        let done = unsafe {
                            if dtype == DType::NVFP4 {
                                // No 4-row table: its own entry (panels, then rows).
                                crate::q8::rows(
                                    isa,
                                    w,
                                    (&acts).into(),
                                    r0,
                                    rows,
                                    SharedMut::new(&mut out),
                                    &mut crate::q8::RowScratch::default(),
                                );
                                true
                            } else {
                                super::super::rows(
                                    isa,
                                    w,
                                    (&acts).into(),
                                    r0,
                                    rows,
                                    SharedMut::new(&mut out),
                                    &mut buf,
                                )
                            }
                        };
                        assert!(done);
                        for r in r0..rows {
                            for t in 0..n {
                                let want = dot_ref(dtype, w.row(r), acts.row(t));
                                assert_eq!(
                                    out[t * rows + r].to_bits(),
                                    want.to_bits(),
                                    "{isa:?} {dtype} fill {fill:?} n {n} r0 {r0} row {r} token {t}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}
