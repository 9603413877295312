//! Weight-kernel micro-benchmark: GB/s of encoded weight bytes.
//!
//! `cargo run --release -p rill-kernels --example kernel_bench [-- ROWS COLS [TYPE...]]`
//!
//! For each encoding, a `ROWS × COLS` matrix (default 2048 × 4096) is built
//! from the committed test-fixture blocks, then timed single-threaded for
//! every kernel path this CPU has: `dot` over all rows (decode: n = 1) and
//! `dequantize` of all rows (prefill), then `matmul` with n = 1 on 2 threads
//! with the best path. Each figure is the best of a few short repetitions.

use std::hint::black_box;
use std::time::{Duration, Instant};

use rill_dtype::DType;

mod common;
use common::matrix;
use rill_kernels::quant::{dequantize_with, dot_with};
use rill_kernels::simd::Isa;
use rill_kernels::{matmul_with, MatRef, Threads};

const TYPES: [DType; 16] = [
    DType::Q4K,
    DType::Q6K,
    DType::Q8_0,
    DType::Q5K,
    DType::IQ4XS,
    DType::BF16,
    DType::F16,
    DType::F32,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q2K,
    DType::Q3K,
    DType::IQ4NL,
    DType::MXFP4,
];

/// Best time of `f` over repetitions lasting about `budget` in all.
fn best_time(budget: Duration, mut f: impl FnMut()) -> Duration {
    f(); // warm up
    let start = Instant::now();
    let mut best = Duration::MAX;
    let mut reps = 0;
    while reps < 3 || (start.elapsed() < budget && reps < 50) {
        let t = Instant::now();
        f();
        best = best.min(t.elapsed());
        reps += 1;
    }
    best
}

fn gbs(bytes: usize, t: Duration) -> f64 {
    bytes as f64 / t.as_secs_f64() / 1e9
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rows: usize = args.first().map_or(2048, |a| a.parse().expect("ROWS"));
    let cols: usize = args.get(1).map_or(4096, |a| a.parse().expect("COLS"));
    let only: Vec<&str> = args.iter().skip(2).map(String::as_str).collect();
    let paths = Isa::available();
    let budget = Duration::from_millis(120);
    let threads = Threads::new(2);
    println!(
        "matrix {rows} x {cols}; paths {paths:?}; best {:?}",
        Isa::best()
    );
    print!("{:<7} {:>8}", "type", "MiB");
    for p in &paths {
        print!(" {:>10}", format!("dot:{}", p.name()));
    }
    for p in &paths {
        print!(" {:>10}", format!("deq:{}", p.name()));
    }
    println!(" {:>10}", "matmul-2t");
    let x: Vec<f32> = (0..cols)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
        .collect();
    let mut out = vec![0f32; rows];
    let mut row_buf = vec![0f32; cols];
    for dtype in TYPES {
        if !only.is_empty() && !only.iter().any(|o| o.eq_ignore_ascii_case(dtype.name())) {
            continue;
        }
        let data = matrix(dtype, rows, cols);
        let w = MatRef::new(dtype, rows, cols, &data);
        print!(
            "{:<7} {:>8.1}",
            dtype.name(),
            data.len() as f64 / (1 << 20) as f64
        );
        for &isa in &paths {
            let t = best_time(budget, || {
                for (r, o) in out.iter_mut().enumerate() {
                    *o = dot_with(isa, dtype, w.row(r), &x);
                }
                black_box(&out);
            });
            print!(" {:>10.2}", gbs(data.len(), t));
        }
        for &isa in &paths {
            let t = best_time(budget, || {
                for r in 0..rows {
                    dequantize_with(isa, dtype, w.row(r), &mut row_buf);
                    black_box(&row_buf);
                }
            });
            print!(" {:>10.2}", gbs(data.len(), t));
        }
        let t = best_time(budget, || {
            matmul_with(Isa::best(), &threads, w, &x, 1, &mut out);
            black_box(&out);
        });
        println!(" {:>10.2}", gbs(data.len(), t));
    }
    println!(
        "(GB/s of encoded weight bytes; dot/deq single-thread, matmul n=1 on 2 threads, best path)"
    );
}
