//! `rill serve --cache-dir`: a conversation's prompt cache outlives the
//! process. A server stopped with SIGTERM writes its cache to the folder;
//! the next one, started on the same folder, resumes the conversation from
//! it (cached prompt tokens, a disk hit on `/metrics`) and answers as the
//! first did.

use serde_json::{json, Value};
use std::path::PathBuf;

mod serving;
use serving::{http, serve};

fn fixture() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/models/qwen35moe.f32.gguf")
        .to_string_lossy()
        .into_owned()
}

fn chat(port: u16, body: &Value) -> Value {
    let (status, text) =
        http(port, "POST", "/v1/chat/completions", Some(body)).expect("a response");
    assert_eq!(status, 200, "{text}");
    serde_json::from_str(&text).expect("JSON")
}

fn metric(port: u16, name: &str) -> f64 {
    let (_, text) = http(port, "GET", "/metrics", None).expect("metrics");
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

#[test]
fn the_prompt_cache_survives_a_restart() {
    let dir = std::env::temp_dir().join(format!("rill-cache-dir-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.to_str().unwrap();
    let model = fixture();
    let long = "The river runs past the mill and the old stone bridge. ".repeat(30);
    let body = json!({
        "messages": [{"role": "system", "content": long}, {"role": "user", "content": "Go on."}],
        "max_tokens": 8, "temperature": 0, "chat_template_kwargs": {"enable_thinking": false},
    });

    let first = serve(&model, &["--cache-dir", d]);
    let a = chat(first.port, &body);
    let prompt = a["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(
        prompt > 256,
        "a prompt past one snapshot interval: {prompt}"
    );
    assert!(first.stop().success(), "a graceful stop");
    let written = std::fs::read_dir(&dir).unwrap().count();
    assert!(written > 0, "the cache was written to {d}");

    let second = serve(&model, &["--cache-dir", d]);
    let b = chat(second.port, &body);
    let cached = b["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    assert!(
        cached > 0 && cached < prompt,
        "{cached} of {prompt} prompt tokens from the cache"
    );
    assert_eq!(
        metric(second.port, "rill_prompt_cache_disk_hits_total"),
        1.0
    );
    assert_eq!(
        b["choices"][0]["message"], a["choices"][0]["message"],
        "the resumed state answers as the first"
    );
    drop(second);
    let _ = std::fs::remove_dir_all(&dir);
}
