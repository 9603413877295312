//! The serving engine: a queue, continuous batching, the prompt cache.
//!
//! One thread owns the model loop. Each step it admits waiting requests into
//! free slots (resuming from the longest cached prompt prefix), then runs a
//! single batched forward over every running sequence: one token for each
//! sequence that is generating, plus prompt chunks for sequences still in
//! prefill. New requests therefore join between steps, and long prompts are
//! prefilled a chunk at a time without stalling the streams already running.
//!
//! Each sequence's prompt is cut into chunks at the same boundaries whatever
//! else is running, and every kernel computes a token's row independently of
//! the other rows of the step, so a request gets the same tokens alone or in
//! a crowd.

mod breakers;
mod draft;
mod step_budget;

use crate::budget::{mib, Fit, MemoryPlan};
use crate::disk_cache::DiskCache;
use crate::metrics::Metrics;
use crate::prefix_cache::PrefixCache;
use crate::request::{Done, Event, Failure, Request, SubmitError};
use crate::sequence::{Sequence, Submitted, TokenContext};
use crate::speculation::SpecConfig;
use rill_grammar::{Constraint, GrammarError, GrammarSpec, Grammars, MaskTiming};
use rill_kernels::{Isa, Precision, Threads};
use rill_model::{BatchItem, KvConfig, Model, Runner, SequenceState, StepOutputs};
use rill_sampler::{Breakers, Sampler};
use rill_tokenizer::Tokenizer;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

/// How the engine runs.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Sequences decoded together.
    pub max_parallel: usize,
    /// Requests that may wait for a slot; beyond this, submissions are refused.
    pub max_queue: usize,
    /// Positions per sequence (prompt + generated).
    pub ctx_size: usize,
    /// Prompt tokens per sequence per step.
    pub prefill_chunk: usize,
    /// Most rows one step runs, all sequences together (llama.cpp's
    /// `--ubatch-size`, vLLM's `--max-num-batched-tokens`): bounds the
    /// step's working memory. Prompt chunks that do not fit wait, whole,
    /// for a later step (see `scheduler/step_budget.rs`).
    pub step_tokens: usize,
    /// Prompt-cache budget in bytes (0 disables the cache), within
    /// `mem_budget`.
    pub cache_bytes: usize,
    /// One budget, in bytes, for the running sequences' states and the
    /// prompt cache (`None`: only `cache_bytes` bounds anything); see
    /// `budget.rs` for how admission plans against it.
    pub mem_budget: Option<usize>,
    /// Keep the prompt cache on disk too (`--cache-dir`): entries written
    /// as memory evicts them and at shutdown, read when memory misses (and
    /// after a restart); at most `cache_dir_bytes`.
    pub cache_dir: Option<std::path::PathBuf>,
    pub cache_dir_bytes: u64,
    /// Also snapshot a prompt every this many tokens (a multiple of `prefill_chunk`).
    pub cache_interval: usize,
    /// Worker threads of the forward passes (0 = all cores).
    pub threads: usize,
    /// The kernel class every forward pass runs (one this CPU runs: see
    /// `Isa::require`).
    pub kernels: Isa,
    /// The matrix products' numerics: a run option of the engine, passed
    /// down to every forward pass.
    pub precision: Precision,
    /// How new sequences store their attention KV cache (K and V types).
    pub kv: KvConfig,
    /// Speculative decoding with the model's MTP head (used when the model
    /// has one).
    pub spec: SpecConfig,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_parallel: 4,
            max_queue: 64,
            ctx_size: 4096,
            prefill_chunk: 256,
            step_tokens: 512,
            cache_bytes: 2 << 30,
            mem_budget: None,
            cache_dir: None,
            cache_dir_bytes: 4 << 30,
            cache_interval: 1024,
            threads: 0,
            kernels: Isa::best(),
            precision: Precision::Exact,
            kv: KvConfig::f32(),
            spec: SpecConfig::default(),
        }
    }
}

/// A submitted request: its events, and cancellation (also on drop).
pub struct Handle {
    pub events: UnboundedReceiver<Event>,
    cancel: Arc<AtomicBool>,
}

impl Handle {
    /// Ask the engine to stop this request: it ends with `Done`
    /// (`FinishReason::Cancelled`) at the next step.
    pub fn cancel(&self) {
        self.cancel.store(true, Relaxed);
    }

    /// A flag that cancels this request when set (for a signal handler).
    pub fn cancel_flag(&self) -> Arc<AtomicBool> {
        self.cancel.clone()
    }

    /// The next event, waiting for it: the form for a front end that is not
    /// async (the command line). `None` once the engine has sent the last.
    /// Must not be called from inside an async runtime.
    pub fn recv_blocking(&mut self) -> Option<Event> {
        self.events.blocking_recv()
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.cancel.store(true, Relaxed);
    }
}

enum Command {
    Submit(Box<Submitted>),
    Shutdown,
}

/// The engine, shared by the front ends (`Send + Sync`).
pub struct Engine {
    tx: mpsc::Sender<Command>,
    metrics: Arc<Metrics>,
    /// Why speculation is off (None: it runs).
    spec_note: Option<String>,
    config: EngineConfig,
    tok: Arc<Tokenizer>,
    /// The vocabulary's token trie for constraints, built on first use.
    grammars: std::sync::OnceLock<Result<Grammars, GrammarError>>,
    waiting: Arc<std::sync::atomic::AtomicUsize>,
    /// What states cost and the budget, for the check at submission.
    plan: Arc<MemoryPlan>,
    closing: AtomicBool,
    worker: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Engine {
    /// Start the engine thread.
    pub fn start(model: Arc<Model>, tok: Arc<Tokenizer>, mut config: EngineConfig) -> Engine {
        let (tx, rx) = mpsc::channel();
        // Speculation as it will run: off where the model cannot draft, or
        // (auto) where drafting would not pay.
        let spec_note = match crate::speculation::drafting_pays(&model, &config.spec) {
            _ if !config.spec.is_on() => Some("off".to_string()),
            Err(why) if config.spec.auto || !model.has_mtp() => {
                config.spec.draft_max = 0;
                Some(format!("off: {why}"))
            }
            _ => None,
        };
        let metrics = Arc::new(Metrics::default());
        let plan = Arc::new(MemoryPlan::new(&model, &config));
        if let Some(b) = config.mem_budget {
            metrics.mem_budget_bytes.store(b as u64, Relaxed);
        }
        let waiting = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let disk = config.cache_dir.as_ref().and_then(|dir| {
            match DiskCache::open(dir, config.cache_dir_bytes, &model) {
                Ok(d) => {
                    tracing::info!(
                        "prompt cache on disk: {} ({} entries)",
                        dir.display(),
                        d.len()
                    );
                    Some(d)
                }
                Err(e) => {
                    tracing::warn!(
                        "--cache-dir {}: {e}; the cache stays in memory",
                        dir.display()
                    );
                    None
                }
            }
        });
        // With a disk cache, what memory evicts is written there.
        let mut cache = PrefixCache::new(config.cache_bytes);
        cache.keep_evicted(disk.is_some());
        let mut worker = Worker {
            disk,
            runner: Runner::new(
                Threads::new(config.threads),
                config.kernels,
                config.precision,
            ),
            cache,
            model,
            tok: tok.clone(),
            config: config.clone(),
            metrics: metrics.clone(),
            waiting_count: waiting.clone(),
            plan: plan.clone(),
            reserved: 0,
            pressed: false,
            waiting: VecDeque::new(),
            running: Vec::new(),
            parked: Vec::new(),
            outputs: StepOutputs::new(),
            head_outputs: StepOutputs::new(),
            spans: Vec::new(),
            finished: Vec::new(),
            dry_breakers: HashMap::new(),
        };
        let handle = std::thread::Builder::new()
            .name("rill-engine".into())
            .spawn(move || worker.run(rx))
            .expect("cannot start the engine thread");
        Engine {
            tx,
            metrics,
            spec_note,
            config,
            tok,
            grammars: std::sync::OnceLock::new(),
            waiting,
            plan,
            closing: AtomicBool::new(false),
            worker: std::sync::Mutex::new(Some(handle)),
        }
    }

    /// The configuration as it runs (speculation turned off where it cannot
    /// or, with `auto`, would not pay).
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// How this engine speculates, in words: the drafting it does, or why
    /// it does not.
    pub fn speculation(&self) -> String {
        match &self.spec_note {
            Some(note) => note.clone(),
            None => {
                let s = &self.config.spec;
                format!(
                    "MTP head, up to {} drafted tokens per step{}",
                    s.draft_max,
                    if s.adaptive { " (adaptive)" } else { "" }
                )
            }
        }
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Queue a request. Refused when the queue is full, the prompt does not
    /// fit the context, or the engine is shutting down.
    pub fn submit(&self, req: Request) -> Result<Handle, SubmitError> {
        let reject = |e: SubmitError| {
            self.metrics.requests_rejected.fetch_add(1, Relaxed);
            Err(e)
        };
        if self.closing.load(Relaxed) {
            return reject(SubmitError::ShuttingDown);
        }
        if req.prompt.is_empty() {
            return reject(SubmitError::EmptyPrompt);
        }
        if req.prompt.len() >= self.config.ctx_size {
            return reject(SubmitError::PromptTooLong {
                tokens: req.prompt.len(),
                ctx: self.config.ctx_size,
            });
        }
        if let Err(e) = req.sampler.validate() {
            return reject(SubmitError::Invalid(e.message));
        }
        if let Err(e) = self.plan.check(&req) {
            return reject(e);
        }
        // Grammars compile here, on the caller's thread, not in the step loop.
        let constraint = match &req.constraint {
            None => None,
            Some(c) => match self.compile(&c.grammar) {
                Ok(k) => Some(k),
                Err(e) => return reject(SubmitError::Invalid(e.0)),
            },
        };
        let queued = self.waiting.fetch_add(1, Relaxed);
        if queued >= self.config.max_queue {
            self.waiting.fetch_sub(1, Relaxed);
            return reject(SubmitError::QueueFull(queued));
        }
        let (etx, erx) = unbounded_channel();
        let cancel = Arc::new(AtomicBool::new(false));
        let sub = Submitted {
            req,
            constraint,
            events: etx,
            cancel: cancel.clone(),
            at: Instant::now(),
        };
        self.metrics.requests_total.fetch_add(1, Relaxed);
        self.metrics
            .queue_depth
            .store(self.waiting.load(Relaxed) as u64, Relaxed);
        if self.tx.send(Command::Submit(Box::new(sub))).is_err() {
            self.waiting.fetch_sub(1, Relaxed);
            return reject(SubmitError::ShuttingDown);
        }
        Ok(Handle {
            events: erx,
            cancel,
        })
    }

    /// Masks ahead on a helper thread where the forward passes leave a
    /// core to it, else on demand (see [`MaskTiming`]).
    fn mask_timing(&self) -> MaskTiming {
        let cores = std::thread::available_parallelism().map_or(1, |p| p.get());
        let busy = match self.config.threads {
            0 => cores,
            n => n,
        };
        if busy < cores {
            MaskTiming::Ahead
        } else {
            MaskTiming::OnDemand
        }
    }

    /// A constraint for `grammar` on this engine's vocabulary.
    pub fn compile(&self, grammar: &GrammarSpec) -> Result<Constraint, GrammarError> {
        let grammars = self
            .grammars
            .get_or_init(|| Grammars::new(self.tok.clone(), self.mask_timing()))
            .as_ref()
            .map_err(Clone::clone)?;
        grammars.compile(grammar)
    }

    /// Stop accepting requests, finish the ones accepted, and stop the thread.
    pub fn shutdown(&self) {
        self.closing.store(true, Relaxed);
        let _ = self.tx.send(Command::Shutdown);
        if let Some(h) = self.worker.lock().ok().and_then(|mut w| w.take()) {
            let _ = h.join();
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shutdown();
    }
}

struct Worker {
    model: Arc<Model>,
    tok: Arc<Tokenizer>,
    /// Threads, numerics and the forward passes' workspace, kept for the
    /// engine's life.
    runner: Runner,
    config: EngineConfig,
    metrics: Arc<Metrics>,
    cache: PrefixCache,
    /// The prompt cache's files (`--cache-dir`).
    disk: Option<DiskCache>,
    waiting_count: Arc<std::sync::atomic::AtomicUsize>,
    plan: Arc<MemoryPlan>,
    /// Bytes the running sequences reserved (their worst cases).
    reserved: usize,
    /// A request is waiting for memory (rung 3 logged once per episode).
    pressed: bool,
    waiting: VecDeque<Submitted>,
    running: Vec<Sequence>,
    /// Running sequences left out of this step by its row budget (empty
    /// between steps).
    parked: Vec<Sequence>,
    /// The last step's outputs, in a buffer kept from step to step, and
    /// the MTP head's.
    outputs: StepOutputs,
    head_outputs: StepOutputs,
    /// Each running sequence's prompt rows in this step (None: decoding),
    /// and the step's finished sequences: kept between steps.
    spans: Vec<Option<std::ops::Range<usize>>>,
    finished: Vec<(usize, Result<Done, Failure>)>,
    /// DRY's sequence breakers as tokens, by their texts: most requests
    /// use the defaults, and making them reads the whole vocabulary.
    dry_breakers: HashMap<Vec<String>, Arc<Breakers>>,
}

impl Worker {
    fn run(&mut self, rx: mpsc::Receiver<Command>) {
        let mut closing = false;
        loop {
            // Take new work; block only when there is nothing to do.
            loop {
                let cmd = if self.running.is_empty() && self.waiting.is_empty() && !closing {
                    match rx.recv() {
                        Ok(c) => c,
                        Err(_) => return,
                    }
                } else {
                    match rx.try_recv() {
                        Ok(c) => c,
                        Err(_) => break,
                    }
                };
                match cmd {
                    Command::Submit(s) => self.waiting.push_back(*s),
                    Command::Shutdown => closing = true,
                }
            }
            if closing && self.running.is_empty() && self.waiting.is_empty() {
                self.persist();
                return;
            }
            self.admit();
            self.step();
        }
    }

    fn admit(&mut self) {
        while self.running.len() < self.config.max_parallel {
            let Some(sub) = self.waiting.pop_front() else {
                break;
            };
            if !sub.is_gone() && !self.fits(&sub.req) {
                // First come, first served: it stays at the head.
                self.waiting.push_front(sub);
                break;
            }
            self.waiting_count.fetch_sub(1, Relaxed);
            self.metrics
                .queue_depth
                .store(self.waiting.len() as u64, Relaxed);
            if sub.is_gone() {
                self.metrics.requests_cancelled.fetch_add(1, Relaxed);
                continue;
            }
            let Fit::Start { kv, need, .. } =
                self.plan.fit(&sub.req, self.reserved, self.cache.bytes())
            else {
                unreachable!("fits() said it starts");
            };
            let prompt = &sub.req.prompt;
            self.metrics
                .prompt_tokens_total
                .fetch_add(prompt.len() as u64, Relaxed);
            // A sequence pressed into the quantized KV does not resume an
            // entry of another type (the cache is empty by then anyway).
            // A request for the prompt's log-probabilities needs every
            // row's logits: it runs its prompt whole; so does one that asks
            // not to use the cache.
            let resumable =
                kv == self.config.kv && sub.req.prompt_logprobs.is_none() && sub.req.cache_prompt;
            let mut hit = match resumable {
                true => self.cache.lookup(prompt, self.config.ctx_size),
                false => None,
            };
            if let Some(disk) = self.disk.as_ref().filter(|_| resumable) {
                let than = hit.as_ref().map_or(0, |h| h.len);
                let ctx = self.config.ctx_size;
                if let Some((len, state)) = disk.lookup(&self.model, prompt, than, ctx) {
                    self.metrics.cache_disk_hits_total.fetch_add(1, Relaxed);
                    hit = Some(crate::prefix_cache::Hit { len, state });
                }
            }
            let (state, cached) = match hit {
                Some(hit) => {
                    self.metrics.cache_hits_total.fetch_add(1, Relaxed);
                    self.metrics
                        .prompt_tokens_cached_total
                        .fetch_add(hit.len as u64, Relaxed);
                    (hit.state, hit.len)
                }
                None => {
                    self.metrics.cache_misses_total.fetch_add(1, Relaxed);
                    let ctx = self.config.ctx_size;
                    match SequenceState::with_kv(&self.model, ctx, kv) {
                        Ok(s) => (s, 0),
                        Err(e) => {
                            let _ = sub
                                .events
                                .send(Event::Error(Failure::Internal(e.to_string())));
                            continue;
                        }
                    }
                }
            };
            let sampler = match Sampler::new(sub.req.sampler.clone()) {
                Ok(s) if s.config().dry.is_on() => {
                    let b = self.breakers(&s.config().dry.sequence_breakers);
                    s.with_breakers(b)
                }
                Ok(s) => s,
                Err(e) => {
                    let _ = sub
                        .events
                        .send(Event::Error(Failure::Internal(e.to_string())));
                    continue;
                }
            };
            let spec = self.speculation_for(&sub.req, &state);
            self.metrics.requests_running.fetch_add(1, Relaxed);
            let mut seq = Sequence::new(sub, state, cached, sampler);
            seq.report_progress();
            seq.reserved = need;
            self.reserved += need;
            self.metrics
                .mem_reserved_bytes
                .store(self.reserved as u64, Relaxed);
            self.running.push(match spec {
                Some(spec) => seq.with_speculation(spec),
                None => seq,
            });
        }
    }

    /// Whether `req` can start now under the memory budget, climbing the
    /// ladder (evict prompt-cache entries, quantized KV) as far as that
    /// takes; each rung logged and counted. When it cannot, the request
    /// waits for running sequences to finish (logged once per episode).
    fn fits(&mut self, req: &Request) -> bool {
        let total = self.plan.total.unwrap_or(0);
        match self.plan.fit(req, self.reserved, self.cache.bytes()) {
            Fit::Wait { need } => {
                if !self.pressed {
                    self.pressed = true;
                    self.metrics.mem_waits_total.fetch_add(1, Relaxed);
                    tracing::warn!(
                        "memory budget: the next request needs up to {} MiB; {} running \
                         sequences reserve {} MiB of {} MiB, so it waits (fewer sequences run)",
                        mib(need),
                        self.running.len(),
                        mib(self.reserved),
                        mib(total)
                    );
                }
                false
            }
            Fit::Start {
                kv,
                need,
                cache_limit,
            } => {
                self.pressed = false;
                if let Some(limit) = cache_limit {
                    let (n, bytes) = self.cache.shrink_to(limit);
                    self.cache_metrics();
                    if n > 0 {
                        self.metrics
                            .mem_cache_evictions_total
                            .fetch_add(n as u64, Relaxed);
                        tracing::info!(
                            "memory budget: evicted {n} prompt-cache entries ({} MiB) for a \
                             request needing up to {} MiB",
                            mib(bytes),
                            mib(need)
                        );
                    }
                }
                if kv != self.config.kv {
                    self.metrics.mem_quantized_kv_total.fetch_add(1, Relaxed);
                    tracing::warn!(
                        "memory budget: the new sequence stores its KV as {} ({} MiB at most; \
                         {} would need {} MiB)",
                        kv.describe(),
                        mib(need),
                        self.config.kv.describe(),
                        mib(self.plan.worst_case(req))
                    );
                }
                true
            }
        }
    }

    /// Prompt-cache entries evicted from memory go to `--cache-dir`, so a
    /// conversation pushed out of memory still resumes from its file (now,
    /// and after a restart). Called at each step's start and at shutdown.
    fn spill_evicted(&mut self) {
        let evicted = self.cache.take_evicted();
        let Some(disk) = &mut self.disk else {
            return;
        };
        for (tokens, state) in evicted {
            if let Err(e) = disk.store(&tokens, &state) {
                tracing::warn!("--cache-dir: cannot write an evicted prompt-cache entry: {e}");
                return;
            }
        }
    }

    /// Write the memory cache's entries to `--cache-dir` (at shutdown).
    fn persist(&mut self) {
        self.spill_evicted();
        let Some(disk) = &mut self.disk else {
            return;
        };
        for (tokens, state) in self.cache.entries() {
            if let Err(e) = disk.store(&tokens, state) {
                tracing::warn!("--cache-dir: cannot write a prompt-cache file: {e}");
                return;
            }
        }
    }

    /// Give back what a sequence that leaves reserved.
    fn release(&mut self, reserved: usize) {
        self.reserved -= reserved;
        self.metrics
            .mem_reserved_bytes
            .store(self.reserved as u64, Relaxed);
    }

    fn cache_metrics(&self) {
        publish_cache(&self.metrics, &self.cache);
    }

    /// End the sequences whose client cancelled: a client still listening
    /// gets the text held back and a `Done` (cancelled); one that went away
    /// gets nothing.
    fn drop_cancelled(&mut self) {
        let mut i = 0;
        while i < self.running.len() {
            if !self.running[i].sub.is_gone() {
                i += 1;
                continue;
            }
            let s = self.running.swap_remove(i);
            self.release(s.reserved);
            self.metrics.requests_cancelled.fetch_add(1, Relaxed);
            self.metrics.requests_running.fetch_sub(1, Relaxed);
            let events = s.sub.events.clone();
            let _ = events.send(Event::Done(s.cancelled()));
        }
    }

    fn step(&mut self) {
        self.spill_evicted();
        self.drop_cancelled();
        if self.running.is_empty() {
            return;
        }
        self.park_over_budget();
        let chunk = self.config.prefill_chunk;
        let n_vocab = self.model.config.n_vocab;
        let mut spans = std::mem::take(&mut self.spans);
        spans.clear();
        spans.extend(
            self.running
                .iter()
                .map(|s| s.in_prefill().then(|| s.prefill_span(chunk, n_vocab))),
        );
        let t0 = Instant::now();
        self.draft(&spans);
        let mut items: Vec<BatchItem> = self
            .running
            .iter_mut()
            .zip(&spans)
            .map(|(s, span)| s.batch_item(span.as_ref()))
            .collect();
        let rows: usize = items.iter().map(|it| it.tokens.len()).sum();
        self.metrics.step_rows_peak.fetch_max(rows as u64, Relaxed);
        let result = self
            .model
            .forward_batch_into(&self.runner, &mut items, &mut self.outputs);
        drop(items);
        if let Err(e) = result {
            // Never expected (inputs are validated at submission); fail
            // the step's requests rather than the server.
            self.unpark();
            self.reserved = 0;
            self.metrics.mem_reserved_bytes.store(0, Relaxed);
            for s in self.running.drain(..) {
                self.metrics.requests_running.fetch_sub(1, Relaxed);
                let _ = s
                    .sub
                    .events
                    .send(Event::Error(Failure::Internal(e.to_string())));
            }
            return;
        }
        self.metrics.steps_total.fetch_add(1, Relaxed);
        let prefilled: usize = spans.iter().flatten().map(|r| r.len()).sum();
        self.metrics
            .prompt_tokens_computed_total
            .fetch_add(prefilled as u64, Relaxed);
        for (i, span) in spans.iter().enumerate() {
            if let Some(r) = span {
                let hidden = self.outputs.hidden(i);
                self.running[i].record_prefill(r, hidden);
                let logits = self.outputs.logits(i);
                self.running[i].record_prompt_logprobs(r, logits, n_vocab);
            }
        }
        self.catch_up(&spans);
        let n_decode = spans.iter().filter(|s| s.is_none()).count();
        let secs = t0.elapsed().as_secs_f64();
        if n_decode > 0 && secs > 0.0 {
            self.metrics
                .decode_tok_s_milli
                .store((n_decode as f64 / secs * 1000.0) as u64, Relaxed);
        }

        let mut finished = std::mem::take(&mut self.finished);
        finished.clear();
        let cx = TokenContext {
            tok: &self.tok,
            metrics: &self.metrics,
            n_vocab: self.model.config.n_vocab,
        };
        for (i, span) in spans.iter().enumerate() {
            let s = &mut self.running[i];
            if let Some(r) = span {
                let still_prefilling = s.prefilled_to(r.end);
                let at = r.end;
                let interval = self.config.cache_interval.max(1);
                let wanted = s.sub.req.cache_points.contains(&at);
                if !still_prefilling || at.is_multiple_of(interval) || wanted {
                    // The cache holds what the reservations leave.
                    let room = self
                        .plan
                        .total
                        .map_or(usize::MAX, |t| t.saturating_sub(self.reserved));
                    self.cache.insert(s.fed_prompt(), &s.state, room);
                    publish_cache(&self.metrics, &self.cache);
                }
                if still_prefilling {
                    continue;
                }
            }
            let end = if span.is_none() && s.speculates() {
                s.take_verified(self.outputs.logits(i), self.outputs.hidden(i), &cx)
            } else {
                // The last row's (a prompt's chunk may return every row's).
                let logits = self.outputs.logits(i);
                s.take_token(&logits[logits.len().saturating_sub(n_vocab)..], &cx)
            };
            if let Some(end) = end {
                finished.push((i, end));
            }
        }
        for (i, end) in finished.drain(..).rev() {
            let s = self.running.swap_remove(i);
            self.release(s.reserved);
            // Counters first, so a client that sees Done sees them settled.
            self.metrics.requests_finished.fetch_add(1, Relaxed);
            self.metrics.requests_running.fetch_sub(1, Relaxed);
            let _ = s.sub.events.send(match end {
                Ok(done) => Event::Done(done),
                Err(why) => Event::Error(why),
            });
        }
        self.finished = finished;
        self.spans = spans;
        self.unpark();
        self.held_metrics();
    }

    /// What the states and the cache hold now (never more than the
    /// reservations plus the cache: the budget's invariant), and its peak.
    fn held_metrics(&self) {
        // Pages a sequence shares with the cache count once (the cache's).
        let held = (self.running.iter())
            .map(|s| self.cache.extra_bytes(&s.state))
            .sum::<usize>()
            + self.cache.bytes();
        self.metrics.mem_held_bytes.store(held as u64, Relaxed);
        self.metrics
            .mem_held_peak_bytes
            .fetch_max(held as u64, Relaxed);
    }
}

/// The prompt cache's size and entry count into the metrics.
fn publish_cache(metrics: &Metrics, cache: &PrefixCache) {
    metrics.cache_bytes.store(cache.bytes() as u64, Relaxed);
    metrics.cache_entries.store(cache.len() as u64, Relaxed);
}
