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
    let render = |extra: serde_json::Value| {
        let mut b = json!({"messages": msgs, "max_tokens": 1});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
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
