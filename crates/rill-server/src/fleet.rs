//! vLLM-named series on `/metrics`, beside rill's own, for the routers and
//! dashboards that read vLLM's (each labelled `model_name`).
//!
//! Gauges and counters come from the engine's counters, and so does the
//! inter-token latency (observed by the engine per token); the other
//! histograms and `vllm:request_success_total` come from each finished
//! request's [`Done`] (`AppState::observe_done`). The time to first token
//! includes the wait in the queue, which `vllm:request_queue_time_seconds`
//! also gives apart.

use crate::state::AppState;
use rill_engine::{Done, FinishReason};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Mutex;

/// vLLM's buckets for the time to first token, seconds.
const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
/// vLLM's buckets for request latencies, seconds.
const LATENCY_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];

/// 1, 2, 5, 10, 20, 50, … up to `max` (vLLM's token-count buckets).
fn buckets_1_2_5(max: usize) -> Vec<f64> {
    let mut out = Vec::new();
    let mut scale = 1usize;
    'outer: loop {
        for m in [1, 2, 5] {
            let v = m * scale;
            if v > max {
                break 'outer;
            }
            out.push(v as f64);
        }
        scale = match scale.checked_mul(10) {
            Some(s) => s,
            None => break,
        };
    }
    out
}

struct Histogram {
    bounds: Vec<f64>,
    /// Per bucket (not cumulative), and one past the last bound.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(bounds: Vec<f64>) -> Histogram {
        let n = bounds.len() + 1;
        Histogram {
            bounds,
            counts: vec![0; n],
            sum: 0.0,
            count: 0,
        }
    }

    /// The engine's inter-token histogram as it stands.
    fn of_engine(h: &rill_engine::metrics::LatencyHistogram) -> Histogram {
        let (counts, sum) = h.snapshot();
        Histogram {
            bounds: rill_engine::metrics::INTER_TOKEN_BUCKETS.to_vec(),
            count: counts.iter().sum(),
            counts,
            sum,
        }
    }

    fn observe(&mut self, v: f64) {
        let v = if v.is_finite() { v.max(0.0) } else { 0.0 };
        let i = self
            .bounds
            .iter()
            .position(|&b| v <= b)
            .unwrap_or(self.bounds.len());
        self.counts[i] += 1;
        self.sum += v;
        self.count += 1;
    }

    fn render(&self, s: &mut String, name: &str, help: &str, label: &str) {
        let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (i, b) in self.bounds.iter().enumerate() {
            cumulative += self.counts[i];
            let _ = writeln!(
                s,
                "{name}_bucket{{{label},le=\"{}\"}} {cumulative}",
                fmt_bound(*b)
            );
        }
        let _ = writeln!(s, "{name}_bucket{{{label},le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(s, "{name}_sum{{{label}}} {}", self.sum);
        let _ = writeln!(s, "{name}_count{{{label}}} {}", self.count);
    }
}

fn fmt_bound(b: f64) -> String {
    // Prometheus clients write bounds as floats: 1.0, 0.25.
    if b.fract() == 0.0 {
        format!("{b:.1}")
    } else {
        format!("{b}")
    }
}

struct Inner {
    ttft: Histogram,
    e2e: Histogram,
    queue: Histogram,
    decode: Histogram,
    prompt_tokens: Histogram,
    generation_tokens: Histogram,
    success: BTreeMap<&'static str, u64>,
}

/// How busy the engine is now: what `/metrics`' gauges and the load
/// endpoints that routers poll (`/get_load`, `/load`) report.
#[derive(Debug, Clone, Copy)]
pub struct Load {
    /// Requests being generated.
    pub running: u64,
    /// Requests waiting for a sequence slot.
    pub waiting: u64,
    /// Sequence state over the memory budget (or slots in use), 0–1.
    pub usage: f64,
}

impl Load {
    pub fn of(state: &AppState) -> Load {
        let e = state.engine.metrics();
        let running = e.requests_running.load(Relaxed);
        let slots = state.engine.config().max_parallel.max(1) as f64;
        // With a memory budget: what running sequences reserve of it (the
        // prompt cache gives way to them, so it counts as free, as vLLM
        // counts evictable cached blocks). Without: each running sequence
        // holds one of the --parallel slots of sequence state.
        let usage = e
            .sequence_usage_of_budget()
            .unwrap_or((running as f64 / slots).min(1.0));
        Load {
            running,
            waiting: e.queue_depth.load(Relaxed),
            usage,
        }
    }
}

pub struct FleetMetrics {
    inner: Mutex<Inner>,
}

impl FleetMetrics {
    pub fn new(max_model_len: usize) -> FleetMetrics {
        let tokens = buckets_1_2_5(max_model_len.max(1));
        FleetMetrics {
            inner: Mutex::new(Inner {
                ttft: Histogram::new(TTFT_BUCKETS.to_vec()),
                e2e: Histogram::new(LATENCY_BUCKETS.to_vec()),
                queue: Histogram::new(LATENCY_BUCKETS.to_vec()),
                decode: Histogram::new(LATENCY_BUCKETS.to_vec()),
                prompt_tokens: Histogram::new(tokens.clone()),
                generation_tokens: Histogram::new(tokens),
                success: BTreeMap::new(),
            }),
        }
    }

    /// A request that finished (was not cancelled).
    pub fn observe(&self, d: &Done) {
        let Ok(mut m) = self.inner.lock() else {
            return;
        };
        m.ttft.observe(d.ttft_ms / 1e3);
        m.e2e.observe(d.total_ms / 1e3);
        m.queue.observe(d.queue_ms / 1e3);
        m.decode.observe((d.total_ms - d.ttft_ms) / 1e3);
        m.prompt_tokens.observe(d.prompt_tokens as f64);
        m.generation_tokens.observe(d.completion_tokens as f64);
        let reason = match d.finish {
            FinishReason::Length => "length",
            _ => "stop",
        };
        *m.success.entry(reason).or_insert(0) += 1;
    }

    /// The exposition text of every vLLM-named series.
    pub fn render(&self, state: &AppState) -> String {
        let e = state.engine.metrics();
        let cfg = state.engine.config();
        let label = format!("model_name=\"{}\"", escape(&state.config.model_id));
        let mut s = String::new();
        let mut one = |name: &str, kind: &str, help: &str, v: f64| {
            let _ = writeln!(
                s,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{{label}}} {v}"
            );
        };
        let load = Load::of(state);
        one(
            "vllm:num_requests_running",
            "gauge",
            "Number of requests being generated.",
            load.running as f64,
        );
        one(
            "vllm:num_requests_waiting",
            "gauge",
            "Number of requests waiting for a sequence slot.",
            load.waiting as f64,
        );
        one(
            "vllm:kv_cache_usage_perc",
            "gauge",
            "Sequence state (KV + GDN) and prompt cache in use over the memory budget (0-1).",
            load.usage,
        );
        one(
            "vllm:gpu_cache_usage_perc",
            "gauge",
            "Legacy name of vllm:kv_cache_usage_perc.",
            load.usage,
        );
        // The counters read straight from the engine's: name, help.
        #[rustfmt::skip]
        let counters: [(&str, &str, &AtomicU64); 7] = [
            ("vllm:prefix_cache_queries_total", "Prompt tokens looked up in the prompt cache.", &e.prompt_tokens_total),
            ("vllm:prefix_cache_hits_total", "Prompt tokens found in the prompt cache.", &e.prompt_tokens_cached_total),
            ("vllm:prompt_tokens_total", "Prompt tokens received.", &e.prompt_tokens_total),
            ("vllm:generation_tokens_total", "Tokens generated.", &e.generated_tokens_total),
            ("vllm:spec_decode_num_drafts_total", "Verify steps that checked a draft of the MTP head.", &e.spec_drafts_total),
            ("vllm:spec_decode_num_draft_tokens_total", "Tokens drafted by the MTP head.", &e.spec_draft_tokens_total),
            ("vllm:spec_decode_num_accepted_tokens_total", "Drafted tokens the target accepted.", &e.spec_accepted_tokens_total),
        ];
        for (name, help, v) in counters {
            one(name, "counter", help, v.load(Relaxed) as f64);
        }
        let _ = writeln!(
            s,
            "# HELP vllm:spec_decode_num_accepted_tokens_per_pos Drafted tokens accepted at each draft position.\n\
             # TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter"
        );
        let positions = cfg.spec.draft_max.min(e.spec_accepted_per_position.len());
        for (i, a) in e.spec_accepted_per_position[..positions].iter().enumerate() {
            let _ = writeln!(
                s,
                "vllm:spec_decode_num_accepted_tokens_per_pos{{{label},position=\"{i}\"}} {}",
                a.load(Relaxed)
            );
        }
        let _ = writeln!(
            s,
            "# HELP vllm:cache_config_info Sequence-state layout: one block of block_size positions per sequence.\n\
             # TYPE vllm:cache_config_info gauge\n\
             vllm:cache_config_info{{{label},block_size=\"{}\",num_gpu_blocks=\"{}\",enable_prefix_caching=\"{}\",prefix_cache_bytes=\"{}\"}} 1",
            cfg.ctx_size,
            cfg.max_parallel,
            if cfg.cache_bytes > 0 { "True" } else { "False" },
            cfg.cache_bytes,
        );
        let Ok(m) = self.inner.lock() else {
            return s;
        };
        let _ = writeln!(
            s,
            "# HELP vllm:request_success_total Requests that finished, by reason.\n# TYPE vllm:request_success_total counter"
        );
        for reason in ["stop", "length"] {
            let _ = writeln!(
                s,
                "vllm:request_success_total{{{label},finished_reason=\"{reason}\"}} {}",
                m.success.get(reason).copied().unwrap_or(0)
            );
        }
        m.ttft.render(
            &mut s,
            "vllm:time_to_first_token_seconds",
            "Time to first token (queue wait included).",
            &label,
        );
        m.e2e.render(
            &mut s,
            "vllm:e2e_request_latency_seconds",
            "Time from arrival to the last token.",
            &label,
        );
        m.queue.render(
            &mut s,
            "vllm:request_queue_time_seconds",
            "Time from arrival to the start of the prompt's processing.",
            &label,
        );
        let inter_token = Histogram::of_engine(&e.inter_token);
        for name in [
            "vllm:inter_token_latency_seconds",
            // the name before vLLM 0.11
            "vllm:time_per_output_token_seconds",
        ] {
            inter_token.render(
                &mut s,
                name,
                "Time between a request's consecutive tokens.",
                &label,
            );
        }
        m.decode.render(
            &mut s,
            "vllm:request_decode_time_seconds",
            "Time from the first token to the last.",
            &label,
        );
        m.prompt_tokens.render(
            &mut s,
            "vllm:request_prompt_tokens",
            "Prompt tokens per request.",
            &label,
        );
        m.generation_tokens.render(
            &mut s,
            "vllm:request_generation_tokens",
            "Generated tokens per request.",
            &label,
        );
        s
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_buckets() {
        assert_eq!(buckets_1_2_5(100), [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]);
        assert_eq!(buckets_1_2_5(1), [1.0]);
    }

    #[test]
    fn histogram_is_cumulative() {
        let mut h = Histogram::new(vec![0.5, 1.0]);
        for v in [0.25, 0.5, 0.75, 3.0] {
            h.observe(v);
        }
        let mut s = String::new();
        h.render(&mut s, "x", "help", "model_name=\"m\"");
        assert!(
            s.contains("x_bucket{model_name=\"m\",le=\"0.5\"} 2\n"),
            "{s}"
        );
        assert!(
            s.contains("x_bucket{model_name=\"m\",le=\"1.0\"} 3\n"),
            "{s}"
        );
        assert!(
            s.contains("x_bucket{model_name=\"m\",le=\"+Inf\"} 4\n"),
            "{s}"
        );
        assert!(s.contains("x_sum{model_name=\"m\"} 4.5\n"), "{s}");
        assert!(s.contains("x_count{model_name=\"m\"} 4\n"), "{s}");
        assert_eq!(escape("a\"b\\"), "a\\\"b\\\\");
    }
}
