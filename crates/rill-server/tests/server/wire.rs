//! Wire details: `X-Request-Id`, CORS, and the thinking under both names.

use crate::common::*;
use rill_server::wire::CorsOrigins;
use serde_json::json;

/// The `Access-Control-Allow-Origin` a reply carries.
fn allowed_origin(r: &reqwest::Response) -> Option<&str> {
    let h = r.headers().get("access-control-allow-origin")?;
    h.to_str().ok()
}

fn rid(r: &reqwest::Response) -> String {
    r.headers()["x-request-id"].to_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_response_has_a_request_id() {
    let s = start(Opts::keyed("sk-1")).await;
    let mut seen = Vec::new();
    // Answered, refused, unknown: all carry an id, each a new one.
    for path in ["/health", "/v1/models", "/nope", "/metrics"] {
        let r = s.client.get(s.url(path)).send().await.unwrap();
        let id = rid(&r);
        assert!(id.starts_with("req-") && id.len() == 28, "{path}: {id}");
        seen.push(id);
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 4);
    // A client's own id comes back.
    let r = s
        .client
        .get(s.url("/v1/models"))
        .header("x-request-id", "trace-abc.123")
        .header("authorization", "Bearer sk-1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(rid(&r), "trace-abc.123");
    // An unusable one is replaced.
    let r = s
        .client
        .get(s.url("/health"))
        .header("x-request-id", "x".repeat(200))
        .send()
        .await
        .unwrap();
    assert!(rid(&r).starts_with("req-"));
    // A stream, and a malformed body.
    let r = s
        .client
        .post(s.url("/v1/chat/completions"))
        .header("authorization", "Bearer sk-1")
        .header("x-request-id", "stream-1")
        .json(&json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(rid(&r), "stream-1");
    let _ = r.text().await.unwrap();
    let r = s
        .client
        .post(s.url("/v1/chat/completions"))
        .header("authorization", "Bearer sk-1")
        .header("content-type", "application/json")
        .body("{bad")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert!(rid(&r).starts_with("req-"));
    s.stop().await;
}

async fn preflight(s: &TestServer, origin: &str) -> reqwest::Response {
    s.client
        .request(reqwest::Method::OPTIONS, s.url("/v1/chat/completions"))
        .header("origin", origin)
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "authorization, content-type",
        )
        .send()
        .await
        .unwrap()
}

async fn get_from(s: &TestServer, origin: &str) -> reqwest::Response {
    s.client
        .get(s.url("/health"))
        .header("origin", origin)
        .send()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_cors_by_default() {
    let s = start(Opts::default()).await;
    let r = get_from(&s, "http://a.example").await;
    assert_eq!(r.status(), 200);
    assert_eq!(allowed_origin(&r), None);
    let r = preflight(&s, "http://a.example").await;
    assert_eq!(r.status(), 405);
    assert_eq!(allowed_origin(&r), None);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_for_listed_origins() {
    let s = start(Opts {
        api_key: Some("sk-1".into()),
        cors: CorsOrigins::parse("http://ok.example, http://localhost:3000").unwrap(),
        ..Opts::default()
    })
    .await;
    // A preflight needs no key and names what may follow.
    let r = preflight(&s, "http://ok.example").await;
    assert_eq!(r.status(), 204);
    let h = r.headers();
    assert_eq!(h["access-control-allow-origin"], "http://ok.example");
    assert_eq!(h["access-control-allow-methods"], "GET, POST, OPTIONS");
    assert_eq!(
        h["access-control-allow-headers"],
        "authorization, content-type"
    );
    assert!(h.get("access-control-max-age").is_some());
    assert!(h.get("x-request-id").is_some());
    // The real request.
    let r = s
        .client
        .post(s.url("/v1/chat/completions"))
        .header("origin", "http://localhost:3000")
        .header("authorization", "Bearer sk-1")
        .json(&json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(allowed_origin(&r), Some("http://localhost:3000"));
    let expose = r.headers()["access-control-expose-headers"]
        .to_str()
        .unwrap();
    assert!(expose.contains("x-request-id"), "{expose}");
    assert!(r
        .headers()
        .get_all("vary")
        .iter()
        .any(|v| v.to_str().unwrap().contains("Origin")));
    // Errors get the header too, so the page can read them.
    let r = s
        .client
        .get(s.url("/v1/models"))
        .header("origin", "http://ok.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(allowed_origin(&r), Some("http://ok.example"));
    // Other origins: nothing, and a JSON 403 on preflight.
    let r = get_from(&s, "http://evil.example").await;
    assert_eq!(allowed_origin(&r), None);
    let r = preflight(&s, "http://evil.example").await;
    assert_eq!(r.status(), 403);
    assert_error_code(r, 403, "origin_not_allowed").await;
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_for_any_origin() {
    let s = start(Opts {
        cors: CorsOrigins::Any,
        ..Opts::default()
    })
    .await;
    let r = get_from(&s, "http://anything.example").await;
    assert_eq!(allowed_origin(&r), Some("*"));
    let r = preflight(&s, "http://anything.example").await;
    assert_eq!(r.status(), 204);
    assert_eq!(allowed_origin(&r), Some("*"));
    // Without an Origin (not a browser): no CORS headers.
    let r = s.client.get(s.url("/health")).send().await.unwrap();
    assert_eq!(allowed_origin(&r), None);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thinking_goes_out_under_both_names() {
    let s = start(Opts::default()).await;
    let body = json!({
        "messages": [{"role": "user", "content": "Think."}],
        "max_tokens": 6, "ignore_eos": true, "temperature": 0,
    });
    let (status, v) = s.post("/v1/chat/completions", &body).await;
    assert_eq!(status, 200, "{v}");
    let m = &v["choices"][0]["message"];
    assert!(
        m["reasoning_content"]
            .as_str()
            .is_some_and(|r| !r.is_empty()),
        "{m}"
    );
    assert_eq!(m["reasoning"], m["reasoning_content"]);
    let mut sb = body.clone();
    sb["stream"] = json!(true);
    let c = chunks(&s.stream("/v1/chat/completions", &sb).await);
    let mut a = String::new();
    let mut b = String::new();
    for ch in &c {
        let d = &ch["choices"][0]["delta"];
        assert_eq!(d["reasoning"], d["reasoning_content"], "{d}");
        a.push_str(d["reasoning_content"].as_str().unwrap_or(""));
        b.push_str(d["reasoning"].as_str().unwrap_or(""));
    }
    assert_eq!(a, m["reasoning_content"].as_str().unwrap());
    assert_eq!(a, b);
    // Either name is accepted on a message sent back.
    for key in ["reasoning", "reasoning_content"] {
        let mut msg = json!({"role": "assistant", "content": "ok"});
        msg[key] = json!("earlier thoughts");
        let (status, v) = s
            .post(
                "/v1/chat/completions",
                &json!({"messages": [{"role": "user", "content": "a"}, msg, {"role": "user", "content": "b"}],
                        "max_tokens": 1}),
            )
            .await;
        assert_eq!(status, 200, "{key}: {v}");
    }
    s.stop().await;
}
