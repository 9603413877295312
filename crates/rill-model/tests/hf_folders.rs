//! Hugging Face folders read as they ship (`fixtures/models/hf/`, made by
//! `scripts/fixtures/make_hf_fixtures.py` and `make_hf_quant_fixtures.py`):
//! logits at every position, greedy ids and the MTP head's logits against
//! transformers on the same weights; for the folder with the same weights as
//! a GGUF fixture, the same logits as that file; FP8 and NVFP4 folders
//! against transformers on their exactly dequantized weights.

mod common;

use common::*;
use rill_model::{HfSource, Model, SequenceState};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;

/// The folder fixtures of `kind` (`hf`: BF16 / F32, `hf_quant`: FP8, NVFP4).
fn hf_fixtures_of(kind: &str) -> Vec<Value> {
    let dir = fixtures_dir().join("hf");
    let mut out: Vec<Value> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap())
        .collect();
    out.retain(|f| f["kind"] == kind);
    out.sort_by_key(|f| f["name"].as_str().unwrap().to_string());
    assert!(out.len() >= 3, "three {kind} fixtures");
    out
}

fn hf_fixtures() -> Vec<Value> {
    hf_fixtures_of("hf")
}

fn folder(f: &Value) -> PathBuf {
    fixtures_dir().join(f["folder"].as_str().unwrap())
}

/// Each Hugging Face fixture of `kind` with its name and its model.
fn hf_models(kind: &str) -> impl Iterator<Item = (Value, String, Model)> {
    hf_fixtures_of(kind).into_iter().map(|f| {
        let name = f["name"].as_str().unwrap().to_string();
        let model = open(&f);
        (f, name, model)
    })
}

fn open(f: &Value) -> Model {
    let src = HfSource::open(&folder(f)).unwrap_or_else(|e| panic!("{}: {e}", f["name"]));
    Model::from_source(Arc::new(src)).unwrap_or_else(|e| panic!("{}: {e}", f["name"]))
}

#[test]
fn folders_bind_with_their_layouts() {
    for (f, name, model) in hf_models("hf") {
        assert!(model.has_mtp(), "{name}: the folder holds mtp.*");
        assert_eq!(
            model.config.arch.name(),
            f["arch"].as_str().unwrap(),
            "{name}"
        );
        assert_eq!(
            model.has_output_matrix(),
            !f["layout"]["tie"].as_bool().unwrap(),
            "{name}: tied embeddings"
        );
    }
}

#[test]
fn logits_match_transformers_at_every_position() {
    let run = runner(2);
    for (f, name, model) in hf_models("hf") {
        let ids = ids(&f["prompt"]["ids"]);
        let (shape, want) = read_npy(f["prompt"]["logits"].as_str().unwrap());
        assert_eq!(shape, vec![ids.len(), model.config.n_vocab], "{name}");
        let got = batch_logits(&model, &run, &ids);
        let (max, mean) = diff(&got, &want);
        eprintln!("{name}: prompt logits vs transformers max |Δ| {max:.2e}, mean {mean:.2e}");
        assert!(max <= 1e-4, "{name}: max |Δ| {max:e} > 1e-4");
    }
}

#[test]
fn greedy_ids_match_transformers() {
    let run = runner(2);
    for (f, name, model) in hf_models("hf") {
        let g = &f["generation"];
        let prompt = ids(&g["prompt_ids"]);
        let want = ids(&g["ids"]);
        let got = greedy(&model, &run, &prompt, want.len());
        assert_eq!(got, want, "{name}: greedy ids");
    }
}

#[test]
fn mtp_logits_match_transformers() {
    let run = runner(2);
    for (f, name, model) in hf_models("hf") {
        let ids = ids(&f["mtp"]["ids"]);
        let (_, want) = read_npy(f["mtp"]["logits"].as_str().unwrap());
        let mut st = SequenceState::new(&model, ids.len());
        let h = trunk_hidden(&model, &run, &mut st, &ids);
        let prev = shifted(&h, model.config.n_embd);
        let (max, mean) = diff(&mtp_logits(&model, &run, &mut st, &ids, &prev), &want);
        eprintln!("{name}: MTP logits vs transformers max |Δ| {max:.2e}, mean {mean:.2e}");
        assert!(max <= 1e-4, "{name}: MTP max |Δ| {max:e} > 1e-4");
    }
}

#[test]
fn a_folder_and_the_gguf_converted_from_its_weights_agree() {
    let run = runner(2);
    let mut compared = 0;
    for f in hf_fixtures() {
        let Some(gguf) = f["same_weights_as_gguf"].as_str() else {
            continue;
        };
        let name = f["name"].as_str().unwrap();
        let hf = open(&f);
        let file = Model::open(&fixtures_dir().join(gguf)).unwrap();
        let ids = ids(&f["prompt"]["ids"]);
        let (max, _) = diff(
            &batch_logits(&hf, &run, &ids),
            &batch_logits(&file, &run, &ids),
        );
        eprintln!("{name}: folder vs {gguf} max |Δ| {max:.2e}");
        // the same f32 weights; only the value-head order (grouped vs tiled) differs
        assert!(max <= 1e-5, "{name}: folder vs GGUF {max:e}");
        compared += 1;
    }
    assert!(compared >= 1, "a folder with the weights of a GGUF fixture");
}

#[test]
fn fp8_and_nvfp4_folders_match_their_exact_models() {
    let run = runner(2);
    for (f, name, model) in hf_models("hf_quant") {
        let prompt_ids = ids(&f["prompt"]["ids"]);
        let (_, want) = read_npy(f["prompt"]["logits"].as_str().unwrap());
        let (max, mean) = diff(&batch_logits(&model, &run, &prompt_ids), &want);
        eprintln!("{name}: prompt logits vs the exact model max |Δ| {max:.2e}, mean {mean:.2e}");
        assert!(max <= 1e-4, "{name}: max |Δ| {max:e} > 1e-4");
        let g = &f["generation"];
        let prompt = ids(&g["prompt_ids"]);
        let want_ids = ids(&g["ids"]);
        let got = greedy(&model, &run, &prompt, want_ids.len());
        assert_eq!(got, want_ids, "{name}: greedy ids");
    }
}
