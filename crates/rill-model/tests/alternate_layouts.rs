//! Tensor layouts other converters (or older llama.cpp versions) write:
//! Qwen3-Next's fused `ssm_in` (q, k, v, z per key head) and fused
//! `ffn_gate_up_exps` (per expert, gate rows then up rows). Rewriting a
//! fixture into those layouts must give bit-identical logits.

mod common;

use common::*;
use rill_gguf::writer::GgufWriter;
use rill_gguf::GgufFile;
use rill_model::{Model, Rows, SequenceState};
use std::collections::HashMap;
use std::sync::Arc;

type Tensors = Vec<(String, Vec<u64>, u32, Vec<u8>)>;

fn read(name: &str) -> (GgufFile, Tensors) {
    let f = fixtures("f32")
        .into_iter()
        .find(|f| f["name"] == name)
        .unwrap();
    let file = GgufFile::open(&fixtures_dir().join(f["gguf"].as_str().unwrap())).unwrap();
    let tensors = file
        .tensors()
        .iter()
        .map(|t| {
            (
                t.name.clone(),
                t.shape.clone(),
                t.ggml_type,
                file.tensor_data(t).to_vec(),
            )
        })
        .collect();
    (file, tensors)
}

fn build(src: &GgufFile, tensors: &Tensors) -> Model {
    let mut w = GgufWriter::new();
    for (k, v) in src.metadata() {
        w.kv(k, v.clone());
    }
    for (n, s, t, d) in tensors {
        w.tensor(n.clone(), s, *t, d.clone());
    }
    Model::from_gguf(Arc::new(
        GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap(),
    ))
    .unwrap()
}

fn logits(m: &Model) -> Vec<f32> {
    let ids: Vec<u32> = (0..40).map(|i| (i * 37 + 11) % 500).collect();
    let mut st = SequenceState::new(m, ids.len());
    m.forward(&common::runner(2), &mut st, &ids, Rows::All)
        .unwrap()
}

/// Rows `a..b` of an f32 matrix stored row-major with `cols` columns.
fn rows(d: &[u8], cols: usize, a: usize, b: usize) -> &[u8] {
    &d[a * cols * 4..b * cols * 4]
}

#[test]
fn fused_ssm_in_equals_split_projections() {
    let (src, tensors) = read("qwen3next");
    let reference = logits(&build(&src, &tensors));
    let get = |k: &str| {
        src.get(&format!("qwen3next.{k}"))
            .unwrap()
            .as_u64()
            .unwrap() as usize
    };
    let (nk, nv, d) = (
        get("ssm.group_count"),
        get("ssm.time_step_rank"),
        get("ssm.state_size"),
    );
    let r = nv / nk;
    let by_name: HashMap<String, (Vec<u64>, Vec<u8>)> = tensors
        .iter()
        .map(|(n, s, _, d)| (n.clone(), (s.clone(), d.clone())))
        .collect();
    let mut out: Tensors = Vec::new();
    let mut fused = 0;
    for (n, s, t, data) in &tensors {
        if n.ends_with(".attn_gate.weight") {
            continue;
        }
        if let Some(p) = n.strip_suffix(".attn_qkv.weight") {
            let h = s[0] as usize;
            let (_, z) = &by_name[&format!("{p}.attn_gate.weight")];
            let mut rows_out = Vec::new();
            for g in 0..nk {
                rows_out.extend_from_slice(rows(data, h, g * d, (g + 1) * d));
                rows_out.extend_from_slice(rows(data, h, nk * d + g * d, nk * d + (g + 1) * d));
                let v0 = 2 * nk * d + g * r * d;
                rows_out.extend_from_slice(rows(data, h, v0, v0 + r * d));
                rows_out.extend_from_slice(rows(z, h, g * r * d, (g + 1) * r * d));
            }
            let total = (2 * nk * d + 2 * nv * d) as u64;
            out.push((
                format!("{p}.ssm_in.weight"),
                vec![s[0], total],
                *t,
                rows_out,
            ));
            fused += 1;
            continue;
        }
        out.push((n.clone(), s.clone(), *t, data.clone()));
    }
    assert!(fused >= 3, "the fixture has GDN layers");
    assert_eq!(logits(&build(&src, &out)), reference);
}

#[test]
fn fused_gate_up_experts_equal_split_experts() {
    let (src, tensors) = read("qwen35moe");
    let reference = logits(&build(&src, &tensors));
    let by_name: HashMap<String, (Vec<u64>, Vec<u8>)> = tensors
        .iter()
        .map(|(n, s, _, d)| (n.clone(), (s.clone(), d.clone())))
        .collect();
    let mut out: Tensors = Vec::new();
    for (n, s, t, data) in &tensors {
        if n.ends_with(".ffn_up_exps.weight") {
            continue;
        }
        if let Some(p) = n.strip_suffix(".ffn_gate_exps.weight") {
            let (h, ff, e) = (s[0] as usize, s[1] as usize, s[2] as usize);
            let (_, up) = &by_name[&format!("{p}.ffn_up_exps.weight")];
            let mut fused = Vec::new();
            for x in 0..e {
                fused.extend_from_slice(rows(data, h, x * ff, (x + 1) * ff));
                fused.extend_from_slice(rows(up, h, x * ff, (x + 1) * ff));
            }
            out.push((
                format!("{p}.ffn_gate_up_exps.weight"),
                vec![s[0], 2 * s[1], s[2]],
                *t,
                fused,
            ));
            continue;
        }
        out.push((n.clone(), s.clone(), *t, data.clone()));
    }
    assert_eq!(logits(&build(&src, &out)), reference);
}

#[test]
fn files_with_an_mtp_layer_load_and_the_trunk_ignores_it() {
    use rill_gguf::MetaValue;
    let (src, tensors) = read("qwen35moe");
    let reference = logits(&build(&src, &tensors));
    let n_layer = src.get("qwen35moe.block_count").unwrap().as_u64().unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in src.metadata() {
        let v = match k {
            "qwen35moe.block_count" => MetaValue::U32(n_layer as u32 + 1),
            "qwen35moe.attention.recurrent_layers" => {
                let mut a = v.as_array().unwrap().to_vec();
                a.push(MetaValue::Bool(false));
                MetaValue::Array(a)
            }
            _ => v.clone(),
        };
        w.kv(k, v);
    }
    w.kv("qwen35moe.nextn_predict_layers", MetaValue::U32(1));
    let last = format!("blk.{}.", n_layer - 1);
    let mtp = format!("blk.{n_layer}.");
    for (n, s, t, d) in &tensors {
        w.tensor(n.clone(), s, *t, d.clone());
        // The MTP block is a full-attention MoE block plus the nextn tensors.
        if let Some(rest) = n.strip_prefix(&last) {
            w.tensor(format!("{mtp}{rest}"), s, *t, d.clone());
        }
    }
    let h = src
        .get("qwen35moe.embedding_length")
        .unwrap()
        .as_u64()
        .unwrap();
    let f32s = |n: u64| vec![0u8; n as usize * 4];
    w.tensor(
        format!("{mtp}nextn.eh_proj.weight"),
        &[2 * h, h],
        0,
        f32s(2 * h * h),
    );
    w.tensor(format!("{mtp}nextn.enorm.weight"), &[h], 0, f32s(h));
    w.tensor(format!("{mtp}nextn.hnorm.weight"), &[h], 0, f32s(h));
    w.tensor(
        format!("{mtp}nextn.shared_head_norm.weight"),
        &[h],
        0,
        f32s(h),
    );
    let m = Model::from_gguf(Arc::new(
        GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap(),
    ))
    .unwrap();
    assert_eq!((m.config.n_layer, m.config.n_nextn), (n_layer as usize, 1));
    assert_eq!(logits(&m), reference);
}

#[test]
fn a_model_split_over_three_files_loads_from_any_of_them() {
    use rill_gguf::{MetaValue, KEY_SPLIT_COUNT, KEY_SPLIT_NO, KEY_SPLIT_TENSORS_COUNT};
    let (src, tensors) = read("qwen3next");
    let reference = logits(&build(&src, &tensors));
    let dir = std::env::temp_dir().join(format!("rill-split-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let parts = 3;
    let per = tensors.len().div_ceil(parts);
    for (i, chunk) in tensors.chunks(per).enumerate() {
        let mut w = GgufWriter::new();
        if i == 0 {
            for (k, v) in src.metadata() {
                w.kv(k, v.clone());
            }
        }
        w.kv(KEY_SPLIT_NO, MetaValue::U16(i as u16))
            .kv(KEY_SPLIT_COUNT, MetaValue::U16(parts as u16))
            .kv(
                KEY_SPLIT_TENSORS_COUNT,
                MetaValue::I32(tensors.len() as i32),
            );
        for (n, s, t, d) in chunk {
            w.tensor(n.clone(), s, *t, d.clone());
        }
        w.write_to(&dir.join(format!("model-{:05}-of-{parts:05}.gguf", i + 1)))
            .unwrap();
    }
    for first in ["model-00001-of-00003.gguf", "model-00003-of-00003.gguf"] {
        let m = Model::open(&dir.join(first)).unwrap();
        assert_eq!(logits(&m), reference, "opened through {first}");
    }
    std::fs::remove_file(dir.join("model-00002-of-00003.gguf")).unwrap();
    let err = Model::open(&dir.join("model-00001-of-00003.gguf"))
        .err()
        .expect("a missing part is an error");
    assert!(err.to_string().contains("00002"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}
