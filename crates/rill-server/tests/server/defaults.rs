//! Server-side defaults: sampling for what a request leaves out, chat
//! template kwargs, and `reasoning_effort`.

use crate::common::*;
use serde_json::json;

fn greedy_defaults() -> Opts {
    Opts {
        sampling: rill_sampler::SamplingPrefs {
            temperature: Some(0.0),
            ..Default::default()
        },
        ..Opts::default()
    }
}

#[tokio::test]
async fn a_bare_request_samples_with_the_server_defaults() {
    let s = start(greedy_defaults()).await;
    let body = |t: Option<f64>| {
        let mut b = json!({"prompt": "The river", "max_tokens": 12, "ignore_eos": true,
                           "return_token_ids": true});
        if let Some(t) = t {
            b["temperature"] = json!(t);
        }
        b
    };
    // No temperature: the server's 0 (greedy), so it repeats itself exactly
    // and equals an explicit temperature 0.
    let (st, a) = s.post("/v1/completions", &body(None)).await;
    assert_eq!(st, 200, "{a}");
    let (_, b) = s.post("/v1/completions", &body(None)).await;
    let (_, greedy) = s.post("/v1/completions", &body(Some(0.0))).await;
    assert_eq!(a["choices"][0]["token_ids"], b["choices"][0]["token_ids"]);
    assert_eq!(
        a["choices"][0]["token_ids"],
        greedy["choices"][0]["token_ids"]
    );
    // The request's own value wins: sampling at temperature 1.5 with
    // different seeds differs somewhere over a few tries.
    let mut differs = false;
    for seed in 0..4 {
        let mut hot = body(Some(1.5));
        hot["seed"] = json!(seed);
        let (_, h) = s.post("/v1/completions", &hot).await;
        differs |= h["choices"][0]["token_ids"] != greedy["choices"][0]["token_ids"];
    }
    assert!(differs, "a request's temperature overrides the server's");
    s.stop().await;
}

#[tokio::test]
async fn template_kwargs_and_reasoning_effort_reach_the_template() {
    let mut o = Opts::default();
    o.chat_template_kwargs
        .insert("enable_thinking".into(), json!(false));
    let s = start(o).await;
    let msgs = json!([{"role": "user", "content": "hi"}]);
    let render =
        |extra: serde_json::Value| merged(json!({"messages": msgs, "max_tokens": 1}), extra);
    // The server's kwargs turn thinking off: the prompt holds an empty
    // think block; a request's own kwargs win.
    let (_, off) = s.post("/apply-template", &render(json!({}))).await;
    let (_, on) = s
        .post(
            "/apply-template",
            &render(json!({"chat_template_kwargs": {"enable_thinking": true}})),
        )
        .await;
    let p_off = off["prompt"].as_str().unwrap_or_default().to_string();
    let p_on = on["prompt"].as_str().unwrap_or_default().to_string();
    assert!(p_off.contains("<think>\n\n</think>"), "{off}");
    assert!(!p_on.contains("</think>"), "{on}");
    s.stop().await;

    let s = start(Opts::default()).await;
    let (st, _) = s
        .post(
            "/v1/chat/completions",
            &render(json!({"reasoning_effort": "none"})),
        )
        .await;
    assert_eq!(st, 200);
    let (st, e) = s
        .post(
            "/v1/chat/completions",
            &render(json!({"reasoning_effort": "extreme"})),
        )
        .await;
    assert_eq!(st, 400, "{e}");
    s.stop().await;
}

/// The tokens of a chat reply up to and including `</think>`: the
/// position of the closing tag in the reply's logprobs.
async fn think_end(s: &TestServer, extra: serde_json::Value) -> Option<usize> {
    let mut body = json!({
        "messages": [{"role": "user", "content": "Think first."}],
        "max_tokens": 24, "ignore_eos": true, "temperature": 0, "logprobs": true,
    });
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    let (st, v) = s.post("/v1/chat/completions", &body).await;
    assert_eq!(st, 200, "{v}");
    let tokens = v["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert_eq!(tokens.len(), 24, "{v}");
    tokens.iter().position(|t| t["token"] == "</think>")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reasoning_budget_closes_the_thinking_block() {
    let s = start(Opts {
        reasoning_budget: Some(5),
        model: Some(demo_model()),
        ..Opts::default()
    })
    .await;
    // The server's budget: five thought tokens, then `</think>`; the reply
    // goes on as the answer.
    assert_eq!(think_end(&s, json!({})).await, Some(5));
    let (_, v) = s
        .post(
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": "Think first."}],
                    "max_tokens": 24, "ignore_eos": true, "temperature": 0}),
        )
        .await;
    let m = &v["choices"][0]["message"];
    assert!(
        m["reasoning_content"].is_string() && m["content"].is_string(),
        "{m}"
    );
    // The request's own budget wins; -1 is the server's; 0 closes at once.
    assert_eq!(
        think_end(&s, json!({"thinking_budget_tokens": 2})).await,
        Some(2)
    );
    assert_eq!(
        think_end(&s, json!({"thinking_budget_tokens": -1})).await,
        Some(5)
    );
    assert_eq!(
        think_end(&s, json!({"thinking_budget_tokens": 0})).await,
        Some(0)
    );
    // A message goes before the tag.
    let with_message = think_end(
        &s,
        json!({"thinking_budget_tokens": 1, "thinking_budget_message": " Enough."}),
    )
    .await
    .unwrap();
    assert!(with_message > 2, "{with_message}");
    // llama-server's newer names, which win over the older ones.
    assert_eq!(
        think_end(
            &s,
            json!({"reasoning_budget_tokens": 3, "thinking_budget_tokens": 1})
        )
        .await,
        Some(3)
    );
    assert_eq!(
        think_end(
            &s,
            json!({"reasoning_budget_tokens": 1, "reasoning_budget_message": " Enough."})
        )
        .await,
        Some(with_message)
    );
    // Thinking off: nothing to close.
    assert_eq!(think_end(&s, json!({"enable_thinking": false})).await, None);
    for name in ["thinking_budget_tokens", "reasoning_budget_tokens"] {
        let (st, v) = s
            .post(
                "/v1/chat/completions",
                &json!({"messages": [{"role": "user", "content": "x"}], name: -2}),
            )
            .await;
        assert_error(st, &v, 400, Some(name));
    }

    // `reasoning_format`: `none` leaves the thinking in the content as
    // written (from the tag the prompt opened), `deepseek-legacy` gives
    // it both ways; streamed as whole.
    let reply = |format: Option<&str>, stream: bool| {
        let mut body = json!({"messages": [{"role": "user", "content": "Think first."}],
                              "max_tokens": 24, "ignore_eos": true, "temperature": 0});
        if let Some(f) = format {
            body["reasoning_format"] = json!(f);
        }
        body["stream"] = json!(stream);
        body
    };
    let message = |v: &serde_json::Value| {
        let m = &v["choices"][0]["message"];
        (
            m["reasoning_content"].as_str().map(String::from),
            m["content"].as_str().unwrap_or_default().to_string(),
        )
    };
    let (_, v) = s.post("/v1/chat/completions", &reply(None, false)).await;
    let (thinking, answer) = message(&v);
    let thinking = thinking.expect("thinking apart by default");
    assert!(!answer.contains("<think>") && !answer.is_empty(), "{v}");
    let (_, v) = s
        .post("/v1/chat/completions", &reply(Some("none"), false))
        .await;
    let (none_thinking, raw) = message(&v);
    assert_eq!(none_thinking, None, "{v}");
    assert!(raw.starts_with("<think>"), "{raw:?}");
    assert!(
        raw.contains(&thinking) && raw.contains("</think>") && raw.ends_with(&answer),
        "{raw:?}"
    );
    let (_, v) = s
        .post(
            "/v1/chat/completions",
            &reply(Some("deepseek-legacy"), false),
        )
        .await;
    assert_eq!(message(&v), (Some(thinking.clone()), raw.clone()));
    let chunks = s
        .stream("/v1/chat/completions", &reply(Some("none"), true))
        .await;
    let streamed: String = (chunks.iter())
        .filter_map(|c| serde_json::from_str::<serde_json::Value>(c).ok())
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .map(String::from)
        })
        .collect();
    assert_eq!(streamed, raw);
    let (st, v) = s
        .post("/v1/chat/completions", &reply(Some("raw"), false))
        .await;
    assert_error(st, &v, 400, Some("reasoning_format"));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_budget_tokens_bound_the_thinking_block() {
    let s = start(Opts {
        model: Some(demo_model()),
        ..Opts::default()
    })
    .await;
    let (st, v) = s
        .post(
            "/v1/messages",
            &json!({"max_tokens": 24, "temperature": 0, "ignore_eos": true,
                    "thinking": {"type": "enabled", "budget_tokens": 3},
                    "messages": [{"role": "user", "content": "Think first."}]}),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    let blocks = v["content"].as_array().unwrap();
    assert_eq!(blocks[0]["type"], "thinking", "{v}");
    let thought = blocks[0]["thinking"].as_str().unwrap();
    let (_, t) = s.post("/tokenize", &json!({"content": thought})).await;
    // Three tokens thought (re-tokenizing the text may merge or split a
    // few; it cannot reach the unbounded reply's length).
    let n = t["tokens"].as_array().unwrap().len();
    assert!((1..=4).contains(&n), "{n} tokens in {thought:?}");
    assert!(blocks.iter().any(|b| b["type"] == "text"), "{v}");
    s.stop().await;
}
