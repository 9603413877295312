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

use crate::generate::{end_of_generation_ids, FinishReason};
use crate::metrics::Metrics;
use crate::output::TextOutput;
use crate::prefix_cache::PrefixCache;
use crate::request::{Done, Event, Request, SubmitError, TokenInfo};
use rill_kernels::Threads;
use rill_model::{BatchItem, Logits, Model, SequenceState, StepLogits};
use rill_sampler::{log_softmax, Sampler};
use rill_tokenizer::Tokenizer;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

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
    /// Prompt-cache budget in bytes (0 disables the cache).
    pub cache_bytes: usize,
    /// Also snapshot a prompt every this many tokens (a multiple of `prefill_chunk`).
    pub cache_interval: usize,
    pub threads: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_parallel: 4,
            max_queue: 64,
            ctx_size: 4096,
            prefill_chunk: 256,
            cache_bytes: 2 << 30,
            cache_interval: 1024,
            threads: 0,
        }
    }
}

/// A submitted request: its events, and cancellation (also on drop).
pub struct Handle {
    pub events: UnboundedReceiver<Event>,
    cancel: Arc<AtomicBool>,
}

impl Handle {
    pub fn cancel(&self) {
        self.cancel.store(true, Relaxed);
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.cancel.store(true, Relaxed);
    }
}

struct Submitted {
    req: Request,
    events: UnboundedSender<Event>,
    cancel: Arc<AtomicBool>,
    at: Instant,
}

enum Command {
    Submit(Box<Submitted>),
    Shutdown,
}

/// The engine, shared by the front ends (`Send + Sync`).
pub struct Engine {
    tx: mpsc::Sender<Command>,
    metrics: Arc<Metrics>,
    config: EngineConfig,
    waiting: Arc<std::sync::atomic::AtomicUsize>,
    closing: AtomicBool,
    worker: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Engine {
    /// Start the engine thread.
    pub fn start(model: Arc<Model>, tok: Arc<Tokenizer>, config: EngineConfig) -> Engine {
        let (tx, rx) = mpsc::channel();
        let metrics = Arc::new(Metrics::default());
        let waiting = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut worker = Worker {
            threads: Threads::new(config.threads),
            eog: end_of_generation_ids(&tok),
            cache: PrefixCache::new(config.cache_bytes),
            model,
            tok,
            config: config.clone(),
            metrics: metrics.clone(),
            waiting_count: waiting.clone(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            logits: StepLogits::new(),
            spans: Vec::new(),
            finished: Vec::new(),
        };
        let handle = std::thread::Builder::new()
            .name("rill-engine".into())
            .spawn(move || worker.run(rx))
            .expect("cannot start the engine thread");
        Engine {
            tx,
            metrics,
            config,
            waiting,
            closing: AtomicBool::new(false),
            worker: std::sync::Mutex::new(Some(handle)),
        }
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
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
            return reject(SubmitError::Invalid(e.0));
        }
        let queued = self.waiting.fetch_add(1, Relaxed);
        if queued >= self.config.max_queue {
            self.waiting.fetch_sub(1, Relaxed);
            return reject(SubmitError::QueueFull(queued));
        }
        let (etx, erx) = unbounded_channel();
        let cancel = Arc::new(AtomicBool::new(false));
        let sub = Submitted {
            req,
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

/// A running sequence.
struct Seq {
    sub: Submitted,
    state: SequenceState,
    /// Prompt tokens already in the state.
    fed: usize,
    cached: usize,
    /// The token to feed next once generating (the last sampled one).
    next_input: Option<u32>,
    history: Vec<u32>,
    generated: usize,
    sampler: Sampler,
    out: TextOutput,
    first_token_at: Option<Instant>,
}

impl Seq {
    fn in_prefill(&self) -> bool {
        self.fed < self.sub.req.prompt.len()
    }
}

struct Worker {
    model: Arc<Model>,
    tok: Arc<Tokenizer>,
    threads: Threads,
    config: EngineConfig,
    metrics: Arc<Metrics>,
    eog: Vec<u32>,
    cache: PrefixCache,
    waiting_count: Arc<std::sync::atomic::AtomicUsize>,
    waiting: VecDeque<Submitted>,
    running: Vec<Seq>,
    /// The last step's logits, in a buffer kept from step to step.
    logits: StepLogits,
    /// Each running sequence's prompt rows in this step (None: decoding),
    /// and the step's finished sequences: kept between steps.
    spans: Vec<Option<std::ops::Range<usize>>>,
    finished: Vec<(usize, Done)>,
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
            self.waiting_count.fetch_sub(1, Relaxed);
            self.metrics
                .queue_depth
                .store(self.waiting.len() as u64, Relaxed);
            if sub.cancel.load(Relaxed) || sub.events.is_closed() {
                self.metrics.requests_cancelled.fetch_add(1, Relaxed);
                continue;
            }
            let prompt = &sub.req.prompt;
            self.metrics
                .prompt_tokens_total
                .fetch_add(prompt.len() as u64, Relaxed);
            let (state, cached) = match self.cache.lookup(prompt, self.config.ctx_size) {
                Some(hit) => {
                    self.metrics.cache_hits_total.fetch_add(1, Relaxed);
                    self.metrics
                        .prompt_tokens_cached_total
                        .fetch_add(hit.len as u64, Relaxed);
                    (hit.state, hit.len)
                }
                None => {
                    self.metrics.cache_misses_total.fetch_add(1, Relaxed);
                    (SequenceState::new(&self.model, self.config.ctx_size), 0)
                }
            };
            let sampler = match Sampler::new(sub.req.sampler.clone()) {
                Ok(s) => s,
                Err(e) => {
                    let _ = sub.events.send(Event::Error(e.to_string()));
                    continue;
                }
            };
            self.metrics.requests_running.fetch_add(1, Relaxed);
            self.running.push(Seq {
                history: prompt.clone(),
                out: TextOutput::new(&sub.req.stop),
                sub,
                state,
                fed: cached,
                cached,
                next_input: None,
                generated: 0,
                sampler,
                first_token_at: None,
            });
        }
    }

    /// The prompt tokens sequence `s` prefills this step. Chunk boundaries
    /// depend only on the prompt (and the cached prefix length).
    fn prefill_span(&self, s: &Seq) -> std::ops::Range<usize> {
        let chunk = self.config.prefill_chunk.max(1);
        let mut end = ((s.fed / chunk + 1) * chunk).min(s.sub.req.prompt.len());
        // Stop at a requested snapshot point inside this chunk.
        if let Some(&p) = s
            .sub
            .req
            .cache_points
            .iter()
            .filter(|&&p| p > s.fed && p < end)
            .min()
        {
            end = p;
        }
        s.fed..end
    }

    fn step(&mut self) {
        // Drop sequences whose client went away.
        let before = self.running.len();
        self.running.retain(|s| {
            let gone = s.sub.cancel.load(Relaxed) || s.sub.events.is_closed();
            if gone {
                self.metrics.requests_cancelled.fetch_add(1, Relaxed);
                self.metrics.requests_running.fetch_sub(1, Relaxed);
            }
            !gone
        });
        if self.running.is_empty() {
            return;
        }
        let _ = before;
        let mut spans = std::mem::take(&mut self.spans);
        spans.clear();
        spans.extend(
            self.running
                .iter()
                .map(|s| s.in_prefill().then(|| self.prefill_span(s))),
        );
        let t0 = Instant::now();
        // The step's tokens are borrowed where they are: a chunk of the
        // prompt, or the last sampled token.
        let mut items: Vec<BatchItem> = self
            .running
            .iter_mut()
            .zip(&spans)
            .map(|(s, span)| {
                let Seq {
                    state,
                    sub,
                    next_input,
                    ..
                } = s;
                let (tokens, last) = match span {
                    Some(r) => (&sub.req.prompt[r.clone()], r.end == sub.req.prompt.len()),
                    None => (
                        std::slice::from_ref(
                            next_input
                                .as_ref()
                                .expect("a generating sequence has a token to feed"),
                        ),
                        true,
                    ),
                };
                BatchItem {
                    state,
                    tokens,
                    logits: if last { Logits::Last } else { Logits::None },
                }
            })
            .collect();
        let result = self
            .model
            .forward_batch_into(&self.threads, &mut items, &mut self.logits);
        drop(items);
        if let Err(e) = result {
            // Never expected (inputs are validated at submission); fail
            // the step's requests rather than the server.
            for s in self.running.drain(..) {
                self.metrics.requests_running.fetch_sub(1, Relaxed);
                let _ = s
                    .sub
                    .events
                    .send(Event::Error(format!("internal error: {e}")));
            }
            return;
        }
        self.metrics.steps_total.fetch_add(1, Relaxed);
        let n_decode = spans.iter().filter(|s| s.is_none()).count();
        let secs = t0.elapsed().as_secs_f64();
        if n_decode > 0 && secs > 0.0 {
            self.metrics
                .decode_tok_s_milli
                .store((n_decode as f64 / secs * 1000.0) as u64, Relaxed);
        }

        let mut finished = std::mem::take(&mut self.finished);
        finished.clear();
        for (i, span) in spans.iter().enumerate() {
            let row = self.logits.get(i);
            let s = &mut self.running[i];
            if let Some(r) = span {
                s.fed = r.end;
                let at = s.fed;
                let interval = self.config.cache_interval.max(1);
                let wanted = s.sub.req.cache_points.contains(&at);
                if at == s.sub.req.prompt.len() || at.is_multiple_of(interval) || wanted {
                    self.cache.insert(&s.sub.req.prompt[..at], &s.state);
                    self.metrics
                        .cache_bytes
                        .store(self.cache.bytes() as u64, Relaxed);
                    self.metrics
                        .cache_entries
                        .store(self.cache.len() as u64, Relaxed);
                }
                if s.in_prefill() {
                    continue;
                }
            }
            if let Some(done) = sample_one(s, row, &self.eog, &self.tok, &self.metrics) {
                finished.push((i, done));
            }
        }
        for (i, done) in finished.drain(..).rev() {
            let s = self.running.swap_remove(i);
            // Counters first, so a client that sees Done sees them settled.
            self.metrics.requests_finished.fetch_add(1, Relaxed);
            self.metrics.requests_running.fetch_sub(1, Relaxed);
            let _ = s.sub.events.send(Event::Done(done));
        }
        self.finished = finished;
        self.spans = spans;
    }
}

/// Sample the next token of `s` from `row`, emit its text, and say whether
/// the sequence is done.
fn sample_one(s: &mut Seq, row: &[f32], eog: &[u32], tok: &Tokenizer, m: &Metrics) -> Option<Done> {
    let req = &s.sub.req;
    let id = s.sampler.sample(row, &s.history);
    if s.first_token_at.is_none() {
        let now = Instant::now();
        s.first_token_at = Some(now);
        m.ttft_us_sum
            .fetch_add((now - s.sub.at).as_micros() as u64, Relaxed);
        m.ttft_count.fetch_add(1, Relaxed);
    }
    let done = |s: &Seq, finish| Done {
        finish,
        prompt_tokens: s.sub.req.prompt.len(),
        cached_tokens: s.cached,
        completion_tokens: s.generated,
        ttft_ms: s
            .first_token_at
            .map_or(0.0, |t| (t - s.sub.at).as_secs_f64() * 1e3),
        total_ms: s.sub.at.elapsed().as_secs_f64() * 1e3,
    };
    if !req.ignore_eos && eog.contains(&id) {
        send_tail(s);
        return Some(done(s, FinishReason::Stop));
    }
    s.generated += 1;
    s.history.push(id);
    m.generated_tokens_total.fetch_add(1, Relaxed);
    let info = TokenInfo {
        id,
        logprob: None,
        top: Vec::new(),
    };
    let info = match req.logprobs {
        None => info,
        Some(k) => {
            let lp = log_softmax(row);
            let mut order: Vec<u32> = (0..lp.len() as u32).collect();
            let k = k.min(lp.len());
            if k > 0 {
                order.select_nth_unstable_by(k - 1, |&a, &b| {
                    lp[b as usize].total_cmp(&lp[a as usize])
                });
            }
            order.truncate(k);
            order.sort_by(|&a, &b| lp[b as usize].total_cmp(&lp[a as usize]).then(a.cmp(&b)));
            TokenInfo {
                logprob: Some(lp[id as usize]),
                top: order.into_iter().map(|t| (t, lp[t as usize])).collect(),
                ..info
            }
        }
    };
    let fed = match s.out.push(tok, id) {
        Ok(f) => f,
        Err(e) => {
            let _ = s.sub.events.send(Event::Error(e.to_string()));
            return Some(done(s, FinishReason::Stop));
        }
    };
    let _ = s.sub.events.send(Event::Text {
        text: fed.emit,
        tokens: vec![info],
    });
    if fed.stopped {
        return Some(done(s, FinishReason::Stop));
    }
    let out_of_room = s.state.position() + 1 >= s.state.capacity();
    if s.generated >= req.max_tokens || out_of_room {
        let finish = if send_tail(s) {
            FinishReason::Stop
        } else {
            FinishReason::Length
        };
        return Some(done(s, finish));
    }
    s.next_input = Some(id);
    None
}

/// Release the text `s` still holds; true when it completed a stop string.
fn send_tail(s: &mut Seq) -> bool {
    let tail = s.out.finish();
    if !tail.emit.is_empty() {
        let _ = s.sub.events.send(Event::Text {
            text: tail.emit,
            tokens: vec![],
        });
    }
    tail.stopped
}
