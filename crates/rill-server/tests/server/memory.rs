//! The memory budget over HTTP: a request that could never fit gets a 400
//! that says why; a bounded load of long prompts is served within the
//! budget, reported on `/metrics`.

use crate::common::*;
use rill_model::{KvConfig, StateSize};
use serde_json::json;

/// Room for one f32 sequence of 400 positions (the engine's KV here).
fn budget() -> usize {
    let (model, _) = loaded();
    StateSize::of(&model, KvConfig::f32()).bytes(400, 64, 0) * 6 / 5
}

fn long_prompt(i: usize) -> String {
    let words = ["alpha", "brown", "cedar", "delta", "ember", "fjord"];
    (0..120)
        .map(|k| words[(k * 7 + i) % words.len()])
        .collect::<Vec<_>>()
        .join(" ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_budget_is_a_clear_400_and_a_load_stays_within_the_budget() {
    let budget = budget();
    let s = start(Opts {
        parallel: 4,
        mem_budget: Some(budget),
        ..Opts::default()
    })
    .await;
    let chat = "/v1/chat/completions";
    // 4096 positions do not fit even with a q8_0 KV.
    let (st, r) = s
        .post(
            chat,
            &json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4000}),
        )
        .await;
    assert_error(st, &r, 400, Some("max_tokens"));
    assert_eq!(r["error"]["code"], "memory_budget_exceeded", "{r}");
    let msg = r["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("memory budget") && msg.contains("MiB"),
        "{msg}"
    );

    // Six long prompts at once: they wait, some run with a quantized KV,
    // all are answered, and the states never hold more than the budget.
    let tasks: Vec<_> = (0..6)
        .map(|i| {
            let body = json!({"messages": [{"role": "user", "content": long_prompt(i)}],
                              "max_tokens": 8, "ignore_eos": true, "temperature": 0});
            let (client, url) = (s.client.clone(), s.url(chat));
            tokio::spawn(async move {
                let r = client.post(url).json(&body).send().await.unwrap();
                let st = r.status().as_u16();
                (st, r.json::<serde_json::Value>().await.unwrap())
            })
        })
        .collect();
    for t in tasks {
        let (st, r) = t.await.unwrap();
        assert_eq!(st, 200, "{r}");
        assert_eq!(r["usage"]["completion_tokens"], 8, "{r}");
        assert!(r["usage"]["prompt_tokens"].as_u64().unwrap() > 200, "{r}");
    }
    assert_eq!(s.metric("rill_memory_budget_bytes").await, budget as f64);
    let peak = s.metric("rill_memory_held_peak_bytes").await;
    assert!(
        peak > 0.0 && peak <= budget as f64,
        "peak {peak} over {budget}"
    );
    let waited = s.metric("rill_memory_waits_total").await
        + s.metric("rill_memory_quantized_kv_total").await;
    assert!(waited >= 1.0, "six long prompts pressed the budget");
    let usage = s
        .metric("vllm:kv_cache_usage_perc{model_name=\"fixture\"}")
        .await;
    assert!((0.0..=1.0).contains(&usage), "{usage}");
    // Sequence state only: at most what the budget has in use with the
    // prompt cache.
    assert!(usage <= s.metric("rill_memory_usage").await);
    s.stop().await;
}
