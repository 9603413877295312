//! Queue limits, clients that leave, and shutdown.

use crate::common::*;
use futures_util::StreamExt;
use serde_json::json;
use std::time::Duration;

/// A request that runs for a long time unless cancelled.
fn long_stream() -> serde_json::Value {
    json!({"prompt": "Tell me a very long story.", "max_tokens": 100000, "ignore_eos": true, "stream": true})
}

/// Open a streaming request and read its first event.
async fn open_stream(s: &TestServer) -> reqwest::Response {
    let mut r = s.open("/v1/completions", &long_stream()).await;
    let first = tokio::time::timeout(Duration::from_secs(30), r.chunk())
        .await
        .expect("first chunk in time")
        .unwrap();
    assert!(first.is_some());
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_full_is_429_and_disconnects_free_slots() {
    let s = start(Opts {
        parallel: 1,
        queue: 1,
        ctx: 1 << 16,
        ..Opts::default()
    })
    .await;
    // One running, one waiting: the next is refused with Retry-After.
    let a = open_stream(&s).await;
    s.wait_metric("rill_requests_running", 1.0).await;
    let b = s.open("/v1/completions", &long_stream()).await;
    let r = s
        .client
        .post(s.url("/v1/chat/completions"))
        .json(&json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "1");
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["error"]["type"], "rate_limit_error");

    // Both clients leave: the running sequence and the waiting one go.
    drop(a);
    drop(b);
    s.wait_metric("rill_requests_running", 0.0).await;
    s.wait_metric("rill_queue_depth", 0.0).await;
    s.wait_metric("rill_http_streams_open", 0.0).await;
    assert!(s.metric("rill_requests_cancelled_total").await >= 1.0);

    // The slot is free again.
    let (st, r) = s
        .post(
            "/v1/completions",
            &json!({"prompt": "x", "max_tokens": 3, "ignore_eos": true}),
        )
        .await;
    assert_eq!(st, 200, "{r}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_stream_disconnect_mid_stream() {
    let s = start(Opts {
        parallel: 2,
        ctx: 1 << 16,
        ..Opts::default()
    })
    .await;
    let mut r = s
        .client
        .post(s.url("/v1/chat/completions"))
        .json(&json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 100000, "ignore_eos": true, "stream": true}))
        .send()
        .await
        .unwrap();
    let mut n = 0;
    while n < 5 {
        if r.chunk().await.unwrap().is_some() {
            n += 1;
        }
    }
    s.wait_metric("rill_requests_running", 1.0).await;
    drop(r);
    s.wait_metric("rill_requests_running", 0.0).await;
    assert!(s.metric("rill_http_streams_disconnected_total").await >= 1.0);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_finishes_streams_in_flight() {
    let mut s = start(Opts::default()).await;
    let r = s
        .open(
            "/v1/completions",
            &json!({"prompt": "abc", "max_tokens": 300, "ignore_eos": true, "stream": true}),
        )
        .await;
    let mut body = r.bytes_stream();
    let first = body.next().await.unwrap().unwrap();
    s.begin_stop();
    // The stream runs to its end.
    let mut text = String::from_utf8_lossy(&first).into_owned();
    while let Some(b) = body.next().await {
        text.push_str(&String::from_utf8_lossy(&b.unwrap()));
    }
    let ch = chunks(&sse_data(&text));
    assert_eq!(ch.last().unwrap()["choices"][0]["finish_reason"], "length");
    let state = s.state.clone();
    let base = s.base.clone();
    s.join().await;
    // The engine is stopped and the port closed.
    assert_eq!(
        state
            .engine
            .metrics()
            .requests_running
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    assert!(state
        .engine
        .submit(rill_engine::Request {
            max_tokens: 1,
            ..rill_engine::Request::new(vec![1], Default::default())
        })
        .is_err());
    assert!(reqwest::Client::new()
        .get(format!("{base}/health"))
        .send()
        .await
        .is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_streaming_client_that_leaves_cancels_too() {
    let s = start(Opts {
        ctx: 1 << 16,
        ..Opts::default()
    })
    .await;
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let r = impatient
        .post(s.url("/v1/completions"))
        .json(&json!({"prompt": "x", "max_tokens": 100000, "ignore_eos": true}))
        .send()
        .await;
    assert!(r.is_err(), "the request should still be running");
    s.wait_metric("rill_requests_running", 0.0).await;
    assert!(s.metric("rill_requests_cancelled_total").await >= 1.0);
    s.stop().await;
}
