//! The vLLM-named series on `/metrics`.

use crate::common::*;
use serde_json::json;

const L: &str = "{model_name=\"fixture\"}";

fn series(name: &str) -> String {
    format!("{name}{L}")
}

async fn open_stream(s: &TestServer) -> reqwest::Response {
    s.open(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "go on"}],
                      "max_tokens": 3000, "ignore_eos": true, "stream": true}),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vllm_series_follow_the_engine() {
    let s = start(Opts::one_slot()).await;
    assert_eq!(s.metric(&series("vllm:num_requests_running")).await, 0.0);
    assert_eq!(s.metric(&series("vllm:kv_cache_usage_perc")).await, 0.0);
    let body = json!({"messages": [{"role": "user", "content": "count"}],
                      "max_tokens": 5, "ignore_eos": true, "temperature": 0});
    for stream in [false, true] {
        let mut b = body.clone();
        b["stream"] = json!(stream);
        if stream {
            let c = chunks(&s.stream("/v1/chat/completions", &b).await);
            assert!(!c.is_empty());
        } else {
            let (st, v) = s.post("/v1/chat/completions", &b).await;
            assert_eq!(st, 200, "{v}");
        }
    }
    // A completion too (it has its own path to Done).
    let (st, _) = s
        .post(
            "/v1/completions",
            &json!({"prompt": "a b c", "max_tokens": 3, "ignore_eos": true}),
        )
        .await;
    assert_eq!(st, 200);
    let text = s.get_text("/metrics").await;
    let m =
        |name: &str| metric_value(&text, name).unwrap_or_else(|| panic!("no {name} in\n{text}"));
    assert_eq!(m(&series("vllm:generation_tokens_total")), 13.0);
    assert_eq!(
        m(&series("vllm:prompt_tokens_total")),
        m("rill_prompt_tokens_total")
    );
    assert_eq!(
        m(&series("vllm:prefix_cache_queries_total")),
        m("rill_prompt_tokens_total")
    );
    // The second chat request found the first one's prompt in the cache.
    let hits = m(&series("vllm:prefix_cache_hits_total"));
    assert_eq!(hits, m("rill_prompt_tokens_cached_total"));
    assert!(hits > 0.0, "{text}");
    // Every prompt token not taken from the cache ran through the model once.
    assert_eq!(
        m("rill_prompt_tokens_computed_total"),
        m("rill_prompt_tokens_total") - hits
    );
    assert_eq!(
        m("vllm:request_success_total{model_name=\"fixture\",finished_reason=\"length\"}"),
        3.0
    );
    for h in [
        "vllm:time_to_first_token_seconds",
        "vllm:e2e_request_latency_seconds",
        "vllm:request_queue_time_seconds",
        "vllm:request_prompt_tokens",
        "vllm:request_generation_tokens",
    ] {
        assert_eq!(m(&format!("{h}_count{L}")), 3.0, "{h}");
        assert_eq!(
            m(&format!("{h}_bucket{{model_name=\"fixture\",le=\"+Inf\"}}")),
            3.0,
            "{h}"
        );
        assert!(text.contains(&format!("# TYPE {h} histogram")), "{h}");
    }
    assert_eq!(
        m("vllm:request_generation_tokens_bucket{model_name=\"fixture\",le=\"5.0\"}"),
        3.0
    );
    assert_eq!(
        m("vllm:request_generation_tokens_bucket{model_name=\"fixture\",le=\"2.0\"}"),
        0.0
    );
    assert_eq!(m(&format!("vllm:request_generation_tokens_sum{L}")), 13.0);
    // One interval per token after a request's first: 4 + 4 + 2.
    for h in [
        "vllm:inter_token_latency_seconds",
        "vllm:time_per_output_token_seconds",
    ] {
        assert_eq!(m(&format!("{h}_count{L}")), 10.0, "{h}");
        assert_eq!(
            m(&format!("{h}_bucket{{model_name=\"fixture\",le=\"+Inf\"}}")),
            10.0,
            "{h}"
        );
        let sum = m(&format!("{h}_sum{L}"));
        assert!(
            sum > 0.0 && sum <= m(&format!("vllm:request_decode_time_seconds_sum{L}")) + 1e-3,
            "{h}: {sum}"
        );
    }
    // Queue time is part of the time to first token.
    assert!(
        m(&format!("vllm:request_queue_time_seconds_sum{L}"))
            <= m(&format!("vllm:time_to_first_token_seconds_sum{L}"))
    );
    assert!(text.contains("vllm:cache_config_info{model_name=\"fixture\",block_size=\"4096\",num_gpu_blocks=\"1\",enable_prefix_caching=\"True\""), "{text}");

    // One stream holds the only slot, a second waits.
    let a = open_stream(&s).await;
    s.wait_metric(&series("vllm:num_requests_running"), 1.0)
        .await;
    assert_eq!(s.metric(&series("vllm:kv_cache_usage_perc")).await, 1.0);
    let b = open_stream(&s).await;
    s.wait_metric(&series("vllm:num_requests_waiting"), 1.0)
        .await;
    // The load a router polls says the same.
    let load: serde_json::Value = serde_json::from_str(&s.get_text("/get_load").await).unwrap();
    assert_eq!(
        load,
        json!({"load": 2, "num_reqs": 1, "num_waiting_reqs": 1, "kv_cache_usage_perc": 1.0})
    );
    let load: serde_json::Value = serde_json::from_str(&s.get_text("/load").await).unwrap();
    assert_eq!(load, json!({"server_load": 2}));
    drop(a);
    drop(b);
    s.wait_metric(&series("vllm:num_requests_running"), 0.0)
        .await;
    s.wait_metric(&series("vllm:num_requests_waiting"), 0.0)
        .await;
    let load: serde_json::Value = serde_json::from_str(&s.get_text("/get_load").await).unwrap();
    assert_eq!(load["load"], 0);
    // Cancelled requests are not successes.
    assert_eq!(
        s.metric("vllm:request_success_total{model_name=\"fixture\",finished_reason=\"length\"}")
            .await,
        3.0
    );
    s.stop().await;
}
