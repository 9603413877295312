//! Fuzzing the constraint fields, bounded and on loopback: hostile and
//! malformed JSON schemas, regexes, choices and grammars, in every field a
//! client may carry them in (OpenAI's `response_format` and tools, vLLM's
//! `structured_outputs` and `guided_*`, llama-server's `json_schema` and
//! `grammar`, Anthropic's `input_schema`, the Responses API's `text.format`
//! and function tools), and malformed bodies of every generating endpoint. Each request must get a 200 or a
//! 400 with a message — never a 5xx, a dropped connection or a sequence
//! that hangs — and the server must serve normally afterwards.

use crate::common::*;
use rill_sampler::Rng;
use serde_json::{json, Value};
use std::time::Duration;

/// Schemas written to break a compiler: recursion, contradictions, huge
/// bounds, catastrophic patterns, wrong types where schemas are expected.
fn hostile_schemas() -> Vec<Value> {
    let mut deep = json!({"type": "string"});
    for _ in 0..200 {
        deep = json!({"type": "object", "properties": {"a": deep}, "required": ["a"]});
    }
    let mut deep_array = json!(1);
    for _ in 0..300 {
        deep_array = json!([deep_array]);
    }
    let many_enum: Vec<Value> = (0..5000).map(|i| json!(format!("v{i}"))).collect();
    let many_props: serde_json::Map<String, Value> = (0..2000)
        .map(|i| (format!("p{i}"), json!({"type": "integer"})))
        .collect();
    vec![
        json!({}),
        json!(true),
        json!(false),
        json!({"$ref": "#"}),
        json!({"$ref": "#/definitions/missing"}),
        json!({"$ref": "http://example.com/schema.json"}),
        json!({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}),
        json!({"$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}, "required": ["next"]}}, "$ref": "#/$defs/n"}),
        json!({"type": "nonsense"}),
        json!({"type": ["string", 5, null]}),
        json!({"type": 17}),
        json!({"properties": 5}),
        json!({"properties": {"a": 5, "b": "x", "c": null}}),
        json!({"required": "a"}),
        json!({"type": "object", "required": ["x"], "additionalProperties": false}),
        json!({"allOf": [{"type": "string"}, {"type": "integer"}]}),
        json!({"anyOf": []}),
        json!({"oneOf": [{}, {}, {}]}),
        json!({"not": {}}),
        json!({"enum": []}),
        json!({"enum": many_enum}),
        json!({"const": {"a": [1, 2, {"b": null}]}}),
        json!({"type": "object", "properties": many_props}),
        json!({"type": "integer", "minimum": 10, "maximum": 1}),
        json!({"type": "number", "exclusiveMinimum": 1e308, "multipleOf": 1e-308}),
        json!({"type": "string", "minLength": 1_000_000_000u64}),
        json!({"type": "string", "minLength": 10, "maxLength": 2}),
        json!({"type": "string", "minLength": -5}),
        json!({"type": "array", "minItems": 100_000_000u64, "items": {"type": "integer"}}),
        json!({"type": "array", "items": false, "minItems": 1}),
        json!({"type": "array", "prefixItems": [{"type": "string"}], "items": 5}),
        json!({"type": "string", "pattern": "(a+)+$"}),
        json!({"type": "string", "pattern": "(a|a?)+b{1000}"}),
        json!({"type": "string", "pattern": "["}),
        json!({"type": "string", "pattern": "a{99999999}"}),
        json!({"type": "string", "pattern": "\\p{NoSuchClass}"}),
        json!({"type": "string", "pattern": "(?<=a)b"}),
        json!({"type": "string", "format": "no-such-format"}),
        json!({"type": "string", "format": "date-time"}),
        json!({"type": "string", "enum": ["\u{0}", "\u{fffd}\u{fffd}", "\\", "\""]}),
        json!({"patternProperties": {"[": {}}}),
        json!({"propertyNames": {"pattern": "^x+$"}, "minProperties": 3, "maxProperties": 1}),
        json!({"if": {"type": "string"}, "then": {"type": "integer"}}),
        json!({"x-guidance": "not an object"}),
        json!({"x-guidance": {"whitespace_flexible": 5, "lenient": "yes"}}),
        json!({"x-guidance": {"item_separator": "\u{0}", "key_separator": ""}}),
        json!({"type": "object", "properties": {"\u{0}": {"type": "string"}, "": {}}}),
        deep,
        json!({"default": deep_array}),
        json!([1, 2, 3]),
        json!("a string"),
        json!(12),
        json!(null),
    ]
}

fn hostile_regexes() -> Vec<String> {
    vec![
        "".into(),
        "[".into(),
        "(".repeat(100),
        format!("{}a{}", "(".repeat(60), ")".repeat(60)),
        "a{99999999}".into(),
        "(a+)+$".into(),
        "(a|aa)*c{0,1000}".into(),
        "\\".into(),
        "[^\\s\\S]".into(),
        "\u{0}+".into(),
        "(?i)[a-z]{5000}".into(),
        "x".repeat(20_000),
        (0..3000)
            .map(|i| format!("w{i}"))
            .collect::<Vec<_>>()
            .join("|"),
        "\\p{Greek}{3}\\d+".into(),
        "(?P<n>a)(?P=n)".into(),
    ]
}

fn hostile_grammars() -> Vec<String> {
    vec![
        "".into(),
        "start:".into(),
        "start: start".into(),
        "start: start \"a\" | \"a\"".into(),
        "start: a\na: b\nb: a".into(),
        "start: missing_rule".into(),
        "start: /[^\\s\\S]/".into(),
        "start: \"a\"{0,100000000}".into(),
        "start: /(a+)+$/".into(),
        "start: %json {\"$ref\": \"#\"}".into(),
        "start: %json {\"type\": 5}".into(),
        "start: %json not json".into(),
        "%llguidance {}\nstart: \"x\"".into(),
        "%llguidance {\"no\": \"such option\"}\nstart: \"x\"".into(),
        "%import common.WORD\nstart: WORD".into(),
        "root ::= \"a\" root | \"b\"".into(),
        "root ::= [a-".into(),
        "root ::= (((((\"a\"".into(),
        format!("start: {}", "(".repeat(70)),
        "start: \"\\u0000\"+".into(),
        (0..2000)
            .map(|i| format!("r{i}: \"t{i}\"\n"))
            .collect::<String>()
            + "start: r0",
        "start: <[999999999]>".into(),
        "start: <|no_such_special|>".into(),
        "\u{0}\u{1}\u{2}".into(),
    ]
}

/// A random JSON value, deep or wide or odd, from `rng`.
fn random_value(rng: &mut Rng, depth: usize) -> Value {
    const KEYS: &[&str] = &[
        "type",
        "properties",
        "items",
        "$ref",
        "pattern",
        "enum",
        "anyOf",
        "allOf",
        "oneOf",
        "required",
        "minLength",
        "maxLength",
        "minimum",
        "maximum",
        "additionalProperties",
        "format",
        "const",
        "$defs",
        "not",
        "x-guidance",
        "prefixItems",
        "minItems",
    ];
    const TYPES: &[&str] = &[
        "string", "integer", "number", "boolean", "object", "array", "null", "any",
    ];
    match rng.below(if depth > 6 { 6 } else { 9 }) {
        0 => Value::Null,
        1 => json!(rng.below(2) == 0),
        2 => json!(rng.next_u64() as i64 >> rng.below(64)),
        3 => json!(rng.next_f64() * 1e6 - 5e5),
        4 => json!(TYPES[rng.below(TYPES.len())]),
        5 => {
            let n = rng.below(12);
            let s: String = (0..n)
                .map(|_| char::from_u32(rng.below(0x3000) as u32).unwrap_or('?'))
                .collect();
            json!(s)
        }
        6 | 7 => {
            let n = rng.below(4);
            let mut o = serde_json::Map::new();
            for _ in 0..n {
                let k = KEYS[rng.below(KEYS.len())].to_string();
                o.insert(k, random_value(rng, depth + 1));
            }
            Value::Object(o)
        }
        _ => Value::Array(
            (0..rng.below(4))
                .map(|_| random_value(rng, depth + 1))
                .collect(),
        ),
    }
}

/// `v` with one node somewhere replaced by a random value.
fn mutate(rng: &mut Rng, v: &Value) -> Value {
    let mut out = v.clone();
    let mut node = &mut out;
    loop {
        let children = match node {
            Value::Object(o) if !o.is_empty() => o.len(),
            Value::Array(a) if !a.is_empty() => a.len(),
            _ => 0,
        };
        if children == 0 || rng.below(3) == 0 {
            break;
        }
        let i = rng.below(children);
        node = match node {
            Value::Object(o) => o.values_mut().nth(i).unwrap(),
            Value::Array(a) => &mut a[i],
            _ => unreachable!(),
        };
    }
    *node = random_value(rng, 0);
    out
}

fn valid_schemas() -> Vec<Value> {
    vec![
        json!({"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
               "age": {"type": "integer", "minimum": 0}}, "required": ["name", "age"]}),
        json!({"type": "array", "items": {"enum": ["a", "b", 3]}, "maxItems": 3}),
        json!({"anyOf": [{"type": "string", "pattern": "^[a-z]{1,4}$"}, {"type": "null"}]}),
        json!({"$defs": {"p": {"type": "object", "properties": {"x": {"type": "number"}}}},
               "type": "object", "properties": {"p": {"$ref": "#/$defs/p"}}}),
    ]
}

/// A chat request asking for `spec` in the field `carrier`.
fn chat_body(carrier: usize, spec: &Value, thinking: bool) -> (&'static str, Value) {
    let mut b = json!({
        "messages": [{"role": "user", "content": "Answer in the format asked."}],
        "max_tokens": 6,
        "temperature": 0,
        "chat_template_kwargs": {"enable_thinking": thinking},
    });
    let tool = |schema: &Value| json!([{"type": "function", "function": {"name": "f", "description": "a tool", "parameters": schema}}]);
    match carrier {
        0 => {
            b["response_format"] = json!({"type": "json_schema", "json_schema": {"name": "x", "schema": spec, "strict": true}})
        }
        1 => b["json_schema"] = spec.clone(),
        2 => b["structured_outputs"] = json!({"json": spec}),
        3 => b["guided_json"] = spec.clone(),
        4 => {
            b["tools"] = tool(spec);
            b["tool_choice"] = json!("required");
        }
        5 => {
            b["tools"] = tool(spec);
            b["tool_choice"] = json!({"type": "function", "function": {"name": "f"}});
        }
        6 => {
            let body = json!({
                "model": MODEL_ID, "max_tokens": 6,
                "messages": [{"role": "user", "content": "Use the tool."}],
                "tools": [{"name": "f", "description": "a tool", "input_schema": spec}],
                "tool_choice": {"type": "any"},
            });
            return ("/v1/messages", body);
        }
        8 | 9 => {
            let mut body = json!({
                "input": "Answer in the format asked.", "max_output_tokens": 6,
                "temperature": 0, "reasoning": {"effort": "none"},
            });
            if carrier == 8 {
                body["text"] = json!({"format": {"type": "json_schema", "name": "x", "schema": spec, "strict": true}});
            } else {
                body["tools"] = json!([{"type": "function", "name": "f", "parameters": spec}]);
                body["tool_choice"] = json!("required");
            }
            return ("/v1/responses", body);
        }
        // A schema passed as a JSON string.
        _ => {
            b["response_format"] =
                json!({"type": "json_schema", "json_schema": {"schema": spec.to_string()}})
        }
    }
    ("/v1/chat/completions", b)
}

fn text_body(field: usize, text: &str) -> Value {
    let mut b = json!({
        "messages": [{"role": "user", "content": "Go."}],
        "max_tokens": 6,
        "chat_template_kwargs": {"enable_thinking": false},
    });
    match field {
        0 => b["grammar"] = json!(text),
        1 => b["structured_outputs"] = json!({"grammar": text}),
        2 => b["guided_grammar"] = json!(text),
        3 => b["guided_regex"] = json!(text),
        _ => b["structured_outputs"] = json!({"regex": text}),
    }
    b
}

/// Malformed bodies of the Responses and Messages APIs and of completions:
/// wrong shapes where items, content blocks, tools and formats go.
fn malformed_other_bodies() -> Vec<(&'static str, Value)> {
    let responses = |extra: Value| {
        let b = merged(json!({"input": "x", "max_output_tokens": 4}), extra);
        ("/v1/responses", b)
    };
    let messages = |extra: Value| {
        let b = merged(
            json!({"model": MODEL_ID, "max_tokens": 4,
                           "messages": [{"role": "user", "content": "x"}]}),
            extra,
        );
        ("/v1/messages", b)
    };
    vec![
        responses(json!({"input": 5})),
        responses(json!({"input": [5, null]})),
        responses(json!({"input": [{"type": "no_such_item"}]})),
        responses(json!({"input": [{"role": "wizard", "content": "x"}]})),
        responses(json!({"input": [{"type": "function_call_output", "output": {"a": 1}}]})),
        responses(json!({"input": [{"role": "user", "content": [{"type": "input_text"}]}]})),
        responses(json!({"text": {"format": {"type": "json_schema"}}})),
        responses(json!({"text": {"format": {"type": "xml"}}})),
        responses(json!({"text": {"format": "json"}})),
        responses(json!({"tools": "f"})),
        responses(json!({"tools": [{"type": "function"}]})),
        responses(
            json!({"tools": [{"type": "function", "name": "f", "parameters": 7}], "tool_choice": "required"}),
        ),
        responses(json!({"tool_choice": {"type": "function", "name": "missing"}})),
        responses(json!({"max_output_tokens": -3})),
        responses(json!({"instructions": ["a"]})),
        messages(json!({"messages": "x"})),
        messages(json!({"messages": [{"role": "user", "content": [{"type": "no_such_block"}]}]})),
        messages(json!({"messages": [{"role": "user", "content": [{"type": "tool_result"}]}]})),
        messages(json!({"system": 5})),
        messages(json!({"max_tokens": -1})),
        messages(json!({"tools": [{"name": 5}]})),
        messages(
            json!({"tools": [{"name": "f", "input_schema": "x"}], "tool_choice": {"type": "tool"}}),
        ),
        messages(json!({"stop_sequences": 3})),
        ("/v1/completions", json!({"prompt": {"a": 1}})),
        ("/v1/completions", json!({"prompt": [[1, -2]]})),
        ("/v1/completions", json!({"prompt": "x", "n": 99})),
        ("/v1/completions/render", json!({"prompt": [1.5]})),
        ("/v1/chat/completions/render", json!({"messages": 4})),
    ]
}

/// Malformed carriers: the right field holding the wrong shape.
fn malformed_bodies() -> Vec<Value> {
    let user = json!([{"role": "user", "content": "x"}]);
    let with = |k: &str, v: Value| {
        let mut b = json!({"messages": user, "max_tokens": 4});
        b[k] = v;
        b
    };
    vec![
        with("response_format", json!(5)),
        with("response_format", json!({"type": "json_schema"})),
        with("response_format", json!({"type": "yaml"})),
        with(
            "response_format",
            json!({"type": "json_schema", "json_schema": {"schema": "{not json"}}),
        ),
        with(
            "response_format",
            json!({"type": "json_schema", "json_schema": 7}),
        ),
        with("structured_outputs", json!([1, 2])),
        with("structured_outputs", json!({"json": {}, "regex": "a"})),
        with("structured_outputs", json!({"nothing": 1})),
        with("structured_outputs", json!({"choice": []})),
        with("structured_outputs", json!({"choice": [1, null]})),
        with("guided_choice", json!([])),
        with("guided_choice", json!("a")),
        with(
            "guided_choice",
            json!((0..5000).map(|i| format!("c{i}")).collect::<Vec<_>>()),
        ),
        with("guided_regex", json!(5)),
        with("grammar", json!({"start": "x"})),
        with("json_schema", json!("{\"type\":")),
        with("tool_choice", json!("required")),
        with(
            "tool_choice",
            json!({"type": "function", "function": {"name": "missing"}}),
        ),
        with(
            "tools",
            json!([{"type": "function", "function": {"name": "f", "parameters": "x"}}]),
        ),
        with("tools", json!([{"type": "function"}])),
        with("tools", json!("not a list")),
        with("parallel_tool_calls", json!("yes")),
    ]
}

/// What a fuzzed request may get: a 200 with choices (or Anthropic
/// content), or a 400 saying what is wrong.
fn assert_answer(case: &str, status: u16, body: &Value) {
    match status {
        200 => assert!(
            body.get("choices").is_some()
                || body.get("content").is_some()
                || body.get("output").is_some(),
            "{case}: a 200 without a reply: {body}"
        ),
        400 => {
            let msg = body["error"]["message"].as_str().unwrap_or_default();
            assert!(!msg.is_empty(), "{case}: a 400 without a message: {body}");
            assert!(!msg.contains("panicked"), "{case}: {msg}");
        }
        _ => panic!("{case}: status {status}: {body}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_constraints_get_a_400_or_an_answer_never_a_crash_or_a_hang() {
    let s = start(Opts::default()).await;
    let mut cases: Vec<(String, &'static str, Value)> = Vec::new();
    for (i, schema) in hostile_schemas().iter().enumerate() {
        for carrier in 0..10 {
            let (path, body) = chat_body(carrier, schema, i % 3 == 0);
            cases.push((format!("schema {i} in carrier {carrier}"), path, body));
        }
    }
    // Regexes in fields 3 and 4 of `text_body`, grammars in 0 to 2.
    let texts = [
        (hostile_regexes(), "regex", 3..5),
        (hostile_grammars(), "grammar", 0..3),
    ];
    for (list, what, fields) in texts {
        for (i, text) in list.iter().enumerate() {
            for field in fields.clone() {
                let body = text_body(field, text);
                cases.push((
                    format!("{what} {i} in field {field}"),
                    "/v1/chat/completions",
                    body,
                ));
            }
        }
    }
    for (i, body) in malformed_bodies().into_iter().enumerate() {
        cases.push((format!("malformed {i}"), "/v1/chat/completions", body));
    }
    for (i, (path, body)) in malformed_other_bodies().into_iter().enumerate() {
        cases.push((format!("malformed {path} {i}"), path, body));
    }
    // Seeded random mutations of valid schemas.
    let mut rng = Rng::new(0x5eed);
    let valid = valid_schemas();
    for i in 0..160 {
        let mut schema = valid[rng.below(valid.len())].clone();
        for _ in 0..1 + rng.below(3) {
            schema = mutate(&mut rng, &schema);
        }
        let (path, body) = chat_body(rng.below(10), &schema, rng.below(4) == 0);
        cases.push((format!("mutation {i}: {schema}"), path, body));
    }
    let total = cases.len();
    // Four at a time: hostile constraints share engine steps with each other.
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let (mut ok, mut refused) = (0, 0);
    for group in cases.chunks(4) {
        let mut tasks = Vec::new();
        for (case, path, body) in group.iter().cloned() {
            let (client, url) = (client.clone(), s.url(path));
            tasks.push(tokio::spawn(async move {
                let r = client.post(url).json(&body).send().await;
                let r = r.unwrap_or_else(|e| panic!("{case}: no answer (hung or dropped): {e}"));
                let status = r.status().as_u16();
                let text = r.text().await.unwrap_or_else(|e| panic!("{case}: {e}"));
                let v: Value = serde_json::from_str(&text)
                    .unwrap_or_else(|e| panic!("{case}: not JSON ({e}): {text}"));
                assert_answer(&case, status, &v);
                status
            }));
        }
        for t in tasks {
            match t.await.unwrap() {
                200 => ok += 1,
                _ => refused += 1,
            }
        }
    }
    assert_eq!(ok + refused, total);
    eprintln!("{total} fuzzed requests: {ok} answered, {refused} refused");
    // The fuzz reached both sides: some constraints compiled, many were refused.
    assert!(ok > 20 && refused > 50, "{ok} answered, {refused} refused");
    // Nothing is left running, and the server still serves.
    s.wait_metric("rill_requests_running", 0.0).await;
    let (st, v) = s
        .post(
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
                    "response_format": {"type": "json_object"}}),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    s.stop().await;
}

/// A schema that compiles but recurses without end fails once generation
/// reaches the recursion: the request's fault, so a 400 (not a 500), and
/// in a stream an error event saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grammar_that_dead_ends_while_running_is_the_requests_error() {
    let s = start(Opts::default()).await;
    let endless = json!({"$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}},
                         "required": ["next"]}}, "$ref": "#/$defs/n"});
    let body = json!({
        "messages": [{"role": "user", "content": "x"}], "max_tokens": 64, "temperature": 0,
        "chat_template_kwargs": {"enable_thinking": false},
        "response_format": {"type": "json_schema", "json_schema": {"schema": endless}},
    });
    let (st, v) = s.post("/v1/chat/completions", &body).await;
    assert_eq!(st, 400, "{v}");
    assert_eq!(v["error"]["code"], "grammar_failed", "{v}");
    assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let data = s.stream("/v1/chat/completions", &streamed).await;
    let last: Value = serde_json::from_str(data.last().expect("events")).unwrap();
    assert_eq!(last["error"]["type"], "invalid_request_error", "{data:?}");
    // The same schema refused at once where it can be seen at compile time.
    let (st, v) = s
        .post(
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": "x"}],
                    "response_format": {"type": "json_schema", "json_schema": {"schema": {"$ref": "#"}}}}),
        )
        .await;
    assert_eq!(st, 400, "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("admits no output") && !msg.contains("<state>"),
        "{msg}"
    );
    s.wait_metric("rill_requests_running", 0.0).await;
    s.stop().await;
}
