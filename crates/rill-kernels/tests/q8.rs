//! Products with 8-bit activations (`Precision::Q8`) on every kernel path
//! this CPU has: bit for bit the scalar reference's canonical order
//! (`q8::dot_ref`) whatever the batch, threads or path, and within the
//! activations' rounding of the exact product.

use rill_dtype::DType;
use rill_kernels::q8::{dot_ref, ActFormat, Precision, Q8Acts};
use rill_kernels::quant::dequantize_with;
use rill_kernels::simd::Isa;
use rill_kernels::{matmul_many_on, MatJob, MatRef, Threads};

mod common;
use common::{dot_f64, matrix, Rng};

/// Encodings with integer kernels, with a column count each: fewer blocks
/// than a group of 8 partials, exactly 8, and more (the partials wrap;
/// Q8_0 also ends on a partial group of blocks). The IQ1 / IQ2 / IQ3
/// codebook encodings have them on x86 only; elsewhere they are skipped.
/// (NVFP4 of 64 columns: on x86 not whole blocks of 128, the reference's
/// path.)
const CASES: [(DType, usize); 32] = [
    (DType::Q8_0, 224),
    (DType::Q8_0, 2048),
    (DType::Q8_0, 2880),
    (DType::Q4K, 512),
    (DType::Q5K, 768),
    (DType::Q5K, 2304),
    (DType::Q6K, 512),
    (DType::Q6K, 2560),
    (DType::Q4K, 2048),
    (DType::IQ4XS, 512),
    (DType::IQ4XS, 2304),
    (DType::Q4_0, 224),
    (DType::Q4_0, 2880),
    (DType::IQ4NL, 352),
    (DType::MXFP4, 224),
    (DType::MXFP4, 2880),
    (DType::Q5_0, 320),
    (DType::Q5_0, 2560),
    (DType::Q4_1, 224),
    (DType::Q5_1, 320),
    (DType::Q5_1, 2880),
    (DType::IQ2XXS, 512),
    (DType::IQ2XXS, 2304),
    (DType::IQ2XS, 768),
    (DType::IQ2S, 2304),
    (DType::IQ3XXS, 512),
    (DType::IQ3S, 2304),
    (DType::IQ1S, 768),
    (DType::IQ1M, 2304),
    (DType::NVFP4, 64),
    (DType::NVFP4, 256),
    (DType::NVFP4, 2304),
];

fn activations(n: usize, cols: usize, rng: &mut Rng) -> Vec<f32> {
    // Blocks of very different magnitudes, as real hidden states have.
    (0..n * cols)
        .map(|i| rng.f32() * [0.01, 1.0, 30.0][(i / 32) % 3])
        .collect()
}

/// A `rows × cols` matrix of `dtype` and `n` tokens of activations for it
/// (drawn in that order from `rng`).
fn weights_and_activations(
    dtype: DType,
    rows: usize,
    cols: usize,
    n: usize,
    rng: &mut Rng,
) -> (Vec<u8>, Vec<f32>) {
    let data = matrix(dtype, rows, cols, rng);
    (data, activations(n, cols, rng))
}

/// `x` (`n` rows of `cols`) quantized in the format `dtype`'s kernels take.
fn quantized(dtype: DType, x: &[f32], n: usize, cols: usize) -> Q8Acts {
    let mut acts = Q8Acts::default();
    acts.quantize(ActFormat::for_weights(dtype).unwrap(), x, n, cols);
    acts
}

/// `f(w, x, acts)` for each of [`CASES`]: a `rows × cols` matrix, `n`
/// tokens of activations `x` and their quantization (drawn from `Rng(seed)`).
fn each_case(seed: u64, rows: usize, n: usize, mut f: impl FnMut(MatRef, &[f32], &Q8Acts)) {
    let mut rng = Rng(seed);
    for (dtype, cols) in CASES {
        if ActFormat::for_weights(dtype).is_none() {
            continue;
        }
        let (data, x) = weights_and_activations(dtype, rows, cols, n, &mut rng);
        f(
            MatRef::new(dtype, rows, cols, &data),
            &x,
            &quantized(dtype, &x, n, cols),
        );
    }
}

fn run(isa: Isa, threads: usize, w: MatRef, x: &[f32], n: usize) -> Vec<f32> {
    let mut out = vec![f32::NAN; n * w.rows];
    let job = MatJob {
        w,
        x,
        n,
        out: &mut out,
        pick: None,
    };
    matmul_many_on(isa, Precision::Q8, &Threads::new(threads), &mut [job]);
    out
}

#[test]
fn every_path_gives_the_reference_bits_in_any_batch() {
    each_case(7, 37, 9, |w, x, acts| {
        let (dtype, rows, cols, n) = (w.dtype, w.rows, w.cols, 9);
        for isa in Isa::available() {
            for threads in [1, 3] {
                let all = run(isa, threads, w, x, n);
                for t in 0..n {
                    for r in 0..rows {
                        let want = dot_ref(dtype, w.row(r), acts.row(t));
                        let got = all[t * rows + r];
                        assert_eq!(
                            got.to_bits(),
                            want.to_bits(),
                            "{dtype} {isa:?} threads {threads}: token {t} row {r}: {got:e} vs {want:e}"
                        );
                    }
                }
                // Every batch size up to the largest in-register tile and past
                // it, and on both sides of where prefill moves to AMX (8).
                for m in 1..=8 {
                    let part = run(isa, threads, w, &x[..m * cols], m);
                    assert_eq!(
                        part.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                        (0..m)
                            .flat_map(|t| &all[t * rows..(t + 1) * rows])
                            .map(|v| v.to_bits())
                            .collect::<Vec<_>>(),
                        "{dtype} {isa:?}: batch of {m}"
                    );
                }
            }
        }
    });
}

#[test]
fn prefill_batches_give_the_reference_bits() {
    // Batches of whole and partial 16-token tiles (the AMX kernel's, where
    // the CPU has one, from 8 tokens), row counts and thread splits that leave partial
    // 16-row tiles, and more tokens than one relaid block.
    let mut rng = Rng(13);
    for (dtype, cols) in CASES {
        if ActFormat::for_weights(dtype).is_none() {
            continue;
        }
        let rows = if cols > 1000 { 21 } else { 37 };
        let (data, x) = weights_and_activations(dtype, rows, cols, 520, &mut rng);
        let w = MatRef::new(dtype, rows, cols, &data);
        for n in [8, 16, 17, 40, 520] {
            let x = &x[..n * cols];
            let acts = quantized(dtype, x, n, cols);
            let want: Vec<u32> = (0..n)
                .flat_map(|t| (0..rows).map(move |r| (t, r)))
                .map(|(t, r)| dot_ref(dtype, w.row(r), acts.row(t)).to_bits())
                .collect();
            for isa in Isa::available() {
                for threads in [1, 3] {
                    let got = run(isa, threads, w, x, n);
                    for (i, (g, &e)) in got.iter().zip(&want).enumerate() {
                        assert_eq!(
                            g.to_bits(),
                            e,
                            "{dtype} {isa:?} threads {threads} n {n}: token {} row {}: {g:e} vs {:e}",
                            i / rows,
                            i % rows,
                            f32::from_bits(e)
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn products_are_within_the_activations_rounding_of_the_exact_ones() {
    each_case(11, 16, 3, |w, x, acts| {
        let (dtype, rows, cols, n) = (w.dtype, w.rows, w.cols, 3);
        let format = ActFormat::for_weights(dtype).unwrap();
        for isa in Isa::available() {
            let got = run(isa, 2, w, x, n);
            let mut wr = vec![0f32; cols];
            for r in 0..rows {
                dequantize_with(Isa::Scalar, dtype, w.row(r), &mut wr);
                for t in 0..n {
                    let xt = &x[t * cols..(t + 1) * cols];
                    let d = acts.row(t).d;
                    let (exact, mag) = dot_f64(&wr, xt);
                    // MXFP4 fixture blocks with E8M0 scales near 2^127: the
                    // products leave f32's range in either precision.
                    if mag > f32::MAX as f64 / 4.0 {
                        continue;
                    }
                    // Each activation moves by at most half its block's step,
                    // plus, for B32, the scale's f16 rounding (2⁻¹¹ of 127 steps).
                    let step = match format {
                        ActFormat::K256 => 0.5,
                        ActFormat::B32 => 0.5 + 127.0 / 2048.0,
                    };
                    let bound: f64 = wr
                        .iter()
                        .enumerate()
                        .map(|(c, &a)| (a as f64).abs() * d[c / format.block()] as f64 * step)
                        .sum::<f64>()
                        * 1.001
                        + 1e-5 * mag;
                    let err = (got[t * rows + r] as f64 - exact).abs();
                    assert!(
                        err <= bound,
                        "{isa} {dtype}: token {t} row {r}: error {err:e} over {bound:e}"
                    );
                }
            }
        }
    });
}

#[test]
fn encodings_without_integer_kernels_stay_exact() {
    let mut rng = Rng(3);
    for (dtype, cols) in [(DType::Q3K, 256), (DType::Q2K, 512), (DType::F32, 40)] {
        let rows = 5;
        let (data, x) = weights_and_activations(dtype, rows, cols, 2, &mut rng);
        let w = MatRef::new(dtype, rows, cols, &data);
        for isa in Isa::available() {
            let q8 = run(isa, 1, w, &x, 2);
            let mut exact = vec![0f32; 2 * rows];
            rill_kernels::matmul_with(isa, &Threads::new(1), w, &x, 2, &mut exact);
            assert_eq!(q8, exact, "{isa} {dtype}");
        }
    }
}

/// Jobs that pick rows out of one shared input (a MoE step's experts)
/// give, bit for bit, what the same jobs give on copies of those rows, in
/// either precision, on every path; the input is quantized once for all.
#[test]
fn picked_rows_equal_gathered_rows() {
    let mut rng = Rng(11);
    for (dtype, cols) in [(DType::Q4K, 512), (DType::Q6K, 512), (DType::Q8_0, 224)] {
        let rows = 40;
        let n_all = 37;
        let x = activations(n_all, cols, &mut rng);
        let mats: Vec<Vec<u8>> = (0..3)
            .map(|_| matrix(dtype, rows, cols, &mut rng))
            .collect();
        let w = |i: usize| MatRef::new(dtype, rows, cols, &mats[i]);
        // Sizes on both sides of the AMX threshold, one row twice.
        let picks: [Vec<usize>; 3] = [
            (0..20).map(|i| (i * 5 + 2) % n_all).collect(),
            vec![3, 30, 3],
            (0..n_all).rev().collect(),
        ];
        for isa in Isa::available() {
            for precision in [Precision::Exact, Precision::Q8] {
                let mut picked: Vec<Vec<f32>> = picks
                    .iter()
                    .map(|p| vec![f32::NAN; p.len() * rows])
                    .collect();
                let mut jobs: Vec<MatJob> = picked
                    .iter_mut()
                    .zip(&picks)
                    .enumerate()
                    .map(|(i, (out, p))| MatJob {
                        w: w(i),
                        x: &x,
                        n: p.len(),
                        out,
                        pick: Some(p),
                    })
                    .collect();
                matmul_many_on(isa, precision, &Threads::new(2), &mut jobs);
                drop(jobs);
                for (i, p) in picks.iter().enumerate() {
                    let gathered: Vec<f32> = p
                        .iter()
                        .flat_map(|&t| x[t * cols..(t + 1) * cols].iter().copied())
                        .collect();
                    let mut want = vec![f32::NAN; p.len() * rows];
                    let job = MatJob {
                        w: w(i),
                        x: &gathered,
                        n: p.len(),
                        out: &mut want,
                        pick: None,
                    };
                    matmul_many_on(isa, precision, &Threads::new(1), &mut [job]);
                    let same = picked[i]
                        .iter()
                        .zip(&want)
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{dtype} {isa:?} {precision:?} pick {i}");
                }
            }
        }
    }
}

/// Q6_K rewritten in its planar layout (`rill_kernels::layout`, what the
/// loader does for the AVX2 integer kernels) gives the file's blocks' bits
/// on every path, for decode, the 4-row kernels and the panels alike, and
/// in the exact precision too.
#[test]
fn the_planar_q6k_layout_gives_the_bits_of_the_file_blocks() {
    use rill_kernels::layout::rewrite;
    let mut rng = Rng(0x6B);
    let rows = 37;
    for cols in [512, 2560] {
        let file = matrix(DType::Q6K, rows, cols, &mut rng);
        let mut planar = file.clone();
        assert!(rewrite(
            DType::Q6K,
            DType::Q6KPlanar,
            cols / 256 * 210,
            &mut planar
        ));
        let (w, wp) = (
            MatRef::new(DType::Q6K, rows, cols, &file),
            MatRef::new(DType::Q6KPlanar, rows, cols, &planar),
        );
        for n in [1, 2, 4, 7, 9] {
            let x = activations(n, cols, &mut rng);
            for precision in [Precision::Q8, Precision::Exact] {
                let product = |isa, threads, w| {
                    let mut out = vec![f32::NAN; n * rows];
                    rill_kernels::matmul_on(
                        isa,
                        precision,
                        &Threads::new(threads),
                        w,
                        &x,
                        n,
                        &mut out,
                    );
                    out.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
                };
                for isa in Isa::available() {
                    let want = product(isa, 1, w);
                    for threads in [1, 3] {
                        assert_eq!(
                            product(isa, threads, wp),
                            want,
                            "{isa:?} {precision:?} {cols} columns, {n} tokens, {threads} threads"
                        );
                    }
                }
            }
        }
    }
}

/// Q4_K and Q6_K rewritten with every 8 rows interleaved (`DType::Q4KX8`,
/// `DType::Q6KX8`: what the loader does for the AVX2 integer kernels) give
/// the file's bits on every
/// class and precision, for 1 to 9 tokens on 1 and 3 threads; so do a slice
/// of its rows that ends inside a group, and products whose tasks cut its
/// groups (a job of 3 rows before it shifts every task bound).
#[test]
fn the_interleaved_layouts_give_the_bits_of_the_file_rows() {
    use rill_kernels::layout::rewrite;
    let mut rng = Rng(0x48);
    let rows = 40;
    let cases = [(DType::Q4K, DType::Q4KX8), (DType::Q6K, DType::Q6KX8)];
    for ((from, to), cols) in cases.into_iter().flat_map(|c| [(c, 256), (c, 2048)]) {
        let file = matrix(from, rows, cols, &mut rng);
        let mut x8 = file.clone();
        let rb = cols / 256 * from.block_bytes();
        assert!(rewrite(from, to, rb, &mut x8));
        assert_ne!(x8, file);
        let (w, wx) = (
            MatRef::new(from, rows, cols, &file),
            MatRef::new(to, rows, cols, &x8),
        );
        let small = matrix(DType::Q8_0, 3, cols, &mut rng);
        let small = MatRef::new(DType::Q8_0, 3, cols, &small);
        for n in [1, 2, 3, 6, 7, 9] {
            let x = activations(n, cols, &mut rng);
            for precision in [Precision::Q8, Precision::Exact] {
                // `m` after a 3-row job (its outputs only), on `threads`.
                let product = |isa, threads, m: MatRef, shifted: bool| {
                    let mut out = vec![f32::NAN; n * m.rows];
                    let mut other = vec![f32::NAN; n * 3];
                    let job = |w, out| MatJob {
                        w,
                        x: &x,
                        n,
                        out,
                        pick: None,
                    };
                    let mut jobs = vec![job(m, &mut out)];
                    if shifted {
                        jobs.insert(0, job(small, &mut other));
                    }
                    matmul_many_on(isa, precision, &Threads::new(threads), &mut jobs);
                    drop(jobs);
                    out.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
                };
                for isa in Isa::available() {
                    let at = format!("{to} {isa:?} {precision:?} {cols} columns, {n} tokens");
                    let want = product(isa, 1, w, false);
                    for threads in [1, 3] {
                        for shifted in [false, true] {
                            let got = product(isa, threads, wx, shifted);
                            assert_eq!(got, want, "{at}, {threads} threads, shifted {shifted}");
                        }
                    }
                    let cut = product(isa, 3, wx.slice_rows(8, 37), false);
                    assert_eq!(
                        cut,
                        product(isa, 1, w.slice_rows(8, 37), false),
                        "{at}, rows 8..37"
                    );
                }
            }
        }
    }
}
