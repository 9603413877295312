//! Overhead of one parallel region on the worker pool (an empty job split
//! over all workers), the cost every kernel call pays per token.
//!     cargo run --release -p rill-kernels --example pool_overhead -- [THREADS]
use rill_kernels::Threads;
use std::time::Instant;

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2);
    let threads = Threads::new(n);
    let sink = std::sync::atomic::AtomicUsize::new(0);
    for _ in 0..1000 {
        threads.for_ranges(64, 1, |a, b| {
            sink.fetch_add(b - a, std::sync::atomic::Ordering::Relaxed);
        });
    }
    let iters = 20000;
    let t0 = Instant::now();
    for _ in 0..iters {
        threads.for_ranges(64, 1, |a, b| {
            sink.fetch_add(b - a, std::sync::atomic::Ordering::Relaxed);
        });
    }
    let us = t0.elapsed().as_secs_f64() * 1e6 / iters as f64;
    println!("{n} threads: {us:.2} µs per parallel region");
}
