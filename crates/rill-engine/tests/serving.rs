//! The serving engine on a committed fixture model: batch invariance, the
//! prompt cache, cancellation and the queue bound.

mod common;

use common::*;
use rill_engine::{Engine, EngineConfig, Event, FinishReason, Request, SubmitError};
use rill_kernels::Precision;
use rill_load::{LoadOptions, ModelSource};
use rill_sampler::SamplerConfig;
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

fn engine(cfg: EngineConfig) -> Engine {
    engine_on("qwen35moe.f32.gguf", Precision::Exact, cfg)
}

fn engine_on(name: &str, precision: Precision, cfg: EngineConfig) -> Engine {
    let (m, t) = fixture(name);
    Engine::start(
        m,
        t,
        EngineConfig {
            threads: 2,
            precision,
            ..cfg
        },
    )
}

/// A deterministic prompt of `n` ids below the special tokens.
fn prompt(seed: u32, n: usize) -> Vec<u32> {
    prompt_below(seed, n, 500)
}

#[test]
fn eight_concurrent_greedy_requests_get_the_tokens_they_get_alone() {
    eight_concurrent_requests_on("qwen35moe.f32.gguf", Precision::Exact);
}

/// With 8-bit activations too: prefill chunks take the AMX tile kernel
/// (where the CPU has one), decode steps of one to eight sequences the
/// in-register ones; the integer kernels keep the same bits.
#[test]
fn eight_concurrent_q8_requests_get_the_tokens_they_get_alone() {
    eight_concurrent_requests_on("qwen35moe_wide.q4_k_m.gguf", Precision::Q8);
}

fn eight_concurrent_requests_on(name: &str, precision: Precision) {
    let prompts: Vec<Vec<u32>> = (0..8).map(|i| prompt(i, 20 + 37 * i as usize)).collect();
    let cfg = EngineConfig {
        max_parallel: 8,
        prefill_chunk: 64,
        cache_bytes: 0,
        ..Default::default()
    };
    let e = engine_on(name, precision, cfg);
    let alone: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| collect(e.submit(greedy(p.clone(), 24)).unwrap()).0)
        .collect();
    let handles: Vec<_> = prompts
        .iter()
        .map(|p| e.submit(greedy(p.clone(), 24)).unwrap())
        .collect();
    let together: Vec<Vec<u32>> = handles.into_iter().map(|h| collect(h).0).collect();
    for (i, (a, b)) in alone.iter().zip(&together).enumerate() {
        assert_eq!(a.len(), 24);
        assert_eq!(a, b, "request {i} changed under load");
    }
    assert_eq!(e.metrics().requests_running.load(Relaxed), 0);
}

/// Four prompts prefilling at once under a step budget of one chunk (plus
/// the decode rows): no step runs more rows than the budget, the waiting
/// chunks run in later steps, and each request still gets the tokens it
/// gets alone (chunks wait whole, never cut).
#[test]
fn concurrent_prefills_share_the_step_budget_and_keep_their_tokens() {
    let chunk = 32;
    let budget = chunk + 8;
    let cfg = |step_tokens| EngineConfig {
        max_parallel: 4,
        prefill_chunk: chunk,
        step_tokens,
        cache_bytes: 0,
        ..Default::default()
    };
    let prompts: Vec<Vec<u32>> = (0..4)
        .map(|i| prompt(10 + i, 90 + 7 * i as usize))
        .collect();
    let alone_engine = engine(cfg(budget));
    let alone: Vec<Vec<u32>> = (prompts.iter())
        .map(|p| collect(alone_engine.submit(greedy(p.clone(), 6)).unwrap()).0)
        .collect();
    let run_together = |step_tokens| {
        let e = engine(cfg(step_tokens));
        let handles: Vec<_> = (prompts.iter())
            .map(|p| e.submit(greedy(p.clone(), 6)).unwrap())
            .collect();
        let out: Vec<Vec<u32>> = handles.into_iter().map(|h| collect(h).0).collect();
        (out, e.metrics().step_rows_peak.load(Relaxed) as usize)
    };
    let (together, peak) = run_together(budget);
    assert_eq!(together, alone, "a request changed under the budget");
    assert!(
        (chunk..=budget).contains(&peak),
        "a step ran {peak} rows against a budget of {budget}"
    );
    // Without the bound, the same requests prefill several chunks at once.
    let (_, unbounded) = run_together(usize::MAX);
    assert!(unbounded > budget, "{unbounded} rows");
}

#[test]
fn a_follow_up_turn_resumes_from_the_cache_and_matches_a_cold_run() {
    let cfg = EngineConfig {
        max_parallel: 2,
        prefill_chunk: 32,
        cache_interval: 64,
        ..Default::default()
    };
    let first = prompt(3, 200);
    let mut second = first.clone();
    second.extend(prompt(4, 30));

    let cold = engine(EngineConfig {
        cache_bytes: 0,
        ..cfg.clone()
    });
    let (want, d) = collect(cold.submit(greedy(second.clone(), 16)).unwrap());
    assert_eq!(d.cached_tokens, 0);

    let warm = engine(cfg);
    collect(warm.submit(greedy(first, 4)).unwrap());
    let (got, d) = collect(warm.submit(greedy(second, 16)).unwrap());
    assert_eq!(
        d.cached_tokens, 200,
        "the whole first prompt is a cached prefix"
    );
    assert_eq!(got, want, "resuming from a snapshot changes nothing");
    assert_eq!(warm.metrics().cache_hits_total.load(Relaxed), 1);
    assert!(warm
        .metrics()
        .render()
        .contains("rill_prompt_cache_hits_total 1"));
}

#[test]
fn dropping_a_handle_cancels_and_frees_the_slot() {
    let e = engine(EngineConfig {
        max_parallel: 1,
        ..Default::default()
    });
    let h = e.submit(greedy(prompt(1, 10), 3000)).unwrap();
    drop(h);
    let t0 = Instant::now();
    while e.metrics().requests_running.load(Relaxed) != 0
        || e.metrics().queue_depth.load(Relaxed) != 0
    {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the cancelled request still runs"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // The slot serves the next request.
    let (ids, d) = collect(e.submit(greedy(prompt(2, 10), 5)).unwrap());
    assert_eq!((ids.len(), d.finish), (5, FinishReason::Length));
}

#[test]
fn bad_requests_and_a_full_queue_are_refused() {
    let e = engine(EngineConfig {
        max_parallel: 1,
        max_queue: 1,
        ctx_size: 256,
        ..Default::default()
    });
    assert!(matches!(
        e.submit(greedy(vec![], 4)),
        Err(SubmitError::EmptyPrompt)
    ));
    assert!(matches!(
        e.submit(greedy(prompt(1, 256), 4)),
        Err(SubmitError::PromptTooLong { .. })
    ));
    let mut bad = greedy(prompt(1, 4), 4);
    bad.sampler.top_p = 0.0;
    assert!(matches!(e.submit(bad), Err(SubmitError::Invalid(_))));
    // One running, one waiting, the third refused.
    let mut held = Vec::new();
    let mut refused = 0;
    for i in 0..6 {
        match e.submit(greedy(prompt(i, 8), 200)) {
            Ok(h) => held.push(h),
            Err(SubmitError::QueueFull(_)) => refused += 1,
            Err(other) => panic!("{other}"),
        }
    }
    assert!(refused >= 1, "a bounded queue refuses work");
    for h in held {
        let (_, d) = collect(h);
        assert_eq!(d.finish, FinishReason::Length);
    }
}

#[test]
fn stop_strings_and_logprobs() {
    let e = engine(EngineConfig::default());
    let mut r = greedy(prompt(5, 12), 8);
    r.logprobs = Some(3);
    let mut h = e.submit(r).unwrap();
    let mut text = String::new();
    let mut n = 0;
    loop {
        match h.events.blocking_recv().unwrap() {
            Event::Text { text: t, tokens } => {
                text.push_str(&t);
                for tk in tokens {
                    n += 1;
                    let lp = tk.logprob.unwrap();
                    assert!(lp <= 0.0);
                    assert_eq!(tk.top.len(), 3);
                    assert_eq!(tk.top[0].0, tk.id, "greedy picks the most likely token");
                    assert!(tk.top.windows(2).all(|w| w[0].1 >= w[1].1));
                }
            }
            Event::Done(_) => break,
            Event::Error(e) => panic!("{e}"),
            Event::Prompt { .. } => panic!("prompt log-probabilities nobody asked for"),
            Event::Progress(_) => panic!("prompt progress nobody asked for"),
        }
    }
    assert_eq!(n, 8);
    // Now stop on a piece of that text: generation ends before it.
    let piece: String = text.chars().skip(3).take(2).collect();
    if !piece.is_empty() {
        let mut r = greedy(prompt(5, 12), 8);
        r.stop = vec![piece.clone()];
        let mut h = e.submit(r).unwrap();
        let mut got = String::new();
        let done = loop {
            match h.events.blocking_recv().unwrap() {
                Event::Text { text: t, .. } => got.push_str(&t),
                Event::Done(d) => break d,
                Event::Error(e) => panic!("{e}"),
                Event::Prompt { .. } => panic!("prompt log-probabilities nobody asked for"),
                Event::Progress(_) => panic!("prompt progress nobody asked for"),
            }
        };
        assert_eq!(done.finish, FinishReason::Stop);
        assert!(!got.contains(&piece));
        assert!(text.starts_with(&got));
    }
}

#[test]
fn a_cache_point_inside_a_chunk_is_snapshotted_and_reused() {
    let cfg = EngineConfig {
        max_parallel: 1,
        prefill_chunk: 64,
        cache_interval: 1024,
        ..Default::default()
    };
    let e = engine(cfg);
    // History of 100 tokens, then a 5-token "generation prompt" the next turn will not repeat.
    let history = prompt(9, 100);
    let mut first = history.clone();
    first.extend([501, 502, 503, 504, 505]);
    let mut r = greedy(first, 2);
    r.cache_points = vec![history.len()];
    collect(e.submit(r).unwrap());
    let mut second = history.clone();
    second.extend(prompt(10, 20));
    let (_, d) = collect(e.submit(greedy(second, 2)).unwrap());
    assert_eq!(
        d.cached_tokens, 100,
        "resumed at the end of the shared history"
    );
}

/// Structured output: the constrained text parses and follows the schema
/// (random weights would write anything), the grammar's end ends the
/// request, an unconstrained neighbour gets its own tokens, and a bad
/// grammar is refused at submission.
#[test]
fn a_json_schema_constraint_holds_and_leaves_neighbours_alone() {
    use rill_engine::{ConstraintRequest, GrammarSpec};
    let e = engine(EngineConfig {
        max_parallel: 4,
        ..EngineConfig::default()
    });
    let tok_path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/models/qwen35moe.f32.gguf");
    let tok = rill_load::load(&ModelSource::File(tok_path), &LoadOptions::default())
        .unwrap()
        .tokenizer;
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "ok": {"type": "boolean"},
            "n": {"type": "integer", "minimum": 0, "maximum": 99}
        },
        "required": ["ok", "n"],
        "additionalProperties": false
    });
    let alone = collect(e.submit(greedy(prompt(9, 40), 12)).unwrap()).0;
    for seed in 0..3u64 {
        let constrained = Request {
            max_tokens: 200,
            ignore_eos: false,
            sampler: SamplerConfig {
                temperature: 1.0,
                seed,
                ..SamplerConfig::default()
            },
            constraint: Some(ConstraintRequest {
                grammar: GrammarSpec::JsonSchema(schema.clone()),
                after: None,
            }),
            ..Request::new(prompt(seed as u32, 30), SamplerConfig::default())
        };
        let h = e.submit(constrained).unwrap();
        let neighbour = e.submit(greedy(prompt(9, 40), 12)).unwrap();
        let (ids, done) = collect(h);
        let text = tok.decode(&ids).unwrap();
        assert_eq!(
            done.finish,
            FinishReason::Stop,
            "the grammar's end ends it: {text:?}"
        );
        let v: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|err| panic!("{text:?}: {err}"));
        assert!(v["ok"].is_boolean() && v["n"].is_i64(), "{text}");
        assert_eq!(v.as_object().unwrap().len(), 2, "{text}");
        assert_eq!(collect(neighbour).0, alone, "the neighbour's tokens");
    }
    let bad = Request {
        constraint: Some(ConstraintRequest {
            grammar: GrammarSpec::Regex("(".into()),
            after: None,
        }),
        ..greedy(prompt(1, 5), 4)
    };
    assert!(matches!(e.submit(bad), Err(SubmitError::Invalid(_))));
}

/// With `after`, the text before that token is free and the grammar holds
/// after it.
#[test]
fn a_constraint_starts_after_its_token() {
    use rill_engine::{ConstraintRequest, GrammarSpec};
    let e = engine(EngineConfig::default());
    // Greedy, unconstrained: take the third token as the opener.
    let free = collect(e.submit(greedy(prompt(5, 20), 6)).unwrap()).0;
    let opener = free[2];
    let req = Request {
        max_tokens: 40,
        ignore_eos: false,
        constraint: Some(ConstraintRequest {
            grammar: GrammarSpec::Choice(vec!["yes".into(), "no".into()]),
            after: Some(opener),
        }),
        ..Request::new(prompt(5, 20), SamplerConfig::default())
    };
    let (ids, done) = collect(e.submit(req).unwrap());
    let at = ids.iter().position(|&t| t == opener).expect("the opener");
    assert_eq!(&ids[..=at], &free[..=at], "free until the opener");
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/models/qwen35moe.f32.gguf");
    let tok = rill_load::load(&ModelSource::File(path), &LoadOptions::default())
        .unwrap()
        .tokenizer;
    let rest = tok.decode(&ids[at + 1..]).unwrap();
    assert!(rest == "yes" || rest == "no", "{rest:?}");
    assert_eq!(done.finish, FinishReason::Stop);
}

/// Greedy under a grammar takes the row's best token when the grammar
/// allows it, without masking the row: the tokens must be those of masking
/// every row. A sampler at top-k 1 picks the same token but never takes
/// that shortcut (it is not greedy), so it is the reference.
#[test]
fn greedy_under_a_grammar_picks_what_the_masked_row_picks() {
    use rill_engine::{ConstraintRequest, GrammarSpec};
    let e = engine(EngineConfig::default());
    let schema = serde_json::json!({
        "type": "object",
        "properties": {"words": {"type": "array", "items": {"type": "string", "maxLength": 12},
                                  "minItems": 3, "maxItems": 3}},
        "required": ["words"],
    });
    let run = |sampler: SamplerConfig, seed: u32| {
        let req = Request {
            max_tokens: 60,
            ignore_eos: false,
            constraint: Some(ConstraintRequest {
                grammar: GrammarSpec::JsonSchema(schema.clone()),
                after: None,
            }),
            ..Request::new(prompt(seed, 24), sampler)
        };
        collect(e.submit(req).unwrap()).0
    };
    for seed in 0..3 {
        let greedy = run(SamplerConfig::default(), seed);
        let top1 = SamplerConfig {
            temperature: 0.7,
            top_k: 1,
            ..SamplerConfig::default()
        };
        assert!(greedy.len() > 10, "{greedy:?}");
        assert_eq!(greedy, run(top1, seed), "prompt {seed}");
    }
}

/// `prompt_logprobs`: every prompt token after the first scored by the rows
/// before it, as the model's own logits of the whole prompt give them, over
/// prefill chunks; sent before the text, which is the plain request's. It
/// is not resumed from the prompt cache (whose prefix has no logits): it
/// scores the whole prompt every time.
#[test]
fn prompt_logprobs_score_every_prompt_token() {
    let (model, tok) = fixture("qwen35moe.f32.gguf");
    let p = prompt(9, 45);
    let run = rill_model::Runner::exact(rill_kernels::simd::Isa::best(), 2);
    let mut state = rill_model::SequenceState::new(&model, 64);
    let rows = model
        .forward(&run, &mut state, &p, rill_model::Rows::All)
        .unwrap();
    let n_vocab = model.config.n_vocab;
    let e = Engine::start(
        model.clone(),
        tok,
        EngineConfig {
            threads: 2,
            precision: Precision::Exact,
            prefill_chunk: 16,
            ..Default::default()
        },
    );
    // The cache holds the first 30 tokens' state, which a plain request of
    // the whole prompt resumes from.
    collect(e.submit(greedy(p[..30].to_vec(), 1)).unwrap());
    let (plain, done) = collect(e.submit(greedy(p.clone(), 4)).unwrap());
    assert_eq!(done.cached_tokens, 30);
    for round in 0..2 {
        let mut r = greedy(p.clone(), 4);
        r.prompt_logprobs = Some(2);
        let mut h = e.submit(r).unwrap();
        let scored = match h.events.blocking_recv().unwrap() {
            Event::Prompt { tokens } => tokens,
            other => panic!("round {round}: {other:?} before the prompt's log-probabilities"),
        };
        assert_eq!(scored.len(), p.len(), "round {round}");
        assert_eq!(scored[0].id, p[0]);
        assert_eq!(scored[0].logprob, None);
        for (i, info) in scored.iter().enumerate().skip(1) {
            assert_eq!(info.id, p[i]);
            let want = rill_sampler::logprobs(&rows[(i - 1) * n_vocab..i * n_vocab], p[i], 2);
            let got = info.logprob.unwrap();
            assert!(
                (got - want.chosen).abs() <= 1e-4,
                "round {round}, token {i}: {got} vs {}",
                want.chosen
            );
            assert_eq!(info.top.len(), 2);
            assert_eq!(info.rank, Some(want.rank), "round {round}, token {i}");
            assert_eq!(info.top[0].0, want.top[0].0, "round {round}, token {i}");
        }
        let (ids, done) = collect(h);
        assert_eq!(ids, plain, "round {round}");
        assert_eq!(done.cached_tokens, 0, "round {round}");
    }
}

/// llama-server's `return_progress`: the prompt's progress when the
/// sequence starts (its cached prefix) and after each prefill chunk, up to
/// the whole prompt, before any text; the text is the plain request's.
#[test]
fn progress_reports_each_prefill_chunk_before_the_text() {
    let e = engine(EngineConfig {
        prefill_chunk: 16,
        ..Default::default()
    });
    let p = prompt(4, 45);
    collect(e.submit(greedy(p[..20].to_vec(), 1)).unwrap());
    let (plain, _) = collect(e.submit(greedy(p.clone(), 3)).unwrap());
    let mut r = greedy(p.clone(), 3);
    r.report_progress = true;
    let mut h = e.submit(r).unwrap();
    let (mut seen, mut ids, mut from) = (Vec::new(), Vec::new(), None);
    loop {
        match h.events.blocking_recv().unwrap() {
            Event::Progress(rill_engine::PromptProgress {
                total,
                cached,
                processed,
                ..
            }) => {
                assert!(ids.is_empty(), "progress after the text");
                assert_eq!(total, 45);
                assert_eq!(*from.get_or_insert(cached), cached);
                seen.push(processed);
            }
            Event::Text { tokens, .. } => ids.extend(tokens.iter().map(|t| t.id)),
            Event::Done(_) => break,
            other => panic!("{other:?}"),
        }
    }
    // From the cached prefix, a chunk of at most 16 at a time, to the end.
    let cached = from.expect("progress");
    assert!(cached > 0, "resumed from the cache");
    assert_eq!(seen[0], cached);
    assert_eq!(seen.last(), Some(&45));
    assert!(
        seen.windows(2).all(|w| w[0] < w[1] && w[1] - w[0] <= 16),
        "{seen:?}"
    );
    assert!(seen.len() >= 2);
    assert_eq!(ids, plain);
}
