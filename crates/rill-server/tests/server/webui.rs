//! The chat page at `/`, and the figures it reads from a stream's last chunk.

use crate::common::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_is_served_outside_the_api_key() {
    let s = start(Opts::keyed("sk-page")).await;
    for path in ["/", "/index.html"] {
        let r = s.client.get(s.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        assert_eq!(r.headers()["content-type"], "text/html; charset=utf-8");
        let csp = r.headers()["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("connect-src 'self'"), "{csp}");
        let body = r.text().await.unwrap();
        assert!(body.contains("/v1/chat/completions"));
        assert_eq!(body, rill_server::webui::INDEX_HTML);
    }
    // The API behind it still wants the key.
    let r = s.client.get(s.url("/v1/models")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    // POST / is not a page.
    let r = s.client.post(s.url("/")).send().await.unwrap();
    assert_eq!(r.status(), 405);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_page_slash_is_a_json_404() {
    let s = start(Opts {
        webui: false,
        ..Opts::default()
    })
    .await;
    for path in ["/", "/index.html"] {
        let r = s.client.get(s.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 404, "{path}");
        assert_error_code(r, 404, "not_found").await;
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_chunk_carries_timings() {
    let s = start(Opts::default()).await;
    let body = |usage: bool| {
        json!({
            "messages": [{"role": "user", "content": "Timings, please."}],
            "max_tokens": 5, "ignore_eos": true, "temperature": 0, "stream": true,
            "enable_thinking": false,
            "stream_options": {"include_usage": usage},
        })
    };
    // With usage: the usage chunk (no choices) is last and has the timings.
    let c = chunks(&s.stream("/v1/chat/completions", &body(true)).await);
    let last = c.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    let t = &last["timings"];
    assert_eq!(t["predicted_n"], 5);
    let prompt = last["usage"]["prompt_tokens"].as_u64().unwrap();
    let cached = last["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    assert_eq!(t["cache_n"].as_u64().unwrap(), cached);
    assert_eq!(t["prompt_n"].as_u64().unwrap() + cached, prompt);
    assert!(t["prompt_ms"].as_f64().unwrap() > 0.0);
    assert!(t["predicted_ms"].as_f64().unwrap() > 0.0);
    assert!(t["predicted_per_second"].as_f64().unwrap() > 0.0);
    assert!(c[..c.len() - 1].iter().all(|x| x.get("timings").is_none()));
    // The same conversation again: its prompt comes from the cache.
    let c = chunks(&s.stream("/v1/chat/completions", &body(false)).await);
    let last = c.last().unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "length");
    assert!(last.get("usage").is_none());
    assert!(
        last["timings"]["cache_n"].as_u64().unwrap() > 0,
        "{}",
        last["timings"]
    );
    // The whole reply has them too.
    let mut b = body(false);
    b["stream"] = json!(false);
    let (status, v) = s.post("/v1/chat/completions", &b).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["timings"]["predicted_n"], 5);
    assert!(v["timings"]["ttft_ms"].as_f64().is_some());
    s.stop().await;
}
