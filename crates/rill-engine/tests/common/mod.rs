//! Helpers shared by the engine's test binaries.
#![allow(dead_code)]

use rill_engine::{Done, Engine, EngineConfig, Event, Handle, Request, SpecConfig};
use rill_kernels::Precision;
use rill_load::{LoadOptions, ModelSource};
use rill_model::Model;
use rill_sampler::SamplerConfig;
use rill_tokenizer::Tokenizer;
use std::path::PathBuf;
use std::sync::Arc;

pub fn load(path: PathBuf) -> (Arc<Model>, Arc<Tokenizer>) {
    let l = rill_load::load(&ModelSource::File(path), &LoadOptions::default()).expect("model");
    (Arc::new(l.model), Arc::new(l.tokenizer))
}

/// A committed fixture model and its tokenizer.
pub fn fixture(name: &str) -> (Arc<Model>, Arc<Tokenizer>) {
    load(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures/models")
            .join(name),
    )
}

/// A deterministic prompt of `n` ids below `below` (under the special tokens).
pub fn prompt_below(seed: u32, n: usize, below: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| (i.wrapping_mul(2654435761).wrapping_add(seed * 97)) % below)
        .collect()
}

pub fn greedy(prompt: Vec<u32>, max_tokens: usize) -> Request {
    Request {
        max_tokens,
        ignore_eos: true,
        ..Request::new(prompt, SamplerConfig::default())
    }
}

/// Wait for a request to finish: (token ids, Done).
pub fn collect(mut h: Handle) -> (Vec<u32>, Done) {
    let mut ids = Vec::new();
    loop {
        match h.recv_blocking().expect("engine hung up") {
            Event::Text { tokens, .. } => ids.extend(tokens.iter().map(|t| t.id)),
            Event::Done(d) => return (ids, d),
            Event::Error(e) => panic!("request failed: {e}"),
            Event::Prompt { .. } => panic!("prompt log-probabilities nobody asked for"),
            Event::Progress(_) => panic!("prompt progress nobody asked for"),
        }
    }
}

/// An engine in the exact precision on 2 threads, small prefill chunks and
/// no prompt cache, speculating as `spec` says.
pub fn exact_engine(
    model: &(Arc<Model>, Arc<Tokenizer>),
    spec: SpecConfig,
    parallel: usize,
) -> Engine {
    Engine::start(
        model.0.clone(),
        model.1.clone(),
        EngineConfig {
            max_parallel: parallel,
            threads: 2,
            precision: Precision::Exact,
            prefill_chunk: 16,
            cache_bytes: 0,
            spec,
            ..EngineConfig::default()
        },
    )
}
