//! YaRN rope scaling against transformers, on the fixture whose config asks
//! for it (`kind: "yarn"`, `scripts/fixtures/make_yarn_fixture.py`): factor
//! 4 over an original context of 64, partial interleaved MRoPE, a prompt
//! that runs to 3.5× the original context.

mod common;

use common::*;
use rill_model::{Rope, RopeOverride, RopeScalingType, Rows, SequenceState};
use serde_json::Value;

fn fixture() -> Value {
    fixtures("yarn").remove(0)
}

#[test]
fn the_file_declares_yarn_and_its_frequencies_are_transformers() {
    let f = fixture();
    let model = load(&f);
    let c = &model.config;
    let s = c.rope_scaling;
    assert_eq!(s.kind, RopeScalingType::Yarn);
    assert_eq!((s.factor, s.orig_ctx), (4.0, Some(64)));
    let rope = Rope::of(c);
    let path = fixtures_dir().join(f["json"].as_str().unwrap());
    let rec: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let want: Vec<f64> = rec["hf_inv_freq"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert_eq!(rope.inv_freq.len(), want.len());
    for (i, (&got, &w)) in rope.inv_freq.iter().zip(&want).enumerate() {
        // transformers' f32 values: the same f32 operations, but torch's
        // and Rust's `powf` may round a last bit apart.
        assert!(
            ((got as f64 - w) / w).abs() < 5e-7,
            "pair {i}: {got} vs {w}"
        );
    }
    let attn = rec["hf_attention_scaling"].as_f64().unwrap();
    assert!(
        (rope.mscale as f64 - attn).abs() < 1e-7,
        "{} vs {attn}",
        rope.mscale
    );
}

#[test]
fn yarn_prompt_logits_match_transformers_past_the_original_context() {
    let f = fixture();
    let model = load(&f);
    let run = runner(2);
    let ids = ids(&f["prompt"]["ids"]);
    let (shape, want) = read_npy(f["prompt"]["logits"].as_str().unwrap());
    assert_eq!(shape, vec![ids.len(), model.config.n_vocab]);
    let got = batch_logits(&model, &run, &ids);
    let v = model.config.n_vocab;
    let orig = f["prompt"]["orig_ctx"].as_u64().unwrap() as usize;
    let (max, mean) = diff(&got, &want);
    let (max_past, _) = diff(&got[orig * v..], &want[orig * v..]);
    eprintln!(
        "yarn: prompt logits vs transformers max |Δ| {max:.2e} (past position {orig}: \
         {max_past:.2e}), mean {mean:.2e} over {} positions",
        ids.len()
    );
    assert!(max <= 1e-4, "max |Δ| {max:e} > 1e-4");

    // Decode token by token takes the same rotation.
    let mut st = SequenceState::new(&model, ids.len());
    let tail = ids.len() - 8;
    model
        .forward(&run, &mut st, &ids[..tail], Rows::None)
        .unwrap();
    for (p, &t) in ids.iter().enumerate().skip(tail) {
        let row = model.forward(&run, &mut st, &[t], Rows::Last).unwrap();
        let (m, _) = diff(&row, &want[p * v..(p + 1) * v]);
        assert!(m <= 1e-4, "decode at {p}: {m:e}");
    }
}

/// The flags' path: turned off, the logits move far (YaRN matters here);
/// turned back on with the file's own settings, they are the file's bits.
#[test]
fn flags_turn_yarn_off_and_give_it_back() {
    let f = fixture();
    let run = runner(2);
    let ids = ids(&f["prompt"]["ids"]);
    let (_, want) = read_npy(f["prompt"]["logits"].as_str().unwrap());
    let file = load(&f);
    let reference = batch_logits(&file, &run, &ids);

    let mut off = load(&f);
    off.override_rope(&RopeOverride {
        kind: Some(RopeScalingType::None),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(off.config.rope_scaling.factor, 1.0);
    let plain = batch_logits(&off, &run, &ids);
    let (moved, _) = diff(&plain, &want);
    assert!(
        moved > 0.1,
        "the default rope is only {moved} from YaRN's logits"
    );

    let mut on = off;
    on.override_rope(&RopeOverride {
        kind: Some(RopeScalingType::Yarn),
        factor: Some(4.0),
        orig_ctx: Some(64),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(on.config.rope_scaling, file.config.rope_scaling);
    // `-c 0` follows the scaled context: 64 × 4.
    assert_eq!(on.config.n_ctx_train, 256);
    let again = batch_logits(&on, &run, &ids);
    assert!(
        same_bits(&again, &reference),
        "flags giving the file's YaRN must give the file's bits"
    );

    let mut bad = load(&f);
    let err = bad
        .override_rope(&RopeOverride {
            factor: Some(-1.0),
            ..Default::default()
        })
        .unwrap_err();
    assert!(err.to_string().contains("factor"), "{err}");
    assert_eq!(bad.config.rope_scaling, file.config.rope_scaling);
}

/// A Hugging Face config with `rope_parameters.rope_type: yarn` reads as
/// the GGUF the converter made from it.
#[test]
fn hf_rope_parameters_read_as_the_converted_file() {
    let f = fixture();
    let file = load(&f);
    let mut cfg: Value = f["hparams"].clone();
    cfg["max_position_embeddings"] = 256.into();
    let text = serde_json::to_string(&cfg).unwrap();
    let hf = rill_model::source::hf::config::parse(&text, "config.json").unwrap();
    assert_eq!(hf.model.rope_scaling, file.config.rope_scaling);
    assert_eq!(Rope::of(&hf.model), Rope::of(&file.config));

    // A type rill does not run is refused by name.
    cfg["rope_parameters"] =
        serde_json::json!({"rope_type": "longrope", "rope_theta": 1e4, "factor": 2.0});
    let text = serde_json::to_string(&cfg).unwrap();
    let err = rill_model::source::hf::config::parse(&text, "config.json").unwrap_err();
    assert!(err.to_string().contains("longrope"), "{err}");
}
