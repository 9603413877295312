//! `rill bench`: prompt processing and generation speed, like llama-bench.
//!
//! pp: `-p` random tokens through a fresh state in one batch. tg: `-n`
//! tokens decoded one at a time into a fresh state. Each test runs `-r`
//! times after one warm-up; we report mean ± sd tokens/s, the load time, the
//! peak resident memory, and the weight bandwidth decode achieves (weight
//! bytes touched per token × tokens/s), next to the machine's measured read
//! bandwidth when `--bandwidth` is given.

use crate::load;
use anyhow::Result;
use rill_gguf::GgufFile;
use rill_kernels::simd::Isa;
use rill_kernels::Precision;
use rill_kernels::Threads;
use rill_model::{BatchItem, Logits, Model, SequenceState, StepLogits};
use rill_sampler::Rng;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// Model file (GGUF).
    #[arg(short, long)]
    model: PathBuf,
    /// Prompt tokens for the prompt-processing test (0 = skip).
    #[arg(short = 'p', long, default_value_t = 512)]
    n_prompt: usize,
    /// Tokens for the generation test (0 = skip).
    #[arg(short = 'n', long, default_value_t = 128)]
    n_gen: usize,
    /// Repetitions of each test.
    #[arg(short = 'r', long, default_value_t = 3)]
    reps: usize,
    /// Worker threads (0 = all cores).
    #[arg(short, long, default_value_t = 0)]
    threads: usize,
    /// Matrix-product numerics: `exact` (f32 activations, the reference
    /// results) or `q8` (8-bit activations as llama.cpp uses: faster,
    /// results within the activations' rounding).
    #[arg(long, default_value = "exact")]
    precision: Precision,
    /// Sequences decoded together in the generation test (one batched step
    /// per token for all of them, as the server does); tg reports the
    /// aggregate tokens/s.
    #[arg(long, default_value_t = 1)]
    parallel: usize,
    /// Also measure the machine's read bandwidth with the same threads.
    #[arg(long)]
    bandwidth: bool,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

/// Mean and sample standard deviation.
fn stats(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = if xs.len() > 1 {
        xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    (mean, var.sqrt())
}

/// Weight bytes read to generate one token: every tensor in full except the
/// embedding (one row) and routed experts (top-k of n).
pub fn active_weight_bytes(file: &GgufFile, model: &Model) -> f64 {
    let c = &model.config;
    let mut total = 0.0;
    for t in file.tensors() {
        let Ok(data) = file.try_tensor_data(t) else {
            continue;
        };
        let b = data.len() as f64;
        // MTP layers are not run by the trunk.
        if let Some(rest) = t.name.strip_prefix("blk.") {
            let layer: usize = rest
                .split('.')
                .next()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            if layer >= c.n_layer {
                continue;
            }
        }
        total += if t.name == "token_embd.weight" {
            if model.has_output_matrix() {
                b / c.n_vocab as f64
            } else {
                b // tied: the output projection reads all of it
            }
        } else if t.name.contains("_exps") {
            b * c.n_expert_used as f64 / c.n_expert.max(1) as f64
        } else {
            b
        };
    }
    total
}

/// Peak resident set size of this process, from /proc (Linux), in bytes.
fn peak_rss() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Read bandwidth of `threads` workers summing a buffer far larger than the caches.
fn read_bandwidth(threads: &Threads) -> f64 {
    let n: usize = 256 << 20; // 1 GiB of f32
    let buf: Vec<f32> = (0..n).map(|i| (i & 7) as f32).collect();
    let mut best = 0f64;
    for _ in 0..3 {
        let t0 = Instant::now();
        let sums: Vec<std::sync::atomic::AtomicU32> =
            (0..threads.count()).map(|_| Default::default()).collect();
        let chunk = n.div_ceil(threads.count());
        threads.for_ranges(threads.count(), 1, |a, b| {
            for w in a..b {
                let part = &buf[w * chunk..((w + 1) * chunk).min(n)];
                let s = rill_kernels::ops::sum(part);
                sums[w].store(s.to_bits(), std::sync::atomic::Ordering::Relaxed);
            }
        });
        let secs = t0.elapsed().as_secs_f64();
        std::hint::black_box(&sums);
        best = best.max((n * 4) as f64 / secs);
    }
    best
}

pub fn run(a: Args) -> Result<()> {
    anyhow::ensure!(a.reps > 0, "-r must be at least 1");
    let t0 = Instant::now();
    let model = load::open_model(&a.model, a.precision)?;
    let load_s = t0.elapsed().as_secs_f64();
    let threads = Threads::new(a.threads);
    let c = &model.config;
    let mut rng = Rng::new(42);
    let mut random_tokens = |n: usize| -> Vec<u32> {
        (0..n)
            .map(|_| (rng.next_u64() % c.n_vocab as u64) as u32)
            .collect()
    };

    let mut pp = Vec::new();
    if a.n_prompt > 0 {
        for rep in 0..=a.reps {
            let toks = random_tokens(a.n_prompt);
            let mut st = SequenceState::new(&model, a.n_prompt);
            let t = Instant::now();
            model.forward(&threads, &mut st, &toks, Logits::Last)?;
            if rep > 0 {
                pp.push(a.n_prompt as f64 / t.elapsed().as_secs_f64());
            }
        }
    }
    let mut tg = Vec::new();
    let par = a.parallel.max(1);
    if a.n_gen > 0 {
        for rep in 0..=a.reps {
            let toks: Vec<Vec<u32>> = (0..par).map(|_| random_tokens(a.n_gen)).collect();
            let mut states: Vec<SequenceState> = (0..par)
                .map(|_| SequenceState::new(&model, a.n_gen))
                .collect();
            // As the server steps: logits into one reused buffer.
            let mut logits = StepLogits::new();
            let t = Instant::now();
            for i in 0..a.n_gen {
                let mut items: Vec<BatchItem> = states
                    .iter_mut()
                    .zip(&toks)
                    .map(|(st, tk)| BatchItem {
                        state: st,
                        tokens: &tk[i..i + 1],
                        logits: Logits::Last,
                    })
                    .collect();
                model.forward_batch_into(&threads, &mut items, &mut logits)?;
            }
            if rep > 0 {
                tg.push((a.n_gen * par) as f64 / t.elapsed().as_secs_f64());
            }
        }
    }
    let active = active_weight_bytes(model.file(), &model);
    // Before the bandwidth probe, whose buffer would dominate it.
    let rss = peak_rss();
    let bw = a.bandwidth.then(|| read_bandwidth(&threads));
    let (pp_m, pp_sd) = if pp.is_empty() {
        (0.0, 0.0)
    } else {
        stats(&pp)
    };
    let (tg_m, tg_sd) = if tg.is_empty() {
        (0.0, 0.0)
    } else {
        stats(&tg)
    };
    let decode_bw = active * tg_m;

    if a.json {
        let obj = serde_json::json!({
            "model": a.model.display().to_string(),
            "threads": threads.count(),
            "kernels": Isa::best().name(),
            "precision": a.precision.name(),
            "load_s": load_s,
            "peak_rss_bytes": rss,
            "pp": { "n": a.n_prompt, "tok_s": pp, "mean": pp_m, "sd": pp_sd },
            "tg": { "n": a.n_gen, "parallel": par, "tok_s": tg, "mean": tg_m, "sd": tg_sd },
            "active_weight_bytes_per_token": active,
            "decode_weight_bandwidth_bytes_s": decode_bw,
            "read_bandwidth_bytes_s": bw,
        });
        println!("{obj}");
        return Ok(());
    }
    println!(
        "model: {} ({}, {} threads, {} kernels, {} precision), loaded in {load_s:.2} s",
        a.model.display(),
        c.arch.name(),
        threads.count(),
        Isa::best().name(),
        a.precision.name()
    );
    println!("| test   |            t/s |");
    println!("| ------ | -------------: |");
    if a.n_prompt > 0 {
        println!("| pp{:<4} | {pp_m:>7.2} ± {pp_sd:>5.2} |", a.n_prompt);
    }
    if a.n_gen > 0 {
        let label = if par > 1 {
            format!("tg{}x{par}", a.n_gen)
        } else {
            format!("tg{}", a.n_gen)
        };
        println!("| {label:<6} | {tg_m:>7.2} ± {tg_sd:>5.2} |");
    }
    if let Some(r) = rss {
        println!("peak resident memory: {:.1} MiB", r as f64 / 1048576.0);
    }
    println!("weights touched per token: {:.1} MiB", active / 1048576.0);
    if a.n_gen > 0 {
        println!("decode weight bandwidth: {:.2} GB/s", decode_bw / 1e9);
    }
    if let Some(b) = bw {
        println!(
            "machine read bandwidth ({} threads): {:.2} GB/s; decode at {:.0}% of it",
            threads.count(),
            b / 1e9,
            100.0 * decode_bw / b
        );
    }
    Ok(())
}
