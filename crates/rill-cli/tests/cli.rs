//! The `rill` binary as a user runs it, on the committed fixtures.

use serde_json::Value;
use std::process::Command;

mod common;
use common::{fixture, fixtures, inspect_says, ok, refused, rill};

fn ids(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

#[test]
fn greedy_run_matches_transformers_generate() {
    let spec: Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("cli_run.json")).unwrap())
            .unwrap();
    let n = spec["n_gen"].as_u64().unwrap().to_string();
    for case in spec["cases"].as_array().unwrap() {
        let model = fixtures().join(case["model"].as_str().unwrap());
        let m = model.to_str().unwrap();
        let prompt = case["prompt"].as_str().unwrap();
        let mut args = vec![
            "run",
            "-m",
            m,
            "-p",
            prompt,
            "--temp",
            "0",
            "-n",
            &n,
            "--ignore-eos",
            "--json",
            "-t",
            "2",
        ];
        if case["kind"] == "chat" {
            args.push("--chat");
        }
        let out: Value = serde_json::from_str(&ok(&args)).expect("--json prints one object");
        let what = format!("{} {}", case["model"], case["kind"]);
        assert_eq!(
            ids(&out["prompt_tokens"]),
            ids(&case["prompt_ids"]),
            "{what}: prompt tokens"
        );
        assert_eq!(
            ids(&out["tokens"]),
            ids(&case["gen_ids"]),
            "{what}: generated tokens"
        );
        assert_eq!(out["finish_reason"], "length");
        assert!(out["timings"]["predicted_per_second"].as_f64().unwrap() > 0.0);
    }
}

#[test]
fn tokenize_detokenize_and_inspect() {
    let m = fixtures().join("qwen35moe.f32.gguf");
    let m = m.to_str().unwrap();
    let text = "The quick brown fox<|im_end|>";
    let json: Vec<u32> =
        serde_json::from_str(&ok(&["tokenize", "-m", m, "--text", text, "--json"])).unwrap();
    assert_eq!(*json.last().unwrap(), 511, "special token parsed");
    let plain = ok(&["tokenize", "-m", m, "--text", text]);
    assert_eq!(plain.split_whitespace().count(), json.len());
    let list: Vec<String> = json.iter().map(|i| i.to_string()).collect();
    assert_eq!(
        ok(&["detokenize", "-m", m, "--tokens", &list.join(",")]).trim_end_matches('\n'),
        text
    );
    let info = ok(&["inspect", m]);
    assert!(
        info.contains("qwen35moe") && info.contains("layer map    gggA"),
        "{info}"
    );
    // qwen4exp: the streams, the indexer and the PLE table.
    let q = fixture("qwen4exp_b12r2.f32.gguf");
    let wants = [
        "4 residual streams (hyper-connections of rank 8)",
        "indexer      4 heads × 16, budget 12 tokens; sparse layers 3 (blocks of 2), 7 (blocks of 2)",
        "PLE          layer 0: 3-grams, 16 heads of 4 values",
        "layer map    pggQgggQ",
    ];
    inspect_says(&q, &wants);
    // The same from a Hugging Face folder: the table is its n-gram shards.
    let folder = fixtures().join("hf/qwen4exp");
    let gguf = fixture("qwen4exp.f32.gguf");
    let table = "table 16896 rows, F32, 0.3 MiB read in place";
    inspect_says(&gguf, &[table]);
    inspect_says(folder.to_str().unwrap(), &[table]);
}

/// The `.npy` bytes `rill logits` writes for tokens 1,2,3,4 of fixture
/// `model`, with `extra` arguments.
fn logits_npy(model: &str, extra: &[&str]) -> Vec<u8> {
    let m = fixtures().join(model);
    let out = std::env::temp_dir().join(format!(
        "rill-cli-test-{}-{}.npy",
        std::process::id(),
        extra.join("")
    ));
    let mut args = vec!["logits", "-m", m.to_str().unwrap(), "--tokens", "1,2,3,4"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--out", out.to_str().unwrap()]);
    ok(&args);
    let bytes = std::fs::read(&out).unwrap();
    std::fs::remove_file(&out).ok();
    bytes
}

/// `rill logits` on fixture `model` with `flags`, which it must refuse
/// (not panic): its stderr.
fn logits_refused(model: &str, flags: &[&str]) -> String {
    let m = fixtures().join(model);
    let m = m.to_str().unwrap();
    let mut args = vec!["logits", "-m", m, "--tokens", "1", "--out", "/tmp/x.npy"];
    args.extend_from_slice(flags);
    refused(&args)
}

#[test]
fn logits_writes_npy_of_the_right_shape() {
    let bytes = logits_npy("qwen3next.f32.gguf", &[]);
    let header = String::from_utf8_lossy(&bytes[10..128]);
    assert!(header.contains("'shape': (4, 512)"), "{header}");
}

#[test]
fn precision_q8_changes_the_logits_of_a_quantized_file() {
    let name = "qwen35moe_wide.q4_k_m.gguf";
    let run = |precision: &str| logits_npy(name, &["--precision", precision]);
    let (exact, q8) = (run("exact"), run("q8"));
    assert_eq!(exact.len(), q8.len(), "same shape");
    assert_ne!(exact, q8, "q8 rounds the activations");
    assert!(logits_refused(name, &["--precision", "int3"]).contains("precision"));
}

/// `--kernels` runs every class this CPU has, and refuses with a reason a
/// class it lacks or a name it does not know; `rill bench --json` says
/// which class ran on which CPU.
#[test]
fn kernels_flag_picks_a_class_and_refuses_what_the_cpu_lacks() {
    use rill_kernels::Isa;
    let listed: Vec<String> = ok(&["kernels", "--available"])
        .lines()
        .map(str::to_string)
        .collect();
    let have: Vec<String> = Isa::available().iter().map(|i| i.to_string()).collect();
    assert_eq!(listed, have, "rill kernels --available");
    assert!(ok(&["kernels"]).contains(&format!("default: {}", Isa::best())));
    let name = "qwen35moe_wide.q4_k_m.gguf";
    for isa in Isa::available() {
        let bytes = logits_npy(name, &["--kernels", isa.name()]);
        let header = String::from_utf8_lossy(&bytes[10..128]);
        assert!(header.contains("'shape': (4, "), "{isa}: {header}");
    }
    let err = logits_refused(name, &["--kernels", "sse9"]);
    assert!(err.contains("unknown kernel class"), "{err}");
    let lacking = rill_kernels::simd::CLASS_NAMES
        .iter()
        .find(|n| Isa::from_name(n).map_or(true, |i| !i.is_available()));
    if let Some(lacking) = lacking {
        let err = logits_refused(name, &["--kernels", lacking]);
        assert!(
            err.contains("cannot run the") || err.contains("only on aarch64"),
            "{lacking}: {err}"
        );
    }
    let out = ok(&[
        "bench",
        "-m",
        &fixture("qwen35moe.f32.gguf"),
        "-p",
        "8",
        "-n",
        "2",
        "-r",
        "1",
        "-t",
        "1",
        "--kernels",
        "scalar",
        "--json",
    ]);
    let v: Value = serde_json::from_str(&out).expect("one JSON object");
    assert_eq!(v["kernels"], "scalar", "{v}");
    assert_eq!(
        v["precision"], "exact",
        "the scalar class has no integer kernels: {v}"
    );
    assert!(!v["cpu"].as_str().unwrap().is_empty(), "{v}");
}

#[test]
fn cache_type_flags_change_the_kv_cache_as_llama_cpp_spells_them() {
    let name = "qwen35.f32.gguf";
    let f32_kv = logits_npy(name, &[]);
    let q8 = logits_npy(name, &["-ctk", "q8_0", "-ctv=q8_0"]);
    let q8_long = logits_npy(name, &["--cache-type-k", "q8_0", "--cache-type-v", "q8_0"]);
    assert_eq!(q8, q8_long, "-ctk/-ctv are --cache-type-k/-v");
    assert_ne!(q8, f32_kv, "a q8_0 cache rounds K and V");
    let err = logits_refused(name, &["-ctk", "q3_k"]);
    assert!(
        err.contains("unknown KV cache type 'q3_k'") && err.contains("q4_0"),
        "{err}"
    );
}

/// `--rope-scaling/--rope-scale/--yarn-orig-ctx` (llama.cpp's names) replace
/// the file's YaRN: off, the logits change; the file's own settings given as
/// flags give its bits (the way back from `none` is in rill-model's
/// tests/yarn.rs); a bad value is a clear error.
#[test]
fn rope_scaling_flags_replace_the_files_yarn() {
    let name = "qwen35moe_yarn.f32.gguf";
    let file = logits_npy(name, &[]);
    let off = logits_npy(name, &["--rope-scaling", "none"]);
    assert_ne!(off, file, "YaRN changes the logits");
    let other = logits_npy(name, &["--rope-scale", "2"]);
    assert_ne!(other, file, "another factor, other logits");
    let flags = [
        "--rope-scaling",
        "yarn",
        "--rope-scale",
        "4",
        "--yarn-orig-ctx",
        "64",
    ];
    assert_eq!(
        logits_npy(name, &flags),
        file,
        "the file's settings as flags"
    );
    let m = fixtures().join(name);
    let info = ok(&["inspect", m.to_str().unwrap()]);
    assert!(
        info.contains("RoPE scaling yarn ×4 over an original context of 64"),
        "{info}"
    );
    for (flag, value, says) in [
        ("--rope-scale", "-2", "must be greater than 0"),
        (
            "--rope-scaling",
            "longrope",
            "rill runs none, linear and yarn",
        ),
        ("--yarn-orig-ctx", "0", "not a positive number"),
    ] {
        let err = logits_refused(name, &[flag, value]);
        assert!(err.contains(says), "{flag} {value}: {err}");
    }
}

#[test]
fn bad_input_is_a_clear_error_not_a_panic() {
    let m = fixtures().join("qwen35moe.f32.gguf");
    let m = m.to_str().unwrap();
    let npy = fixtures().join("qwen35.prompt_logits.npy");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["inspect", "/nonexistent/model.gguf"],
            "cannot read /nonexistent/model.gguf: No such file",
        ),
        (vec!["run", "-m", npy.to_str().unwrap(), "-p", "hi"], "GGUF"),
        (
            vec!["logits", "-m", m, "--tokens", "1,x", "--out", "/tmp/x.npy"],
            "bad token id",
        ),
        (
            vec![
                "logits",
                "-m",
                m,
                "--tokens",
                "99999",
                "--out",
                "/tmp/x.npy",
            ],
            "out of range",
        ),
        (vec!["detokenize", "-m", m, "--tokens", "99999"], "99999"),
        (vec!["run", "-m", m, "-p", "hi", "--top-p", "0"], "top_p"),
        (
            vec!["run", "-m", m, "-p", "hello there", "-c", "2"],
            "context",
        ),
    ];
    for (args, want) in cases {
        let out = rill(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} should fail");
        assert_eq!(out.status.code(), Some(1), "{args:?}: exit code ({err})");
        assert!(err.contains(want), "{args:?}: stderr lacks '{want}': {err}");
        assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    }
}

/// `rill chat` runs on the engine: the second turn resumes from the prompt
/// cache where the first turn's history ended.
#[test]
fn chat_turns_resume_from_the_prompt_cache() {
    use std::io::Write;
    let m = fixture("qwen35moe.f32.gguf");
    let mut child = Command::new(env!("CARGO_BIN_EXE_rill"))
        .args(["chat", "-m", &m, "-n", "6", "--timings", "--temp", "0"])
        .args(["-t", "2"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run rill chat");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"Hello there\nAnd a second turn\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let evals: Vec<&str> = err.lines().filter(|l| l.contains("prompt eval:")).collect();
    assert_eq!(evals.len(), 2, "{err}");
    assert!(!evals[0].contains("prompt cache"), "{err}");
    assert!(evals[1].contains("from the prompt cache"), "{err}");
}

/// With no `-m`, `rill run` runs the demo model inside the binary, from any
/// folder, says so, and the trained model writes a reply that ends its turn.
#[test]
fn run_without_a_model_runs_the_embedded_demo_and_ends_its_turn() {
    let out = Command::new(env!("CARGO_BIN_EXE_rill"))
        .args([
            "run",
            "-p",
            "What does os.path.join do?",
            "--chat",
            "--temp",
            "0",
        ])
        .args(["-n", "300", "--json", "-t", "2"])
        .current_dir(std::env::temp_dir())
        .output()
        .expect("run rill");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("embedded demo model"), "{err}");
    assert!(err.contains("-m MODEL.gguf"), "{err}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let text = v["text"].as_str().unwrap();
    assert!(text.trim().len() > 10, "{text:?}");
    assert_eq!(
        v["finish_reason"], "stop",
        "the reply ends its turn: {text:?}"
    );
}

/// `rill bench` runs its tests through the engine and reports them.
#[test]
fn bench_reports_prefill_and_decode_speed() {
    let m = fixture("qwen35moe.f32.gguf");
    for parallel in ["1", "3"] {
        let out = ok(&[
            "bench",
            "-m",
            &m,
            "-p",
            "32",
            "-n",
            "8",
            "-r",
            "1",
            "-t",
            "2",
            "--parallel",
            parallel,
            "--json",
        ]);
        let v: Value = serde_json::from_str(&out).expect("one JSON object");
        assert!(v["pp"]["mean"].as_f64().unwrap() > 0.0, "{v}");
        assert!(v["tg"]["mean"].as_f64().unwrap() > 0.0, "{v}");
        assert_eq!(v["tg"]["parallel"], parallel.parse::<u64>().unwrap());
        assert!(v["active_weight_bytes_per_token"].as_f64().unwrap() > 0.0);
        assert!(
            ["q8", "exact"].contains(&v["precision"].as_str().unwrap()),
            "{v}"
        );
    }
}

#[test]
fn context_zero_is_the_models_trained_context() {
    let m = fixture("qwen35.f32.gguf");
    let out = rill(&[
        "run", "-m", &m, "-p", "Hello", "-n", "2", "--temp", "0", "-c", "0", "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    let info = ok(&["inspect", &m]);
    let trained = info
        .lines()
        .find_map(|l| l.split("context").nth(1))
        .and_then(|r| r.split_whitespace().find_map(|w| w.parse::<usize>().ok()))
        .expect("inspect prints the trained context");
    assert!(
        err.contains(&format!("context {trained} (the model's trained context)")),
        "{err}"
    );
}

/// Speculation as a user runs it: the head of a separate MTP-only file
/// (`--mtp-model`) drafts, greedy tokens are those of `--spec off`, `rill
/// bench` reports acceptance, and a file that is no such head is refused.
#[test]
fn speculation_with_a_separate_head_file_and_in_bench() {
    let trunk = fixtures().join("qwen35moe_mtp.trunk.f32.gguf");
    let head = fixtures().join("qwen35moe_mtp.mtp-only.f32.gguf");
    let (trunk, head) = (trunk.to_str().unwrap(), head.to_str().unwrap());
    let run = |extra: &[&str]| -> Value {
        let mut args = vec!["run", "-m", trunk, "-p", "hello there", "-n", "16"];
        args.extend_from_slice(&["--temp", "0", "--ignore-eos", "--json", "-t", "2"]);
        args.extend_from_slice(extra);
        serde_json::from_str(&ok(&args)).expect("one JSON object")
    };
    let plain = run(&[]);
    assert_eq!(plain["timings"]["draft_n"], 0, "no head: no drafts");
    let spec = run(&[
        "--mtp-model",
        head,
        "--spec",
        "mtp",
        "--draft-max",
        "3",
        "--draft-fixed",
    ]);
    assert!(spec["timings"]["draft_n"].as_u64().unwrap() > 0, "{spec}");
    assert_eq!(spec["tokens"], plain["tokens"], "greedy is unchanged");
    let off = run(&["--mtp-model", head, "--spec", "off"]);
    assert_eq!(off["timings"]["draft_n"], 0);

    let out = rill(&[
        "run",
        "-m",
        trunk,
        "--mtp-model",
        trunk,
        "-p",
        "x",
        "-n",
        "2",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("no MTP layer") && !err.contains("panicked"),
        "{err}"
    );
    let out = rill(&[
        "run",
        "-m",
        trunk,
        "--draft-max",
        "99",
        "-p",
        "x",
        "-n",
        "2",
    ]);
    assert_eq!(out.status.code(), Some(1));

    let whole = fixture("qwen35moe_mtp.f32.gguf");
    let out = ok(&[
        "bench",
        "-m",
        &whole,
        "-p",
        "0",
        "-n",
        "16",
        "-r",
        "1",
        "-t",
        "2",
        "--draft-fixed",
        "--spec",
        "mtp",
        "--json",
    ]);
    let v: Value = serde_json::from_str(&out).expect("one JSON object");
    assert_eq!(v["spec"]["draft_max"], 3, "{v}");
    // By default (auto) a model this small drafts nothing: it runs from the
    // cache, where verifying drafts costs as much as decoding them.
    let auto = ok(&[
        "bench", "-m", &whole, "-p", "0", "-n", "8", "-r", "1", "--json",
    ]);
    let auto: Value = serde_json::from_str(&auto).expect("one JSON object");
    assert_eq!(auto["spec"]["drafted"], 0, "{auto}");
    assert!(
        auto["spec"]["setting"].as_str().unwrap().contains("cache"),
        "{auto}"
    );
    assert!(v["spec"]["drafted"].as_u64().unwrap() > 0, "{v}");
    let a = v["spec"]["acceptance"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&a), "{v}");
}

/// Against llama.cpp's `--spec-type draft-mtp` (its greedy tokens with
/// drafting, committed by `scripts/bench/spec_vs_llama.py --exact` on the
/// F32 MTP fixture): wherever the two engines agree without drafting, rill
/// drafting still gives llama.cpp's speculative tokens, and rill's drafted
/// greedy output is its plain greedy output everywhere.
#[test]
fn speculative_greedy_agrees_with_llama_cpp_draft_mtp() {
    let spec: Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("../spec_llama_fixture.json")).unwrap(),
    )
    .unwrap();
    let model = fixtures()
        .join("../..")
        .join(spec["model"].as_str().unwrap());
    let n = spec["n_predict"].as_u64().unwrap().to_string();
    let k = spec["draft_max"].as_u64().unwrap().to_string();
    let mut compared = 0;
    for case in spec["cases"].as_array().unwrap() {
        let run = |mode: &str| -> Value {
            let args = [
                "run",
                "-m",
                model.to_str().unwrap(),
                "-p",
                case["prompt"].as_str().unwrap(),
                "-n",
                &n,
                "--temp",
                "0",
                "--ignore-eos",
                "--json",
                "-t",
                "2",
                "--precision",
                "exact",
                "--spec",
                mode,
                "--draft-max",
                &k,
                "--draft-fixed",
            ];
            serde_json::from_str(&ok(&args)).expect("one JSON object")
        };
        let (drafted, plain) = (run("mtp"), run("off"));
        assert_eq!(ids(&drafted["prompt_tokens"]), ids(&case["prompt_ids"]));
        assert!(drafted["timings"]["draft_n"].as_u64().unwrap() > 0);
        assert_eq!(
            drafted["tokens"], plain["tokens"],
            "drafting changed greedy output"
        );
        if ids(&plain["tokens"]) == ids(&case["llama_plain_tokens"]) {
            assert_eq!(ids(&drafted["tokens"]), ids(&case["llama_spec_tokens"]));
            compared += 1;
        }
    }
    assert!(
        compared >= 2,
        "the engines agree on too few prompts to compare"
    );
}

/// Q6_K matrices are held in the AVX2 integer kernels' layout by default
/// (the load line says how much), `--no-repack` keeps the file's (as
/// llama.cpp's), and the tokens are the same either way.
#[test]
fn no_repack_keeps_the_files_layout_and_the_same_tokens() {
    use rill_kernels::Isa;
    let m = fixture("qwen35moe_wide.q6_k.gguf");
    let avx2 = Isa::Avx2.is_available();
    let run = |no_repack: bool| {
        let mut args = vec![
            "run",
            "-m",
            &m,
            "-p",
            "Hello",
            "-n",
            "6",
            "--temp",
            "0",
            "--precision",
            "q8",
        ];
        if avx2 {
            args.extend_from_slice(&["--kernels", "avx2"]);
        }
        if no_repack {
            args.push("--no-repack");
        }
        let out = rill(&args);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "rill {args:?}: {err}");
        (out.stdout, err.contains("in the kernels' layout"))
    };
    let (laid_out, said) = run(false);
    let (file_layout, said_without) = run(true);
    assert!(!laid_out.is_empty());
    assert_eq!(laid_out, file_layout, "the same tokens");
    assert_eq!(said, avx2, "the load line names the rewrite");
    assert!(!said_without);
}
