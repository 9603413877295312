//! One memory budget for everything the engine grows: the running
//! sequences' states (KV caches, GDN states, the MTP head's cache, the
//! rewind ring) and the prompt cache.
//!
//! Admission plans against the worst case: a sequence reserves, when it
//! starts, the bytes its state takes at the most positions it can reach
//! (prompt + `max_tokens`, capped by the context), so the states of running
//! sequences can never outgrow the budget. The prompt cache lives in what
//! the reservations leave. A request whose worst case does not fit waits in
//! the queue; under pressure the engine climbs a ladder, each rung logged
//! and counted in `/metrics`:
//!
//! 1. evict prompt-cache entries (least recently used first);
//! 2. store the new sequence's KV quantized (q8_0) when that fits;
//! 3. run fewer sequences: the request waits for running ones to finish.
//!
//! A request that cannot fit even alone, with an empty cache and the
//! quantized KV, is refused at submission with the figures.

use crate::request::{Request, SubmitError};
use crate::scheduler::EngineConfig;
use crate::speculation::MAX_DRAFT;
use rill_model::{KvConfig, KvType, Model, StateSize};

/// How the budget places one request.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Fit {
    /// Start it with `kv`, reserving `need` bytes, after shrinking the
    /// prompt cache to `cache_limit` bytes (`None`: the cache stays).
    Start {
        kv: KvConfig,
        need: usize,
        cache_limit: Option<usize>,
    },
    /// Not now: it waits for running sequences to finish.
    Wait { need: usize },
}

/// The engine's memory plan: the budget and what states cost.
pub(crate) struct MemoryPlan {
    /// `None`: no budget (the prompt cache keeps its own bound).
    pub total: Option<usize>,
    size: StateSize,
    /// The cheaper KV of rung 2 (`None` when the configured one is as cheap).
    fallback: Option<StateSize>,
    ctx: usize,
    step_rows: usize,
    rewind_rows: usize,
}

/// The KV a pressed engine falls back to: q8_0 for every side wider than it,
/// when the model's head is a whole number of its blocks.
fn quantized_fallback(model: &Model, kv: KvConfig) -> Option<KvConfig> {
    let q8 = KvType::Q8_0;
    let narrower = |t: KvType| {
        if t.bytes_for(32) > q8.bytes_for(32) {
            q8
        } else {
            t
        }
    };
    let f = KvConfig {
        k: narrower(kv.k),
        v: narrower(kv.v),
        ..kv
    };
    (f != kv && f.check(&model.config).is_ok()).then_some(f)
}

impl MemoryPlan {
    pub fn new(model: &Model, config: &EngineConfig) -> MemoryPlan {
        let speculates = config.spec.is_on() && model.has_mtp();
        MemoryPlan {
            total: config.mem_budget,
            size: StateSize::of(model, config.kv),
            fallback: quantized_fallback(model, config.kv).map(|kv| StateSize::of(model, kv)),
            ctx: config.ctx_size,
            step_rows: config.prefill_chunk.max(MAX_DRAFT + 1),
            rewind_rows: if speculates {
                config.spec.draft_max.min(MAX_DRAFT) + 1
            } else {
                0
            },
        }
    }

    /// The most positions `req` can reach.
    fn positions(&self, req: &Request) -> usize {
        (req.prompt.len() + req.max_tokens).min(self.ctx)
    }

    fn need(&self, size: &StateSize, req: &Request) -> usize {
        size.bytes(self.positions(req), self.step_rows, self.rewind_rows)
    }

    /// Bytes `req`'s state may take with the configured KV.
    pub fn worst_case(&self, req: &Request) -> usize {
        self.need(&self.size, req)
    }

    /// Refuse a request that could never run: its worst case exceeds the
    /// whole budget even with the quantized KV.
    pub fn check(&self, req: &Request) -> Result<(), SubmitError> {
        let Some(total) = self.total else {
            return Ok(());
        };
        let need = self.worst_case(req);
        let least = self.fallback.as_ref().map_or(need, |f| self.need(f, req));
        if least <= total {
            return Ok(());
        }
        Err(SubmitError::OverBudget {
            need_mib: mib(least),
            budget_mib: mib(total),
            positions: self.positions(req),
        })
    }

    /// Where `req` goes now, with `reserved` bytes held by running
    /// sequences and `cached` by the prompt cache.
    pub fn fit(&self, req: &Request, reserved: usize, cached: usize) -> Fit {
        let need = self.worst_case(req);
        let Some(total) = self.total else {
            return Fit::Start {
                kv: self.size.kv,
                need,
                cache_limit: None,
            };
        };
        let free = total.saturating_sub(reserved);
        if need <= free {
            let cache_limit = (cached > free - need).then_some(free - need);
            return Fit::Start {
                kv: self.size.kv,
                need,
                cache_limit,
            };
        }
        if let Some(f) = &self.fallback {
            let q = self.need(f, req);
            if q <= free {
                let cache_limit = (cached > free - q).then_some(free - q);
                return Fit::Start {
                    kv: f.kv,
                    need: q,
                    cache_limit,
                };
            }
        }
        Fit::Wait { need }
    }
}

pub(crate) fn mib(bytes: usize) -> f64 {
    (bytes as f64 / (1 << 20) as f64 * 10.0).round() / 10.0
}
