//! llama-server's own `POST /completion`: its names, defaults and reply
//! shape, against the OpenAI endpoint's tokens for the same request.

use crate::common::*;
use serde_json::{json, Value};

fn body(extra: Value) -> Value {
    merged(
        json!({"prompt": "Once upon a time", "n_predict": 8, "ignore_eos": true,
                       "temperature": 0}),
        extra,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completion_speaks_llama_servers_api() {
    let s = start(Opts::default()).await;
    let (st, oai) = s
        .post(
            "/v1/completions",
            &json!({"prompt": "Once upon a time", "max_tokens": 8, "ignore_eos": true,
                    "temperature": 0, "return_token_ids": true}),
        )
        .await;
    assert_eq!(st, 200, "{oai}");
    let text = oai["choices"][0]["text"].as_str().unwrap().to_string();
    let ids = oai["choices"][0]["token_ids"].clone();

    let (st, v) = s.post("/completion", &body(json!({}))).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["content"], text);
    assert_eq!(v["stop"], true);
    assert_eq!(v["stop_type"], "limit");
    assert_eq!(v["tokens_predicted"], 8);
    assert_eq!(v["tokens"], json!([]), "ids only with return_tokens");
    assert_eq!(v["tokens_evaluated"], oai["usage"]["prompt_tokens"]);
    assert_eq!(v["timings"]["predicted_n"], 8);
    assert_eq!(v["generation_settings"]["n_predict"], 8);
    assert_eq!(v["generation_settings"]["temperature"], 0.0);
    let (_, v) = s
        .post("/completions", &body(json!({"return_tokens": true})))
        .await;
    assert_eq!(v["tokens"], ids);

    // llama-server's defaults where the request gives none.
    let (_, v) = s
        .post("/completion", &json!({"prompt": "Hi", "n_predict": 1}))
        .await;
    let g = &v["generation_settings"];
    assert!(
        (g["temperature"].as_f64().unwrap() - 0.8).abs() < 1e-6,
        "{g}"
    );
    assert_eq!(g["top_k"], 40);
    assert_eq!(g["min_keep"], 0);
    let (_, v) = s
        .post(
            "/completion",
            &json!({"prompt": "Hi", "n_predict": 1, "min_keep": 5}),
        )
        .await;
    assert_eq!(v["generation_settings"]["min_keep"], 5, "{v}");

    // A stop word: the text before it, and which one it was.
    let word: String = text.chars().skip(3).take(3).collect();
    let (_, v) = s
        .post("/completion", &body(json!({"stop": [word.clone()]})))
        .await;
    assert_eq!(v["stop_type"], "word", "{v}");
    assert_eq!(v["stopping_word"], word);
    assert!(text.starts_with(v["content"].as_str().unwrap()));
    assert!(!v["content"].as_str().unwrap().contains(&word));

    // End of generation (the end token pushed up).
    let eos = loaded().1.eos_id().expect("an end token");
    let (_, v) = s
        .post(
            "/completion",
            &json!({"prompt": "Hi", "n_predict": 64, "temperature": 0, "logit_bias": [[eos, 30]]}),
        )
        .await;
    assert_eq!(v["stop_type"], "eos", "{v}");

    // n_probs: one entry per token, the chosen one's log-probability and
    // the n best.
    let (_, v) = s.post("/completion", &body(json!({"n_probs": 3}))).await;
    let probs = v["completion_probabilities"].as_array().expect("probs");
    assert_eq!(probs.len(), 8);
    for p in probs {
        let top = p["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 3);
        assert_eq!(p["id"], top[0]["id"], "greedy takes the best");
        assert!(p["logprob"].as_f64().unwrap() <= 0.0);
        assert!(p["bytes"].is_array() && p["token"].is_string());
    }

    // A ban in llama-server's pair form turns the first token.
    let first = ids[0].as_u64().unwrap();
    let (_, v) = s
        .post(
            "/completion",
            &body(json!({"return_tokens": true, "logit_bias": [[first, false]]})),
        )
        .await;
    assert_ne!(v["tokens"][0], ids[0]);

    // cache_prompt false: the same prompt again runs whole, same reply.
    let long = body(json!({"prompt": "Once upon a time there was a fox in the wood"}));
    let (_, first) = s.post("/completion", &long).await;
    let (_, again) = s.post("/completion", &long).await;
    assert!(again["tokens_cached"].as_u64().unwrap() > 0, "{again}");
    let mut uncached = long.clone();
    uncached["cache_prompt"] = json!(false);
    let (_, whole) = s.post("/completion", &uncached).await;
    assert_eq!(whole["tokens_cached"], 0, "{whole}");
    assert_eq!(whole["content"], first["content"]);

    // response_fields: those paths alone, flat under their paths.
    let (_, v) = s
        .post(
            "/completion",
            &body(
                json!({"response_fields": ["content", "generation_settings/n_predict", "nope/x"]}),
            ),
        )
        .await;
    assert_eq!(
        v,
        json!({"content": text, "generation_settings/n_predict": 8}),
        "{v}"
    );

    // n_predict 0: the prompt alone.
    let (_, v) = s.post("/completion", &body(json!({"n_predict": 0}))).await;
    assert_eq!(
        (v["content"].as_str(), v["tokens_predicted"].as_u64()),
        (Some(""), Some(0))
    );

    for bad in [
        json!({"prompt": "x", "n_predict": -2}),
        json!({"prompt": "x", "n_probs": 99}),
        json!({"prompt": "x", "logit_bias": [[1]]}),
        json!({"prompt": "x", "min_keep": -1}),
        json!({"prompt": ""}),
    ] {
        let (st, e) = s.post("/completion", &bad).await;
        assert_eq!(st, 400, "{bad}: {e}");
    }
    s.stop().await;
}

/// Streamed: an object per piece of text, the last with `"stop": true`
/// and the final figures, and no `[DONE]`; the pieces make the whole text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completion_streams_objects_without_done() {
    let s = start(Opts::default()).await;
    let (_, whole) = s.post("/completion", &body(json!({}))).await;
    let data = s
        .stream("/completion", &body(json!({"stream": true, "n_probs": 2})))
        .await;
    assert!(!data.iter().any(|d| d == "[DONE]"), "{data:?}");
    let events: Vec<Value> = data
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let (last, pieces) = events.split_last().unwrap();
    assert_eq!(last["stop"], true);
    assert_eq!(last["stop_type"], "limit");
    assert_eq!(last["tokens_predicted"], 8);
    let mut text = String::new();
    let mut n = 0;
    for p in pieces {
        assert_eq!(p["stop"], false);
        text.push_str(p["content"].as_str().unwrap());
        n += p["tokens"].as_array().unwrap().len();
        assert_eq!(p["tokens_predicted"], n);
        let probs = p["completion_probabilities"].as_array().unwrap();
        assert_eq!(probs.len(), p["tokens"].as_array().unwrap().len());
    }
    assert_eq!(n, 8);
    assert_eq!(text, whole["content"].as_str().unwrap());
    s.stop().await;
}

/// The token ids `/v1/completions/render` makes of a prompt (of each
/// prompt, for a list).
async fn render(s: &TestServer, prompt: Value) -> Value {
    let (st, v) = s
        .post("/v1/completions/render", &json!({ "prompt": prompt }))
        .await;
    assert_eq!(st, 200, "{prompt}: {v}");
    match v {
        Value::Array(list) => list.iter().map(|r| r["token_ids"].clone()).collect(),
        one => one["token_ids"].clone(),
    }
}

/// llama-server's mixed prompts: token ids and text in one prompt, each
/// piece taken in order; a list of prompts of mixed forms, one reply each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_prompts_join_ids_and_text_in_order() {
    let s = start(Opts::default()).await;
    let ids = |v: Value| v.as_array().expect("ids").clone();
    let a = ids(render(&s, json!("Once upon")).await);
    let b = ids(render(&s, json!(" a time")).await);
    assert!(!a.is_empty() && !b.is_empty());
    let joined = Value::Array(a.iter().chain(&b).cloned().collect());

    let ids_then_text = Value::Array(a.iter().cloned().chain([json!(" a time")]).collect());
    let text_then_ids = Value::Array([json!("Once upon")].into_iter().chain(b.clone()).collect());
    assert_eq!(render(&s, ids_then_text.clone()).await, joined);
    assert_eq!(render(&s, text_then_ids).await, joined);

    // No integer at the top level: a list of prompts, in order.
    let list = json!([ids_then_text.clone(), {"prompt_string": " a time"}, b.clone()]);
    assert_eq!(
        render(&s, list).await,
        json!([joined.clone(), b.clone(), b.clone()])
    );

    // Generation from a mixed prompt is generation from its ids.
    let (st, x) = s
        .post("/completion", &body(json!({ "prompt": ids_then_text })))
        .await;
    assert_eq!(st, 200, "{x}");
    let (_, y) = s
        .post("/completion", &body(json!({ "prompt": joined.clone() })))
        .await;
    assert_eq!(x["content"], y["content"]);
    assert_eq!(
        x["tokens_evaluated"].as_u64(),
        Some(a.len() as u64 + b.len() as u64)
    );
    let (st, v) = s
        .post(
            "/v1/completions",
            &json!({"prompt": [a[0].clone(), " a time"], "max_tokens": 2}),
        )
        .await;
    assert_eq!(st, 200, "the OpenAI endpoint takes them too: {v}");

    for bad in [
        json!([12, [1]]),
        json!([[[1]]]),
        json!({"text": "a"}),
        json!([1.5, "a"]),
        json!([999_999_999, "a"]),
        json!([[], "a"]),
    ] {
        let (st, e) = s.post("/completion", &body(json!({ "prompt": bad }))).await;
        assert_eq!(st, 400, "{bad}: {e}");
        assert_eq!(e["error"]["param"], "prompt", "{bad}: {e}");
    }
    s.stop().await;
}

/// `n_cmpl` (and its alias `n`): that many completions of each prompt,
/// prompt-major, each its own seed's draw; a list of replies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n_cmpl_gives_completions_per_prompt() {
    let s = start(Opts::default()).await;
    let sampled = |extra: Value| {
        merged(
            body(json!({"temperature": 1.0, "seed": 7, "return_tokens": true})),
            extra,
        )
    };
    let (st, v) = s.post("/completion", &sampled(json!({"n_cmpl": 3}))).await;
    assert_eq!(st, 200, "{v}");
    let list = v.as_array().expect("a list of replies");
    assert_eq!(list.len(), 3);
    // Completion j draws with seed + j: the first is the single reply.
    let (_, one) = s.post("/completion", &sampled(json!({}))).await;
    assert_eq!(list[0]["tokens"], one["tokens"]);
    let distinct: std::collections::HashSet<String> =
        list.iter().map(|r| r["tokens"].to_string()).collect();
    assert!(distinct.len() > 1, "different seeds, different draws: {v}");
    for (j, r) in list.iter().enumerate() {
        assert_eq!(r["index"], j, "{r}");
        assert_eq!(r["tokens_predicted"], 8);
    }

    // Two prompts × n 2: prompt-major.
    let (st, v) = s
        .post(
            "/completion",
            &sampled(json!({"prompt": ["Once upon a time", "Hello"], "n": 2})),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    let list = v.as_array().unwrap();
    assert_eq!(list.len(), 4);
    let (_, hello) = s
        .post("/completion", &sampled(json!({"prompt": "Hello"})))
        .await;
    assert_eq!(list[0]["tokens"], one["tokens"]);
    assert_eq!(list[2]["tokens"], hello["tokens"]);
    assert_eq!(list[3]["tokens_evaluated"], hello["tokens_evaluated"]);

    // Streamed: each completion's objects, interleaved, each with its
    // index; per index, the pieces make the reply's text and one last
    // object stops it; no `[DONE]`.
    let data = s
        .stream(
            "/completion",
            &sampled(json!({"prompt": ["Once upon a time", "Hello"], "n": 2, "stream": true})),
        )
        .await;
    assert!(!data.iter().any(|d| d == "[DONE]"), "{data:?}");
    let mut texts = vec![String::new(); 4];
    let mut stops = [0; 4];
    for d in &data {
        let e: Value = serde_json::from_str(d).unwrap();
        let i = e["index"].as_u64().expect("an index") as usize;
        assert_eq!(stops[i], 0, "nothing after a completion's last object");
        texts[i].push_str(e["content"].as_str().unwrap());
        if e["stop"] == true {
            stops[i] += 1;
            assert_eq!(e["tokens_predicted"], 8, "{e}");
        }
    }
    assert_eq!(stops, [1; 4]);
    for (i, t) in texts.iter().enumerate() {
        assert_eq!(t, list[i]["content"].as_str().unwrap(), "completion {i}");
    }

    for bad in [json!({"n_cmpl": 0}), json!({"n_cmpl": 1000})] {
        let (st, e) = s.post("/completion", &sampled(bad.clone())).await;
        assert_eq!(st, 400, "{bad}: {e}");
        assert_eq!(e["error"]["param"], "n_cmpl", "{bad}: {e}");
        assert!(
            e["error"]["message"].as_str().unwrap().contains("n_cmpl"),
            "{bad}: {e}"
        );
    }
    s.stop().await;
}

/// `samplers` sets the chain's order: a stage left out is not applied (top-k
/// 1 out of the list lets a hot temperature wander from the greedy tokens;
/// in it, the reply is the greedy one), the reply reports the order, and an
/// unknown sampler is a 400 naming `samplers`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn samplers_order_and_leave_out_stages() {
    let s = start(Opts::default()).await;
    let ids = |v: &Value| v["tokens"].clone();
    let (_, greedy) = s
        .post("/completion", &body(json!({"return_tokens": true})))
        .await;
    let hot = |samplers: Value| {
        body(
            json!({"return_tokens": true, "temperature": 50, "top_k": 1, "seed": 3,
                    "samplers": samplers}),
        )
    };
    let (st, v) = s
        .post("/completion", &hot(json!(["top_k", "temperature"])))
        .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(ids(&v), ids(&greedy));
    assert_eq!(
        v["generation_settings"]["samplers"],
        json!(["top_k", "temperature"])
    );
    let (_, v) = s.post("/completion", &hot(json!("kt"))).await;
    assert_eq!(ids(&v), ids(&greedy), "letters");
    let (_, v) = s.post("/completion", &hot(json!("t"))).await;
    assert_ne!(ids(&v), ids(&greedy), "top-k left out");
    // The default order where none is given.
    let (_, v) = s.post("/completion", &body(json!({}))).await;
    assert_eq!(
        v["generation_settings"]["samplers"],
        json!([
            "penalties",
            "dry",
            "top_n_sigma",
            "top_k",
            "typ_p",
            "top_p",
            "min_p",
            "xtc",
            "temperature"
        ])
    );
    for bad in [json!(["top_k", "beam"]), json!("kq"), json!(7)] {
        let (st, e) = s.post("/completion", &body(json!({"samplers": bad}))).await;
        assert_eq!(st, 400, "{bad}: {e}");
        assert_eq!(e["error"]["param"], "samplers", "{e}");
    }
    s.stop().await;
}

/// `post_sampling_probs`: `completion_probabilities` gives the
/// probabilities the draw chose from (`prob`, `top_probs`): a greedy pick
/// is certain; after top-k 2 at temperature 1 the two kept tokens share
/// the mass as the model's log-probabilities of them say.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_sampling_probs_are_the_draws() {
    let s = start(Opts::default()).await;
    let (_, model) = s.post("/completion", &body(json!({"n_probs": 2}))).await;
    let first = &model["completion_probabilities"][0]["top_logprobs"];
    let lp = |i: usize| first[i]["logprob"].as_f64().unwrap();
    let (_, greedy) = s
        .post(
            "/completion",
            &body(json!({"n_probs": 3, "post_sampling_probs": true})),
        )
        .await;
    let probs = greedy["completion_probabilities"]
        .as_array()
        .expect("probs");
    assert_eq!(probs.len(), 8);
    for p in probs {
        assert_eq!(p["prob"], 1.0, "{p}");
        assert!(p.get("logprob").is_none(), "{p}");
        let top = p["top_probs"].as_array().unwrap();
        assert_eq!(top.len(), 1, "{p}");
        assert_eq!(top[0]["id"], p["id"]);
    }
    let (_, two) = s
        .post(
            "/completion",
            &body(
                json!({"n_probs": 3, "post_sampling_probs": true, "temperature": 1,
                         "top_k": 2, "top_p": 1, "min_p": 0, "seed": 5}),
            ),
        )
        .await;
    let p0 = &two["completion_probabilities"][0];
    let top = p0["top_probs"].as_array().unwrap();
    assert_eq!(top.len(), 2, "{p0}");
    assert_eq!(
        (&top[0]["id"], &top[1]["id"]),
        (&first[0]["id"], &first[1]["id"])
    );
    let want = 1.0 / (1.0 + (lp(1) - lp(0)).exp());
    let got = top[0]["prob"].as_f64().unwrap();
    assert!((got - want).abs() < 1e-4, "{got} vs {want}");
    let chosen = top
        .iter()
        .find(|t| t["id"] == p0["id"])
        .expect("drawn from the kept");
    assert_eq!(chosen["prob"], p0["prob"]);
    s.stop().await;
}

/// `t_max_predict_ms`: past the limit, the first token that brings a
/// newline ends the reply (a prefix of the unlimited one, ending its line;
/// `stop_type` limit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t_max_predict_ms_ends_at_a_line() {
    let s = start(Opts {
        model: Some(demo_model()),
        ..Opts::default()
    })
    .await;
    let ask = |extra: Value| {
        merged(
            json!({"prompt": "def add(a, b):\n", "n_predict": 96, "ignore_eos": true,
                           "temperature": 0}),
            extra,
        )
    };
    let (_, whole) = s.post("/completion", &ask(json!({}))).await;
    let whole = whole["content"].as_str().unwrap().to_string();
    let half: String = whole.chars().take(whole.chars().count() / 2).collect();
    assert!(half[1..].contains('\n'), "a reply with lines: {whole:?}");
    let (_, v) = s
        .post("/completion", &ask(json!({"t_max_predict_ms": 1})))
        .await;
    let cut = v["content"].as_str().unwrap();
    assert!(
        whole.starts_with(cut) && cut.len() < whole.len(),
        "{cut:?} of {whole:?}"
    );
    assert!(cut.contains('\n'), "{cut:?}");
    assert_eq!(v["stop_type"], "limit", "{v}");
    let (_, v) = s
        .post("/completion", &ask(json!({"t_max_predict_ms": 0})))
        .await;
    assert_eq!(v["content"], whole.as_str(), "0: no limit");
    s.stop().await;
}

/// `/infill`: the prompt in llama-server's fill-in-the-middle layout (the
/// extra files first, then prefix, prompt, suffix around the model's FIM
/// tokens), run as a `/completion` request; bad parts are 400s naming them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infill_builds_the_fim_prompt() {
    // A vocabulary without FIM tokens (the random fixture's): 501.
    let s = start(Opts::default()).await;
    let (st, e) = s
        .post(
            "/infill",
            &json!({"input_prefix": "a", "input_suffix": "b"}),
        )
        .await;
    assert_eq!(st, 501, "{e}");
    assert_eq!(e["error"]["type"], "not_supported_error", "{e}");
    s.stop().await;
    let s = start(Opts {
        model: Some(demo_model()),
        ..Opts::default()
    })
    .await;
    let ask = |extra: Value| {
        merged(
            json!({"input_prefix": "def add(a, b):\n    ", "input_suffix": "\n\nprint(add(1, 2))\n",
                           "input_extra": [{"filename": "util.py", "text": "x = 1\n"}],
                           "prompt": "return", "n_predict": 0}),
            extra,
        )
    };
    let (st, v) = s.post("/infill", &ask(json!({}))).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        v["prompt"],
        "<|repo_name|>myproject\n<|file_sep|>util.py\nx = 1\n<|file_sep|>filename\n\
         <|fim_prefix|>def add(a, b):\n    return<|fim_suffix|>\n\nprint(add(1, 2))\n<|fim_middle|>",
        "{v}"
    );
    // Generated as /completion generates from those ids.
    let (_, v) = s
        .post(
            "/infill",
            &ask(json!({"n_predict": 6, "temperature": 0, "ignore_eos": true})),
        )
        .await;
    assert_eq!(v["tokens_predicted"], 6, "{v}");
    assert!(v["content"].is_string());
    // Ids and text mixed in a part; the extra chunks are optional.
    let tok = rill_tokenizer::Tokenizer::from_gguf_path(&demo_model()).unwrap();
    let ids: Vec<u32> = tok.encode("def add(a, b):\n    ", false);
    let (_, mixed) = s
        .post(
            "/infill",
            &ask(json!({"input_prefix": ids, "input_extra": null})),
        )
        .await;
    let text = mixed["prompt"].as_str().unwrap();
    assert!(
        text.starts_with("<|repo_name|>myproject\n<|file_sep|>filename\n<|fim_prefix|>def add"),
        "{text}"
    );
    for (bad, param) in [
        (json!({"input_suffix": null}), "input_suffix"),
        (json!({"input_prefix": {"a": 1}}), "input_prefix"),
        (json!({"input_extra": "x"}), "input_extra"),
        (json!({"input_extra": [{"filename": "a"}]}), "input_extra"),
        (json!({"prompt": 5}), "prompt"),
        (json!({"input_prefix": [999999999]}), "input_prefix"),
    ] {
        let mut body = ask(json!({}));
        for (k, v) in bad.as_object().unwrap() {
            if v.is_null() && k == "input_suffix" {
                body.as_object_mut().unwrap().remove(k);
            } else {
                body[k] = v.clone();
            }
        }
        let (st, e) = s.post("/infill", &body).await;
        assert_eq!(st, 400, "{bad}: {e}");
        assert_eq!(e["error"]["param"], param, "{bad}: {e}");
    }
    s.stop().await;
}

/// `timings_per_token`: every streamed object (and chat chunk) carries the
/// running timings, their `predicted_n` the tokens so far; without it only
/// the last one has timings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timings_per_token_run_with_the_stream() {
    let s = start(Opts::default()).await;
    let events = |data: Vec<String>| -> Vec<Value> {
        (data.iter())
            .filter_map(|d| serde_json::from_str(d).ok())
            .collect()
    };
    let data = s
        .stream(
            "/completion",
            &body(json!({"stream": true, "timings_per_token": true})),
        )
        .await;
    let objects = events(data);
    let (last, pieces) = objects.split_last().unwrap();
    assert!(!pieces.is_empty());
    for p in pieces {
        assert_eq!(p["timings"]["predicted_n"], p["tokens_predicted"], "{p}");
        assert!(p["timings"]["prompt_n"].as_u64().unwrap() > 0, "{p}");
    }
    assert_eq!(last["timings"]["predicted_n"], 8);
    let data = s
        .stream("/completion", &body(json!({"stream": true})))
        .await;
    let objects = events(data);
    assert!(objects[..objects.len() - 1]
        .iter()
        .all(|p| p.get("timings").is_none()));

    let chat = |per_token: bool| {
        json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6,
               "ignore_eos": true, "temperature": 0, "stream": true,
               "timings_per_token": per_token})
    };
    let chunks = events(s.stream("/v1/chat/completions", &chat(true)).await);
    let counts: Vec<u64> = (chunks.iter())
        .map(|c| {
            c["timings"]["predicted_n"]
                .as_u64()
                .expect("timings on every chunk")
        })
        .collect();
    assert!(counts.windows(2).all(|w| w[0] <= w[1]), "{counts:?}");
    assert_eq!(counts.last(), Some(&6));
    let chunks = events(s.stream("/v1/chat/completions", &chat(false)).await);
    let with: usize = chunks.iter().filter(|c| c["timings"].is_object()).count();
    assert_eq!(with, 1, "the last chunk only");
    s.stop().await;
}

/// llama-server's `return_progress` (its web UI shows it): while the prompt
/// runs, streamed objects without text carry `prompt_progress` (at the
/// start, then after each prefill chunk, up to the whole prompt), before
/// the text; on the chat endpoint beside a role delta, on OpenAI
/// completions with an empty text. Not in replies that do not stream, nor
/// unless asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn return_progress_streams_the_prompts_progress_before_the_text() {
    let s = start(Opts::default()).await;
    let body = json!({"prompt": "Once upon a time there was", "n_predict": 4, "temperature": 0,
                      "stream": true, "return_progress": true, "cache_prompt": false});
    let objects: Vec<Value> = (s.stream("/completion", &body).await.iter())
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let progress: Vec<&Value> = objects
        .iter()
        .filter_map(|o| o.get("prompt_progress"))
        .collect();
    let total = objects[0]["tokens_evaluated"].as_u64().unwrap();
    assert!(progress.len() >= 2, "{objects:?}");
    assert_eq!(progress[0]["processed"], 0);
    assert_eq!(progress.last().unwrap()["processed"], total);
    assert!(progress
        .iter()
        .all(|p| p["total"] == total && p["cache"] == 0));
    let first_text = objects.iter().position(|o| o["content"] != "").unwrap();
    assert!(objects[first_text..]
        .iter()
        .all(|o| o.get("prompt_progress").is_none()));
    let plain = merged(body.clone(), json!({"return_progress": false}));
    let lines = s.stream("/completion", &plain).await;
    assert!(lines.iter().all(|l| !l.contains("prompt_progress")));
    let (_, whole) = s
        .post("/completion", &merged(body, json!({"stream": false})))
        .await;
    assert!(whole.get("prompt_progress").is_none(), "{whole}");

    let chat = json!({"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 3,
                      "stream": true, "return_progress": true});
    for c in progress_chunks(&s, "/v1/chat/completions", &chat).await {
        assert_eq!(c["choices"][0]["delta"]["role"], "assistant");
    }
    let cmpl = json!({"prompt": "Once upon a time", "max_tokens": 3, "stream": true,
                      "return_progress": true});
    for c in progress_chunks(&s, "/v1/completions", &cmpl).await {
        assert_eq!(c["choices"][0]["text"], "");
    }
    s.stop().await;
}

/// The chunks of an OpenAI stream that carry `prompt_progress`: at least
/// one, the last at the whole prompt.
async fn progress_chunks(s: &TestServer, path: &str, body: &Value) -> Vec<Value> {
    let with: Vec<Value> = (chunks(&s.stream(path, body).await).into_iter())
        .filter(|c| c.get("prompt_progress").is_some())
        .collect();
    assert!(!with.is_empty(), "{path}: no progress");
    let last = &with.last().unwrap()["prompt_progress"];
    assert_eq!(last["processed"], last["total"], "{path}");
    with
}
