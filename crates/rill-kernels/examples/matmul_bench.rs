//! `matmul` throughput for prefill (many tokens) and decode (one token).
//!
//! `cargo run --release -p rill-kernels --example matmul_bench [-- ROWS COLS [TYPE...]]`
//!
//! For each encoding (default F32, Q4_K, Q8_0) a `ROWS × COLS` matrix
//! (default 2048 × 2048) is built from the committed test-fixture blocks and
//! multiplied by n = 1, 16, 128, 512 activation rows (or the comma-separated
//! list in `MATMUL_BENCH_N`) on 1 and 2 threads (or the list in `MATMUL_BENCH_THREADS`), with exact f32 activations
//! or, with `MATMUL_BENCH_PRECISION=q8`, 8-bit ones (`rill_kernels::q8`), on
//! the kernel class `MATMUL_BENCH_KERNELS` names (default: the best).
//! Prints GFLOP/s (`2·rows·cols·n / time`), the median of several short runs
//! (the machine may be shared, so medians are steadier than means;
//! `MATMUL_BENCH_BEST=1` prints the fastest run instead; `MATMUL_BENCH_LAYOUT=1`
//! holds each matrix in the layout the loader makes for the class). The
//! `cpu` line is the 1-thread figure per second of on-CPU time, which time
//! given to other jobs on a shared machine does not dilute.

use std::hint::black_box;
use std::time::{Duration, Instant};

use rill_dtype::DType;

mod common;
use common::matrix;
use rill_kernels::{matmul_on, Isa, MatRef, Precision, Threads};

const ALL: [DType; 26] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::Q8_0,
    DType::Q4_0,
    DType::Q5_0,
    DType::Q4_1,
    DType::Q5_1,
    DType::IQ4NL,
    DType::IQ4XS,
    DType::Q4K,
    DType::Q5K,
    DType::Q6K,
    DType::Q2K,
    DType::Q3K,
    DType::MXFP4,
    DType::IQ2XXS,
    DType::IQ2XS,
    DType::IQ2S,
    DType::IQ3XXS,
    DType::IQ3S,
    DType::IQ1S,
    DType::IQ1M,
    DType::TQ1_0,
    DType::TQ2_0,
    DType::NVFP4,
];

/// On-CPU time of the calling thread (Linux `/proc/thread-self/schedstat`),
/// if available: unlike wall time it does not count time the scheduler gave
/// to other jobs on a shared machine.
fn thread_cpu() -> Option<Duration> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    Some(Duration::from_nanos(
        s.split_whitespace().next()?.parse().ok()?,
    ))
}

/// Median wall time of `f` over at least 5 runs (more while under
/// `budget`), and the mean on-CPU time of the calling thread per run (the
/// kernel's counter is coarse, so it is read around all runs at once).
fn median_time(budget: Duration, mut f: impl FnMut()) -> (Duration, Option<Duration>) {
    f(); // warm up
    let start = Instant::now();
    let c0 = thread_cpu();
    let mut wall = Vec::new();
    while wall.len() < 5 || (start.elapsed() < budget && wall.len() < 401) {
        let t = Instant::now();
        f();
        wall.push(t.elapsed());
    }
    let cpu = match (c0, thread_cpu()) {
        (Some(a), Some(b)) if b > a => Some((b - a) / wall.len() as u32),
        _ => None,
    };
    wall.sort();
    // The fastest run: a kernel's own speed on a machine shared with
    // other jobs (in-cache matrices), where the median moves ±20%.
    let best = std::env::var_os("MATMUL_BENCH_BEST").is_some();
    (wall[if best { 0 } else { wall.len() / 2 }], cpu)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rows: usize = args.first().map_or(2048, |a| a.parse().expect("ROWS"));
    let cols: usize = args.get(1).map_or(2048, |a| a.parse().expect("COLS"));
    let names: Vec<&str> = args.iter().skip(2).map(String::as_str).collect();
    let types: Vec<DType> = if names.is_empty() {
        vec![DType::F32, DType::Q4K, DType::Q8_0]
    } else {
        names
            .iter()
            .map(|n| {
                ALL.into_iter()
                    .find(|d| d.name().eq_ignore_ascii_case(n))
                    .unwrap_or_else(|| panic!("unknown type {n}"))
            })
            .collect()
    };
    let ns: Vec<usize> = std::env::var("MATMUL_BENCH_N").map_or(vec![1, 16, 128, 512], |v| {
        v.split(',')
            .map(|n| n.trim().parse().expect("MATMUL_BENCH_N"))
            .collect()
    });
    let precision: Precision = std::env::var("MATMUL_BENCH_PRECISION")
        .map_or(Precision::Exact, |v| {
            v.parse().expect("MATMUL_BENCH_PRECISION")
        });
    let isa: Isa = std::env::var("MATMUL_BENCH_KERNELS").map_or(Isa::best(), |v| {
        v.parse()
            .unwrap_or_else(|e| panic!("MATMUL_BENCH_KERNELS: {e}"))
    });
    let thread_counts: Vec<usize> = std::env::var("MATMUL_BENCH_THREADS").map_or(vec![1, 2], |v| {
        v.split(',')
            .map(|n| n.trim().parse().expect("MATMUL_BENCH_THREADS"))
            .collect()
    });
    let budget = Duration::from_millis(300);
    println!(
        "matrix {rows} x {cols}; kernels {isa} on {}; precision {}; GFLOP/s (median)",
        rill_kernels::simd::cpu_name(),
        precision.name()
    );
    print!("{:<6} {:>3}", "type", "thr");
    for &n in &ns {
        print!(" {:>9}", format!("n={n}"));
    }
    println!();
    // `MATMUL_BENCH_LAYOUT=1`: each matrix in the layout a model loaded
    // for this class and precision holds it in (`rill_kernels::layout`).
    let layout = std::env::var_os("MATMUL_BENCH_LAYOUT").is_some();
    for file_dtype in types {
        let mut data = matrix(file_dtype, rows, cols);
        let dtype = match rill_kernels::layout::load_layout(isa, precision, file_dtype, rows) {
            Some(to) if layout => {
                let rb = cols / file_dtype.block_len() * file_dtype.block_bytes();
                assert!(rill_kernels::layout::rewrite(file_dtype, to, rb, &mut data));
                to
            }
            _ => file_dtype,
        };
        if dtype == DType::NVFP4 {
            // The fixture's NaN-pattern scales (0x7F, 0xFF) send a row to the
            // reference; files from checkpoints have none.
            for b in data.chunks_exact_mut(36) {
                b[..4].iter_mut().for_each(|s| *s = (*s & 0x7F).min(0x7E));
            }
        }
        // On 2 MiB pages where the kernel gives them, as rill-gguf maps
        // model files: with 4 KiB pages TLB misses dominate large matrices.
        let mut anon = memmap2::MmapMut::map_anon(data.len()).expect("mmap");
        let _ = anon.advise(memmap2::Advice::HugePage);
        anon.copy_from_slice(&data);
        let data = anon;
        let w = MatRef::new(dtype, rows, cols, &data);
        for &nt in &thread_counts {
            let threads = Threads::new(nt);
            print!("{:<6} {:>3}", file_dtype.name(), nt);
            let mut on_cpu = Vec::new();
            for &n in &ns {
                let x: Vec<f32> = (0..n * cols)
                    .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
                    .collect();
                let mut out = vec![0f32; n * rows];
                let (t, cpu) = median_time(budget, || {
                    matmul_on(isa, precision, &threads, w, black_box(&x), n, &mut out);
                    black_box(&out);
                });
                let flop = 2.0 * rows as f64 * cols as f64 * n as f64;
                print!(" {:>9.1}", flop / t.as_secs_f64() / 1e9);
                on_cpu.push(cpu.map(|c| flop / c.as_secs_f64() / 1e9));
            }
            println!();
            // One thread runs on the caller: its on-CPU time is the whole cost.
            if nt == 1 && on_cpu.iter().all(Option::is_some) {
                print!("{:<6} {:>3}", file_dtype.name(), "cpu");
                for g in on_cpu.into_iter().flatten() {
                    print!(" {:>9.1}", g);
                }
                println!();
            }
        }
    }
}
