//! `rill convert` on the committed Hugging Face fixture folders.

use rill_gguf::{GgufFile, MetaValue};
use std::path::PathBuf;
use std::process::Command;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/models")
}

fn convert(folder: &str, ty: &str) -> PathBuf {
    let out = std::env::temp_dir().join(format!(
        "rill-convert-{}-{folder}.{ty}.gguf",
        std::process::id()
    ));
    let st = Command::new(env!("CARGO_BIN_EXE_rill"))
        .args(["convert", "--quiet", "--type", ty])
        .arg(fixtures().join("hf").join(folder))
        .arg(&out)
        .status()
        .unwrap();
    assert!(st.success(), "rill convert {folder} --type {ty}");
    out
}

/// The folder holds the weights llama.cpp's converter wrote into
/// `qwen35moe_mtp.f32.gguf`: rill's F32 file is the converter's, tensor for
/// tensor and byte for byte, with the same metadata (the name aside).
#[test]
fn f32_output_is_the_converters_file() {
    same_as_the_converters("qwen35moe_mtp", "qwen35moe_mtp.f32.gguf");
}

/// The same for qwen4exp (`fixtures/models/hf/qwen4exp` is the folder
/// `qwen4exp.f32.gguf` was converted from): the indexer's fused projection
/// split, the PLE shards laid end to end, the hyper-connection, indexer and
/// PLE keys (its hash constants among them).
#[test]
fn qwen4exp_f32_output_is_the_converters_file() {
    same_as_the_converters("qwen4exp", "qwen4exp.f32.gguf");
}

fn same_as_the_converters(folder: &str, gguf: &str) {
    let out = convert(folder, "f32");
    let ours = GgufFile::open(&out).unwrap();
    let theirs = GgufFile::open(&fixtures().join(gguf)).unwrap();
    assert_same_tensors(&ours, &theirs);
    for (k, v) in theirs.metadata() {
        if k == "general.name" || k == "general.size_label" {
            continue;
        }
        let mine: Option<&MetaValue> = ours.get(k);
        assert_eq!(mine, Some(v), "{folder}: {k}");
    }
    std::fs::remove_file(out).ok();
}

/// Every tensor of `theirs` is in `ours`, of the same shape, type and
/// bytes, and `ours` has no other.
fn assert_same_tensors(ours: &GgufFile, theirs: &GgufFile) {
    assert_eq!(ours.tensors().len(), theirs.tensors().len());
    for t in theirs.tensors() {
        let o = ours
            .tensor(&t.name)
            .unwrap_or_else(|| panic!("no {}", t.name));
        assert_eq!(
            (&o.shape, o.ggml_type),
            (&t.shape, t.ggml_type),
            "{}",
            t.name
        );
        let (a, b) = (ours.tensor_data(o), theirs.tensor_data(t));
        if t.name.ends_with(".ssm_a") && a != b {
            // −exp(A_log) in f32: rill's exp is correctly rounded, the
            // converter's (torch) is within an ulp of it.
            let f = |d: &[u8]| -> Vec<i32> {
                (d.chunks_exact(4))
                    .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
                    .collect()
            };
            let (x, y) = (f(a), f(b));
            assert!(
                x.len() == y.len() && x.iter().zip(&y).all(|(p, q)| (p - q).abs() <= 1),
                "{}: data differ by more than an ulp",
                t.name
            );
            continue;
        }
        assert!(a == b, "{}: data differ", t.name);
    }
}

/// An NVFP4 checkpoint (ModelOpt; per-expert scales, V heads reordered)
/// converts as llama.cpp's converter converts it: its NVFP4 matrices stay
/// NVFP4 (codes and scales repacked) with their global scales as `.scale`
/// tensors — `qwen35moe_wide.nvfp4.gguf`, which the converter made of this
/// folder, tensor for tensor and byte for byte.
#[test]
fn nvfp4_checkpoints_stay_nvfp4_as_the_converter_writes_them() {
    let out = convert("qwen35moe_wide_nvfp4", "f32");
    let ours = GgufFile::open(&out).unwrap();
    let theirs = GgufFile::open(&fixtures().join("qwen35moe_wide.nvfp4.gguf")).unwrap();
    assert_same_tensors(&ours, &theirs);
    let nvfp4 = rill_gguf::ggml_id_of(rill_dtype::DType::NVFP4).unwrap();
    assert!(ours.tensors().iter().any(|t| t.ggml_type == nvfp4));
    assert!(ours.tensor("blk.0.ffn_up_exps.scale").is_some());
    std::fs::remove_file(out).ok();
}

/// The other layouts (dense tied Qwen3.5, Qwen3-Next's fused projections and
/// per-expert tensors) convert to files rill opens, in every output type.
#[test]
fn every_fixture_converts_in_every_type() {
    for folder in [
        "qwen35_mtp",
        "qwen3next_mtp",
        "qwen35moe_wide_nvfp4",
        "qwen4exp",
    ] {
        for ty in ["f32", "bf16", "q8_0", "q4_0", "q5_1", "q4_k_m", "q6_k"] {
            let out = convert(folder, ty);
            rill_model::Model::open(&out).unwrap_or_else(|e| panic!("{folder} {ty}: {e}"));
            std::fs::remove_file(out).ok();
        }
    }
}
