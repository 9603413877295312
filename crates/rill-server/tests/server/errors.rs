//! Bad requests get the right status and an OpenAI-style JSON error.

use crate::common::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_bodies_and_parameters() {
    let s = start(Opts::default()).await;
    let chat = "/v1/chat/completions";
    for raw in ["{", "not json", "", "[1, 2]", "{\"messages\": []} trailing"] {
        let (st, r) = s.post_raw(chat, raw.to_string()).await;
        assert_error(st, &r, 400, None);
    }
    let msgs = json!([{"role": "user", "content": "hi"}]);
    let cases = [
        (json!({"messages": "hello"}), "messages"),
        (
            json!({"messages": msgs, "temperature": "hot"}),
            "temperature",
        ),
        (json!({"messages": msgs, "temperature": -1}), "temperature"),
        (json!({"messages": msgs, "top_p": 1.5}), "top_p"),
        (json!({"messages": msgs, "top_p": 0}), "top_p"),
        (json!({"messages": msgs, "min_p": -0.1}), "min_p"),
        (json!({"messages": msgs, "top_k": -2}), "top_k"),
        (json!({"messages": msgs, "max_tokens": -5}), "max_tokens"),
        (json!({"messages": msgs, "max_tokens": 0}), "max_tokens"),
        (json!({"messages": msgs, "max_tokens": 1.5}), "max_tokens"),
        (
            json!({"messages": msgs, "presence_penalty": 5}),
            "presence_penalty",
        ),
        (
            json!({"messages": msgs, "repetition_penalty": 0}),
            "repetition_penalty",
        ),
        (json!({"messages": msgs, "n": 0}), "n"),
        (json!({"messages": msgs, "n": 2.5}), "n"),
        (json!({"messages": msgs, "typical_p": 0}), "typical_p"),
        (
            json!({"messages": msgs, "xtc_probability": 1.5}),
            "xtc_probability",
        ),
        (
            json!({"messages": msgs, "xtc_threshold": -0.1}),
            "xtc_threshold",
        ),
        (json!({"messages": msgs, "mirostat": 3}), "mirostat"),
        (
            json!({"messages": msgs, "dynatemp_range": -1}),
            "dynatemp_range",
        ),
        (
            json!({"messages": msgs, "repeat_last_n": -2}),
            "repeat_last_n",
        ),
        (
            json!({"messages": msgs, "dry_allowed_length": -1}),
            "dry_allowed_length",
        ),
        (
            json!({"messages": msgs, "dry_multiplier": -1}),
            "dry_multiplier",
        ),
        (
            json!({"messages": msgs, "dry_sequence_breakers": []}),
            "dry_sequence_breakers",
        ),
        (json!({"messages": msgs, "stop": ""}), "stop"),
        (json!({"messages": msgs, "stop": 5}), "stop"),
        (json!({"messages": msgs, "top_logprobs": 3}), "top_logprobs"),
        (
            json!({"messages": msgs, "logprobs": true, "top_logprobs": 50}),
            "top_logprobs",
        ),
        (
            json!({"messages": msgs, "response_format": {"type": "xml"}}),
            "response_format",
        ),
        (
            json!({"messages": [{"role": "wizard", "content": "hi"}]}),
            "messages[0].role",
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}),
            "messages[0].content[0]",
        ),
        (json!({"messages": []}), "messages"),
        (
            json!({"messages": msgs, "chat_template_kwargs": {"enable_thinking": "yes"}}),
            "chat_template_kwargs.enable_thinking",
        ),
    ];
    for (body, param) in cases {
        let (st, r) = s.post(chat, &body).await;
        assert_error(st, &r, 400, Some(param));
        assert_eq!(r["error"]["type"], "invalid_request_error");
    }
    // The template refuses a conversation without a user message.
    let (st, r) = s
        .post(
            chat,
            &json!({"messages": [{"role": "system", "content": "only me"}]}),
        )
        .await;
    assert_error_says(st, &r, 400, "No user query");

    let comp = "/v1/completions";
    let cases = [
        (json!({"prompt": 5}), "prompt"),
        (json!({"prompt": ""}), "prompt"),
        (json!({"prompt": [1, 999999]}), "prompt"),
        (json!({"prompt": [-1]}), "prompt"),
        (json!({"prompt": ["a", ""]}), "prompt"),
        (json!({"prompt": "x", "logprobs": 30}), "logprobs"),
        (
            json!({"prompt": "x", "echo": true, "logprobs": -1}),
            "logprobs",
        ),
        (json!({"prompt": "x", "best_of": 3}), "best_of"),
        (json!({"max_tokens": 3}), "prompt"),
    ];
    for (body, param) in cases {
        let (st, r) = s.post(comp, &body).await;
        if param == "prompt" && body.get("prompt").is_none() {
            // A missing field is named in the message.
            assert_error(st, &r, 400, None);
            assert!(r["error"]["message"].as_str().unwrap().contains("prompt"));
        } else {
            assert_error(st, &r, 400, Some(param));
        }
    }

    // Unknown model: 404 model_not_found; the alias is fine.
    for path in [chat, comp] {
        let body = json!({"model": "gpt-4o", "messages": msgs, "prompt": "x", "max_tokens": 1});
        let (st, r) = s.post(path, &body).await;
        assert_error(st, &r, 404, Some("model"));
        assert_eq!(r["error"]["code"], "model_not_found");
        let body = json!({"model": ALIAS, "messages": msgs, "prompt": "x", "max_tokens": 1});
        let (st, r) = s.post(path, &body).await;
        assert_eq!(st, 200, "{r}");
    }

    // Unknown routes and methods.
    let r = s.client.get(s.url("/v1/nothing")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert!(r.json::<serde_json::Value>().await.unwrap()["error"].is_object());
    let r = s.client.get(s.url(chat)).send().await.unwrap();
    assert_eq!(r.status(), 405);
    assert!(r.json::<serde_json::Value>().await.unwrap()["error"].is_object());
    // Nothing was left running.
    assert_eq!(s.metric("rill_requests_running").await, 0.0);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompt_too_long_and_body_too_large() {
    let s = start(Opts {
        ctx: 64,
        body_limit: 64 << 10,
        ..Opts::default()
    })
    .await;
    let long = "word ".repeat(200);
    let (st, r) = s
        .post(
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": long}]}),
        )
        .await;
    assert_error(st, &r, 400, Some("messages"));
    assert_eq!(r["error"]["code"], "context_length_exceeded");
    let (st, r) = s.post("/v1/completions", &json!({"prompt": long})).await;
    assert_error(st, &r, 400, Some("prompt"));
    assert_eq!(r["error"]["code"], "context_length_exceeded");

    let huge = format!("{{\"prompt\": \"{}\"}}", "x".repeat(100 << 10));
    let (st, r) = s.post_raw("/v1/completions", huge).await;
    assert_error(st, &r, 413, None);
    // Still serving.
    let (st, _) = s
        .post("/v1/completions", &json!({"prompt": "ok", "max_tokens": 2}))
        .await;
    assert_eq!(st, 200);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_key_guards_v1_only() {
    let s = start(Opts::keyed("sk-test-123")).await;
    let get = |auth: Option<&'static str>| {
        let mut r = s.client.get(s.url("/v1/models"));
        if let Some(a) = auth {
            r = r.header("authorization", a);
        }
        r.send()
    };
    for auth in [
        None,
        Some("Bearer wrong"),
        Some("Bearer sk-test-12"),
        Some("sk-test-123"),
    ] {
        let r = get(auth).await.unwrap();
        assert_eq!(r.status(), 401, "{auth:?}");
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body["error"]["code"], "invalid_api_key");
    }
    assert_eq!(get(Some("Bearer sk-test-123")).await.unwrap().status(), 200);
    let r = s
        .client
        .post(s.url("/v1/completions"))
        .json(&json!({"prompt": "x", "max_tokens": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = s
        .client
        .post(s.url("/v1/completions"))
        .bearer_auth("sk-test-123")
        .json(&json!({"prompt": "x", "max_tokens": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        s.client
            .get(s.url("/health"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    s.stop().await;
}
