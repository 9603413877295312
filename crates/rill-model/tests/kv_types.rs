//! KV cache types (`KvConfig`): logits of every type against the f32 cache
//! over a prompt of several key tiles, the f16 sinks / window of a 4-bit
//! cache, the bits kept across chunking and decode, and the MTP head's
//! cache in the same types.

mod common;

use common::*;
use rill_model::{KvConfig, KvType, Model, Rows, Runner, SequenceState};

/// A prompt longer than the default window and several key tiles.
fn prompt(n: usize, vocab: usize) -> Vec<u32> {
    (0..n as u32)
        .map(|i| (i * 37 + (i * i) % 11) % vocab as u32)
        .collect()
}

fn kv(k: KvType, v: KvType, sinks: usize, window: usize) -> KvConfig {
    KvConfig {
        k,
        v,
        sinks,
        window,
        rotate: false,
    }
}

fn rotated(c: KvConfig) -> KvConfig {
    KvConfig { rotate: true, ..c }
}

/// The logits of every position of `ids`, prefilled in chunks of `chunk`.
fn logits(model: &Model, run: &Runner, kv: KvConfig, ids: &[u32], chunk: usize) -> Vec<f32> {
    let mut st = SequenceState::with_kv(model, ids.len(), kv).unwrap();
    let mut out = Vec::new();
    for c in ids.chunks(chunk) {
        out.extend(model.forward(run, &mut st, c, Rows::All).unwrap());
    }
    assert_eq!(st.kv_config(), kv);
    out
}

/// Mean |Δ| of `got` against `want`, relative to the mean |want| (the
/// maximum is dominated by the few positions where a MoE router flips).
fn rel_err(got: &[f32], want: &[f32]) -> f32 {
    let scale = want.iter().map(|v| v.abs()).sum::<f32>() / want.len() as f32;
    diff(got, want).1 / scale
}

#[test]
fn every_kv_type_stays_near_the_f32_cache_and_the_errors_order_by_bits() {
    use KvType as T;
    let run = runner(2);
    for f in fixtures("f32") {
        let name = f["name"].as_str().unwrap().to_string();
        let model = load(&f);
        let ids = prompt(700, model.config.n_vocab);
        let want = logits(&model, &run, KvConfig::f32(), &ids, 700);
        let err = |c: KvConfig| rel_err(&logits(&model, &run, c, &ids, 700), &want);
        let f16 = err(kv(T::F16, T::F16, 0, 0));
        let bf16 = err(kv(T::BF16, T::BF16, 0, 0));
        let q8 = err(kv(T::Q8_0, T::Q8_0, 0, 0));
        let q8_q5 = err(kv(T::Q8_0, T::Q5_1, 0, 0));
        let q4 = err(kv(T::Q4_0, T::Q4_0, 0, 0));
        let q4_sw = err(kv(T::Q4_0, T::Q4_0, 4, 256));
        let q8_rot = err(rotated(kv(T::Q8_0, T::Q8_0, 0, 0)));
        let q4_rot = err(rotated(kv(T::Q4_0, T::Q4_0, 0, 0)));
        eprintln!(
            "{name}: mean |Δ| / mean |logit| vs f32 KV over {} positions: f16 {f16:.2e}, bf16 \
             {bf16:.2e}, q8_0 {q8:.2e}, q8_0/q5_1 {q8_q5:.2e}, q4_0 {q4:.2e}, q4_0 + f16 \
             sinks 4 / window 256 {q4_sw:.2e}; Hadamard-rotated q8_0 {q8_rot:.2e}, q4_0 {q4_rot:.2e}",
            ids.len()
        );
        assert!(f16 < 2e-3, "{name}: f16 {f16:e}");
        assert!(bf16 < 2e-2, "{name}: bf16 {bf16:e}");
        assert!(q8 < 2e-2, "{name}: q8_0 {q8:e}");
        assert!(q4 < 2e-1, "{name}: q4_0 {q4:e}");
        assert!(
            f16 < bf16 && f16 < q8 && q8 < q4,
            "{name}: errors out of order"
        );
        assert!(q8_q5 < q4, "{name}: q8_0/q5_1 {q8_q5:e} vs q4_0 {q4:e}");
        assert!(
            q4_sw < q4,
            "{name}: sinks + window {q4_sw:e} vs none {q4:e}"
        );
        assert!(q4_sw > 0.0, "{name}: the q4_0 rows are read");
        // Random weights have no outlier channels for the rotation to
        // spread: it only has to stay as good.
        assert!(
            q8_rot < 2.0 * q8 && q4_rot < 2.0 * q4,
            "{name}: rotated {q8_rot:e} {q4_rot:e}"
        );
        assert!(
            q8_rot != q8 && q4_rot != q4,
            "{name}: the rotation is applied"
        );
        let f16_rot = err(rotated(kv(T::F16, T::F16, 0, 0)));
        assert_eq!(f16_rot, f16, "{name}: an f16 cache is not rotated");
    }
}

#[test]
fn a_window_as_long_as_the_prompt_gives_the_f16_caches_bits() {
    let run = runner(2);
    for (_, name, model) in models("f32") {
        let ids = prompt(200, model.config.n_vocab);
        let f16 = logits(&model, &run, KvConfig::uniform(KvType::F16), &ids, 200);
        for (sinks, window) in [(0usize, 200usize), (200, 0), (150, 60)] {
            let q4 = logits(
                &model,
                &run,
                kv(KvType::Q4_0, KvType::Q4_0, sinks, window),
                &ids,
                64,
            );
            assert!(
                same_bits(&q4, &f16),
                "{name}: sinks {sinks} window {window}"
            );
        }
    }
}

#[test]
fn quantized_caches_keep_the_bits_across_chunks_decode_and_snapshots() {
    let run = runner(2);
    for f in fixtures("f32")
        .into_iter()
        .chain(fixtures("quant").into_iter().take(1))
    {
        let name = f["name"].as_str().unwrap();
        let model = load(&f);
        let ids = prompt(400, model.config.n_vocab);
        for c in [
            kv(KvType::Q8_0, KvType::Q8_0, 0, 0),
            kv(KvType::Q4_0, KvType::Q5_1, 4, 100),
            kv(KvType::BF16, KvType::Q4_0, 2, 70),
            rotated(kv(KvType::Q4_0, KvType::Q8_0, 4, 100)),
        ] {
            let whole = logits(&model, &run, c, &ids, 400);
            // Chunks of whole GDN chunks (64): the f32 cache's own bits too.
            let chunked = logits(&model, &run, c, &ids, 128);
            assert!(same_bits(&chunked, &whole), "{name} {c:?}: chunks");
            // Prefill a part, snapshot, decode the rest token by token: the
            // state and its snapshot decode the same bits, and near the
            // prefill's (the GDN recurrence token by token rounds apart
            // from the chunkwise form).
            let mut st = SequenceState::with_kv(&model, ids.len(), c).unwrap();
            model
                .forward(&run, &mut st, &ids[..300], Rows::None)
                .unwrap();
            let snap = st.clone();
            let v = model.config.n_vocab;
            let mut decoded = Vec::new();
            for mut s in [st, snap.with_capacity(400)] {
                let mut rows = Vec::new();
                for &t in &ids[300..] {
                    rows.extend(model.forward(&run, &mut s, &[t], Rows::Last).unwrap());
                }
                decoded.push(rows);
            }
            assert!(
                same_bits(&decoded[0], &decoded[1]),
                "{name} {c:?}: snapshot"
            );
            // A float cache keeps that rounding as it is. A block-coded one
            // can amplify it: a value ~1e-6 apart may land on the other side
            // of a code boundary and move by a whole quantization step (seen
            // on the scalar kernels: 1.35e-4 with Q8_0), so its bound is the
            // coarser one.
            let float = |t: KvType| [KvType::F32, KvType::F16, KvType::BF16].contains(&t);
            let bound = if float(c.k) && float(c.v) { 1e-4 } else { 1e-3 };
            let (max, _) = diff(&decoded[0], &whole[300 * v..]);
            assert!(max < bound, "{name} {c:?}: decode vs prefill {max:e}");
        }
    }
}

#[test]
fn a_cache_type_the_head_dimension_cannot_hold_is_refused() {
    let f = &fixtures("f32")[0];
    let mut model = load(f);
    model.config.head_dim = 24;
    let e = SequenceState::with_kv(&model, 8, KvConfig::uniform(KvType::Q8_0)).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("q8_0") && msg.contains("24"), "{msg}");
    assert!(SequenceState::with_kv(&model, 8, KvConfig::uniform(KvType::F16)).is_ok());
}

/// The worst case a memory budget plans with (`StateSize`) is what a state
/// holds: equal for the block types, an upper bound with the f16 window, on
/// a model with and without an MTP head, prompt fed in chunks.
#[test]
fn state_size_bounds_what_a_state_holds() {
    let run = runner(1);
    let mut files = vec![fixtures("f32")[0].clone()];
    files.extend(fixtures("mtp").into_iter().take(1));
    for f in files {
        let model = load(&f);
        let n = 200;
        let ids = prompt(n, model.config.n_vocab);
        for c in [
            KvConfig::f32(),
            KvConfig::uniform(KvType::F16),
            kv(KvType::Q8_0, KvType::Q8_0, 0, 0),
            KvConfig::uniform(KvType::Q4_0),
        ] {
            let size = rill_model::StateSize::of(&model, c);
            let mut st = SequenceState::with_kv(&model, n, c).unwrap();
            for chunk in ids.chunks(64) {
                model.forward(&run, &mut st, chunk, Rows::None).unwrap();
            }
            if let Some(0) = st.mtp_position() {
                let hidden = vec![0f32; n * model.config.n_embd];
                let mut out = rill_model::StepOutputs::new();
                let mut items = [rill_model::MtpItem {
                    state: &mut st,
                    tokens: &ids,
                    hidden: &hidden,
                    outputs: rill_model::Outputs::logits(Rows::Last),
                }];
                model.forward_mtp_into(&run, &mut items, &mut out).unwrap();
            }
            let (held, worst) = (st.bytes(), size.bytes(n, 64, 0));
            let name = f["name"].as_str().unwrap();
            assert!(held <= worst, "{name} {}: {held} > {worst}", c.describe());
            if !c.k.keeps_exact_rows() {
                assert_eq!(held, worst, "{name} {}", c.describe());
            }
            assert!(size.bytes(2 * n, 64, 0) > worst, "grows with positions");
            assert_eq!(
                size.bytes(n, 64, 4) - worst,
                3 * size.ring_slot,
                "a ring of 4 rows keeps 3 slots"
            );
        }
    }
}

#[test]
fn state_bytes_follow_the_cache_types() {
    let f = &fixtures("f32")[0];
    let model = load(f);
    let run = runner(1);
    let ids = prompt(64, model.config.n_vocab);
    let bytes = |c: KvConfig| {
        let mut st = SequenceState::with_kv(&model, 64, c).unwrap();
        model.forward(&run, &mut st, &ids, Rows::None).unwrap();
        st.bytes()
    };
    let (f32b, f16b, q8b) = (
        bytes(KvConfig::f32()),
        bytes(KvConfig::uniform(KvType::F16)),
        bytes(kv(KvType::Q8_0, KvType::Q8_0, 0, 0)),
    );
    let c = &model.config;
    let n_attn = c
        .layer_kinds
        .iter()
        .filter(|k| **k == rill_model::LayerKind::Attention)
        .count();
    // The KV rows are held in whole pages: 64 positions take one page.
    let held =
        64usize.div_ceil(rill_kernels::kv::KV_PAGE_POSITIONS) * rill_kernels::kv::KV_PAGE_POSITIONS;
    let values = n_attn * 2 * held * c.n_head_kv * c.head_dim;
    assert_eq!(f32b - f16b, values * 2, "f16 halves the KV bytes");
    assert_eq!(
        f16b - q8b,
        values * 2 - values / 32 * 34,
        "q8_0: 34 bytes per 32"
    );
}

#[test]
fn the_mtp_heads_cache_takes_the_same_types() {
    let run = runner(2);
    for (_, name, model) in models("mtp") {
        let (h, n) = (model.config.n_embd, 120);
        let ids = prompt(n, model.config.n_vocab);
        let head = |c: KvConfig| {
            let mut st = SequenceState::with_kv(&model, n, c).unwrap();
            let hid = shifted(&trunk_hidden(&model, &run, &mut st, &ids), h);
            let logits = mtp_logits(&model, &run, &mut st, &ids, &hid);
            // Drop the last rows and feed them again: the same bits.
            st.truncate_mtp(n - 5);
            let again = mtp_logits(&model, &run, &mut st, &ids[n - 5..], &hid[(n - 5) * h..]);
            let v = model.config.n_vocab;
            assert!(
                same_bits(&again, &logits[(n - 5) * v..]),
                "{name} {c:?}: truncate and refeed"
            );
            logits
        };
        let want = head(KvConfig::f32());
        let q8 = rel_err(&head(kv(KvType::Q8_0, KvType::Q8_0, 0, 0)), &want);
        let q4 = rel_err(&head(kv(KvType::Q4_0, KvType::Q4_0, 0, 0)), &want);
        eprintln!("{name}: MTP logits vs f32 KV: q8_0 {q8:.2e}, q4_0 {q4:.2e}");
        assert!(
            q8 > 0.0 && q8 < q4 && q4 < 2e-1,
            "{name}: q8 {q8:e} q4 {q4:e}"
        );
    }
}

/// A state written as bytes and read back continues with the bits the
/// original gives (f32, q8_0, q4_0 with its f16 sinks and window, the MTP
/// head's cache); bytes of another model or damaged ones are refused.
#[test]
fn a_state_encoded_and_decoded_continues_bit_for_bit() {
    let run = runner(1);
    let mut files = vec![fixtures("f32")[0].clone()];
    files.extend(fixtures("mtp").into_iter().take(1));
    for f in &files {
        let model = load(f);
        let ids = prompt(150, model.config.n_vocab);
        for c in [
            KvConfig::f32(),
            kv(KvType::Q8_0, KvType::Q8_0, 0, 0),
            KvConfig {
                window: 16,
                ..KvConfig::uniform(KvType::Q4_0)
            },
        ] {
            let mut st = SequenceState::with_kv(&model, 200, c).unwrap();
            model
                .forward(&run, &mut st, &ids[..140], Rows::None)
                .unwrap();
            let bytes = st.encode();
            let mut back = SequenceState::decode(&model, &bytes, 200).unwrap();
            assert_eq!(back.bytes(), st.bytes());
            assert_eq!(back.encode(), bytes, "encoding is canonical");
            let a = model
                .forward(&run, &mut st, &ids[140..], Rows::All)
                .unwrap();
            let b = model
                .forward(&run, &mut back, &ids[140..], Rows::All)
                .unwrap();
            assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()));
            for cut in [0, 9, bytes.len() / 2, bytes.len() - 1] {
                assert!(SequenceState::decode(&model, &bytes[..cut], 200).is_err());
            }
        }
    }
    let (a, b) = (load(&files[0]), load(&files[1]));
    let st = SequenceState::new(&a, 8);
    let err = SequenceState::decode(&b, &st.encode(), 8).unwrap_err();
    assert!(!err.is_empty());
}
