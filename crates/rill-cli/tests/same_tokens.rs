//! `rill run` and `rill serve` are clients of one engine: the same prompt,
//! parameters and seed give the same tokens from both, bit for bit.

use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::Command;

mod serving;
use serving::{http, serve};

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/models")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

fn ids(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

/// Sampling settings: (`rill run` flags, the same as request fields).
fn cases() -> Vec<(Vec<&'static str>, Value)> {
    vec![
        (
            vec!["--temp", "0"],
            json!({"temperature": 0.0, "top_k": 40, "top_p": 0.95, "min_p": 0.05}),
        ),
        (
            vec![
                "--temp", "0.9", "--top-k", "40", "--top-p", "0.95", "--min-p", "0.05", "--seed",
                "1234",
            ],
            json!({"temperature": 0.9, "top_k": 40, "top_p": 0.95, "min_p": 0.05, "seed": 1234}),
        ),
        (
            vec![
                "--temp",
                "1.0",
                "--top-k",
                "0",
                "--top-p",
                "1.0",
                "--min-p",
                "0",
                "--repeat-penalty",
                "1.1",
                "--seed",
                "7",
            ],
            json!({"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0,
                   "repetition_penalty": 1.1, "seed": 7}),
        ),
    ]
}

#[test]
fn run_and_serve_give_the_same_tokens() {
    // A prompt longer than one prefill chunk, so both split it the same way.
    let prompt = "The quick brown fox jumps over the lazy dog. ".repeat(14);
    for model in [
        "qwen35moe.f32.gguf",
        "qwen35.f32.gguf",
        "qwen3next.f32.gguf",
        // qwen4exp: past its budget of 8 (sparse attention, index keys and
        // the PLE history in the engine's states and prompt cache)
        "qwen4exp.f32.gguf",
    ] {
        let path = fixture(model);
        let server = serve(&path, &[]);
        for (flags, fields) in cases() {
            let mut args = vec!["run", "-m", &path, "-p", &prompt, "-n", "24"];
            args.extend(["--ignore-eos", "--json", "-t", "2"]);
            args.extend(flags.iter().copied());
            let out = Command::new(env!("CARGO_BIN_EXE_rill"))
                .args(&args)
                .output()
                .expect("run rill");
            assert!(
                out.status.success(),
                "rill run failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let run: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");

            let mut body = json!({
                "prompt": prompt,
                "max_tokens": 24,
                "ignore_eos": true,
                "return_token_ids": true,
            });
            for (k, v) in fields.as_object().unwrap() {
                body[k] = v.clone();
            }
            let (status, text) =
                http(server.port, "POST", "/v1/completions", Some(&body)).expect("a response");
            assert_eq!(status, 200, "{text}");
            let resp: Value = serde_json::from_str(&text).expect("JSON");
            let choice = &resp["choices"][0];
            let what = format!("{model} {flags:?}");
            assert_eq!(
                ids(&choice["prompt_token_ids"]),
                ids(&run["prompt_tokens"]),
                "{what}: prompt tokens"
            );
            assert!(run["prompt_tokens"].as_array().unwrap().len() > 256);
            assert_eq!(
                ids(&choice["token_ids"]),
                ids(&run["tokens"]),
                "{what}: generated tokens"
            );
            assert_eq!(ids(&run["tokens"]).len(), 24, "{what}");
            assert_eq!(choice["text"], run["text"], "{what}: text");
        }
    }
}
