//! Counters the engine keeps, rendered in the Prometheus text format.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// vLLM's buckets for the inter-token latency, seconds.
pub const INTER_TOKEN_BUCKETS: [f64; 19] = [
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];

/// A histogram of durations over [`INTER_TOKEN_BUCKETS`], kept in atomic
/// counters so that the engine thread observes without a lock or an
/// allocation.
#[derive(Default)]
pub struct LatencyHistogram {
    /// Per bucket (not cumulative), and one past the last bound.
    counts: [AtomicU64; INTER_TOKEN_BUCKETS.len() + 1],
    sum_us: AtomicU64,
}

impl LatencyHistogram {
    pub fn observe(&self, d: std::time::Duration) {
        let secs = d.as_secs_f64();
        let i = (INTER_TOKEN_BUCKETS.iter())
            .position(|&b| secs <= b)
            .unwrap_or(INTER_TOKEN_BUCKETS.len());
        self.counts[i].fetch_add(1, Relaxed);
        self.sum_us.fetch_add(d.as_micros() as u64, Relaxed);
    }

    /// The per-bucket counts (the last: past the last bound) and the sum
    /// in seconds.
    pub fn snapshot(&self) -> (Vec<u64>, f64) {
        let counts = self.counts.iter().map(|c| c.load(Relaxed)).collect();
        (counts, self.sum_us.load(Relaxed) as f64 / 1e6)
    }
}

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
    /// Prompt tokens run through the model so far (chunk by chunk: what
    /// a long prefill's progress reads).
    pub prompt_tokens_computed_total: AtomicU64,
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
    /// The time between a sequence's consecutive tokens.
    pub inter_token: LatencyHistogram,
    /// Sum and count of time to first token, in microseconds.
    pub ttft_us_sum: AtomicU64,
    pub ttft_count: AtomicU64,
    /// Generation throughput over the last engine step, tokens/s × 1000.
    pub decode_tok_s_milli: AtomicU64,
    pub steps_total: AtomicU64,
    /// Most rows one forward step has run (all sequences' prompt chunks,
    /// tokens and verified drafts): what the step's working memory grew to.
    pub step_rows_peak: AtomicU64,
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

    /// What running sequences reserve of the budget, 0–1 (`None` without a
    /// budget): the prompt cache left out, since it gives way to them (as
    /// vLLM counts evictable cached blocks as free in its
    /// `kv_cache_usage_perc`).
    pub fn sequence_usage_of_budget(&self) -> Option<f64> {
        let budget = self.mem_budget_bytes.load(Relaxed);
        (budget > 0).then(|| {
            let used = self.mem_reserved_bytes.load(Relaxed);
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
        // The series read straight from a counter or gauge: name, type, help.
        #[rustfmt::skip]
        let plain: [(&str, &str, &str, &AtomicU64); 28] = [
            ("requests_total", "counter", "Requests accepted.", &self.requests_total),
            ("requests_finished_total", "counter", "Requests completed.", &self.requests_finished),
            ("requests_rejected_total", "counter", "Requests refused (queue full or invalid).", &self.requests_rejected),
            ("requests_cancelled_total", "counter", "Requests cancelled by the client.", &self.requests_cancelled),
            ("requests_running", "gauge", "Sequences being processed.", &self.requests_running),
            ("queue_depth", "gauge", "Requests waiting for a slot.", &self.queue_depth),
            ("prompt_tokens_total", "counter", "Prompt tokens received.", &self.prompt_tokens_total),
            ("prompt_tokens_cached_total", "counter", "Prompt tokens served from the prompt cache.", &self.prompt_tokens_cached_total),
            ("prompt_tokens_computed_total", "counter", "Prompt tokens run through the model (prefill progress).", &self.prompt_tokens_computed_total),
            ("generated_tokens_total", "counter", "Tokens generated.", &self.generated_tokens_total),
            ("prompt_cache_hits_total", "counter", "Requests that resumed from a cached prefix.", &self.cache_hits_total),
            ("prompt_cache_misses_total", "counter", "Requests with no cached prefix.", &self.cache_misses_total),
            ("prompt_cache_bytes", "gauge", "Bytes held by the prompt cache.", &self.cache_bytes),
            ("prompt_cache_entries", "gauge", "Snapshots held by the prompt cache.", &self.cache_entries),
            ("prompt_cache_disk_hits_total", "counter", "Requests that resumed from a prompt-cache file of --cache-dir.", &self.cache_disk_hits_total),
            ("memory_budget_bytes", "gauge", "The memory budget for sequence states and the prompt cache (0: none).", &self.mem_budget_bytes),
            ("memory_reserved_bytes", "gauge", "Bytes running sequences reserve (their states' worst cases).", &self.mem_reserved_bytes),
            ("memory_held_bytes", "gauge", "Bytes sequence states and the prompt cache hold now.", &self.mem_held_bytes),
            ("memory_held_peak_bytes", "gauge", "Most bytes sequence states and the prompt cache have held.", &self.mem_held_peak_bytes),
            ("memory_cache_evictions_total", "counter", "Prompt-cache entries evicted to admit a request (ladder rung 1).", &self.mem_cache_evictions_total),
            ("memory_quantized_kv_total", "counter", "Sequences started with the quantized KV to fit the budget (rung 2).", &self.mem_quantized_kv_total),
            ("memory_waits_total", "counter", "Times a request waited for memory, fewer sequences running (rung 3).", &self.mem_waits_total),
            ("time_to_first_token_seconds_count", "counter", "Requests with a first token.", &self.ttft_count),
            ("engine_steps_total", "counter", "Forward steps run.", &self.steps_total),
            ("engine_step_rows_peak", "gauge", "Most rows (prompt chunks, tokens, verified drafts of all sequences) one forward step has run.", &self.step_rows_peak),
            ("spec_decode_drafts_total", "counter", "Verify steps that checked a draft of the MTP head.", &self.spec_drafts_total),
            ("spec_decode_draft_tokens_total", "counter", "Tokens drafted by the MTP head.", &self.spec_draft_tokens_total),
            ("spec_decode_accepted_tokens_total", "counter", "Drafted tokens the target accepted.", &self.spec_accepted_tokens_total),
        ];
        for (name, kind, help, v) in plain {
            put(name, kind, help, v.load(Relaxed) as f64);
        }
        put(
            "memory_usage",
            "gauge",
            "Reserved plus prompt-cache bytes over the budget (0-1; 0 without a budget).",
            self.memory_usage(),
        );
        put(
            "time_to_first_token_seconds_sum",
            "counter",
            "Sum of times to first token.",
            self.ttft_us_sum.load(Relaxed) as f64 / 1e6,
        );
        put(
            "decode_tokens_per_second",
            "gauge",
            "Generation throughput of the last step.",
            self.decode_tok_s_milli.load(Relaxed) as f64 / 1e3,
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
