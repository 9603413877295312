//! vLLM's stopping controls on the OpenAI endpoints: `min_tokens`,
//! `stop_token_ids`, `include_stop_str_in_output`; llama-server's
//! `n_indent`.

use crate::common::*;
use serde_json::{json, Value};

/// `/v1/completions`, greedy, with `extra` set: (text, token ids, finish).
async fn complete(s: &TestServer, extra: Value) -> (String, Vec<u64>, String) {
    let b = merged(
        json!({"prompt": "Once upon a time", "max_tokens": 10, "temperature": 0,
                       "return_token_ids": true}),
        extra,
    );
    let (st, v) = s.post("/v1/completions", &b).await;
    assert_eq!(st, 200, "{v}");
    let c = &v["choices"][0];
    let ids = (c["token_ids"].as_array().unwrap().iter())
        .map(|i| i.as_u64().unwrap())
        .collect();
    let finish = c["finish_reason"].as_str().unwrap().to_string();
    (c["text"].as_str().unwrap().to_string(), ids, finish)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_token_ids_and_min_tokens_end_where_vllm_ends() {
    let s = start(Opts::default()).await;
    let (text, ids, _) = complete(&s, json!({"ignore_eos": true})).await;
    assert_eq!(ids.len(), 10);
    // A stop token: the first at its first place (kept in the text).
    let j = (2..8)
        .find(|&j| !ids[..j].contains(&ids[j]))
        .expect("a fresh token");
    let (cut, cut_ids, finish) =
        complete(&s, json!({"ignore_eos": true, "stop_token_ids": [ids[j]]})).await;
    assert_eq!(cut_ids, ids[..=j], "ends with the stop token");
    assert_eq!(finish, "stop");
    assert!(
        text.starts_with(&cut) && cut.len() < text.len(),
        "{cut:?} / {text:?}"
    );
    // Not before min_tokens: the stop token is not drawn before then.
    let (_, late, _) = complete(
        &s,
        json!({"ignore_eos": true, "stop_token_ids": [ids[j]], "min_tokens": j + 2}),
    )
    .await;
    assert!(late.len() >= j + 2, "{late:?}");
    assert!(!late[..j + 1].contains(&ids[j]), "{late:?}");

    // A stop string: left out, or kept with include_stop_str_in_output.
    let word: String = text.chars().skip(4).take(3).collect();
    let (without, _, finish) = complete(&s, json!({"ignore_eos": true, "stop": [word]})).await;
    assert_eq!(finish, "stop");
    let (with, _, _) = complete(
        &s,
        json!({"ignore_eos": true, "stop": [word], "include_stop_str_in_output": true}),
    )
    .await;
    assert_eq!(with, format!("{without}{word}"));
    // Past min_tokens only: a stop string the first tokens bring is not
    // looked for.
    let (early, early_ids, _) = complete(
        &s,
        json!({"ignore_eos": true, "stop": [word], "min_tokens": 10}),
    )
    .await;
    assert_eq!((early.as_str(), early_ids.len()), (text.as_str(), 10));

    for (bad, param) in [
        (json!({"min_tokens": -1}), "min_tokens"),
        (json!({"min_tokens": 11}), "min_tokens"),
        (json!({"stop_token_ids": [-3]}), "stop_token_ids"),
        (json!({"stop_token_ids": [1_000_000_000]}), "stop_token_ids"),
    ] {
        let mut b = json!({"prompt": "x", "max_tokens": 10});
        for (k, v) in bad.as_object().unwrap() {
            b[k] = v.clone();
        }
        let (st, e) = s.post("/v1/completions", &b).await;
        assert_eq!(st, 400, "{bad}: {e}");
        assert_eq!(e["error"]["param"], param, "{bad}: {e}");
    }
    s.stop().await;
}

/// On the demo model, whose greedy chat replies end their turn: with
/// `min_tokens` past that end, the reply goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_tokens_holds_off_the_end_of_turn() {
    let s = start(Opts {
        model: Some(demo_model()),
        ..Opts::default()
    })
    .await;
    let chat = |extra: Value| {
        merged(
            json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 200,
                           "temperature": 0, "enable_thinking": false}),
            extra,
        )
    };
    let (_, v) = s.post("/v1/chat/completions", &chat(json!({}))).await;
    assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
    let n = v["usage"]["completion_tokens"].as_u64().unwrap();
    assert!(n < 190, "{v}");
    let (_, v) = s
        .post("/v1/chat/completions", &chat(json!({"min_tokens": n + 5})))
        .await;
    let longer = v["usage"]["completion_tokens"].as_u64().unwrap();
    assert!(longer >= n + 5, "{longer} < {n} + 5: {v}");
    s.stop().await;
}

/// llama-server's `n_indent` (llama.vim sends it with `/infill`): a line
/// after the first indented by fewer spaces than it ends the text where its
/// content starts, as the length limit does; the first line is not judged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n_indent_ends_the_text_at_a_line_indented_less() {
    let s = start(Opts::default()).await;
    let body = |n_indent: i64, stream: bool| {
        json!({"prompt": "def f():", "n_predict": 48, "temperature": 0, "stream": stream,
               "grammar": "root ::= \"x = 1\\n    y = 2\\n  z = 3\\n\"",
               "n_indent": n_indent})
    };
    let whole = "x = 1\n    y = 2\n  z = 3\n";
    for (n_indent, text, stop_type) in [
        (4, "x = 1\n    y = 2\n  ", "limit"),
        (2, whole, "eos"),
        (0, whole, "eos"),
    ] {
        let (st, v) = s.post("/completion", &body(n_indent, false)).await;
        assert_eq!(st, 200, "{v}");
        assert_eq!(v["content"], text, "n_indent {n_indent}");
        assert_eq!(v["stop_type"], stop_type, "n_indent {n_indent}: {v}");
        let lines = s.stream("/completion", &body(n_indent, true)).await;
        let objects: Vec<Value> = (lines.iter())
            .map(|d| serde_json::from_str(d).unwrap())
            .collect();
        let streamed: String = (objects.iter())
            .filter_map(|c| c["content"].as_str().map(str::to_string))
            .collect();
        assert_eq!(streamed, text, "n_indent {n_indent}, streamed");
        // The final object says the text had a newline, as the whole reply's.
        assert_eq!(objects.last().unwrap()["has_new_line"], true);
        assert_eq!(v["has_new_line"], true);
    }
    s.stop().await;
}

/// `min_tokens` past where the grammar allows only the end: the grammar's
/// end ends the text (as vLLM ends a request whose grammar has
/// terminated), before `min_tokens` — not a hang on a row with nothing
/// left to draw, not an error; the server goes on serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grammars_end_ends_the_text_before_min_tokens() {
    let s = start(Opts::default()).await;
    let b = json!({"prompt": "x", "max_tokens": 8, "temperature": 0, "min_tokens": 4,
                   "guided_grammar": "root ::= \"ok\""});
    let (st, v) = s.post("/v1/completions", &b).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["choices"][0]["text"], "ok", "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
    let (st, _) = s
        .post("/v1/completions", &json!({"prompt": "x", "max_tokens": 2}))
        .await;
    assert_eq!(st, 200);
    s.stop().await;
}
