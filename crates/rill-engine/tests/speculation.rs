//! Speculative decoding with the MTP head, through the engine every front
//! end uses: greedy output is exactly plain decoding's (alone and with many
//! sequences at once, every draft length), sampled output keeps its
//! distribution, and drafting on the trained demo model is accepted.

mod common;

use common::*;
use rill_engine::{Engine, Request, SpecConfig};
use rill_model::Model;
use rill_sampler::SamplerConfig;
use rill_tokenizer::Tokenizer;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

fn demo() -> (Arc<Model>, Arc<Tokenizer>) {
    load(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../assets/demo/rill-demo.gguf"))
}

/// Drafting on every step (no adaptive pause), `k` tokens at a time.
fn drafting(k: usize) -> SpecConfig {
    SpecConfig {
        draft_max: k,
        adaptive: false,
        ..SpecConfig::default()
    }
}

fn start(model: &(Arc<Model>, Arc<Tokenizer>), spec: SpecConfig, parallel: usize) -> Engine {
    exact_engine(model, spec, parallel)
}

fn prompt(seed: u32, n: usize) -> Vec<u32> {
    prompt_below(seed, n, 300)
}

/// Every request alone and then all at once, on one engine.
fn run_all(e: &Engine, reqs: &[Request]) -> (Vec<Vec<u32>>, Vec<Vec<u32>>, usize) {
    let alone: Vec<Vec<u32>> = reqs
        .iter()
        .map(|r| collect(e.submit(r.clone()).unwrap()).0)
        .collect();
    let handles: Vec<_> = reqs.iter().map(|r| e.submit(r.clone()).unwrap()).collect();
    let mut drafted = 0;
    let together = handles
        .into_iter()
        .map(|h| {
            let (ids, d) = collect(h);
            drafted += d.drafted_tokens;
            assert!(d.accepted_tokens <= d.drafted_tokens);
            ids
        })
        .collect();
    (alone, together, drafted)
}

#[test]
fn greedy_with_speculation_is_plain_greedy_on_every_fixture_and_draft_length() {
    // The three architectures: the MoE and dense GGUF fixtures, and the
    // Qwen3-Next one as a Hugging Face folder (its MTP head from `mtp.*`).
    for name in [
        "qwen35moe_mtp.f32.gguf",
        "qwen35_mtp.f32.gguf",
        "hf/qwen3next_mtp",
    ] {
        let model = fixture(name);
        let reqs: Vec<Request> = (0..8)
            .map(|s| greedy(prompt(s, 5 + 7 * s as usize), 20))
            .collect();
        let plain = start(&model, SpecConfig::OFF, 8);
        let (want, want_together, none) = run_all(&plain, &reqs);
        assert_eq!(
            want, want_together,
            "{name}: plain decoding alone vs together"
        );
        assert_eq!(none, 0, "{name}: no drafts without speculation");
        for k in 1..=4 {
            let e = start(&model, drafting(k), 8);
            let (alone, together, drafted) = run_all(&e, &reqs);
            assert_eq!(alone, want, "{name}: k = {k}, alone");
            assert_eq!(together, want, "{name}: k = {k}, 8 at once");
            assert!(drafted > 0, "{name}: k = {k}: nothing was drafted");
            let m = e.metrics();
            assert!(m.spec_draft_tokens_total.load(Relaxed) > 0);
        }
    }
}

/// On the trained demo model the head's drafts are mostly right: whole
/// drafts are accepted, rewinds happen at every depth, and greedy tokens
/// are still exactly plain decoding's.
#[test]
fn demo_model_drafts_are_accepted_and_greedy_is_unchanged() {
    let model = demo();
    let tok = model.1.clone();
    let texts = [
        "The river runs past the old mill and",
        "Once upon a time, a small fox",
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    ];
    let reqs: Vec<Request> = texts
        .iter()
        .map(|t| greedy(tok.encode_prompt(t), 40))
        .collect();
    let plain = start(&model, SpecConfig::OFF, 4);
    let (want, _, _) = run_all(&plain, &reqs);
    let e = start(&model, drafting(3), 4);
    let (alone, together, _) = run_all(&e, &reqs);
    assert_eq!(alone, want, "speculative greedy alone");
    assert_eq!(together, want, "speculative greedy together");
    let m = e.metrics();
    let (drafted, accepted) = (
        m.spec_draft_tokens_total.load(Relaxed),
        m.spec_accepted_tokens_total.load(Relaxed),
    );
    assert!(
        accepted * 4 > drafted,
        "the trained head's drafts are accepted: {accepted} of {drafted}"
    );
    let per_pos: Vec<u64> = m
        .spec_accepted_per_position
        .iter()
        .map(|a| a.load(Relaxed))
        .collect();
    assert!(
        per_pos[2] > 0,
        "whole 3-token drafts were taken: {per_pos:?}"
    );
    assert!(per_pos[0] >= per_pos[1] && per_pos[1] >= per_pos[2]);
}

/// With sampling, speculation changes which random draws are made but not
/// the distribution of the output: the tokens at each of the first
/// positions, over many seeds, have the same frequencies with and without
/// speculation (a two-sample chi-square test at p = 1e-4).
#[test]
fn sampled_speculation_keeps_the_output_distribution() {
    let model = demo();
    let tok = model.1.clone();
    let p = tok.encode_prompt("The river runs past the old mill and");
    let request = |seed: u64| Request {
        max_tokens: 4,
        ignore_eos: true,
        ..Request::new(
            p.clone(),
            SamplerConfig {
                temperature: 1.0,
                top_k: 6,
                seed,
                ..SamplerConfig::default()
            },
        )
    };
    let runs = 500;
    let histograms = |e: &Engine, seed0: u64| {
        let mut h: Vec<HashMap<u32, usize>> = vec![HashMap::new(); 4];
        for s in 0..runs {
            let (ids, _) = collect(e.submit(request(seed0 + s)).unwrap());
            for (pos, id) in ids.iter().enumerate() {
                *h[pos].entry(*id).or_default() += 1;
            }
        }
        h
    };
    let plain = start(&model, SpecConfig::OFF, 4);
    let spec = start(&model, drafting(3), 4);
    let a = histograms(&plain, 1);
    let b = histograms(&spec, 1_000_000);
    assert!(
        spec.metrics().spec_accepted_tokens_total.load(Relaxed) > 0,
        "some drafts were accepted"
    );
    for pos in 1..4 {
        let (stat, df) = chi_square(&a[pos], &b[pos]);
        let crit = chi_square_critical(df);
        assert!(
            stat < crit,
            "position {pos}: chi-square {stat:.1} > {crit:.1} ({df} degrees of freedom)"
        );
    }
}

/// The two-sample statistic for equal sample sizes, pooling rare tokens.
fn chi_square(a: &HashMap<u32, usize>, b: &HashMap<u32, usize>) -> (f64, usize) {
    let mut keys: Vec<u32> = a.keys().chain(b.keys()).copied().collect();
    keys.sort_unstable();
    keys.dedup();
    let (mut stat, mut cells) = (0.0, 0);
    let (mut ra, mut rb) = (0usize, 0usize);
    let mut add = |x: usize, y: usize| {
        stat += (x as f64 - y as f64).powi(2) / (x + y) as f64;
        cells += 1;
    };
    for k in keys {
        let (x, y) = (
            a.get(&k).copied().unwrap_or(0),
            b.get(&k).copied().unwrap_or(0),
        );
        if x + y < 20 {
            ra += x;
            rb += y;
        } else {
            add(x, y);
        }
    }
    if ra + rb > 0 {
        add(ra, rb);
    }
    (stat, cells.max(2) - 1)
}

/// The chi-square quantile at 1 − 1e-4 (Wilson–Hilferty).
fn chi_square_critical(df: usize) -> f64 {
    let (k, z) = (df as f64, 3.719);
    k * (1.0 - 2.0 / (9.0 * k) + z * (2.0 / (9.0 * k)).sqrt()).powi(3)
}

/// A request may opt out, and a file without the head decodes plainly.
#[test]
fn opting_out_and_files_without_a_head_decode_plainly() {
    let model = fixture("qwen35moe_mtp.f32.gguf");
    let e = start(&model, drafting(2), 2);
    let r = Request {
        draft_max: Some(0),
        ..greedy(prompt(1, 9), 12)
    };
    let (_, d) = collect(e.submit(r).unwrap());
    assert_eq!(d.drafted_tokens, 0);
    let (_, d) = collect(e.submit(greedy(prompt(1, 9), 12)).unwrap());
    assert!(d.drafted_tokens > 0);

    let no_head = fixture("qwen35moe.f32.gguf");
    let e = start(&no_head, drafting(2), 2);
    let (ids, d) = collect(e.submit(greedy(prompt(1, 9), 12)).unwrap());
    assert_eq!((ids.len(), d.drafted_tokens), (12, 0));
}

/// A grammar-constrained request speculates: drafts are drawn under the
/// grammar's mask (rolled back before the trunk verifies them) and each
/// verify row is masked, so greedy constrained output is exactly plain
/// constrained decoding's, alone and beside other sequences, on a fixture
/// with random weights (the mask decides most tokens) and on the trained
/// demo model (where the masked drafts are accepted).
#[test]
fn constrained_greedy_with_speculation_is_plain_constrained_greedy() {
    use rill_engine::{ConstraintRequest, GrammarSpec};
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 12},
            "facts": {"type": "array", "items": {"type": "string", "maxLength": 16}, "maxItems": 4},
            "n": {"type": "integer", "minimum": 0, "maximum": 999}
        },
        "required": ["name", "facts", "n"],
        "additionalProperties": false
    });
    let constrained = |prompt: Vec<u32>, after: Option<u32>| Request {
        ignore_eos: false,
        constraint: Some(ConstraintRequest {
            grammar: GrammarSpec::JsonSchema(schema.clone()),
            after,
        }),
        ..greedy(prompt, 48)
    };
    for name in ["qwen35moe_mtp.f32.gguf", "demo"] {
        let model = match name {
            "demo" => demo(),
            _ => fixture(name),
        };
        let tok = model.1.clone();
        let mut reqs: Vec<Request> = (0..3)
            .map(|s| constrained(prompt(s, 6 + 5 * s as usize), None))
            .collect();
        let chat = "<|im_start|>user\nDescribe a fox as JSON.<|im_end|>\n<|im_start|>assistant\n";
        reqs.push(constrained(tok.encode_prompt(chat), None));
        // Free text until a token the plain run writes, then the grammar.
        let free = collect(
            start(&model, SpecConfig::OFF, 1)
                .submit(greedy(prompt(7, 9), 4))
                .unwrap(),
        )
        .0;
        reqs.push(constrained(prompt(7, 9), Some(free[1])));
        // An unconstrained neighbour.
        reqs.push(greedy(prompt(4, 11), 30));
        let plain = start(&model, SpecConfig::OFF, 6);
        let (want, want_together, _) = run_all(&plain, &reqs);
        assert_eq!(want, want_together, "{name}: plain alone vs together");
        for k in [1, 3] {
            let e = start(&model, drafting(k), 6);
            let (alone, together, drafted) = run_all(&e, &reqs);
            assert_eq!(alone, want, "{name}: k = {k}, alone");
            assert_eq!(together, want, "{name}: k = {k}, together");
            assert!(drafted > 0, "{name}: k = {k}: nothing was drafted");
            if name == "demo" {
                let m = e.metrics();
                assert!(
                    m.spec_accepted_tokens_total.load(Relaxed) > 0,
                    "{name}: masked drafts are accepted"
                );
            }
        }
    }
}
