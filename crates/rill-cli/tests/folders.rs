//! `rill -m DIR` on Hugging Face folders: the same run as the GGUF of the
//! same weights, `rill inspect DIR`, and damaged folders refused with a
//! clear error naming the file and tensor (exit code 1, never a panic).

use serde_json::Value;
use std::path::{Path, PathBuf};

mod common;
use common::{fixtures, inspect_says, ok, rill};

fn greedy(model: &Path) -> Value {
    let m = model.to_str().unwrap();
    let args = [
        "run",
        "-m",
        m,
        "-p",
        "The quick brown fox",
        "--temp",
        "0",
        "-n",
        "12",
        "--ignore-eos",
        "--json",
        "-t",
        "2",
    ];
    serde_json::from_str(&ok(&args)).expect("--json prints one object")
}

#[test]
fn a_folder_runs_like_the_gguf_of_its_weights() {
    let folder = greedy(&fixtures().join("hf/qwen35moe_mtp"));
    let file = greedy(&fixtures().join("qwen35moe_mtp.f32.gguf"));
    assert_eq!(folder["prompt_tokens"], file["prompt_tokens"]);
    assert_eq!(folder["tokens"], file["tokens"]);
    assert_eq!(folder["tokens"].as_array().unwrap().len(), 12);
}

#[test]
fn inspect_says_the_architecture_encodings_and_what_is_skipped() {
    let dir = fixtures().join("hf/qwen35moe_mtp");
    let wants = [
        "Hugging Face folder, safetensors (2 files)",
        "arch:        qwen35moe",
        "Qwen3_5MoeForConditionalGeneration",
        "layers.N.mlp.experts.gate_up_proj",
        "mtp.fc.weight",
        "skipped:     2 tensors",
        "vision tower",
        "+ 1 MTP",
    ];
    inspect_says(dir.to_str().unwrap(), &wants);
    let next = ok(&[
        "inspect",
        fixtures().join("hf/qwen3next_mtp").to_str().unwrap(),
    ]);
    assert!(
        next.contains("layers.N.mlp.experts.N.up_proj.weight") && next.contains("BF16 ×8"),
        "{next}"
    );
}

/// A copy of fixture folder `name` to damage.
fn scratch(name: &str, case: &str) -> PathBuf {
    let dst = std::env::temp_dir().join(format!("rill-hf-{}-{case}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dst);
    std::fs::create_dir_all(&dst).unwrap();
    for e in std::fs::read_dir(fixtures().join("hf").join(name)).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
    }
    dst
}

/// `rill run` (and `rill chat`, through the same options) take the model's
/// own sampling defaults where no flag gives them: a folder whose
/// `generation_config.json` says `do_sample: false` runs greedy whatever
/// the seed; a flag still overrides it.
#[test]
fn run_takes_the_folders_generation_config_as_its_defaults() {
    let dir = scratch("qwen35moe_mtp", "genconfig");
    let run = |extra: &[&str]| -> Value {
        let m = dir.to_str().unwrap();
        let mut args = vec!["run", "-m", m, "-p", "The quick brown fox", "-n", "16"];
        args.extend_from_slice(&["--ignore-eos", "--json", "-t", "2"]);
        args.extend_from_slice(extra);
        serde_json::from_str::<Value>(&ok(&args)).unwrap()["tokens"].clone()
    };
    // As shipped (temperature 0.6): the seed matters.
    assert_ne!(run(&["--seed", "1"]), run(&["--seed", "2"]));
    let gen = dir.join("generation_config.json");
    let mut g: Value = serde_json::from_str(&std::fs::read_to_string(&gen).unwrap()).unwrap();
    g["do_sample"] = Value::Bool(false);
    std::fs::write(&gen, g.to_string()).unwrap();
    let greedy = run(&["--temp", "0"]);
    assert_eq!(run(&["--seed", "1"]), greedy);
    assert_eq!(run(&["--seed", "2"]), greedy);
    assert_ne!(
        run(&["--temp", "1", "--seed", "1"]),
        run(&["--temp", "1", "--seed", "2"])
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Rewrite the JSON header of a safetensors file (the data stays as it is).
fn edit_header(file: &Path, edit: impl FnOnce(&mut Value)) {
    let bytes = std::fs::read(file).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut header: Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    edit(&mut header);
    let text = serde_json::to_string(&header).unwrap();
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(&bytes[8 + n..]);
    std::fs::write(file, out).unwrap();
}

fn fails_with(dir: &Path, wants: &[&str]) {
    let out = rill(&["run", "-m", dir.to_str().unwrap(), "-p", "hi", "-n", "1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}: exit code ({err})",
        dir.display()
    );
    assert!(!err.contains("panicked"), "panicked: {err}");
    for want in wants {
        assert!(err.contains(want), "stderr lacks {want:?}: {err}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn damaged_folders_are_clear_errors() {
    // a shard the index names is missing
    let d = scratch("qwen35moe_mtp", "shard");
    std::fs::remove_file(d.join("model-00002-of-00002.safetensors")).unwrap();
    fails_with(
        &d,
        &[
            "model-00002-of-00002.safetensors",
            "cannot open the weight file",
            "more tensors",
        ],
    );

    // a tensor of the wrong shape (same bytes, dimensions swapped)
    let d = scratch("qwen35_mtp", "shape");
    let q = "model.layers.1.self_attn.o_proj.weight";
    edit_header(&d.join("model.safetensors"), |h| {
        let s = h[q]["shape"].as_array().unwrap().clone();
        h[q]["shape"] = Value::Array(vec![s[1].clone(), s[0].clone()]);
    });
    fails_with(&d, &[q, "model.safetensors", "has shape"]);

    // a tensor of a dtype rill cannot compute with (same width)
    let d = scratch("qwen35_mtp", "dtype");
    let t = "model.layers.0.linear_attn.in_proj_qkv.weight";
    edit_header(&d.join("model.safetensors"), |h| {
        h[t]["dtype"] = "I16".into()
    });
    fails_with(&d, &[t, "model.safetensors", "dtype I16"]);

    // a quantization_config rill does not know
    let d = scratch("qwen3next_mtp", "quant");
    let cfg = d.join("config.json");
    let mut c: Value = serde_json::from_str(&std::fs::read_to_string(&cfg).unwrap()).unwrap();
    c["quantization_config"] = serde_json::json!({"quant_method": "awq", "bits": 4});
    std::fs::write(&cfg, c.to_string()).unwrap();
    fails_with(&d, &["config.json", "quant_method `awq`"]);

    // a truncated weight file: the tensor past the end is named
    let d = scratch("qwen3next_mtp", "truncated");
    let f = d.join("model.safetensors");
    let len = std::fs::metadata(&f).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&f)
        .unwrap()
        .set_len(len - 100)
        .unwrap();
    fails_with(&d, &["model.safetensors", "truncated", "tensor '"]);

    // no config.json: not a model folder
    let d = scratch("qwen3next_mtp", "noconfig");
    std::fs::remove_file(d.join("config.json")).unwrap();
    fails_with(&d, &["config.json", "missing"]);
}
