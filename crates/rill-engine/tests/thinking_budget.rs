//! The thinking budget through the engine: after `tokens` thought tokens
//! the engine writes the closing (message, then `</think>`) itself, the
//! tokens before it are the ones the model writes without a budget, a
//! budget the model stays inside changes nothing, and speculation gives
//! the same tokens as plain decoding.

mod common;

use common::*;
use rill_engine::{Engine, Request, SpecConfig, ThinkingBudget};
use rill_model::Model;
use rill_tokenizer::Tokenizer;
use std::sync::Arc;

fn start(model: &(Arc<Model>, Arc<Tokenizer>), spec: SpecConfig) -> Engine {
    exact_engine(model, spec, 2)
}

fn run(e: &Engine, req: &Request) -> Vec<u32> {
    collect(e.submit(req.clone()).unwrap()).0
}

#[test]
fn the_engine_closes_the_block_when_the_budget_is_spent() {
    let model = fixture("qwen35moe_mtp.f32.gguf");
    let closing = model.1.encode("\nOut of time.\n", false);
    let plain_engine = start(&model, SpecConfig::OFF);
    let spec_engine = start(
        &model,
        SpecConfig {
            draft_max: 3,
            adaptive: false,
            ..SpecConfig::default()
        },
    );
    for seed in 0..3 {
        let free = greedy(prompt_below(seed, 12, 300), 24);
        let plain = run(&plain_engine, &free);
        // The fixture's small vocabulary has no `</think>`: an id the
        // random model does not write here stands for it.
        let end = (0..300).find(|t| !plain.contains(t)).unwrap();
        for tokens in [0, 1, 5, 11] {
            let budgeted = Request {
                thinking_budget: Some(ThinkingBudget {
                    tokens,
                    end,
                    closing: closing.clone(),
                }),
                ..free.clone()
            };
            let got = run(&plain_engine, &budgeted);
            let n = closing.len();
            assert_eq!(got.len(), 24, "seed {seed} budget {tokens}");
            assert_eq!(
                got[..tokens],
                plain[..tokens],
                "seed {seed} budget {tokens}"
            );
            assert_eq!(
                got[tokens..tokens + n],
                closing[..],
                "seed {seed} budget {tokens}"
            );
            assert_eq!(got[tokens + n], end, "seed {seed} budget {tokens}");
            // Drafting stops at the budget and the verify rows take the
            // closing: the same tokens as without speculation.
            let (spec_ids, spec_done) = collect(spec_engine.submit(budgeted.clone()).unwrap());
            assert_eq!(spec_ids, got, "speculation, seed {seed} budget {tokens}");
            assert!(spec_done.drafted_tokens > 0, "the head drafted");
        }
        // A budget the thinking stays inside changes nothing.
        let roomy = Request {
            thinking_budget: Some(ThinkingBudget {
                tokens: 100,
                end,
                closing: vec![],
            }),
            ..free.clone()
        };
        assert_eq!(run(&plain_engine, &roomy), plain, "seed {seed}");
    }
}

#[test]
fn a_block_the_model_closes_itself_is_left_alone() {
    // The trained demo model opens and closes its thinking: with a budget
    // longer than its thought, its tokens are unchanged; with a short one,
    // the engine closes the block and the model goes on to answer.
    let model = load(
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../assets/demo/rill-demo.gguf"),
    );
    let tok = &model.1;
    let end = tok.token_to_id("</think>").unwrap();
    let e = start(&model, SpecConfig::OFF);
    let prompt = tok.encode_prompt(
        "<|im_start|>user\nWhat is a Python list?<|im_end|>\n<|im_start|>assistant\n<think>\n",
    );
    let free = Request {
        ignore_eos: false,
        ..greedy(prompt, 200)
    };
    let plain = run(&e, &free);
    let closed_at = plain
        .iter()
        .position(|&t| t == end)
        .expect("the demo model closes its thinking");
    let with = |tokens: usize| Request {
        thinking_budget: Some(ThinkingBudget {
            tokens,
            end,
            closing: vec![],
        }),
        ..free.clone()
    };
    assert_eq!(run(&e, &with(closed_at + 5)), plain);
    assert_eq!(run(&e, &with(closed_at)), plain, "exactly at the budget");
    if closed_at >= 2 {
        let short = run(&e, &with(closed_at / 2));
        assert_eq!(short[..closed_at / 2], plain[..closed_at / 2]);
        assert_eq!(short[closed_at / 2], end);
        assert!(short.len() > closed_at / 2 + 1, "an answer follows");
    }
}
