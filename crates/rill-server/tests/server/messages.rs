//! Anthropic's `/v1/messages` and `/v1/messages/count_tokens`.

use crate::common::*;
use serde_json::{json, Value};

fn body(extra: Value) -> Value {
    merged(
        json!({
            "model": MODEL_ID,
            "max_tokens": 12,
            "system": "You are terse.",
            "messages": [{"role": "user", "content": "Say hello."}],
            "temperature": 0,
            "ignore_eos": true,
        }),
        extra,
    )
}

/// `(event, data)` pairs of an SSE body.
fn events(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .filter_map(|e| {
            let mut name = None;
            let mut data = String::new();
            for l in e.lines() {
                if let Some(n) = l.strip_prefix("event:") {
                    name = Some(n.trim().to_string());
                } else if let Some(d) = l.strip_prefix("data:") {
                    data.push_str(d.trim_start());
                }
            }
            let name = name?;
            Some((name, serde_json::from_str(&data).unwrap()))
        })
        .collect()
}

async fn stream(s: &TestServer, b: &Value) -> Vec<(String, Value)> {
    let r = s.open("/v1/messages", b).await;
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let text = r.text().await.unwrap();
    assert!(!text.contains("[DONE]"));
    events(&text)
}

fn block_text(blocks: &[Value], kind: &str, field: &str) -> String {
    blocks
        .iter()
        .filter(|b| b["type"] == kind)
        .map(|b| b[field].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_and_streamed_messages_agree() {
    let s = start(Opts::default()).await;
    for thinking in [None, Some("disabled")] {
        let extra = match thinking {
            None => json!({}),
            Some(t) => json!({"thinking": {"type": t}}),
        };
        let (st, v) = s.post("/v1/messages", &body(extra.clone())).await;
        assert_eq!(st, 200, "{v}");
        assert!(v["id"].as_str().unwrap().starts_with("msg_"));
        assert_eq!(v["type"], "message");
        assert_eq!(v["role"], "assistant");
        assert_eq!(v["model"], MODEL_ID);
        assert_eq!(v["stop_reason"], "max_tokens");
        assert_eq!(v["stop_sequence"], Value::Null);
        assert_eq!(v["usage"]["output_tokens"], 12);
        let blocks = v["content"].as_array().unwrap();
        let (kind, field) = if thinking.is_none() {
            ("thinking", "thinking")
        } else {
            ("text", "text")
        };
        // Thinking on (the template's default) opens <think>: all of it is thinking.
        assert_eq!(blocks.len(), 1, "{v}");
        assert_eq!(blocks[0]["type"], kind, "{v}");
        let whole = block_text(blocks, kind, field);
        assert!(!whole.is_empty());

        let mut sb = body(extra);
        sb["stream"] = json!(true);
        let ev = stream(&s, &sb).await;
        let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names[0], "message_start", "{names:?}");
        assert_eq!(names[1], "content_block_start", "{names:?}");
        assert_eq!(names[names.len() - 3], "content_block_stop");
        assert_eq!(names[names.len() - 2], "message_delta");
        assert_eq!(names[names.len() - 1], "message_stop");
        for (n, d) in &ev {
            assert_eq!(d["type"], n.as_str(), "the data's type names its event");
        }
        let start = &ev[0].1["message"];
        assert_eq!(start["role"], "assistant");
        assert_eq!(start["content"], json!([]));
        let input = start["usage"]["input_tokens"].as_u64().unwrap();
        assert_eq!(ev[1].1["index"], 0);
        assert_eq!(ev[1].1["content_block"]["type"], kind);
        let delta_kind = format!("{kind}_delta");
        let streamed: String = ev
            .iter()
            .filter(|(n, _)| n == "content_block_delta")
            .map(|(_, d)| {
                assert_eq!(d["delta"]["type"], delta_kind.as_str());
                d["delta"][field].as_str().unwrap().to_string()
            })
            .collect();
        assert_eq!(streamed, whole);
        let md = &ev[ev.len() - 2].1;
        assert_eq!(md["delta"]["stop_reason"], "max_tokens");
        assert_eq!(md["usage"]["output_tokens"], 12);
        let u = &md["usage"];
        assert_eq!(
            u["input_tokens"].as_u64().unwrap() + u["cache_read_input_tokens"].as_u64().unwrap(),
            input
        );
        // count_tokens counts the same prompt.
        let (st, c) = s.post("/v1/messages/count_tokens", &sb).await;
        assert_eq!(st, 200, "{c}");
        assert_eq!(c["input_tokens"].as_u64().unwrap(), input);
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_sequences_are_reported() {
    let s = start(Opts::default()).await;
    let off = json!({"thinking": {"type": "disabled"}, "max_tokens": 40});
    let (_, v) = s.post("/v1/messages", &body(off.clone())).await;
    let text = block_text(v["content"].as_array().unwrap(), "text", "text");
    // Three plain characters from the middle of the greedy reply.
    let chars: Vec<char> = text.chars().collect();
    let at = (2..chars.len().saturating_sub(3))
        .find(|&i| chars[i..i + 3].iter().all(|c| c.is_ascii_alphanumeric()))
        .expect("some plain text in the reply");
    let stop: String = chars[at..at + 3].iter().collect();
    let mut b = body(off);
    b["stop_sequences"] = json!(["NEVER-SEEN-0", stop]);
    let (st, v) = s.post("/v1/messages", &b).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["stop_reason"], "stop_sequence", "{v}");
    assert_eq!(v["stop_sequence"], stop.as_str());
    let cut = block_text(v["content"].as_array().unwrap(), "text", "text");
    assert!(
        text.starts_with(&cut) && !cut.contains(&stop),
        "{cut:?} {text:?}"
    );
    // Streamed, the same.
    b["stream"] = json!(true);
    let ev = stream(&s, &b).await;
    let md = &ev[ev.len() - 2].1;
    assert_eq!(md["delta"]["stop_reason"], "stop_sequence");
    assert_eq!(md["delta"]["stop_sequence"], stop.as_str());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_and_a_tool_round_trip() {
    let s = start(Opts::default()).await;
    let tools = json!([{"name": "get_weather", "description": "Current weather",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]);
    for choice in [
        json!({"type": "auto"}),
        json!({"type": "any"}),
        json!({"type": "tool", "name": "get_weather"}),
        json!({"type": "none"}),
    ] {
        let (st, v) = s
            .post(
                "/v1/messages",
                &body(json!({"tools": tools, "tool_choice": choice, "ignore_eos": false})),
            )
            .await;
        assert_eq!(st, 200, "{choice}: {v}");
        for b in v["content"].as_array().unwrap() {
            if b["type"] == "tool_use" {
                assert!(b["id"].as_str().unwrap().starts_with("toolu_"));
                assert!(b["input"].is_object());
                assert_eq!(v["stop_reason"], "tool_use");
            }
        }
    }
    // A conversation that used the tool: the template sees the call and the result.
    let history = json!([
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "I should call the tool.", "signature": ""},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "rill_sunny_result"}
        ]}
    ]);
    let b = body(json!({"tools": tools, "messages": history}));
    let (st, v) = s.post("/v1/messages", &b).await;
    assert_eq!(st, 200, "{v}");
    // The same conversation through the OpenAI shape renders identically.
    let (_, t) = s
        .post(
            "/apply-template",
            &json!({"messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": null, "reasoning_content": "I should call the tool.",
                 "tool_calls": [{"id": "toolu_1", "type": "function",
                                 "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
                {"role": "tool", "tool_call_id": "toolu_1", "content": "rill_sunny_result"}
            ], "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Current weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]}),
        )
        .await;
    let prompt = t["prompt"].as_str().unwrap();
    assert!(
        prompt.contains("rill_sunny_result") && prompt.contains("get_weather"),
        "{prompt}"
    );
    let (_, c) = s.post("/v1/messages/count_tokens", &b).await;
    assert_eq!(
        c["input_tokens"].as_u64().unwrap() as usize,
        s.state.encode_prompt(prompt).len()
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_in_anthropic_shape_and_x_api_key() {
    let s = start(Opts::keyed("sk-ant")).await;
    let send = |b: reqwest::RequestBuilder| async move {
        let r = b.send().await.unwrap();
        let st = r.status().as_u16();
        (st, r.json::<Value>().await.unwrap())
    };
    let post = |key: Option<(&'static str, &'static str)>| {
        let mut r = s.client.post(s.url("/v1/messages"));
        if let Some((h, v)) = key {
            r = r.header(h, v);
        }
        r
    };
    let (st, v) = send(post(None).json(&body(json!({})))).await;
    assert_eq!(st, 401);
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "authentication_error");
    let (st, _) = send(post(Some(("x-api-key", "wrong"))).json(&body(json!({})))).await;
    assert_eq!(st, 401);
    let key = Some(("x-api-key", "sk-ant"));
    let (st, v) = send(post(key).json(&body(json!({"max_tokens": 2})))).await;
    assert_eq!(st, 200, "{v}");
    let (st, _) =
        send(post(Some(("authorization", "Bearer sk-ant"))).json(&body(json!({"max_tokens": 2}))))
            .await;
    assert_eq!(st, 200);
    // The OpenAI routes keep their Bearer-only check.
    let (st, _) = send(
        s.client
            .get(s.url("/v1/models"))
            .header("x-api-key", "sk-ant"),
    )
    .await;
    assert_eq!(st, 401);

    let mut no_max = body(json!({}));
    no_max.as_object_mut().unwrap().remove("max_tokens");
    for (b, status, kind, param) in [
        (no_max, 400, "invalid_request_error", Some("max_tokens")),
        (
            body(json!({"model": "claude-nope"})),
            404,
            "not_found_error",
            Some("model"),
        ),
        (
            body(json!({"temperature": -1})),
            400,
            "invalid_request_error",
            Some("temperature"),
        ),
        (
            body(
                json!({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}),
            ),
            400,
            "invalid_request_error",
            Some("messages[0].content[0].type"),
        ),
        (
            body(json!({"messages": "hi"})),
            400,
            "invalid_request_error",
            Some("messages"),
        ),
    ] {
        let (st, v) = send(post(key).json(&b)).await;
        assert_eq!(st, status, "{b}: {v}");
        assert_eq!(v["type"], "error", "{v}");
        assert_eq!(v["error"]["type"], kind, "{v}");
        assert!(v["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
        assert_eq!(v["error"]["param"].as_str(), param, "{v}");
    }
    let (st, v) = send(
        post(key)
            .header("content-type", "application/json")
            .body("{nope"),
    )
    .await;
    assert_eq!(st, 400);
    assert_eq!(v["error"]["type"], "invalid_request_error");
    s.stop().await;
}
