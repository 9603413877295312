//! qwen4exp (Qwen3.8-Flash-Next) against transformers on the committed
//! random models (`scripts/fixtures/make_qwen4exp_fixtures.py`): prompts
//! past the QSA budget (so the sparse selection runs) with EOS tokens in
//! them (so the PLE n-gram window resets), two budgets and block sizes.

mod common;

use common::*;
use rill_model::{
    BatchItem, HfSource, KvConfig, KvType, Model, Outputs, Rows, Runner, SequenceState,
};
use serde_json::Value;
use std::sync::Arc;

const FIXTURES: [&str; 5] = [
    "qwen4exp",
    "qwen4exp_b12r2",
    "qwen4exp_b64",
    "qwen4exp_yarn",
    "qwen4exp_i32",
];

/// Each fixture with its name and its model.
fn qwen4exp_models() -> impl Iterator<Item = (&'static str, Value, Model)> {
    FIXTURES.iter().map(|&name| {
        let f = fixture(name);
        let model = load(&f);
        (name, f, model)
    })
}

fn fixture(name: &str) -> Value {
    let path = fixtures_dir().join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).expect("fixture JSON")
}

/// F32 logits at every position within 1e-4 of transformers', the same
/// argmax everywhere, and the sparse part of the prompt really sparse.
#[test]
fn prompt_logits_match_transformers_at_every_position() {
    let run = runner(2);
    for (name, f, model) in qwen4exp_models() {
        let ids = ids(&f["prompt"]["ids"]);
        let sparse_from = f["prompt"]["sparse_from_position"].as_u64().unwrap() as usize;
        assert!(
            ids.len() > sparse_from + 32,
            "{name}: prompt too short to be sparse"
        );
        let ids_of = |v: &Value| -> Vec<usize> {
            v.as_array()
                .expect("positions")
                .iter()
                .map(|x| x.as_u64().unwrap() as usize)
                .collect()
        };
        let (shape, want) = read_npy(f["prompt"]["logits"].as_str().unwrap());
        let v = model.config.n_vocab;
        assert_eq!(shape, vec![ids.len(), v]);
        let got = batch_logits(&model, &run, &ids);
        let (max, mean) = diff(&got, &want);
        let (dense_max, _) = diff(&got[..sparse_from * v], &want[..sparse_from * v]);
        eprintln!(
            "{name} on {}: max |Δ| {max:.2e} (dense part {dense_max:.2e}), mean {mean:.2e} over {} positions",
            run.kernels(),
            ids.len()
        );
        // Where transformers' block choice was a tie, torch picked among
        // the tied blocks in no defined order (rill: the lower block), so
        // those positions are not compared; they must stay few.
        let ties: Vec<usize> = ids_of(&f["prompt"]["tie_positions"]);
        assert!(
            ties.len() * 5 <= ids.len() - sparse_from,
            "{name}: {} tied positions",
            ties.len()
        );
        let mut compared_max = 0f32;
        for (p, (g, w)) in got.chunks_exact(v).zip(want.chunks_exact(v)).enumerate() {
            if ties.contains(&p) {
                continue;
            }
            compared_max = compared_max.max(diff(g, w).0);
            assert_eq!(argmax(g), argmax(w), "{name}: argmax at position {p}");
        }
        eprintln!(
            "{name}: {} tied positions skipped; max over the rest {compared_max:.2e}",
            ties.len()
        );
        assert!(
            compared_max <= 1e-4,
            "{name}: max |Δlogit| {compared_max:e}"
        );
        assert!(dense_max <= 1e-4);
    }
}

/// Greedy decoding from a prompt past the budget gives transformers'
/// tokens (its cached `generate`), with logits within 1e-4 at each step.
#[test]
fn greedy_tokens_match_transformers() {
    let run = runner(2);
    for (name, f, model) in qwen4exp_models() {
        let prompt = ids(&f["generation"]["prompt_ids"]);
        let want = ids(&f["generation"]["ids"]);
        assert!(want.len() >= 24);
        let (_, want_logits) = read_npy(f["generation"]["logits"].as_str().unwrap());
        let v = model.config.n_vocab;
        let got = greedy_until(&model, &run, &prompt, want.len(), |step, logits, _| {
            let (max, _) = diff(logits, &want_logits[step * v..(step + 1) * v]);
            assert!(max <= 1e-4, "{name}: step {step}: max |Δlogit| {max:e}");
            true
        });
        assert_eq!(got, want, "{name}: greedy tokens");
    }
}

/// Where a generation stays dense (llama.cpp selects other keys than
/// transformers once sparse), rill's greedy tokens are llama.cpp's too
/// (its F32 GGUF run, f32 KV, recorded by the fixture generator).
#[test]
fn greedy_tokens_match_llama_cpp_while_dense() {
    let run = runner(2);
    let mut checked = 0;
    for name in FIXTURES {
        let f = fixture(name);
        if f["generation"]["dense"] != true {
            continue;
        }
        let model = load(&f);
        let prompt = ids(&f["generation"]["prompt_ids"]);
        let llama = ids(&f["llama_cpp"]["gen_ids"]);
        assert_eq!(llama.len(), 24, "{name}");
        let mut st = SequenceState::new(&model, prompt.len() + llama.len());
        let mut logits = model.forward(&run, &mut st, &prompt, Rows::Last).unwrap();
        let mut got = Vec::new();
        for _ in 0..llama.len() {
            let t = argmax(&logits);
            got.push(t);
            logits = model.forward(&run, &mut st, &[t], Rows::Last).unwrap();
        }
        assert_eq!(got, llama, "{name}: greedy vs llama.cpp");
        checked += 1;
    }
    assert!(checked > 0, "no fixture with a dense generation");
}

/// Token-by-token decoding gives the batched prefill's logits, and
/// prefill in uneven chunks too (the index keys, the blocks they pool and
/// the PLE history carry over between steps).
#[test]
fn decode_and_chunks_equal_the_batch() {
    let run = runner(2);
    for (name, f, model) in qwen4exp_models() {
        let ids = ids(&f["prompt"]["ids"]);
        let v = model.config.n_vocab;
        let batch = batch_logits(&model, &run, &ids);
        let mut st = SequenceState::new(&model, ids.len());
        let mut one = Vec::new();
        for &t in &ids {
            one.extend(model.forward(&run, &mut st, &[t], Rows::Last).unwrap());
        }
        let (max, _) = diff(&one, &batch);
        assert!(max <= 1e-4, "{name}: token by token vs batch {max:e}");
        let mut st = SequenceState::new(&model, ids.len());
        let chunked = chunked_logits(&model, &run, &mut st, &ids, &[5, 1, 13, 7, 2]);
        let (max, _) = diff(&chunked, &batch);
        assert!(max <= 1e-4, "{name}: chunks vs batch {max:e}");
        assert_eq!(chunked.len(), ids.len() * v);
    }
}

/// Every row's logits of `ids` fed in chunks of the lengths `chunks`, cycled.
fn chunked_logits(
    model: &Model,
    run: &Runner,
    st: &mut SequenceState,
    ids: &[u32],
    chunks: &[usize],
) -> Vec<f32> {
    let mut out = Vec::new();
    let mut at = 0;
    for len in chunks.iter().cycle() {
        if at == ids.len() {
            break;
        }
        let end = (at + len).min(ids.len());
        out.extend(model.forward(run, st, &ids[at..end], Rows::All).unwrap());
        at = end;
    }
    out
}

/// A sequence's logits do not depend on the others in its step.
#[test]
fn batched_sequences_are_independent() {
    let run = runner(2);
    let f = fixture("qwen4exp");
    let model = load(&f);
    let ids = ids(&f["prompt"]["ids"]);
    let (a, b) = (&ids[..60], &ids[17..90]);
    let alone_a = batch_logits(&model, &run, a);
    let alone_b = batch_logits(&model, &run, b);
    let mut sa = SequenceState::new(&model, a.len());
    let mut sb = SequenceState::new(&model, b.len());
    let out = {
        let mut items = [
            BatchItem::new(&mut sa, a, Outputs::logits(Rows::All)),
            BatchItem::new(&mut sb, b, Outputs::logits(Rows::All)),
        ];
        model.forward_batch(&run, &mut items).unwrap()
    };
    assert_eq!(diff(&out[0], &alone_a).0, 0.0, "sequence a changed by b");
    assert_eq!(diff(&out[1], &alone_b).0, 0.0, "sequence b changed by a");
}

/// A snapshot (the prompt cache's clone) resumes exactly where it was.
#[test]
fn a_cloned_state_resumes_like_the_original() {
    let run = runner(1);
    let f = fixture("qwen4exp");
    let model: Model = load(&f);
    let ids = ids(&f["prompt"]["ids"]);
    let mut st = SequenceState::new(&model, ids.len());
    model
        .forward(&run, &mut st, &ids[..50], Rows::None)
        .unwrap();
    let mut copy = st.with_capacity(ids.len());
    let a = model.forward(&run, &mut st, &ids[50..], Rows::All).unwrap();
    let b = model
        .forward(&run, &mut copy, &ids[50..], Rows::All)
        .unwrap();
    assert_eq!(a, b);
}

/// A state written to bytes and read back (the disk prompt cache's format)
/// resumes exactly: the index keys (complete blocks and the raw keys of an
/// incomplete one) and the PLE history travel with it; a cut file and a
/// state of another shape are refused.
#[test]
fn a_state_encoded_and_decoded_resumes_like_the_original() {
    let run = runner(1);
    for name in ["qwen4exp", "qwen4exp_b12r2"] {
        let f = fixture(name);
        let model: Model = load(&f);
        let ids = ids(&f["prompt"]["ids"]);
        // 51: past the budget, and inside a key block of every ratio > 1.
        let cut = 51;
        let mut st = SequenceState::new(&model, ids.len());
        model
            .forward(&run, &mut st, &ids[..cut], Rows::None)
            .unwrap();
        let bytes = st.encode();
        let mut back = SequenceState::decode(&model, &bytes, ids.len()).unwrap();
        assert_eq!(back.encode(), bytes, "{name}: encoding is canonical");
        let a = model
            .forward(&run, &mut st, &ids[cut..], Rows::All)
            .unwrap();
        let b = model
            .forward(&run, &mut back, &ids[cut..], Rows::All)
            .unwrap();
        assert_eq!(a, b, "{name}: the decoded state resumes otherwise");
        for end in [bytes.len() / 2, bytes.len() - 1] {
            assert!(SequenceState::decode(&model, &bytes[..end], ids.len()).is_err());
        }
    }
    let (a, b) = (load(&fixture("qwen4exp")), load(&fixture("qwen4exp_b12r2")));
    let st = SequenceState::new(&a, 8);
    assert!(SequenceState::decode(&b, &st.encode(), 8).is_err());
}

/// The worst case a memory budget plans with (`StateSize`) covers what a
/// qwen4exp state holds: its KV, and also the index keys that grow with
/// the context and the PLE history.
#[test]
fn state_size_bounds_what_a_state_holds() {
    let run = runner(1);
    for (name, f, model) in qwen4exp_models() {
        let ids = ids(&f["prompt"]["ids"]);
        let n = ids.len();
        for t in [KvType::F32, KvType::F16, KvType::Q8_0, KvType::Q4_0] {
            let kv = KvConfig::uniform(t);
            let size = rill_model::StateSize::of(&model, kv);
            let mut st = SequenceState::with_kv(&model, n, kv).unwrap();
            for chunk in ids.chunks(16) {
                model.forward(&run, &mut st, chunk, Rows::None).unwrap();
            }
            let (held, worst) = (st.bytes(), size.bytes(n, 16, 0));
            assert!(held <= worst, "{name} {t}: {held} > {worst}");
            assert!(size.hyper_per_pos > 0, "{name}: index keys grow");
        }
    }
}

/// The Hugging Face folder the first fixture was converted from, read as it
/// ships (the indexer's fused `index_qk_proj`, the n-gram table in shards,
/// hash constants derived from config.json, +1 on the zero-centred norms):
/// transformers' logits, and the GGUF's.
#[test]
fn the_hugging_face_folder_runs_as_transformers_does() {
    let run = runner(2);
    let f = fixture("qwen4exp");
    let dir = fixtures_dir().join("hf/qwen4exp");
    let src = HfSource::open(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let folder = Model::from_source(Arc::new(src)).unwrap();
    let gguf = load(&f);
    assert_eq!(
        folder.config.qwen4exp, gguf.config.qwen4exp,
        "hash constants, indexer, streams"
    );
    let ids = ids(&f["prompt"]["ids"]);
    let (_, want) = read_npy(f["prompt"]["logits"].as_str().unwrap());
    let got = batch_logits(&folder, &run, &ids);
    let (max, mean) = diff(&got, &want);
    eprintln!("hf/qwen4exp: max |Δ| {max:.2e}, mean {mean:.2e}");
    assert!(max <= 1e-4, "folder vs transformers {max:e}");
    let (max, _) = diff(&got, &batch_logits(&gguf, &run, &ids));
    assert!(max <= 1e-4, "folder vs GGUF {max:e}");
}

/// Quantized files (Q8_0, Q4_K_M, Q6_K, IQ4_XS of one wide model): rill's
/// mean |Δ logit| from transformers (float32, the model they were quantized
/// from) is at most llama.cpp's on the same file (to 0.2%), in both precisions, over
/// the dense positions (llama.cpp selects other keys past them); past
/// them rill stays as close as it is before.
#[test]
fn quantized_files_are_as_close_to_transformers_as_llama_cpp() {
    let f = fixture("qwen4exp_wide");
    let ids = ids(&f["prompt"]["ids"]);
    let dense = f["prompt"]["sparse_from_position"].as_u64().unwrap() as usize;
    let (_, want) = read_npy(f["prompt"]["logits"].as_str().unwrap());
    for (qt, file) in f["files"].as_object().unwrap() {
        let model = load(file);
        let v = model.config.n_vocab;
        let llama = file["llama_cpp_dense"]["mean_abs"].as_f64().unwrap() as f32;
        for precision in [rill_kernels::Precision::Exact, rill_kernels::Precision::Q8] {
            let mut run = runner(2);
            run.precision = precision;
            let got = batch_logits(&model, &run, &ids);
            let (_, mean) = diff(&got[..dense * v], &want[..dense * v]);
            let (_, mean_all) = diff(&got, &want);
            eprintln!(
                "{qt} {precision:?}: mean |Δ| {mean:.2e} over the dense positions (llama.cpp {llama:.2e}), \
                 {mean_all:.2e} over all"
            );
            // In q8 rill rounds activations as llama.cpp does: the same
            // error, to the last digits of its sums.
            assert!(
                mean <= llama * 1.002,
                "{qt} {precision:?}: {mean:e} > llama.cpp's {llama:e}"
            );
            assert!(
                mean_all <= 1.5 * llama,
                "{qt} {precision:?}: {mean_all:e} past the budget"
            );
        }
    }
}

/// With a block-quantized K cache the pooled index keys are stored in its
/// type too (as llama.cpp's indexer cache takes `-ctk`), rotated with the
/// index queries when K is rotated: on a model whose index keys are one
/// q8_0 / q4_0 block long, the logits stay within the KV type's error of
/// transformers past the budget, decoding and chunks give the batch's
/// logits, and a state written to bytes resumes exactly.
#[test]
fn index_keys_follow_the_k_cache_type() {
    let run = runner(2);
    let f = fixture("qwen4exp_i32");
    let model = load(&f);
    let ids = ids(&f["prompt"]["ids"]);
    let n = ids.len();
    let v = model.config.n_vocab;
    let (_, want) = read_npy(f["prompt"]["logits"].as_str().unwrap());
    let sparse_from = f["prompt"]["sparse_from_position"].as_u64().unwrap() as usize;
    let logits = |st: &mut SequenceState, chunks: &[usize]| -> Vec<f32> {
        chunked_logits(&model, &run, st, &ids, chunks)
    };
    for (t, rotate, max_tol, mean_tol) in [
        (KvType::Q8_0, true, 0.02, 2e-3),
        (KvType::Q4_0, true, 0.3, 1e-2),
        (KvType::Q4_0, false, 0.3, 1e-2),
    ] {
        let kv = KvConfig {
            rotate,
            ..KvConfig::uniform(t)
        };
        let state = || SequenceState::with_kv(&model, n, kv).unwrap();
        let batch = logits(&mut state(), &[n]);
        let sparse = sparse_from * v..;
        let (max, mean) = diff(&batch[sparse.clone()], &want[sparse.clone()]);
        eprintln!("{t} (rotated: {rotate}) past the budget: max |Δ| {max:.2e}, mean {mean:.2e}");
        assert!(
            max <= max_tol && mean <= mean_tol,
            "{t}: {max:e} / {mean:e}"
        );
        let agree = (batch[sparse.clone()].chunks_exact(v))
            .zip(want[sparse].chunks_exact(v))
            .filter(|(g, w)| argmax(g) == argmax(w))
            .count();
        assert!(agree * 10 >= (n - sparse_from) * 9, "{t}: argmax {agree}");
        for chunks in [&[1][..], &[5, 1, 13, 7, 2]] {
            let (d, _) = diff(&logits(&mut state(), chunks), &batch);
            assert!(d <= 1e-4, "{t}: chunks {chunks:?} vs batch {d:e}");
        }
        let mut st = state();
        model
            .forward(&run, &mut st, &ids[..51], Rows::None)
            .unwrap();
        let mut back = SequenceState::decode(&model, &st.encode(), n).unwrap();
        let a = model.forward(&run, &mut st, &ids[51..], Rows::All).unwrap();
        let b = model
            .forward(&run, &mut back, &ids[51..], Rows::All)
            .unwrap();
        assert_eq!(a, b, "{t}: the decoded state resumes otherwise");
    }
}
