//! Counters the engine keeps, rendered in the Prometheus text format.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

#[derive(Default)]
pub struct Metrics {
    pub requests_total: AtomicU64,
    pub requests_finished: AtomicU64,
    pub requests_rejected: AtomicU64,
    pub requests_cancelled: AtomicU64,
    pub requests_running: AtomicU64,
    pub queue_depth: AtomicU64,
    pub prompt_tokens_total: AtomicU64,
    pub prompt_tokens_cached_total: AtomicU64,
    pub generated_tokens_total: AtomicU64,
    pub cache_hits_total: AtomicU64,
    pub cache_misses_total: AtomicU64,
    pub cache_bytes: AtomicU64,
    pub cache_entries: AtomicU64,
    /// The memory budget (0: none), what running sequences reserve of it,
    /// what states and cache hold now and at most.
    pub mem_budget_bytes: AtomicU64,
    pub mem_reserved_bytes: AtomicU64,
    pub mem_held_bytes: AtomicU64,
    pub mem_held_peak_bytes: AtomicU64,
    /// The ladder's rungs: prompt-cache entries evicted to admit a request,
    /// sequences started with the quantized KV, waits for memory.
    pub mem_cache_evictions_total: AtomicU64,
    pub mem_quantized_kv_total: AtomicU64,
    pub mem_waits_total: AtomicU64,
    /// Requests that resumed from a `--cache-dir` file (also in
    /// `cache_hits_total`).
    pub cache_disk_hits_total: AtomicU64,
    /// Sum and count of time to first token, in microseconds.
    pub ttft_us_sum: AtomicU64,
    pub ttft_count: AtomicU64,
    /// Generation throughput over the last engine step, tokens/s × 1000.
    pub decode_tok_s_milli: AtomicU64,
    pub steps_total: AtomicU64,
    /// Verify steps that checked a draft.
    pub spec_drafts_total: AtomicU64,
    /// Tokens drafted by the MTP head.
    pub spec_draft_tokens_total: AtomicU64,
    /// Drafted tokens the target kept.
    pub spec_accepted_tokens_total: AtomicU64,
    /// Drafts kept at each draft position (0-based): position `i` counts
    /// verify steps that kept at least `i + 1` drafts.
    pub spec_accepted_per_position: [AtomicU64; crate::speculation::MAX_DRAFT],
}

impl Metrics {
    /// What the budget has in use, 0–1: the running sequences' reservations
    /// plus the prompt cache, over the budget (`None` without a budget).
    pub fn memory_usage_of_budget(&self) -> Option<f64> {
        let budget = self.mem_budget_bytes.load(Relaxed);
        (budget > 0).then(|| {
            let used = self.mem_reserved_bytes.load(Relaxed) + self.cache_bytes.load(Relaxed);
            (used as f64 / budget as f64).min(1.0)
        })
    }

    fn memory_usage(&self) -> f64 {
        self.memory_usage_of_budget().unwrap_or(0.0)
    }

    /// The Prometheus exposition text.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let mut put = |name: &str, kind: &str, help: &str, v: f64| {
            let _ = writeln!(
                s,
                "# HELP rill_{name} {help}\n# TYPE rill_{name} {kind}\nrill_{name} {v}"
            );
        };
        let g = |a: &AtomicU64| a.load(Relaxed) as f64;
        put(
            "requests_total",
            "counter",
            "Requests accepted.",
            g(&self.requests_total),
        );
        put(
            "requests_finished_total",
            "counter",
            "Requests completed.",
            g(&self.requests_finished),
        );
        put(
            "requests_rejected_total",
            "counter",
            "Requests refused (queue full or invalid).",
            g(&self.requests_rejected),
        );
        put(
            "requests_cancelled_total",
            "counter",
            "Requests cancelled by the client.",
            g(&self.requests_cancelled),
        );
        put(
            "requests_running",
            "gauge",
            "Sequences being processed.",
            g(&self.requests_running),
        );
        put(
            "queue_depth",
            "gauge",
            "Requests waiting for a slot.",
            g(&self.queue_depth),
        );
        put(
            "prompt_tokens_total",
            "counter",
            "Prompt tokens received.",
            g(&self.prompt_tokens_total),
        );
        put(
            "prompt_tokens_cached_total",
            "counter",
            "Prompt tokens served from the prompt cache.",
            g(&self.prompt_tokens_cached_total),
        );
        put(
            "generated_tokens_total",
            "counter",
            "Tokens generated.",
            g(&self.generated_tokens_total),
        );
        put(
            "prompt_cache_hits_total",
            "counter",
            "Requests that resumed from a cached prefix.",
            g(&self.cache_hits_total),
        );
        put(
            "prompt_cache_misses_total",
            "counter",
            "Requests with no cached prefix.",
            g(&self.cache_misses_total),
        );
        put(
            "prompt_cache_bytes",
            "gauge",
            "Bytes held by the prompt cache.",
            g(&self.cache_bytes),
        );
        put(
            "prompt_cache_entries",
            "gauge",
            "Snapshots held by the prompt cache.",
            g(&self.cache_entries),
        );
        put(
            "prompt_cache_disk_hits_total",
            "counter",
            "Requests that resumed from a prompt-cache file of --cache-dir.",
            g(&self.cache_disk_hits_total),
        );
        put(
            "memory_budget_bytes",
            "gauge",
            "The memory budget for sequence states and the prompt cache (0: none).",
            g(&self.mem_budget_bytes),
        );
        put(
            "memory_reserved_bytes",
            "gauge",
            "Bytes running sequences reserve (their states' worst cases).",
            g(&self.mem_reserved_bytes),
        );
        put(
            "memory_held_bytes",
            "gauge",
            "Bytes sequence states and the prompt cache hold now.",
            g(&self.mem_held_bytes),
        );
        put(
            "memory_held_peak_bytes",
            "gauge",
            "Most bytes sequence states and the prompt cache have held.",
            g(&self.mem_held_peak_bytes),
        );
        put(
            "memory_usage",
            "gauge",
            "Reserved plus prompt-cache bytes over the budget (0-1; 0 without a budget).",
            self.memory_usage(),
        );
        put(
            "memory_cache_evictions_total",
            "counter",
            "Prompt-cache entries evicted to admit a request (ladder rung 1).",
            g(&self.mem_cache_evictions_total),
        );
        put(
            "memory_quantized_kv_total",
            "counter",
            "Sequences started with the quantized KV to fit the budget (rung 2).",
            g(&self.mem_quantized_kv_total),
        );
        put(
            "memory_waits_total",
            "counter",
            "Times a request waited for memory, fewer sequences running (rung 3).",
            g(&self.mem_waits_total),
        );
        put(
            "time_to_first_token_seconds_sum",
            "counter",
            "Sum of times to first token.",
            g(&self.ttft_us_sum) / 1e6,
        );
        put(
            "time_to_first_token_seconds_count",
            "counter",
            "Requests with a first token.",
            g(&self.ttft_count),
        );
        put(
            "decode_tokens_per_second",
            "gauge",
            "Generation throughput of the last step.",
            g(&self.decode_tok_s_milli) / 1e3,
        );
        put(
            "engine_steps_total",
            "counter",
            "Forward steps run.",
            g(&self.steps_total),
        );
        put(
            "spec_decode_drafts_total",
            "counter",
            "Verify steps that checked a draft of the MTP head.",
            g(&self.spec_drafts_total),
        );
        put(
            "spec_decode_draft_tokens_total",
            "counter",
            "Tokens drafted by the MTP head.",
            g(&self.spec_draft_tokens_total),
        );
        put(
            "spec_decode_accepted_tokens_total",
            "counter",
            "Drafted tokens the target accepted.",
            g(&self.spec_accepted_tokens_total),
        );
        let _ = writeln!(
            s,
            "# HELP rill_spec_decode_accepted_tokens_per_pos Drafts accepted at each draft position.\n\
             # TYPE rill_spec_decode_accepted_tokens_per_pos counter"
        );
        for (i, a) in self.spec_accepted_per_position.iter().enumerate() {
            let _ = writeln!(
                s,
                "rill_spec_decode_accepted_tokens_per_pos{{position=\"{i}\"}} {}",
                a.load(Relaxed)
            );
        }
        s
    }
}
