//! Files and inputs a user can get wrong: each is a typed error with a
//! message naming the problem, never a panic.

mod common;

use common::*;
use rill_gguf::writer::GgufWriter;
use rill_gguf::{GgufFile, MetaValue};

use rill_model::{ForwardError, Model, ModelError, Rows, SequenceState};
use std::sync::Arc;

/// Re-write the first F32 fixture with `edit` applied to each tensor
/// (`None` drops it) and `meta` applied to each metadata entry.
fn rewrite(
    edit: impl Fn(&str, Vec<u64>, u32, Vec<u8>) -> Option<(Vec<u64>, u32, Vec<u8>)>,
    meta: impl Fn(&str, MetaValue) -> MetaValue,
) -> Result<Model, ModelError> {
    rewrite_adding(edit, meta, Vec::new())
}

/// A tensor to add: (name, shape, ggml type, data).
type NewTensor = (&'static str, Vec<u64>, u32, Vec<u8>);

/// [`rewrite`], then tensors `extra` added.
fn rewrite_adding(
    edit: impl Fn(&str, Vec<u64>, u32, Vec<u8>) -> Option<(Vec<u64>, u32, Vec<u8>)>,
    meta: impl Fn(&str, MetaValue) -> MetaValue,
    extra: Vec<NewTensor>,
) -> Result<Model, ModelError> {
    let f = &fixtures("f32")[0];
    let src = GgufFile::open(&fixtures_dir().join(f["gguf"].as_str().unwrap())).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in src.metadata() {
        w.kv(k, meta(k, v.clone()));
    }
    for t in src.tensors() {
        let data = src.tensor_data(t).to_vec();
        if let Some((shape, ty, data)) = edit(&t.name, t.shape.clone(), t.ggml_type, data) {
            w.tensor(t.name.clone(), &shape, ty, data);
        }
    }
    for (name, shape, ty, data) in extra {
        w.tensor(name.to_string(), &shape, ty, data);
    }
    let file = GgufFile::from_bytes(w.to_bytes().unwrap())?;
    Model::from_gguf(Arc::new(file))
}

fn keep(_: &str, s: Vec<u64>, t: u32, d: Vec<u8>) -> Option<(Vec<u64>, u32, Vec<u8>)> {
    Some((s, t, d))
}

fn same(_: &str, v: MetaValue) -> MetaValue {
    v
}

fn err_text(r: Result<Model, ModelError>) -> String {
    match r {
        Ok(_) => panic!("a broken model loaded"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn the_unmodified_rewrite_loads() {
    assert!(rewrite(keep, same).is_ok());
}

/// A tensor rewrite: `(name, shape, ggml type, data)` to what is stored
/// instead (`None`: dropped).
type TensorEdit = fn(&str, Vec<u64>, u32, Vec<u8>) -> Option<(Vec<u64>, u32, Vec<u8>)>;

/// Each bad tensor is refused with a message naming it (and what is wrong).
#[test]
fn bad_tensors_are_named() {
    let cases: [(&str, TensorEdit, &[&str]); 4] = [
        (
            // Q8_1 (ggml type 9) is a valid encoding rill does not compute with.
            "unsupported type",
            |n, s, t, d| {
                if n == "blk.0.attn_qkv.weight" {
                    let blocks = s.iter().product::<u64>() as usize / 32;
                    Some((s, 9, vec![0; blocks * 36]))
                } else {
                    Some((s, t, d))
                }
            },
            &["blk.0.attn_qkv.weight", "Q8_1"],
        ),
        (
            "unknown type id",
            |n, s, t, d| Some((s, if n == "blk.1.ssm_out.weight" { 31 } else { t }, d)),
            &["blk.1.ssm_out.weight", "31"],
        ),
        (
            "missing",
            |n, s, t, d| (n != "blk.2.ssm_norm.weight").then_some((s, t, d)),
            &["missing tensor 'blk.2.ssm_norm.weight'"],
        ),
        (
            "wrong shape",
            |n, s, t, d| {
                if n == "output_norm.weight" {
                    let half = d.len() / 2;
                    Some((vec![s[0] / 2], t, d[..half].to_vec()))
                } else {
                    Some((s, t, d))
                }
            },
            &["output_norm.weight"],
        ),
    ];
    for (case, edit, wants) in cases {
        let msg = err_text(rewrite(edit, same));
        for want in wants {
            assert!(msg.contains(want), "{case}: {want:?} not in {msg}");
        }
    }
}

/// A matrix's `.scale` tensor (GGUF NVFP4's global scales: one f32 per
/// tensor or per expert) that does not fit its matrix is refused, named;
/// one that fits is multiplied into the matrix's products.
#[test]
fn a_scale_tensor_must_fit_its_matrix() {
    let f32s = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let name = "blk.0.attn_qkv.scale";
    let cases: [(&str, NewTensor, &[&str]); 3] = [
        ("not F32", (name, vec![1], 1, vec![0; 2]), &[name, "F16"]),
        ("no values", (name, vec![0], 0, vec![]), &[name, "0 values"]),
        // 7 does not divide the matrix's rows (a power-of-two count of heads × dims).
        (
            "uneven",
            (name, vec![7], 0, f32s(&[1.0; 7])),
            &[name, "7 values", "blk.0.attn_qkv.weight"],
        ),
    ];
    for (case, tensor, wants) in cases {
        let msg = err_text(rewrite_adding(keep, same, vec![tensor]));
        for want in wants {
            assert!(msg.contains(want), "{case}: {want:?} not in {msg}");
        }
    }
    // A fitting one changes the logits (the products are scaled).
    let run = common::runner(1);
    let logits = |m: &Model| {
        let mut st = SequenceState::new(m, 8);
        m.forward(&run, &mut st, &[1, 2, 3], Rows::Last).unwrap()
    };
    let plain = logits(&rewrite(keep, same).unwrap());
    let scaled = rewrite_adding(keep, same, vec![(name, vec![1], 0, f32s(&[2.0]))]).unwrap();
    assert_ne!(plain, logits(&scaled));
}

#[test]
fn foreign_architecture_and_bad_hyperparameters_are_refused() {
    let msg = err_text(rewrite(keep, |k, v| {
        if k == "general.architecture" {
            MetaValue::Str("llama".into())
        } else {
            v
        }
    }));
    assert!(msg.contains("llama"), "{msg}");
    let msg = err_text(rewrite(keep, |k, v| {
        if k.ends_with(".ssm.time_step_rank") {
            MetaValue::U32(5) // not a multiple of the key heads
        } else {
            v
        }
    }));
    assert!(msg.contains("GDN") || msg.contains("ssm"), "{msg}");
    let msg = err_text(rewrite(keep, |k, v| {
        if k.ends_with(".embedding_length") {
            MetaValue::Str("wide".into())
        } else {
            v
        }
    }));
    assert!(msg.contains("embedding_length"), "{msg}");
}

#[test]
fn forward_refuses_bad_tokens_and_overflow() {
    let f = &fixtures("f32")[0];
    let model = load(f);
    let run = common::runner(1);
    let mut st = SequenceState::new(&model, 4);
    let bad = model.config.n_vocab as u32;
    assert!(matches!(
        model.forward(&run, &mut st, &[1, bad], Rows::Last),
        Err(ForwardError::TokenOutOfRange { .. })
    ));
    assert_eq!(st.position(), 0, "a refused batch leaves the state alone");
    assert!(matches!(
        model.forward(&run, &mut st, &[1, 2, 3, 4, 5], Rows::Last),
        Err(ForwardError::ContextFull { .. })
    ));
    assert!(matches!(
        model.forward(&run, &mut st, &[], Rows::Last),
        Err(ForwardError::Empty)
    ));
    assert!(model
        .forward(&run, &mut st, &[1, 2, 3, 4], Rows::Last)
        .is_ok());
}
