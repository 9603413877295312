//! One memory budget for sequence states and the prompt cache: a request
//! that could never fit is refused with the figures, one that does not fit
//! now waits, and under pressure the engine evicts the prompt cache, then
//! stores new KV quantized, then runs fewer sequences — never holding more
//! than the budget.

mod common;

use common::*;
use rill_engine::{Engine, EngineConfig, Request, SubmitError};
use rill_kernels::Precision;
use rill_model::{KvConfig, KvType, Model, StateSize};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

const MODEL: &str = "qwen35moe.f32.gguf";
const CHUNK: usize = 64;

fn engine(model: &Arc<Model>, kv: KvConfig, budget: Option<usize>, parallel: usize) -> Engine {
    let (_, tok) = fixture(MODEL);
    Engine::start(
        model.clone(),
        tok,
        EngineConfig {
            threads: 2,
            precision: Precision::Exact,
            kv,
            max_parallel: parallel,
            ctx_size: 1024,
            prefill_chunk: CHUNK,
            cache_bytes: 64 << 20,
            mem_budget: budget,
            ..Default::default()
        },
    )
}

/// What the engine reserves for `req` with `kv`.
fn worst(model: &Model, kv: KvConfig, req: &Request) -> usize {
    let positions = (req.prompt.len() + req.max_tokens).min(1024);
    StateSize::of(model, kv).bytes(positions, CHUNK, 0)
}

fn q8() -> KvConfig {
    KvConfig::uniform(KvType::Q8_0)
}

#[test]
fn a_request_that_can_never_fit_is_refused_with_the_figures() {
    let (model, _) = fixture(MODEL);
    let small = greedy(prompt_below(1, 32, 500), 8);
    // Room for the small one alone (its KV is one page of f32 rows).
    let budget = worst(&model, KvConfig::f32(), &small);
    let e = engine(&model, KvConfig::f32(), Some(budget), 2);
    // Its worst case, 1024 positions, fits neither in f32 nor in q8_0.
    let big = greedy(prompt_below(2, 32, 500), 5000);
    assert!(worst(&model, q8(), &big) > budget);
    let err = e.submit(big).err().expect("refused");
    assert!(
        matches!(
            err,
            SubmitError::OverBudget {
                positions: 1024,
                ..
            }
        ),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains("MiB") && msg.contains("--mem-budget"), "{msg}");
    assert_eq!(e.metrics().requests_rejected.load(Relaxed), 1);
    // One that fits runs.
    let (ids, done) = collect(e.submit(small).unwrap());
    assert_eq!((ids.len(), done.completion_tokens), (8, 8));
}

/// With room for one sequence at a time, three requests wait their turn
/// (rung 3), the states never hold more than the budget, and each gets the
/// tokens it gets alone.
#[test]
fn requests_wait_for_memory_and_get_the_tokens_they_get_alone() {
    let (model, _) = fixture(MODEL);
    let reqs: Vec<Request> = (0..3)
        .map(|i| greedy(prompt_below(10 + i, 200, 500), 6))
        .collect();
    let one = reqs.iter().map(|r| worst(&model, q8(), r)).max().unwrap();
    let budget = one * 3 / 2;
    let free = engine(&model, q8(), None, 4);
    let alone: Vec<Vec<u32>> = reqs
        .iter()
        .map(|r| collect(free.submit(r.clone()).unwrap()).0)
        .collect();

    let e = engine(&model, q8(), Some(budget), 4);
    let handles: Vec<_> = reqs.iter().map(|r| e.submit(r.clone()).unwrap()).collect();
    for (h, want) in handles.into_iter().zip(&alone) {
        assert_eq!(&collect(h).0, want);
    }
    let m = e.metrics();
    assert!(m.mem_waits_total.load(Relaxed) >= 1, "a request waited");
    let peak = m.mem_held_peak_bytes.load(Relaxed) as usize;
    assert!(peak > 0 && peak <= budget, "peak {peak} within {budget}");
    assert_eq!(m.mem_reserved_bytes.load(Relaxed), 0, "all given back");
    assert_eq!(
        m.mem_quantized_kv_total.load(Relaxed),
        0,
        "q8_0 is the cheapest rung"
    );
}

/// The ladder's first two rungs: a request that fits once the prompt cache
/// is evicted evicts it; one that fits only with a quantized KV runs with
/// q8_0 and gets the tokens a q8_0 engine gives it.
#[test]
fn the_ladder_evicts_the_cache_then_quantizes_the_kv() {
    let (model, _) = fixture(MODEL);
    let f32 = KvConfig::f32();
    let first = greedy(prompt_below(20, 100, 500), 4);
    let second = greedy(prompt_below(21, 450, 500), 4);
    let third = greedy(prompt_below(22, 700, 500), 4);
    let budget = worst(&model, f32, &second) + worst(&model, f32, &first) / 2;
    assert!(
        worst(&model, f32, &first) * 2 < budget,
        "the first one's snapshot fits beside it"
    );
    assert!(worst(&model, f32, &third) > budget && worst(&model, q8(), &third) < budget);

    let e = engine(&model, f32, Some(budget), 2);
    collect(e.submit(first).unwrap());
    let m = e.metrics();
    assert!(
        m.cache_entries.load(Relaxed) >= 1,
        "the first prompt is cached"
    );
    // Idle, with the cache holding a prompt: the budget has that in use,
    // the sequences (what vllm:kv_cache_usage_perc reports) nothing.
    assert!(m.memory_usage_of_budget().unwrap() > 0.0);
    assert_eq!(m.sequence_usage_of_budget(), Some(0.0));
    collect(e.submit(second).unwrap());
    assert!(m.mem_cache_evictions_total.load(Relaxed) >= 1, "rung 1");
    let (ids, _) = collect(e.submit(third.clone()).unwrap());
    assert_eq!(m.mem_quantized_kv_total.load(Relaxed), 1, "rung 2");
    let q8_engine = engine(&model, q8(), None, 2);
    assert_eq!(ids, collect(q8_engine.submit(third).unwrap()).0);
    let peak = m.mem_held_peak_bytes.load(Relaxed) as usize;
    assert!(peak <= budget, "peak {peak} within {budget}");
    let usage = m.memory_usage_of_budget().unwrap();
    assert!((0.0..=1.0).contains(&usage), "{usage}");
}
