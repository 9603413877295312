//! The MTP head (DESIGN.md §2.4) on the fixtures that have one
//! (`kind: "mtp"` in the manifest, made by `scripts/fixtures/make_mtp_fixtures.py`):
//! teacher-forced logits against transformers' `MtpModel`, incremental
//! feeding, batching, and how files with and without a head load.

mod common;

use common::*;
use rill_gguf::writer::GgufWriter;
use rill_gguf::{GgufFile, MetaValue};
use rill_model::{
    ForwardError, Model, ModelError, MtpItem, Outputs, Rows, SequenceState, StepOutputs,
};
use std::sync::Arc;

#[test]
fn mtp_logits_match_transformers_at_every_position() {
    let run = common::runner(2);
    for (f, name, model) in models("mtp") {
        assert!(model.has_mtp(), "{name}");
        let (h, v) = (model.config.n_embd, model.config.n_vocab);
        let ids = ids(&f["mtp"]["ids"]);
        let (shape, want) = read_npy(f["mtp"]["logits"].as_str().unwrap());
        assert_eq!(shape, vec![ids.len(), v], "{name}");
        let mut st = SequenceState::new(&model, ids.len());
        let hid = trunk_hidden(&model, &run, &mut st, &ids);
        assert_eq!(
            st.mtp_position(),
            Some(0),
            "the trunk leaves the head alone"
        );
        let got = mtp_logits(&model, &run, &mut st, &ids, &shifted(&hid, h));
        assert_eq!(st.mtp_position(), Some(ids.len()));
        assert_eq!(st.position(), ids.len());
        let (max, mean) = diff(&got, &want);
        eprintln!(
            "{name}: MTP logits vs transformers max |Δ| {max:.2e}, mean {mean:.2e} over {} positions",
            ids.len()
        );
        assert!(max <= 1e-4, "{name}: max |Δ| {max:e} > 1e-4");
    }
}

#[test]
fn the_head_fed_token_by_token_equals_the_whole_prompt() {
    let run = common::runner(2);
    for (f, name, model) in models("mtp") {
        let h = model.config.n_embd;
        let ids = ids(&f["mtp"]["ids"]);
        let mut st = SequenceState::new(&model, ids.len());
        let hid = shifted(&trunk_hidden(&model, &run, &mut st, &ids), h);
        let whole = mtp_logits(&model, &run, &mut st.clone(), &ids, &hid);
        // A chunk, then one row at a time (as catch-up after each decode step).
        let split = ids.len() / 3;
        let mut got = mtp_logits(&model, &run, &mut st, &ids[..split], &hid[..split * h]);
        for p in split..ids.len() {
            let row = &hid[p * h..(p + 1) * h];
            got.extend(mtp_logits(&model, &run, &mut st, &ids[p..=p], row));
        }
        let (max, _) = diff(&got, &whole);
        eprintln!("{name}: MTP row by row vs whole prompt max |Δ| {max:.2e}");
        assert!(max <= 1e-5, "{name}: row by row vs whole {max:e}");
    }
}

#[test]
fn batched_mtp_rows_get_the_bits_they_get_alone() {
    let run = common::runner(2);
    for (_, name, model) in models("mtp") {
        let h = model.config.n_embd;
        let prompts: Vec<Vec<u32>> = [(13u32, 9u32), (5, 21)]
            .iter()
            .map(|&(n, s)| (0..n).map(|i| (i * 31 + s) % 300).collect())
            .collect();
        let mut states: Vec<SequenceState> = Vec::new();
        let mut hiddens = Vec::new();
        for p in &prompts {
            let mut st = SequenceState::new(&model, 32);
            hiddens.push(shifted(&trunk_hidden(&model, &run, &mut st, p), h));
            states.push(st);
        }
        // Alone: the prompt, then a chained draft row fed the head's own output.
        let mut alone = Vec::new();
        for i in 0..2 {
            let mut st = states[i].clone();
            let mut out = StepOutputs::new();
            let mut items = [MtpItem {
                state: &mut st,
                tokens: &prompts[i],
                hidden: &hiddens[i],
                outputs: Outputs::logits(Rows::Last).with_hidden(),
            }];
            model.forward_mtp_into(&run, &mut items, &mut out).unwrap();
            let (mut rows, chain) = (out.logits(0).to_vec(), out.hidden(0).to_vec());
            let mut items = [MtpItem {
                state: &mut st,
                tokens: &[7],
                hidden: &chain,
                outputs: Outputs::logits(Rows::Last).with_hidden(),
            }];
            model.forward_mtp_into(&run, &mut items, &mut out).unwrap();
            rows.extend_from_slice(out.logits(0));
            rows.extend_from_slice(out.hidden(0));
            alone.push(rows);
        }
        // Together, step by step.
        let mut out = StepOutputs::new();
        let (a, b) = states.split_at_mut(1);
        let mut items = [
            MtpItem {
                state: &mut a[0],
                tokens: &prompts[0],
                hidden: &hiddens[0],
                outputs: Outputs::logits(Rows::Last).with_hidden(),
            },
            MtpItem {
                state: &mut b[0],
                tokens: &prompts[1],
                hidden: &hiddens[1],
                outputs: Outputs::logits(Rows::Last).with_hidden(),
            },
        ];
        model.forward_mtp_into(&run, &mut items, &mut out).unwrap();
        let mut got: Vec<Vec<f32>> = (0..2).map(|i| out.logits(i).to_vec()).collect();
        let chains: Vec<Vec<f32>> = (0..2).map(|i| out.hidden(i).to_vec()).collect();
        let mut items = [
            MtpItem {
                state: &mut a[0],
                tokens: &[7],
                hidden: &chains[0],
                outputs: Outputs::logits(Rows::Last).with_hidden(),
            },
            MtpItem {
                state: &mut b[0],
                tokens: &[7],
                hidden: &chains[1],
                outputs: Outputs::logits(Rows::Last).with_hidden(),
            },
        ];
        model.forward_mtp_into(&run, &mut items, &mut out).unwrap();
        for (i, g) in got.iter_mut().enumerate() {
            g.extend_from_slice(out.logits(i));
            g.extend_from_slice(out.hidden(i));
            assert!(*g == alone[i], "{name}: sequence {i} differs in a batch");
        }
        assert_eq!(a[0].mtp_position(), Some(prompts[0].len() + 1));
        assert_eq!(a[0].position(), prompts[0].len());
    }
}

#[test]
fn the_head_reads_its_hidden_input_and_its_cache_is_counted() {
    let run = common::runner(2);
    for (_, name, model) in models("mtp") {
        let h = model.config.n_embd;
        assert!(model.mtp_decode_weight_bytes() > 0, "{name}");
        let ids = [3u32, 9, 27];
        let mut st = SequenceState::new(&model, 8);
        let hid = shifted(&trunk_hidden(&model, &run, &mut st, &ids), h);
        let before = st.bytes();
        let with_h = mtp_logits(&model, &run, &mut st.clone(), &ids, &hid);
        let zeros = mtp_logits(
            &model,
            &run,
            &mut st.clone(),
            &ids,
            &vec![0.0; ids.len() * h],
        );
        assert!(with_h != zeros, "{name}: the hidden rows change nothing");
        mtp_logits(&model, &run, &mut st, &ids, &hid);
        // The head's KV rows are held in whole pages.
        let held = ids.len().div_ceil(rill_kernels::kv::KV_PAGE_POSITIONS)
            * rill_kernels::kv::KV_PAGE_POSITIONS;
        let kv = 2 * held * model.config.n_head_kv * model.config.head_dim * 4;
        assert_eq!(st.bytes(), before + kv, "{name}: MTP KV bytes");
        assert_eq!(st.with_capacity(8).bytes(), st.bytes(), "{name}: snapshot");
        // Dropping the last row and feeding it again gives the same logits.
        st.truncate_mtp(2);
        assert_eq!(st.mtp_position(), Some(2));
        let again = mtp_logits(&model, &run, &mut st, &ids[2..], &hid[2 * h..]);
        assert_eq!(again, with_h[2 * model.config.n_vocab..], "{name}");
        // Refusals leave the state as it was.
        let mut items = [MtpItem {
            state: &mut st,
            tokens: &[1, 2],
            hidden: &hid[..h],
            outputs: Outputs::last_logits(),
        }];
        let mut out = StepOutputs::new();
        assert!(matches!(
            model.forward_mtp_into(&run, &mut items, &mut out),
            Err(ForwardError::HiddenRows { .. })
        ));
        let big = vec![0.0; 6 * h];
        items[0].tokens = &[1; 6];
        items[0].hidden = &big;
        assert!(matches!(
            model.forward_mtp_into(&run, &mut items, &mut out),
            Err(ForwardError::ContextFull { .. })
        ));
        assert_eq!(st.mtp_position(), Some(3));
    }
}

#[test]
fn files_without_a_head_say_so_and_still_run() {
    let run = common::runner(2);
    for f in fixtures("f32").into_iter().chain(fixtures("quant")) {
        let model = load(&f);
        assert!(!model.has_mtp(), "{}", f["name"]);
        assert_eq!(model.config.n_nextn, 0);
        assert_eq!(model.mtp_decode_weight_bytes(), 0);
        let mut st = SequenceState::new(&model, 4);
        assert_eq!(st.mtp_position(), None);
        let h = vec![0.0; model.config.n_embd];
        let mut items = [MtpItem {
            state: &mut st,
            tokens: &[1],
            hidden: &h,
            outputs: Outputs::last_logits(),
        }];
        assert!(matches!(
            model.forward_mtp_into(&run, &mut items, &mut StepOutputs::new()),
            Err(ForwardError::NoMtp)
        ));
    }
    for f in fixtures("mtp") {
        let model = load(&f);
        assert_eq!(model.config.n_nextn, 1);
        assert_eq!(model.config.n_layer, 2, "the head is not a trunk layer");
        // The trunk's decode bytes do not include the head.
        let trunk = model.decode_weight_bytes();
        let without = rewrite(&f, |n| !n.starts_with("blk.2."), drop_nextn).unwrap();
        assert!(!without.has_mtp());
        assert_eq!(without.decode_weight_bytes(), trunk);
    }
}

/// `f`'s GGUF re-written without the tensors `keep` refuses and with `meta`
/// applied to each metadata entry (`None` drops it).
fn rewrite(
    f: &serde_json::Value,
    keep: impl Fn(&str) -> bool,
    meta: impl Fn(&str, MetaValue) -> Option<MetaValue>,
) -> Result<Model, ModelError> {
    let src = GgufFile::open(&fixtures_dir().join(f["gguf"].as_str().unwrap())).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in src.metadata() {
        if let Some(v) = meta(k, v.clone()) {
            w.kv(k, v);
        }
    }
    for t in src.tensors() {
        if keep(&t.name) {
            let data = src.tensor_data(t).to_vec();
            w.tensor(t.name.clone(), &t.shape, t.ggml_type, data);
        }
    }
    let file = GgufFile::from_bytes(w.to_bytes().unwrap())?;
    Model::from_gguf(Arc::new(file))
}

/// The metadata of the same file as if converted with `--no-mtp`.
fn drop_nextn(k: &str, v: MetaValue) -> Option<MetaValue> {
    if k.ends_with(".nextn_predict_layers") {
        return None;
    }
    if k.ends_with(".block_count") {
        return Some(MetaValue::U32(v.as_u64().unwrap() as u32 - 1));
    }
    Some(v)
}

#[test]
fn a_missing_or_misshaped_mtp_tensor_is_named() {
    let f = &fixtures("mtp")[0];
    for name in [
        "blk.2.nextn.eh_proj.weight",
        "blk.2.nextn.hnorm.weight",
        "blk.2.attn_q.weight",
    ] {
        match rewrite(f, |n| n != name, |_, v| Some(v)) {
            Err(ModelError::MissingTensor(n)) => assert_eq!(n, name),
            Err(e) => panic!("{name}: {e}"),
            Ok(_) => panic!("{name}: loaded without it"),
        }
    }
    // eh_proj as [n_embd, n_embd]: the head's input is twice as wide.
    let src = GgufFile::open(&fixtures_dir().join(f["gguf"].as_str().unwrap())).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in src.metadata() {
        w.kv(k, v.clone());
    }
    for t in src.tensors() {
        let mut data = src.tensor_data(t).to_vec();
        let mut shape = t.shape.clone();
        if t.name == "blk.2.nextn.eh_proj.weight" {
            shape[0] /= 2;
            data.truncate(data.len() / 2);
        }
        w.tensor(t.name.clone(), &shape, t.ggml_type, data);
    }
    let file = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    match Model::from_gguf(Arc::new(file)) {
        Err(ModelError::BadShape { name, .. }) => assert_eq!(name, "blk.2.nextn.eh_proj.weight"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a mis-shaped eh_proj loaded"),
    }
}

/// `nextn.embed_tokens` / `nextn.shared_head_head`, when a file has them,
/// replace the trunk's embedding / LM head in the head (and only there).
#[test]
fn the_heads_own_embedding_and_lm_head_are_used_when_present() {
    let run = common::runner(2);
    for f in fixtures("mtp") {
        let name = f["name"].as_str().unwrap();
        let base = load(&f);
        let (h, v) = (base.config.n_embd, base.config.n_vocab);
        let ids: Vec<u32> = (0..7u32).map(|i| (i * 41 + 3) % v as u32).collect();
        let run_head = |model: &Model| {
            let mut st = SequenceState::new(model, ids.len());
            let hid = shifted(&trunk_hidden(model, &run, &mut st, &ids), h);
            let mut fresh = SequenceState::new(model, ids.len());
            let trunk = model.forward(&run, &mut fresh, &ids, Rows::All).unwrap();
            (trunk, mtp_logits(model, &run, &mut st, &ids, &hid))
        };
        let (trunk, want) = run_head(&base);
        // A file whose extra tensor copies (or negates) a shared one.
        let with = |extra: &str, from: &str, scale: f32| {
            let src = GgufFile::open(&fixtures_dir().join(f["gguf"].as_str().unwrap())).unwrap();
            let mut w = GgufWriter::new();
            for (k, m) in src.metadata() {
                w.kv(k, m.clone());
            }
            for t in src.tensors() {
                let data = src.tensor_data(t).to_vec();
                if t.name == from {
                    let scaled: Vec<u8> = data
                        .chunks_exact(4)
                        .flat_map(|b| {
                            (f32::from_le_bytes(b.try_into().unwrap()) * scale).to_le_bytes()
                        })
                        .collect();
                    w.tensor(extra, &t.shape, t.ggml_type, scaled);
                }
                w.tensor(t.name.clone(), &t.shape, t.ggml_type, data);
            }
            let file = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
            Model::from_gguf(Arc::new(file)).unwrap()
        };
        let lm = if base.has_output_matrix() {
            "output.weight"
        } else {
            "token_embd.weight"
        };
        for (extra, from) in [
            ("blk.2.nextn.embed_tokens.weight", "token_embd.weight"),
            ("blk.2.nextn.shared_head_head.weight", lm),
        ] {
            let same = run_head(&with(extra, from, 1.0));
            assert!(
                same == (trunk.clone(), want.clone()),
                "{name}: {extra} as a copy"
            );
            let (t2, m2) = run_head(&with(extra, from, -1.0));
            assert!(t2 == trunk, "{name}: {extra} changed the trunk");
            assert!(m2 != want, "{name}: {extra} is not used");
        }
    }
}

/// A draft over the first `n` vocabulary entries gives exactly those
/// columns of the whole head's logits, and the same hidden output.
#[test]
fn a_narrower_draft_vocabulary_is_a_prefix_of_the_logits() {
    let run = runner(2);
    for (_, name, model) in models("mtp") {
        let (h, v) = (model.config.n_embd, model.config.n_vocab);
        let ids = [3u32, 9, 27];
        let hidden = vec![0.25f32; ids.len() * h];
        let mut outs = Vec::new();
        for rows in [None, Some(v / 3)] {
            let mut st = SequenceState::new(&model, 8);
            let mut out = StepOutputs::new();
            let mut items = [MtpItem {
                state: &mut st,
                tokens: &ids,
                hidden: &hidden,
                outputs: Outputs::logits(Rows::All).with_hidden(),
            }];
            let options = rill_model::MtpOptions { vocab_rows: rows };
            model
                .forward_mtp_with(&run, &mut items, options, &mut out)
                .unwrap();
            outs.push((out.logits(0).to_vec(), out.hidden(0).to_vec()));
        }
        let n = v / 3;
        assert_eq!(outs[1].0.len(), ids.len() * n, "{name}");
        for t in 0..ids.len() {
            assert!(
                outs[1].0[t * n..(t + 1) * n] == outs[0].0[t * v..t * v + n],
                "{name}: row {t}"
            );
        }
        assert_eq!(outs[0].1, outs[1].1, "{name}: hidden");
    }
}

/// The head from an MTP-only GGUF (llama.cpp's converter with `--mtp`)
/// joined to a trunk converted with `--no-mtp` is the same model as the
/// file that holds both: the same trunk and MTP logits, bit for bit. A file
/// that is not such a head is refused with a message naming it.
#[test]
fn the_head_from_a_separate_mtp_only_file_is_the_same_model() {
    use rill_model::{GgufSource, Model, WeightSource, WithMtpHead};
    use std::sync::Arc;
    let run = runner(2);
    let dir = fixtures_dir();
    let gguf = |name: &str| -> Arc<dyn WeightSource> {
        let file = rill_gguf::GgufFile::open(&dir.join(name)).unwrap();
        Arc::new(GgufSource::new(Arc::new(file), name))
    };
    let whole = Model::open(&dir.join("qwen35moe_mtp.f32.gguf")).unwrap();
    let trunk_only = Model::from_source(gguf("qwen35moe_mtp.trunk.f32.gguf")).unwrap();
    assert!(!trunk_only.has_mtp());
    let joined = WithMtpHead::new(
        gguf("qwen35moe_mtp.trunk.f32.gguf"),
        gguf("qwen35moe_mtp.mtp-only.f32.gguf"),
    )
    .unwrap();
    assert!(joined.describe().contains("mtp-only"));
    let joined = Model::from_source(Arc::new(joined)).unwrap();
    assert!(joined.has_mtp());
    let ids: Vec<u32> = (0..12u32).map(|i| (i * 29 + 3) % 300).collect();
    let mut outs = Vec::new();
    for model in [&whole, &joined] {
        let h = model.config.n_embd;
        let mut st = SequenceState::new(model, 32);
        let trunk = trunk_hidden(model, &run, &mut st, &ids);
        let prev = shifted(&trunk, h);
        let logits = mtp_logits(model, &run, &mut st, &ids, &prev);
        outs.push((trunk, logits));
    }
    assert!(
        outs[0] == outs[1],
        "the joined model differs from the whole file"
    );

    // A trunk file is no MTP head.
    let err = WithMtpHead::new(
        gguf("qwen35moe_mtp.trunk.f32.gguf"),
        gguf("qwen35moe_mtp.trunk.f32.gguf"),
    )
    .err()
    .expect("refused")
    .to_string();
    assert!(err.contains("no MTP layer"), "{err}");
    // Nor is another model's head.
    let err = WithMtpHead::new(
        gguf("qwen35_mtp.f32.gguf"),
        gguf("qwen35moe_mtp.mtp-only.f32.gguf"),
    )
    .err()
    .expect("refused")
    .to_string();
    assert!(err.contains("is not an MTP head for"), "{err}");
}
