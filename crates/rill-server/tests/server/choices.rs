//! Forced tool calls (`tool_choice` required / named, `parallel_tool_calls`),
//! several choices (`n`), `logit_bias` and assistant prefill, on the fixture
//! model (random weights: whatever it would write, the constraint decides).

use crate::common::*;
use serde_json::{json, Value};

fn tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "get_weather", "description": "Weather",
            "parameters": {"type": "object", "properties": {
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 5},
                "alerts": {"type": "boolean"}},
            "required": ["unit", "days"]}}},
        {"type": "function", "function": {"name": "get_time", "description": "Time",
            "parameters": {"type": "object", "properties": {
                "utc": {"type": "boolean"}}, "required": ["utc"]}}}
    ])
}

fn check_args(call: &Value) {
    let f = &call["function"];
    let args: Value = serde_json::from_str(f["arguments"].as_str().unwrap()).unwrap();
    match f["name"].as_str().unwrap() {
        "get_weather" => {
            assert!(["celsius", "fahrenheit"].contains(&args["unit"].as_str().unwrap()));
            assert!((1..=5).contains(&args["days"].as_i64().unwrap()), "{args}");
            assert!(args.get("alerts").is_none_or(Value::is_boolean), "{args}");
        }
        "get_time" => assert!(args["utc"].is_boolean(), "{args}"),
        other => panic!("unknown function {other}"),
    }
}

fn body(extra: Value) -> Value {
    merged(
        json!({
            "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
            "tools": tools(), "max_tokens": 160, "temperature": 0,
            "chat_template_kwargs": {"enable_thinking": false},
        }),
        extra,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_calls_follow_the_tool_schema() {
    let s = start(Opts::default()).await;
    // required: one or more calls of the offered tools.
    let (st, v) = s
        .post(
            "/v1/chat/completions",
            &body(json!({"tool_choice": "required"})),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    let choice = &v["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{v}");
    let calls = choice["message"]["tool_calls"].as_array().unwrap();
    assert!(!calls.is_empty());
    calls.iter().for_each(check_args);
    // A named function: exactly that one, once.
    let named = json!({"type": "function", "function": {"name": "get_time"}});
    let (st, v) = s
        .post("/v1/chat/completions", &body(json!({"tool_choice": named})))
        .await;
    assert_eq!(st, 200, "{v}");
    let calls = v["choices"][0]["message"]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "{v}");
    assert_eq!(calls[0]["function"]["name"], "get_time");
    check_args(&calls[0]);
    // parallel_tool_calls false: exactly one call; streamed the same way.
    let lines = s
        .stream(
            "/v1/chat/completions",
            &body(json!({"tool_choice": "required", "parallel_tool_calls": false, "stream": true})),
        )
        .await;
    let chunks = chunks(&lines);
    let (calls, pieces) = joined_tool_calls(&chunks);
    assert_eq!(calls.len(), 1, "{chunks:?}");
    check_args(&calls[0]);
    // The call streamed: its name first, then its arguments one by one.
    assert!(pieces > 2, "{pieces} pieces");
    let fin = chunks
        .iter()
        .find_map(|c| c["choices"][0]["finish_reason"].as_str())
        .unwrap();
    assert_eq!(fin, "tool_calls");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tool_choices_are_400s() {
    let s = start(Opts::default()).await;
    let no_tools =
        json!({"messages": [{"role": "user", "content": "hi"}], "tool_choice": "required"});
    let cases = [
        (no_tools, "tool_choice"),
        (body(json!({"tool_choice": "always"})), "tool_choice"),
        (
            body(json!({"tool_choice": {"type": "function", "function": {"name": "nope"}}})),
            "tool_choice",
        ),
        (
            body(json!({"tool_choice": "required", "response_format": {"type": "json_object"}})),
            "tool_choice",
        ),
        (body(json!({"n": 0})), "n"),
        (body(json!({"n": 99})), "n"),
        (body(json!({"logit_bias": {"x": 1}})), "logit_bias"),
        (body(json!({"logit_bias": {"5": 101}})), "logit_bias"),
        (body(json!({"logit_bias": {"5": "a"}})), "logit_bias"),
        (body(json!({"logit_bias": {"99999999": 1}})), "logit_bias"),
    ];
    for (b, param) in cases {
        let (st, v) = s.post("/v1/chat/completions", &b).await;
        assert_error(st, &v, 400, Some(param));
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_choices_share_the_prompt() {
    let s = start(Opts::default()).await;
    let b = json!({
        "messages": [{"role": "user", "content": "Tell me about Python lists and tuples."}],
        "max_tokens": 6, "n": 3, "seed": 11, "temperature": 1.0, "ignore_eos": true,
    });
    let (st, v) = s.post("/v1/chat/completions", &b).await;
    assert_eq!(st, 200, "{v}");
    let choices = v["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 3);
    for (i, c) in choices.iter().enumerate() {
        assert_eq!(c["index"], i);
    }
    assert_eq!(v["usage"]["completion_tokens"], 18, "{v}");
    // Seeded: the same request gives the same choices again.
    let (_, again) = s.post("/v1/chat/completions", &b).await;
    let texts = |v: &Value| -> Vec<String> {
        v["choices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                c["message"]["reasoning_content"].to_string() + &c["message"]["content"].to_string()
            })
            .collect()
    };
    assert_eq!(texts(&v), texts(&again));
    // Streamed: every index, each with its finish, then one usage chunk;
    // the later choices resumed from the first one's prompt in the cache.
    let mut sb = b.clone();
    sb["messages"][0]["content"] = json!("A new prompt about dictionaries, not cached yet.");
    sb["stream"] = json!(true);
    sb["stream_options"] = json!({"include_usage": true});
    let lines = s.stream("/v1/chat/completions", &sb).await;
    assert_eq!(lines.last().map(String::as_str), Some("[DONE]"));
    let chunks = chunks(&lines);
    let mut finishes = vec![None; 3];
    for c in &chunks {
        if let Some(ch) = c["choices"].as_array().and_then(|a| a.first()) {
            if let Some(f) = ch["finish_reason"].as_str() {
                let i = ch["index"].as_u64().unwrap() as usize;
                finishes[i] = Some((f.to_string(), ch.clone(), c["timings"].clone()));
            }
        }
    }
    assert!(finishes.iter().all(Option::is_some), "{chunks:?}");
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["completion_tokens"], 18);
    let prompt = usage["usage"]["prompt_tokens"].as_u64().unwrap();
    let cache_n: Vec<u64> = chunks
        .iter()
        .filter(|c| c["choices"].as_array().is_some_and(|a| !a.is_empty()))
        .filter_map(|c| c["timings"]["cache_n"].as_u64())
        .collect();
    assert_eq!(
        cache_n.len(),
        3,
        "each choice's finish chunk carries its timings"
    );
    assert_eq!(
        cache_n.iter().filter(|&&n| n == 0).count(),
        1,
        "{cache_n:?}"
    );
    assert!(
        cache_n.iter().filter(|&&n| n > 0 && n < prompt).count() == 2,
        "the other two resumed from the cache: {cache_n:?} of {prompt}"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logit_bias_bans_and_forces() {
    let s = start(Opts::default()).await;
    let b = json!({"prompt": "The list of numbers", "max_tokens": 8, "temperature": 0,
                   "return_token_ids": true, "ignore_eos": true});
    let (_, plain) = s.post("/v1/completions", &b).await;
    let first = plain["choices"][0]["token_ids"][0].as_u64().unwrap();
    // Banning the greedy first token changes the first token.
    let mut banned = b.clone();
    banned["logit_bias"] = json!({first.to_string(): -100});
    let (st, v) = s.post("/v1/completions", &banned).await;
    assert_eq!(st, 200, "{v}");
    let ids = v["choices"][0]["token_ids"].as_array().unwrap();
    assert_eq!(ids.len(), 8);
    assert!(ids.iter().all(|t| t.as_u64() != Some(first)), "{v}");
    // +100 on a token makes it every token.
    let forced = s.state.tok.encode(" banana", false)[0];
    let mut f = b.clone();
    f["logit_bias"] = json!({forced.to_string(): 100});
    let (_, v) = s.post("/v1/completions", &f).await;
    let ids = v["choices"][0]["token_ids"].as_array().unwrap();
    assert!(ids.iter().all(|t| t.as_u64() == Some(forced as u64)), "{v}");
    // And in a stream, the same tokens.
    f["stream"] = json!(true);
    let lines = s.stream("/v1/completions", &f).await;
    let text: String = chunks(&lines)
        .iter()
        .filter_map(|c| c["choices"][0]["text"].as_str().map(str::to_string))
        .collect();
    assert_eq!(text, v["choices"][0]["text"].as_str().unwrap());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_final_assistant_message_is_continued() {
    let s = start(Opts::default()).await;
    let b = json!({
        "messages": [{"role": "user", "content": "Name a colour."},
                     {"role": "assistant", "content": "My answer is"}],
        "max_tokens": 4, "temperature": 0,
    });
    let (st, v) = s.post("/v1/chat/completions", &b).await;
    assert_eq!(st, 200, "{v}");
    let mut again = b.clone();
    again["continue_final_message"] = json!(false);
    let (_, fresh) = s.post("/v1/chat/completions", &again).await;
    assert!(
        v["usage"]["prompt_tokens"].as_u64() < fresh["usage"]["prompt_tokens"].as_u64(),
        "a continued turn has no end-of-turn and no new header: {v} vs {fresh}"
    );
    // Anthropic's prefill goes the same way.
    let (st, m) = s
        .post(
            "/v1/messages",
            &json!({"max_tokens": 4, "messages": b["messages"], "temperature": 0}),
        )
        .await;
    assert_eq!(st, 200, "{m}");
    s.stop().await;
}

/// llama-server's `grammar` field in GBNF (and vLLM's `guided_grammar`):
/// the reply has the grammar's shape, in completions and chat alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gbnf_grammar_shapes_the_reply() {
    let s = start(Opts::default()).await;
    let gbnf = "root ::= answer \" \" digit{2}\nanswer ::= \"yes\" | \"no\"\ndigit ::= [0-9]\n";
    let shaped = |t: &str| {
        let (a, d) = t.split_once(' ').unwrap_or_else(|| panic!("{t:?}"));
        (a == "yes" || a == "no") && d.len() == 2 && d.bytes().all(|b| b.is_ascii_digit())
    };
    for seed in 0..3 {
        let b = json!({"prompt": "Is it raining?", "max_tokens": 20, "seed": seed,
                       "temperature": 1.0, "grammar": gbnf});
        let (st, v) = s.post("/v1/completions", &b).await;
        assert_eq!(st, 200, "{v}");
        let text = v["choices"][0]["text"].as_str().unwrap();
        assert!(shaped(text), "{text:?}");
        let c = json!({"messages": [{"role": "user", "content": "Is it raining?"}],
                       "enable_thinking": false, "max_tokens": 20, "seed": seed,
                       "temperature": 1.0, "guided_grammar": gbnf});
        let (st, v) = s.post("/v1/chat/completions", &c).await;
        assert_eq!(st, 200, "{v}");
        let text = v["choices"][0]["message"]["content"].as_str().unwrap();
        assert!(shaped(text), "{text:?}");
    }
    // A broken one is a 400 that says what is wrong.
    let b = json!({"prompt": "x", "grammar": "root ::= answer"});
    let (st, v) = s.post("/v1/completions", &b).await;
    assert_eq!(st, 400, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("answer"),
        "{v}"
    );
    s.stop().await;
}

/// `n > 1` on `/v1/completions`: choice `i` is the request with seed
/// `seed + i` alone; streamed, the same texts under their indexes and one
/// usage chunk for all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_give_several_choices() {
    let s = start(Opts::default()).await;
    let b = json!({"prompt": "Lists and tuples in Python", "max_tokens": 6, "n": 3, "seed": 21,
                   "temperature": 1.0, "ignore_eos": true, "return_token_ids": true});
    let (st, v) = s.post("/v1/completions", &b).await;
    assert_eq!(st, 200, "{v}");
    let choices = v["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 3);
    assert_eq!(v["usage"]["completion_tokens"], 18, "{v}");
    let texts: Vec<String> = choices
        .iter()
        .map(|c| c["text"].as_str().unwrap().to_string())
        .collect();
    for (i, c) in choices.iter().enumerate() {
        assert_eq!(c["index"], i);
        assert_eq!(c["token_ids"].as_array().unwrap().len(), 6, "{c}");
        let mut one = b.clone();
        one["n"] = json!(1);
        one["seed"] = json!(21 + i);
        let (_, alone) = s.post("/v1/completions", &one).await;
        assert_eq!(alone["choices"][0]["text"], c["text"], "choice {i}");
    }
    assert!(texts[0] != texts[1] || texts[1] != texts[2], "{texts:?}");
    let mut sb = b.clone();
    sb["stream"] = json!(true);
    sb["stream_options"] = json!({"include_usage": true});
    let lines = s.stream("/v1/completions", &sb).await;
    assert_eq!(lines.last().map(String::as_str), Some("[DONE]"));
    let chunks = chunks(&lines);
    let mut streamed = vec![String::new(); 3];
    let mut finished = [false; 3];
    for c in &chunks {
        if let Some(ch) = c["choices"].as_array().and_then(|a| a.first()) {
            let i = ch["index"].as_u64().unwrap() as usize;
            streamed[i] += ch["text"].as_str().unwrap_or_default();
            finished[i] |= ch["finish_reason"].is_string();
        }
    }
    assert_eq!(streamed, texts);
    assert_eq!(finished, [true; 3]);
    let usage: Vec<_> = chunks.iter().filter(|c| c["usage"].is_object()).collect();
    assert_eq!(usage.len(), 1, "{chunks:?}");
    assert_eq!(usage[0]["usage"]["completion_tokens"], 18);
    s.stop().await;
}

/// A batch of prompts on `/v1/completions` (as vLLM and llama-server take
/// it): `n` choices per prompt, prompt-major (choice `p·n + j`), each the
/// text its prompt gives alone; usage counts every prompt once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_take_a_batch_of_prompts() {
    let s = start(Opts::default()).await;
    let prompts = ["Lists and tuples in Python", "The sum of"];
    let alone = |p: &str| {
        json!({"prompt": p, "max_tokens": 5, "temperature": 0, "ignore_eos": true,
               "return_token_ids": true})
    };
    let mut singles = Vec::new();
    for p in prompts {
        let (st, v) = s.post("/v1/completions", &alone(p)).await;
        assert_eq!(st, 200, "{v}");
        singles.push(v);
    }
    let mut b = alone("");
    b["prompt"] = json!(prompts);
    b["n"] = json!(2);
    let (st, v) = s.post("/v1/completions", &b).await;
    assert_eq!(st, 200, "{v}");
    let choices = v["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 4, "{v}");
    for (i, c) in choices.iter().enumerate() {
        let single = &singles[i / 2]["choices"][0];
        assert_eq!(c["index"], i);
        assert_eq!(c["text"], single["text"], "choice {i}");
        assert_eq!(
            c["prompt_token_ids"], single["prompt_token_ids"],
            "choice {i}"
        );
    }
    let prompt_tokens = |v: &Value| v["usage"]["prompt_tokens"].as_u64().unwrap();
    assert_eq!(
        prompt_tokens(&v),
        prompt_tokens(&singles[0]) + prompt_tokens(&singles[1])
    );
    assert_eq!(v["usage"]["completion_tokens"], 20, "{v}");

    // The same batch as token ids, streamed: every choice under its index.
    let ids: Vec<Value> = singles
        .iter()
        .map(|v| v["choices"][0]["prompt_token_ids"].clone())
        .collect();
    let mut sb = b.clone();
    sb["prompt"] = json!(ids);
    sb["stream"] = json!(true);
    sb["stream_options"] = json!({"include_usage": true});
    let chunks = chunks(&s.stream("/v1/completions", &sb).await);
    let mut streamed = vec![String::new(); 4];
    for c in &chunks {
        if let Some(ch) = c["choices"].as_array().and_then(|a| a.first()) {
            streamed[ch["index"].as_u64().unwrap() as usize] +=
                ch["text"].as_str().unwrap_or_default();
        }
    }
    for (i, text) in streamed.iter().enumerate() {
        assert_eq!(
            text,
            singles[i / 2]["choices"][0]["text"].as_str().unwrap(),
            "choice {i}"
        );
    }
    let usage: Vec<_> = chunks.iter().filter(|c| c["usage"].is_object()).collect();
    assert_eq!(usage.len(), 1, "{chunks:?}");
    assert_eq!(usage[0]["usage"]["prompt_tokens"], prompt_tokens(&v));

    // Too many sequences, an empty list, an empty prompt inside: 400s.
    for (prompt, n) in [
        (json!(vec!["a"; 33]), 2),
        (json!(Vec::<String>::new()), 1),
        (json!(["a", ""]), 1),
        (json!([[1, 2], []]), 1),
    ] {
        let (st, v) = s
            .post(
                "/v1/completions",
                &json!({"prompt": prompt, "n": n, "max_tokens": 2}),
            )
            .await;
        assert_eq!(st, 400, "{prompt}: {v}");
        assert_eq!(v["error"]["param"], "prompt", "{v}");
    }
    s.stop().await;
}
