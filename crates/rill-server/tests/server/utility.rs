//! `/tokenize`, `/detokenize`, `/apply-template`, `/props`, `/slots`, vLLM's
//! `/v1/chat/completions/render` and `/v1/completions/render`, and
//! `max_model_len` in `/v1/models`.

use crate::common::*;
use serde_json::{json, Value};

async fn get(s: &TestServer, path: &str) -> (u16, Value) {
    json_reply(s.client.get(s.url(path)).send().await.unwrap()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokenize_and_detokenize_round_trip() {
    let s = start(Opts::default()).await;
    let text = "Hello, river! <|im_start|>héllo";
    let (st, v) = s.post("/tokenize", &json!({"content": text})).await;
    assert_eq!(st, 200, "{v}");
    let ids: Vec<u32> = serde_json::from_value(v["tokens"].clone()).unwrap();
    assert_eq!(v["count"], ids.len());
    assert_eq!(v["max_model_len"], 4096);
    assert_eq!(ids, s.state.tok.encode(text, true));
    let im_start = s.state.tok.token_to_id("<|im_start|>").unwrap();
    assert!(ids.contains(&im_start), "special text parsed by default");
    // parse_special off: the marker is plain text.
    let (_, v2) = s
        .post(
            "/tokenize",
            &json!({"content": text, "parse_special": false}),
        )
        .await;
    let plain: Vec<u32> = serde_json::from_value(v2["tokens"].clone()).unwrap();
    assert!(!plain.contains(&im_start));
    // vLLM's name for the text.
    let (_, v3) = s.post("/tokenize", &json!({"prompt": text})).await;
    assert_eq!(v3["tokens"], v["tokens"]);
    // Pieces.
    let (_, p) = s
        .post(
            "/tokenize",
            &json!({"content": "ab é", "with_pieces": true}),
        )
        .await;
    let pieces = p["tokens"].as_array().unwrap();
    assert!(!pieces.is_empty());
    let mut joined = Vec::new();
    for t in pieces {
        assert!(t["id"].is_u64(), "{t}");
        match &t["piece"] {
            Value::String(s) => joined.extend_from_slice(s.as_bytes()),
            Value::Array(b) => joined.extend(b.iter().map(|x| x.as_u64().unwrap() as u8)),
            other => panic!("piece {other}"),
        }
    }
    assert_eq!(String::from_utf8(joined).unwrap(), "ab é");
    // And back.
    let (st, d) = s.post("/detokenize", &json!({"tokens": ids})).await;
    assert_eq!(st, 200, "{d}");
    assert_eq!(d["content"], text);
    assert_eq!(d["prompt"], text);
    // A chat, rendered as the chat endpoint would.
    let chat = json!({"messages": [{"role": "user", "content": "hi"}], "enable_thinking": false});
    let (st, c) = s.post("/tokenize", &chat).await;
    assert_eq!(st, 200, "{c}");
    let (_, t) = s.post("/apply-template", &chat).await;
    let want = s.state.encode_prompt(t["prompt"].as_str().unwrap());
    assert_eq!(c["tokens"], json!(want));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn utility_errors_are_json_4xx() {
    let s = start(Opts::default()).await;
    let vocab = s.state.tok.vocab_size();
    for (path, body, param) in [
        ("/tokenize", json!({}), Some("content")),
        ("/tokenize", json!({"content": 5}), Some("content")),
        (
            "/detokenize",
            json!({"tokens": [1, vocab]}),
            Some("tokens[1]"),
        ),
        ("/detokenize", json!({"tokens": [-1]}), Some("tokens[0]")),
        ("/detokenize", json!({"tokens": "12"}), Some("tokens")),
        ("/detokenize", json!({}), None),
        ("/apply-template", json!({"messages": []}), Some("messages")),
        (
            "/apply-template",
            json!({"messages": [{"role": "wizard", "content": "x"}]}),
            Some("messages[0].role"),
        ),
    ] {
        let (st, v) = s.post(path, &body).await;
        assert_error(st, &v, 400, param);
    }
    let (st, v) = s.post_raw("/tokenize", "{not json").await;
    assert_error(st, &v, 400, None);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_template_renders_like_chat() {
    let s = start(Opts::default()).await;
    let (st, v) = s
        .post(
            "/apply-template",
            &json!({"messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "What is rill?"}
            ]}),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    let p = v["prompt"].as_str().unwrap();
    assert!(p.contains("<|im_start|>system\nBe brief.<|im_end|>"), "{p}");
    assert!(
        p.ends_with("<|im_start|>assistant\n<think>\n"),
        "thinking on by default: {p:?}"
    );
    let (_, v) = s
        .post(
            "/apply-template",
            &json!({"messages": [{"role": "user", "content": "x"}],
                    "chat_template_kwargs": {"enable_thinking": false}}),
        )
        .await;
    assert!(
        v["prompt"].as_str().unwrap().ends_with("</think>\n\n"),
        "{v}"
    );
    // Thinking sent back under either name reaches the template.
    for key in ["reasoning", "reasoning_content"] {
        let mut a = json!({"role": "assistant", "content": "It is a river."});
        a[key] = json!("rill_earlier_thought");
        let (_, v) = s
            .post(
                "/apply-template",
                &json!({"messages": [{"role": "user", "content": "x"}, a]}),
            )
            .await;
        assert!(
            v["prompt"]
                .as_str()
                .unwrap()
                .contains("rill_earlier_thought"),
            "{key}: {v}"
        );
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn props_slots_and_models() {
    let s = start(Opts::keyed("sk-u")).await;
    // Behind the key like /v1.
    for path in ["/props", "/slots"] {
        let (st, v) = get(&s, path).await;
        assert_error(st, &v, 401, None);
    }
    let auth = |path: &str| {
        s.client
            .get(s.url(path))
            .header("authorization", "Bearer sk-u")
    };
    let p: Value = auth("/props").send().await.unwrap().json().await.unwrap();
    assert_eq!(p["total_slots"], 2);
    assert_eq!(p["default_generation_settings"]["n_ctx"], 4096);
    assert_eq!(
        p["default_generation_settings"]["params"]["temperature"],
        1.0
    );
    assert!(p["chat_template"]
        .as_str()
        .unwrap()
        .contains("<|im_start|>"));
    let caps = &p["chat_template_caps"];
    assert_eq!(caps["supports_system_role"], true, "{caps}");
    assert_eq!(caps["supports_tools"], true, "{caps}");
    assert_eq!(caps["supports_tool_calls"], true, "{caps}");
    assert_eq!(caps["supports_parallel_tool_calls"], true, "{caps}");
    assert_eq!(p["modalities"]["vision"], false);
    assert_eq!(p["is_sleeping"], false);
    assert!(p["build_info"].as_str().unwrap().starts_with("rill "));
    assert_eq!(p["eos_token"], "<|im_end|>", "{p}");

    let sl: Value = auth("/slots").send().await.unwrap().json().await.unwrap();
    let sl = sl.as_array().unwrap();
    assert_eq!(sl.len(), 2);
    assert_eq!(sl[1]["id"], 1);
    assert_eq!(sl[0]["n_ctx"], 4096);
    assert_eq!(sl[0]["is_processing"], false);
    let r = auth("/slots?fail_on_no_slot=1").send().await.unwrap();
    assert_eq!(r.status(), 200);

    let m: Value = auth("/v1/models")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(m["data"][0]["max_model_len"], 4096);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_fail_when_all_are_busy() {
    let s = start(Opts::one_slot()).await;
    // One long stream holds the only slot.
    let r = s
        .open(
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": "go"}],
                      "max_tokens": 3000, "ignore_eos": true, "stream": true}),
        )
        .await;
    s.wait_metric("rill_requests_running", 1.0).await;
    let (st, v) = get(&s, "/slots?fail_on_no_slot=1").await;
    assert_error(st, &v, 503, None);
    assert_eq!(v["error"]["code"], "no_slot_available");
    let (_, v) = get(&s, "/slots").await;
    assert_eq!(v[0]["is_processing"], true);
    drop(r);
    s.wait_metric("rill_requests_running", 0.0).await;
    s.stop().await;
}

/// vLLM's renderer endpoints give the tokens the model would be given: the
/// chat's as the chat endpoint counts them, a completion prompt's as
/// `/v1/completions` reads it (text or token ids, one or a batch).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn render_endpoints_give_the_prompt_tokens() {
    let s = start(Opts::default()).await;
    let chat = json!({
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi there"}],
        "enable_thinking": false,
        "max_tokens": 1,
    });
    let (st, r) = s.post("/v1/chat/completions/render", &chat).await;
    assert_eq!(st, 200, "{r}");
    let (_, t) = s.post("/apply-template", &chat).await;
    assert_eq!(r["prompt"], t["prompt"]);
    let ids: Vec<u32> = serde_json::from_value(r["token_ids"].clone()).unwrap();
    assert_eq!(ids, s.state.encode_prompt(t["prompt"].as_str().unwrap()));
    let (st, c) = s.post("/v1/chat/completions", &chat).await;
    assert_eq!(st, 200, "{c}");
    assert_eq!(
        c["usage"]["prompt_tokens"],
        ids.len(),
        "the chat endpoint's count"
    );

    let text = "Once upon a time";
    let (st, one) = s
        .post("/v1/completions/render", &json!({"prompt": text}))
        .await;
    assert_eq!(st, 200, "{one}");
    let want = s.state.encode_prompt(text);
    assert_eq!(one["token_ids"], json!(want));
    let (st, many) = s
        .post(
            "/v1/completions/render",
            &json!({"prompt": [text, "the end"]}),
        )
        .await;
    assert_eq!(st, 200, "{many}");
    assert_eq!(many[0]["token_ids"], json!(want));
    assert_eq!(
        many[1]["token_ids"],
        json!(s.state.encode_prompt("the end"))
    );
    let (_, ids) = s
        .post("/v1/completions/render", &json!({"prompt": [5, 6, 7]}))
        .await;
    assert_eq!(ids["token_ids"], json!([5, 6, 7]));

    let vocab = s.state.tok.vocab_size();
    for (path, body) in [
        ("/v1/chat/completions/render", json!({"messages": []})),
        ("/v1/completions/render", json!({"prompt": ""})),
        ("/v1/completions/render", json!({"prompt": [1, vocab]})),
        ("/v1/completions/render", json!({"prompt": []})),
    ] {
        let (st, v) = s.post(path, &body).await;
        assert_eq!(st, 400, "{path} {body}: {v}");
        assert!(v["error"]["message"].is_string(), "{v}");
    }
    s.stop().await;
}

/// `--n-predict`: requests that name no `max_tokens` generate that many
/// tokens at most (chat and completions); a request's own wins; `/props`
/// reports it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n_predict_is_the_default_max_tokens() {
    let s = start(Opts {
        n_predict: Some(5),
        ..Opts::default()
    })
    .await;
    let (_, c) = s
        .post(
            "/v1/completions",
            &json!({"prompt": "Once upon", "ignore_eos": true}),
        )
        .await;
    assert_eq!(c["usage"]["completion_tokens"], 5, "{c}");
    assert_eq!(c["choices"][0]["finish_reason"], "length");
    let chat = json!({"messages": [{"role": "user", "content": "hi"}], "ignore_eos": true});
    let (_, c) = s.post("/v1/chat/completions", &chat).await;
    assert_eq!(c["usage"]["completion_tokens"], 5, "{c}");
    let mut own = chat.clone();
    own["max_completion_tokens"] = json!(9);
    let (_, c) = s.post("/v1/chat/completions", &own).await;
    assert_eq!(c["usage"]["completion_tokens"], 9, "{c}");
    let (_, p) = get(&s, "/props").await;
    assert_eq!(
        p["default_generation_settings"]["params"]["n_predict"], 5,
        "{p}"
    );
    s.stop().await;
}
