//! `rill bench`: prompt processing and generation speed, like llama-bench,
//! measured through the engine every front end uses.
//!
//! pp: a request of `-p` random tokens, prefilled in one batch into a fresh
//! state. tg: `--parallel` requests of one random token each, decoding `-n`
//! tokens together (one batched step per token, as the server runs them).
//! Each test runs `-r` times after one warm-up; we report mean ± sd
//! tokens/s, the load time, the peak resident memory, and the weight
//! bandwidth decode achieves (weight bytes touched per token × tokens/s),
//! next to the machine's measured read bandwidth when `--bandwidth` is given.

use anyhow::{Context, Result};
use rill_engine::{Done, Engine, EngineConfig, Event, Request};
use rill_kernels::Threads;
use rill_load::Prefault;
use rill_sampler::{Rng, SamplerConfig};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct Args {
    /// Model: a GGUF file (any file of a split set) or a Hugging Face
    /// folder (config.json + safetensors). Default: the demo model
    /// inside the binary.
    #[arg(short, long)]
    model: Option<PathBuf>,
    /// Prompt tokens for the prompt-processing test (0 = skip).
    #[arg(short = 'p', long, default_value_t = 512)]
    n_prompt: usize,
    /// Tokens for the generation test (0 = skip).
    #[arg(short = 'n', long, default_value_t = 128)]
    n_gen: usize,
    /// Repetitions of each test.
    #[arg(short = 'r', long, default_value_t = 3)]
    reps: usize,
    #[command(flatten)]
    compute: crate::compute_args::ComputeArgs,
    /// Context depth of the generation test (llama-bench's `-d`): each
    /// request first prefills this many random tokens (not timed), then
    /// decodes `-n`. With a depth there is no warm-up run.
    #[arg(short = 'd', long, default_value_t = 0)]
    depth: usize,
    /// Sequences decoded together in the generation test (one batched step
    /// per token for all of them, as the server does); tg reports the
    /// aggregate tokens/s.
    #[arg(long, default_value_t = 1)]
    parallel: usize,
    /// Prompt tokens per sequence per engine step (llama-bench's `-ub`;
    /// `rill serve --prefill-chunk`). Default: the whole prompt of the pp
    /// test in one step, a deep context in steps of at most 4096.
    #[arg(long, alias = "ubatch-size")]
    prefill_chunk: Option<usize>,
    /// Most rows one engine step runs, all sequences together (`rill serve
    /// --step-tokens`; a lone request's chunk always runs whole). Default:
    /// no bound, so that the `--parallel` sequences prefill in the same
    /// steps and the generation test decodes them together (with a bound
    /// the first ones may finish before the last start).
    #[arg(long)]
    step_tokens: Option<usize>,
    /// Also measure the machine's read bandwidth with the same threads.
    #[arg(long)]
    bandwidth: bool,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// Start each generation-test request from this text instead of one
    /// random token (what the MTP head's acceptance depends on).
    #[arg(long)]
    gen_prompt: Option<String>,
    /// Instead of pp/tg: the cost of a rewindable verify step of 2…5
    /// positions and of an MTP draft step, each relative to a one-token
    /// decode step, after a context of -p tokens (-r runs each).
    #[arg(long)]
    verify_costs: bool,
    #[command(flatten)]
    spec: crate::spec_args::SpecArgs,
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

/// Run `reqs` at once and wait for all of them.
fn run_all(engine: &Engine, reqs: Vec<Request>) -> Result<Vec<Done>> {
    let mut handles = reqs
        .into_iter()
        .map(|r| engine.submit(r).context("the engine refused a request"))
        .collect::<Result<Vec<_>>>()?;
    let mut done = Vec::with_capacity(handles.len());
    for h in &mut handles {
        loop {
            match h.recv_blocking() {
                Some(Event::Text { .. } | Event::Prompt { .. } | Event::Progress(_)) => {}
                Some(Event::Done(d)) => break done.push(d),
                Some(Event::Error(e)) => anyhow::bail!("generation failed: {e}"),
                None => anyhow::bail!("the engine stopped"),
            }
        }
    }
    Ok(done)
}

/// How often a deep context's prefill reports its progress.
const PROGRESS_EVERY: Duration = Duration::from_secs(15);

/// [`run_all`], saying on stderr every [`PROGRESS_EVERY`] how far the
/// prompts' prefill has gone: a deep context (`-d`) takes minutes to hours.
fn run_all_reporting(engine: &Engine, reqs: Vec<Request>) -> Result<Vec<Done>> {
    let total: u64 = reqs.iter().map(|r| r.prompt.len() as u64).sum();
    let computed = &engine.metrics().prompt_tokens_computed_total;
    let start = computed.load(Relaxed);
    let t0 = Instant::now();
    let finished = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut next = PROGRESS_EVERY;
            while !finished.load(Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
                let elapsed = t0.elapsed();
                if elapsed < next {
                    continue;
                }
                next += PROGRESS_EVERY;
                let done = computed.load(Relaxed).saturating_sub(start);
                // (Counted a chunk — up to 4096 tokens — at a time.)
                if done > 0 && done < total {
                    let secs = elapsed.as_secs_f64();
                    eprintln!(
                        "rill: prefill {done} / {total} tokens after {secs:.0} s ({:.1} t/s)",
                        done as f64 / secs
                    );
                }
            }
        });
        let out = run_all(engine, reqs);
        finished.store(true, Relaxed);
        out
    })
}

pub fn run(a: Args) -> Result<()> {
    anyhow::ensure!(a.reps > 0, "-r must be at least 1");
    let t0 = Instant::now();
    let (loaded, kernels, precision, kv) =
        a.compute.open(&a.model, Some(&a.spec), Prefault::Now)?;
    let load_s = t0.elapsed().as_secs_f64();
    if a.verify_costs {
        let run = rill_model::Runner::new(Threads::new(a.compute.threads), kernels, precision);
        let reps = a.reps.max(3) * 10;
        let costs = super::bench_spec::measure(
            &loaded.model,
            &run,
            a.n_prompt.max(1),
            reps,
            a.spec.draft_vocab,
        )?;
        if a.json {
            let rows: Vec<_> = costs
                .iter()
                .map(|c| serde_json::json!({"step": c.name, "ms": c.ms}))
                .collect();
            println!(
                "{}",
                serde_json::json!({"model": loaded.info.label, "costs": rows})
            );
        } else {
            println!(
                "model: {} ({} threads, {} precision), context {} tokens, {reps} runs each",
                loaded.info.label,
                run.threads.count(),
                precision.name(),
                a.n_prompt.max(1)
            );
            super::bench_spec::print(&costs);
        }
        return Ok(());
    }
    let info = loaded.info;
    let (n_vocab, arch) = (loaded.model.config.n_vocab, loaded.model.config.arch);
    let par = a.parallel.max(1);
    let n_threads = match a.compute.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let tokenizer = Arc::new(loaded.tokenizer);
    let gen_prompt = a.gen_prompt.as_deref().map(|t| tokenizer.encode_prompt(t));
    let gen_prompt_len = gen_prompt.as_ref().map_or(1, Vec::len);
    let spec = a.spec.config()?;
    let engine = Engine::start(
        Arc::new(loaded.model),
        tokenizer,
        EngineConfig {
            max_parallel: par,
            ctx_size: (a.n_prompt + 1).max(a.depth + a.n_gen + gen_prompt_len + 1),
            // The whole prompt in one batch, as llama-bench's pp does (a
            // deep context in chunks of at most 4096).
            prefill_chunk: (a.prefill_chunk)
                .unwrap_or(a.n_prompt.max(a.depth.min(4096)))
                .max(1),
            step_tokens: a.step_tokens.unwrap_or(usize::MAX).max(1),
            cache_bytes: 0,
            threads: a.compute.threads,
            kernels,
            precision,
            kv,
            spec: spec.clone(),
            ..EngineConfig::default()
        },
    );
    let spec_on = engine.config().spec.is_on();
    let spec_line = engine.speculation();
    let mut rng = Rng::new(42);
    let mut random_tokens = |n: usize| -> Vec<u32> {
        (0..n)
            .map(|_| (rng.next_u64() % n_vocab as u64) as u32)
            .collect()
    };
    let request = |prompt: Vec<u32>, max_tokens: usize| Request {
        max_tokens,
        ignore_eos: true,
        ..Request::new(prompt, SamplerConfig::default())
    };

    let mut pp = Vec::new();
    if a.n_prompt > 0 {
        for rep in 0..=a.reps {
            let done = run_all(&engine, vec![request(random_tokens(a.n_prompt), 1)])?;
            if rep > 0 {
                pp.push(done[0].prefill_tok_s());
            }
        }
    }
    let mut tg = Vec::new();
    let (mut drafted, mut accepted) = (0usize, 0usize);
    if a.n_gen > 0 {
        // A deep context is its own warm-up (its prefill touches everything).
        let first_rep = usize::from(a.depth > 0);
        for rep in first_rep..=a.reps {
            // One token of prompt (after `depth` of context), then n_gen
            // decode steps after the first sampled token.
            let reqs = (0..par)
                .map(|_| {
                    let mut p = random_tokens(a.depth);
                    match &gen_prompt {
                        Some(g) => p.extend_from_slice(g),
                        None => p.extend(random_tokens(1)),
                    }
                    request(p, a.n_gen + 1)
                })
                .collect();
            let done = run_all_reporting(&engine, reqs)?;
            if rep > 0 {
                drafted += done.iter().map(|d| d.drafted_tokens).sum::<usize>();
                accepted += done.iter().map(|d| d.accepted_tokens).sum::<usize>();
            }
            // All were submitted together: decoding runs from the last
            // first token to the last end.
            let first = done.iter().map(|d| d.ttft_ms).fold(0.0, f64::max);
            let last = done.iter().map(|d| d.total_ms).fold(0.0, f64::max);
            if rep > 0 && last > first {
                tg.push((a.n_gen * par) as f64 * 1e3 / (last - first));
            }
        }
    }
    let active = info.decode_weight_bytes as f64;
    // Before the bandwidth probe, whose buffer would dominate it.
    let rss = peak_rss();
    let bw = a
        .bandwidth
        .then(|| read_bandwidth(&Threads::new(n_threads)));
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
    let acceptance = if drafted > 0 {
        accepted as f64 / drafted as f64
    } else {
        0.0
    };
    let per_position: Vec<u64> = engine.metrics().spec_accepted_per_position
        [..spec.draft_max.min(rill_engine::speculation::MAX_DRAFT)]
        .iter()
        .map(|a| a.load(std::sync::atomic::Ordering::Relaxed))
        .collect();

    if a.json {
        let obj = serde_json::json!({
            "model": info.label,
            "threads": n_threads,
            "kernels": kernels.name(),
            "cpu": rill_kernels::simd::cpu_name(),
            "precision": precision.name(),
            "load_s": load_s,
            "peak_rss_bytes": rss,
            "pp": { "n": a.n_prompt, "tok_s": pp, "mean": pp_m, "sd": pp_sd },
            "tg": { "n": a.n_gen, "parallel": par, "depth": a.depth, "tok_s": tg, "mean": tg_m, "sd": tg_sd },
            "active_weight_bytes_per_token": active,
            "decode_weight_bandwidth_bytes_s": decode_bw,
            "read_bandwidth_bytes_s": bw,
            "spec": {
                "draft_max": if spec_on { spec.draft_max } else { 0 },
                "setting": spec_line,
                "drafted": drafted,
                "accepted": accepted,
                "acceptance": acceptance,
                "accepted_per_position": per_position,
            },
        });
        println!("{obj}");
        return Ok(());
    }
    println!(
        "model: {} ({}, {} threads, {} kernels on {}, {} precision), loaded in {load_s:.2} s",
        info.label,
        arch.name(),
        n_threads,
        kernels.name(),
        rill_kernels::simd::cpu_name(),
        precision.name()
    );
    println!("| test   |            t/s |");
    println!("| ------ | -------------: |");
    if a.n_prompt > 0 {
        println!("| pp{:<4} | {pp_m:>7.2} ± {pp_sd:>5.2} |", a.n_prompt);
    }
    if a.n_gen > 0 {
        let mut label = if par > 1 {
            format!("tg{}x{par}", a.n_gen)
        } else {
            format!("tg{}", a.n_gen)
        };
        if a.depth > 0 {
            label.push_str(&format!(" @ d{}", a.depth));
        }
        println!("| {label:<6} | {tg_m:>7.2} ± {tg_sd:>5.2} |");
    }
    if drafted > 0 {
        println!(
            "speculation (MTP head, up to {} drafts): {accepted} of {drafted} drafted tokens accepted ({:.1}%), accepted per draft position {per_position:?} (warm-up included)",
            spec.draft_max,
            100.0 * acceptance
        );
    } else if a.n_gen > 0 {
        // The engine's own account: off by request, no head, or why
        // `auto` judged that drafting would not pay here.
        println!("speculation: {spec_line}");
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
            n_threads,
            b / 1e9,
            100.0 * decode_bw / b
        );
    }
    Ok(())
}
