//! The endpoints, as a client sees them.

use crate::common::*;
use serde_json::{json, Value};

fn chat_body(extra: Value) -> Value {
    merged(
        json!({
            "model": MODEL_ID,
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Say hello."}
            ],
            "temperature": 0,
            "max_tokens": 12,
        }),
        extra,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_models_metrics() {
    let s = start(Opts::default()).await;
    let r = s.client.get(s.url("/health")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap(), json!({"status": "ok"}));

    let r = s.client.get(s.url("/v1/models")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let m: Value = r.json().await.unwrap();
    assert_eq!(m["object"], "list");
    assert_eq!(m["data"][0]["id"], MODEL_ID);
    assert_eq!(m["data"][0]["object"], "model");
    assert_eq!(m["data"][0]["owned_by"], "rill");

    let text = s.get_text("/metrics").await;
    assert_eq!(metric_value(&text, "rill_requests_running"), Some(0.0));
    assert!(
        text.contains("rill_http_requests_total{route=\"/v1/models\",status=\"200\"} 1"),
        "{text}"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_non_streaming_and_streaming_agree() {
    let s = start(Opts::default()).await;
    // Thinking on (the template's default): the random model never closes
    // <think>, so everything is reasoning.
    let (st, r) = s.post("/v1/chat/completions", &chat_body(json!({}))).await;
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["object"], "chat.completion");
    assert_eq!(r["model"], MODEL_ID);
    assert!(r["id"].as_str().unwrap().starts_with("chatcmpl-"));
    let c = &r["choices"][0];
    assert_eq!(c["index"], 0);
    assert_eq!(c["message"]["role"], "assistant");
    assert!(["stop", "length"].contains(&c["finish_reason"].as_str().unwrap()));
    let u = &r["usage"];
    let (p, n) = (
        u["prompt_tokens"].as_u64().unwrap(),
        u["completion_tokens"].as_u64().unwrap(),
    );
    assert!(p > 10 && n <= 12, "{u}");
    assert_eq!(u["total_tokens"].as_u64().unwrap(), p + n);
    let think_reply = format!(
        "{}{}",
        c["message"]["reasoning_content"].as_str().unwrap_or(""),
        c["message"]["content"].as_str().unwrap_or("")
    );

    // Thinking off: everything is content; greedy output is reproducible
    // and the same streamed.
    let body = chat_body(
        json!({"chat_template_kwargs": {"enable_thinking": false}, "max_tokens": 16, "ignore_eos": true}),
    );
    let (st, r1) = s.post("/v1/chat/completions", &body).await;
    assert_eq!(st, 200, "{r1}");
    assert!(
        r1["choices"][0]["message"]
            .get("reasoning_content")
            .is_none(),
        "{r1}"
    );
    assert_eq!(r1["choices"][0]["finish_reason"], "length");
    assert_eq!(r1["usage"]["completion_tokens"], 16);
    let content = r1["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    let (_, r2) = s.post("/v1/chat/completions", &body).await;
    assert_eq!(r2["choices"][0]["message"]["content"], content.as_str());
    // The convenience flag does the same.
    let mut b2 = chat_body(json!({"enable_thinking": false, "max_tokens": 16, "ignore_eos": true}));
    b2.as_object_mut().unwrap().remove("model");
    let (_, r3) = s.post("/v1/chat/completions", &b2).await;
    assert_eq!(r3["choices"][0]["message"]["content"], content.as_str());
    assert_ne!(content, think_reply.trim(), "thinking changes the prompt");

    let mut sb = body.clone();
    sb["stream"] = json!(true);
    sb["stream_options"] = json!({"include_usage": true});
    let data = s.stream("/v1/chat/completions", &sb).await;
    let ch = chunks(&data);
    assert_eq!(ch[0]["object"], "chat.completion.chunk");
    assert_eq!(ch[0]["choices"][0]["delta"]["role"], "assistant");
    let id = ch[0]["id"].as_str().unwrap();
    assert!(ch.iter().all(|c| c["id"] == id));
    let usage = ch.last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["completion_tokens"], 16);
    let fin = &ch[ch.len() - 2];
    assert_eq!(fin["choices"][0]["finish_reason"], "length");
    let streamed: String = ch
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(streamed, content);
    assert!(ch[1..ch.len() - 2]
        .iter()
        .all(|c| c["choices"][0]["finish_reason"].is_null()));

    // Streaming with thinking on: reasoning deltas, same text as whole.
    let data = s
        .stream("/v1/chat/completions", &chat_body(json!({"stream": true})))
        .await;
    let ch = chunks(&data);
    let streamed: String = ch
        .iter()
        .map(|c| {
            let d = &c["choices"][0]["delta"];
            format!(
                "{}{}",
                d["reasoning_content"].as_str().unwrap_or(""),
                d["content"].as_str().unwrap_or("")
            )
        })
        .collect();
    assert_eq!(streamed, think_reply);
    assert!(ch.last().unwrap()["choices"][0]["finish_reason"].is_string());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_with_tools_and_history() {
    let s = start(Opts::default()).await;
    let tools = json!([{
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
        }
    }]);
    let body = json!({
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21C"},
            {"role": "developer", "content": "ignored role mapping check"},
        ],
        "tools": tools,
        "tool_choice": "auto",
        "max_tokens": 4,
    });
    // A system message after others is refused by the template (it raises).
    let (st, r) = s.post("/v1/chat/completions", &body).await;
    assert_error_says(st, &r, 400, "System message must be at the beginning");
    let mut body = body;
    body["messages"].as_array_mut().unwrap().pop();
    let (st, r) = s.post("/v1/chat/completions", &body).await;
    assert_eq!(st, 200, "{r}");
    assert!(r["choices"][0]["message"].is_object());
    body["tool_choice"] = json!("none");
    let (st, _) = s.post("/v1/chat/completions", &body).await;
    assert_eq!(st, 200);
    // A forced call (tests/server/choices.rs) of a function not offered.
    body["tool_choice"] = json!({"type": "function", "function": {"name": "get_time"}});
    let (st, r) = s.post("/v1/chat/completions", &body).await;
    assert_error(st, &r, 400, Some("tool_choice"));
    body["tool_choice"] = json!("auto");
    body["tools"] = json!([{"type": "function"}]);
    let (st, r) = s.post("/v1/chat/completions", &body).await;
    assert_error(st, &r, 400, Some("tools[0]"));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_text_tokens_and_stream() {
    let s = start(Opts::default()).await;
    let body = json!({"model": ALIAS, "prompt": "Once upon a time", "max_tokens": 10, "temperature": 0, "ignore_eos": true});
    let (st, r) = s.post("/v1/completions", &body).await;
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["object"], "text_completion");
    assert_eq!(r["model"], MODEL_ID);
    assert_eq!(r["choices"][0]["finish_reason"], "length");
    assert_eq!(r["usage"]["completion_tokens"], 10);
    let text = r["choices"][0]["text"].as_str().unwrap().to_string();

    let mut sb = body.clone();
    sb["stream"] = json!(true);
    let ch = chunks(&s.stream("/v1/completions", &sb).await);
    let streamed: String = ch
        .iter()
        .filter_map(|c| c["choices"][0]["text"].as_str())
        .collect();
    assert_eq!(streamed, text);
    assert_eq!(ch.last().unwrap()["choices"][0]["finish_reason"], "length");

    // Token ids in, and the batch forms of one prompt.
    for prompt in [
        json!([1, 2, 3, 4]),
        json!([[1, 2, 3, 4]]),
        json!(["Once upon a time"]),
    ] {
        let (st, r) = s
            .post(
                "/v1/completions",
                &json!({"prompt": prompt, "max_tokens": 3, "ignore_eos": true}),
            )
            .await;
        assert_eq!(st, 200, "{r}");
        assert_eq!(r["usage"]["completion_tokens"], 3);
    }
    let (_, r) = s
        .post(
            "/v1/completions",
            &json!({"prompt": [1, 2, 3, 4], "max_tokens": 3}),
        )
        .await;
    assert_eq!(r["usage"]["prompt_tokens"], 4);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logprobs_in_both_shapes() {
    let s = start(Opts::default()).await;
    let body = json!({
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 6, "ignore_eos": true, "temperature": 0,
        "logprobs": true, "top_logprobs": 3,
    });
    let (st, r) = s.post("/v1/chat/completions", &body).await;
    assert_eq!(st, 200, "{r}");
    let lp = r["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert_eq!(lp.len(), 6);
    for t in lp {
        let l = t["logprob"].as_f64().unwrap();
        assert!(l <= 0.0);
        assert!(t["token"].is_string() && t["bytes"].is_array());
        let top = t["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 3);
        // Greedy: the chosen token is the best one.
        assert!(
            (top[0]["logprob"].as_f64().unwrap() - l).abs() < 1e-5,
            "{t}"
        );
        assert!(top
            .windows(2)
            .all(|w| w[0]["logprob"].as_f64() >= w[1]["logprob"].as_f64()));
    }
    // Streamed: the same tokens, spread over chunks.
    let mut sb = body.clone();
    sb["stream"] = json!(true);
    let ch = chunks(&s.stream("/v1/chat/completions", &sb).await);
    let streamed: Vec<Value> = ch
        .iter()
        .filter_map(|c| c["choices"][0]["logprobs"]["content"].as_array())
        .flatten()
        .cloned()
        .collect();
    assert_eq!(&streamed, lp);
    // Off by default.
    let (_, r) = s
        .post(
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}),
        )
        .await;
    assert!(r["choices"][0]["logprobs"].is_null());

    let (st, r) = s
        .post(
            "/v1/completions",
            &json!({"prompt": "abc", "max_tokens": 4, "ignore_eos": true, "logprobs": 2, "temperature": 0}),
        )
        .await;
    assert_eq!(st, 200, "{r}");
    let lp = &r["choices"][0]["logprobs"];
    assert_eq!(lp["tokens"].as_array().unwrap().len(), 4);
    assert_eq!(lp["token_logprobs"].as_array().unwrap().len(), 4);
    assert_eq!(
        lp["top_logprobs"][0].as_object().unwrap().len().min(2),
        lp["top_logprobs"][0].as_object().unwrap().len()
    );
    assert_eq!(lp["text_offset"][0], 0);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_strings_end_the_text() {
    let s = start(Opts::default()).await;
    let body = json!({"prompt": "The quick brown fox", "max_tokens": 40, "temperature": 0, "ignore_eos": true});
    let (_, r) = s.post("/v1/completions", &body).await;
    let full = r["choices"][0]["text"].as_str().unwrap().to_string();
    let chars: Vec<char> = full.chars().collect();
    assert!(chars.len() > 12, "{full:?}");
    // A stop string taken from the middle of the greedy text.
    let stop: String = chars[8..11].iter().collect();
    let expect = &full[..full.find(&stop).unwrap()];
    for stream in [false, true] {
        let mut b = body.clone();
        b["stop"] = json!([stop.clone(), "\u{1F600}never"]);
        b["stream"] = json!(stream);
        let (text, finish) = if stream {
            let ch = chunks(&s.stream("/v1/completions", &b).await);
            let t: String = ch
                .iter()
                .filter_map(|c| c["choices"][0]["text"].as_str())
                .collect();
            (t, ch.last().unwrap()["choices"][0]["finish_reason"].clone())
        } else {
            let (st, r) = s.post("/v1/completions", &b).await;
            assert_eq!(st, 200, "{r}");
            (
                r["choices"][0]["text"].as_str().unwrap().to_string(),
                r["choices"][0]["finish_reason"].clone(),
            )
        };
        assert_eq!(text, expect, "stop {stop:?} in {full:?}");
        assert_eq!(finish, "stop");
    }
    // A single string works too (chat).
    let (st, r) = s
        .post(
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": "x"}], "stop": "a", "max_tokens": 30, "enable_thinking": false}),
        )
        .await;
    assert_eq!(st, 200, "{r}");
    assert!(!r["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .contains('a'));
    s.stop().await;
}

/// `echo` on `/v1/completions` (what evaluation harnesses send: token-id
/// prompts, `echo`, `logprobs`, one generated token): the prompt's text
/// before the generated text, and its tokens scored, the first `null`. A
/// prompt token's log-probability is the one the model gives it as a
/// generated token after the tokens before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_scores_the_prompt() {
    let s = start(Opts::default()).await;
    let ids: Vec<u32> = (0..12).map(|i| 40 + 7 * i).collect();
    let body = |prompt: Value| json!({"prompt": prompt, "max_tokens": 1, "temperature": 0, "logprobs": 1, "echo": true});
    let (st, v) = s.post("/v1/completions", &body(json!(ids))).await;
    assert_eq!(st, 200, "{v}");
    let c = &v["choices"][0];
    let lp = &c["logprobs"];
    let n = ids.len();
    assert_eq!(lp["tokens"].as_array().unwrap().len(), n + 1, "{lp}");
    assert!(
        lp["token_logprobs"][0].is_null() && lp["top_logprobs"][0].is_null(),
        "{lp}"
    );
    for i in 1..=n {
        assert!(lp["token_logprobs"][i].as_f64().unwrap() <= 0.0, "{lp}");
        assert_eq!(lp["top_logprobs"][i].as_object().unwrap().len(), 1, "{lp}");
    }
    // The text is the prompt's, then the generated token's, at the offsets.
    let (_, d) = s.post("/detokenize", &json!({"tokens": ids})).await;
    let prompt_text = d["content"].as_str().unwrap();
    let text = c["text"].as_str().unwrap();
    assert!(text.starts_with(prompt_text), "{text:?} / {prompt_text:?}");
    assert_eq!(lp["text_offset"][n], prompt_text.chars().count());
    assert_eq!(v["usage"]["prompt_tokens"], n);

    // Each prompt token scored as the prefix before it generates it: the
    // greedy token after the first k tokens, echoed at position k.
    for k in [1, 5, n - 1] {
        let (_, g) = s
            .post(
                "/v1/completions",
                &json!({"prompt": ids[..k], "max_tokens": 1,
            "temperature": 0, "logprobs": 1, "return_token_ids": true}),
            )
            .await;
        let next = g["choices"][0]["token_ids"][0].as_u64().unwrap();
        let generated = g["choices"][0]["logprobs"]["token_logprobs"][0]
            .as_f64()
            .unwrap();
        let mut longer: Vec<u64> = ids[..k].iter().map(|&i| i as u64).collect();
        longer.push(next);
        let (_, e) = s.post("/v1/completions", &body(json!(longer))).await;
        let echoed = e["choices"][0]["logprobs"]["token_logprobs"][k]
            .as_f64()
            .unwrap();
        assert!(
            (echoed - generated).abs() < 1e-4,
            "k {k}: {echoed} vs {generated}"
        );
    }

    // A batch: each choice echoes its own prompt.
    let (_, b) = s
        .post("/v1/completions", &body(json!([ids[..4], ids])))
        .await;
    let choices = b["choices"].as_array().unwrap();
    assert_eq!(
        choices[0]["logprobs"]["tokens"].as_array().unwrap().len(),
        5
    );
    assert_eq!(choices[1]["logprobs"], c["logprobs"]);

    // Streamed: the scored prompt first, then the same text.
    let mut sb = body(json!(ids));
    sb["stream"] = json!(true);
    let ch = chunks(&s.stream("/v1/completions", &sb).await);
    assert_eq!(ch[0]["choices"][0]["text"], prompt_text, "{:?}", ch[0]);
    assert_eq!(
        ch[0]["choices"][0]["logprobs"]["tokens"]
            .as_array()
            .unwrap()
            .len(),
        n
    );
    let streamed: String = ch
        .iter()
        .filter_map(|c| c["choices"][0]["text"].as_str())
        .collect();
    assert_eq!(streamed, text);

    // vLLM's prompt_logprobs: per prompt token (the first null) its own
    // entry and the best alternatives', with ranks; as echo scores them.
    let mut vb = json!({"prompt": ids, "max_tokens": 1, "temperature": 0, "prompt_logprobs": 2});
    let (st, pv) = s.post("/v1/completions", &vb).await;
    assert_eq!(st, 200, "{pv}");
    let pl = pv["choices"][0]["prompt_logprobs"].as_array().unwrap();
    assert_eq!(pl.len(), n);
    assert!(pl[0].is_null());
    for i in 1..n {
        let m = pl[i].as_object().unwrap();
        let own = &m[&ids[i].to_string()];
        let echoed = lp["token_logprobs"][i].as_f64().unwrap();
        assert!(
            (own["logprob"].as_f64().unwrap() - echoed).abs() < 1e-6,
            "{own}"
        );
        let rank = own["rank"].as_u64().unwrap();
        assert!(rank >= 1);
        let ranks: Vec<u64> = m.values().map(|e| e["rank"].as_u64().unwrap()).collect();
        assert!(ranks.contains(&1) && ranks.contains(&2), "{m:?}");
        assert_eq!(m.len(), if rank <= 2 { 2 } else { 3 }, "{m:?}");
    }
    vb["stream"] = json!(true);
    let (st, e) = s.post("/v1/completions", &vb).await;
    assert_eq!(
        (st, &e["error"]["param"]),
        (400, &json!("prompt_logprobs")),
        "{e}"
    );
    vb["stream"] = json!(false);
    vb["prompt_logprobs"] = json!(21);
    let (st, e) = s.post("/v1/completions", &vb).await;
    assert_eq!(
        (st, &e["error"]["param"]),
        (400, &json!("prompt_logprobs")),
        "{e}"
    );
    // On chat, for the rendered prompt, at the top level.
    let chat = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
                      "prompt_logprobs": 0});
    let (st, cv) = s.post("/v1/chat/completions", &chat).await;
    assert_eq!(st, 200, "{cv}");
    let pl = cv["prompt_logprobs"].as_array().unwrap();
    assert_eq!(
        pl.len() as u64,
        cv["usage"]["prompt_tokens"].as_u64().unwrap()
    );
    assert!(pl[0].is_null() && pl[1..].iter().all(|e| e.as_object().unwrap().len() == 1));

    // `max_tokens: 0`: the prompt alone, scored; nothing generated.
    let mut only = body(json!(ids));
    only["max_tokens"] = json!(0);
    let (st, o) = s.post("/v1/completions", &only).await;
    assert_eq!(st, 200, "{o}");
    assert_eq!(o["choices"][0]["text"], prompt_text);
    assert_eq!(o["choices"][0]["finish_reason"], "length");
    assert_eq!(o["usage"]["completion_tokens"], 0);
    let olp = &o["choices"][0]["logprobs"];
    assert_eq!(olp["tokens"].as_array().unwrap().len(), n);
    assert_eq!(
        olp["token_logprobs"].as_array().unwrap()[..],
        lp["token_logprobs"].as_array().unwrap()[..n]
    );
    only["stream"] = json!(true);
    only["stream_options"] = json!({"include_usage": true});
    let ch = chunks(&s.stream("/v1/completions", &only).await);
    let streamed: String = ch
        .iter()
        .filter_map(|c| c["choices"].get(0).and_then(|c| c["text"].as_str()))
        .collect();
    assert_eq!(streamed, prompt_text);
    assert_eq!(
        ch.last().unwrap()["usage"]["completion_tokens"],
        0,
        "{:?}",
        ch.last()
    );
    let (st, e) = s
        .post("/v1/completions", &json!({"prompt": ids, "max_tokens": 0}))
        .await;
    assert_eq!(
        (st, &e["error"]["param"]),
        (400, &json!("max_tokens")),
        "{e}"
    );

    // Without logprobs: the text alone, streamed or not.
    let mut plain = body(json!(ids));
    plain.as_object_mut().unwrap().remove("logprobs");
    let (_, p) = s.post("/v1/completions", &plain).await;
    assert_eq!(p["choices"][0]["text"], text);
    assert!(p["choices"][0]["logprobs"].is_null(), "{p}");
    plain["stream"] = json!(true);
    let ch = chunks(&s.stream("/v1/completions", &plain).await);
    let streamed: String = ch
        .iter()
        .filter_map(|c| c["choices"][0]["text"].as_str())
        .collect();
    assert_eq!(streamed, text);
    s.stop().await;
}

/// llama-server's samplers by their request names: a top-n-σ cut close to 0
/// keeps only the best token, so a hot temperature still gives the greedy
/// text; typical and XTC run (their own cuts are the sampler's tests).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llama_server_samplers_apply() {
    let s = start(Opts::default()).await;
    let body = |extra: Value| {
        merged(
            json!({"prompt": "Once upon a time", "max_tokens": 8, "ignore_eos": true, "seed": 5}),
            extra,
        )
    };
    let text = |v: &Value| v["choices"][0]["text"].as_str().unwrap().to_string();
    let (_, greedy) = s
        .post("/v1/completions", &body(json!({"temperature": 0})))
        .await;
    let (st, cut) = s
        .post(
            "/v1/completions",
            &body(json!({"temperature": 5, "top_n_sigma": 1e-6})),
        )
        .await;
    assert_eq!(st, 200, "{cut}");
    assert_eq!(text(&cut), text(&greedy));
    let (_, hot) = s
        .post("/v1/completions", &body(json!({"temperature": 5})))
        .await;
    assert_ne!(
        text(&hot),
        text(&greedy),
        "a hot draw that is greedy proves nothing"
    );
    let (st, v) = s
        .post(
            "/v1/completions",
            &body(json!({"temperature": 1, "typical_p": 0.5, "xtc_probability": 0.5, "xtc_threshold": 0.05})),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 8);
    s.stop().await;
}

/// Whether token `p` of `ids` continues, with the tokens before it, a run
/// of at least `len` tokens that occurred earlier followed by the same
/// token (what DRY penalises).
fn extends_a_run(ids: &[u64], p: usize, len: usize) -> bool {
    (len..p).any(|e| {
        // An earlier run ending at e − 1 followed by ids[e] == ids[p].
        e < p && ids[e] == ids[p] && (1..=len).all(|i| i <= e && ids[e - i] == ids[p - i])
    })
}

/// llama-server's DRY and Mirostat by their request names. Greedy text of
/// the demo model repeats itself; with a large DRY multiplier and no
/// breakers no generated token extends an earlier run of 2 or more. A
/// Mirostat 2 bound near 0 keeps only the best token, so a hot
/// temperature gives the greedy text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_and_mirostat_apply() {
    let s = start(Opts {
        model: Some(super::common::demo_model()),
        ..Opts::default()
    })
    .await;
    let body = |extra: Value| {
        merged(
            json!({"prompt": "Once upon a time", "max_tokens": 48, "ignore_eos": true,
                           "temperature": 0, "return_token_ids": true, "seed": 5}),
            extra,
        )
    };
    let ids = |v: &Value| -> (Vec<u64>, usize) {
        let prompt: Vec<u64> = (v["choices"][0]["prompt_token_ids"].as_array())
            .or(v["prompt_token_ids"].as_array())
            .expect("prompt ids")
            .iter()
            .map(|t| t.as_u64().unwrap())
            .collect();
        let n = prompt.len();
        let gen = v["choices"][0]["token_ids"].as_array().expect("ids");
        (
            prompt
                .into_iter()
                .chain(gen.iter().map(|t| t.as_u64().unwrap()))
                .collect(),
            n,
        )
    };
    let repeats = |v: &Value| {
        let (all, n) = ids(v);
        (n..all.len())
            .filter(|&p| extends_a_run(&all, p, 2))
            .count()
    };
    let (st, greedy) = s.post("/v1/completions", &body(json!({}))).await;
    assert_eq!(st, 200, "{greedy}");
    assert!(
        repeats(&greedy) > 0,
        "the greedy text must repeat for the test to mean anything: {greedy}"
    );
    let (st, dry) = s
        .post(
            "/v1/completions",
            &body(json!({"dry_multiplier": 100, "dry_allowed_length": 2,
                         "dry_penalty_last_n": -1, "dry_sequence_breakers": ["\u{1}"]})),
        )
        .await;
    assert_eq!(st, 200, "{dry}");
    assert_eq!(repeats(&dry), 0, "{}", dry["choices"][0]["text"]);
    // The breakers reach the sampler as tokens: with " " one, which
    // nearly every token of this text holds, no run is long enough to pay.
    let (st, spaced) = s
        .post(
            "/v1/completions",
            &body(json!({"dry_multiplier": 100, "dry_penalty_last_n": -1,
                         "dry_sequence_breakers": [" "]})),
        )
        .await;
    assert_eq!(st, 200, "{spaced}");
    assert_eq!(spaced["choices"][0]["text"], greedy["choices"][0]["text"]);
    // llama-server's `repeat_last_n`: 0 turns the penalties off.
    let (_, penalised) = s
        .post("/v1/completions", &body(json!({"repetition_penalty": 3})))
        .await;
    assert_ne!(
        penalised["choices"][0]["text"],
        greedy["choices"][0]["text"]
    );
    let (_, off) = s
        .post(
            "/v1/completions",
            &body(json!({"repetition_penalty": 3, "repeat_last_n": 0})),
        )
        .await;
    assert_eq!(off["choices"][0]["text"], greedy["choices"][0]["text"]);
    let (st, miro) = s
        .post(
            "/v1/completions",
            &body(json!({"temperature": 5, "mirostat": 2, "mirostat_tau": 0.01, "max_tokens": 8})),
        )
        .await;
    assert_eq!(st, 200, "{miro}");
    let (_, greedy8) = s
        .post("/v1/completions", &body(json!({"max_tokens": 8})))
        .await;
    assert_eq!(miro["choices"][0]["text"], greedy8["choices"][0]["text"]);
    s.stop().await;
}
