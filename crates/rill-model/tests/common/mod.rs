//! Shared helpers of the fixture tests: the manifest, .npy reading, comparison.
#![allow(dead_code)]

use rill_kernels::Isa;
use rill_model::{Model, MtpItem, Outputs, Rows, Runner, SequenceState, StepOutputs};
use serde_json::Value;
use std::path::PathBuf;

/// The kernel class the tests run on: `RILL_KERNELS` when set (so that
/// the suite runs once per class: `.ci/run` does), else the best this CPU
/// runs. A class the CPU lacks fails the test with the reason.
pub fn kernels() -> Isa {
    match std::env::var("RILL_KERNELS") {
        Ok(v) if !v.is_empty() => v.parse().unwrap_or_else(|e| panic!("RILL_KERNELS: {e}")),
        _ => Isa::best(),
    }
}

/// Exact forward passes on `threads`, on [`kernels`].
pub fn runner(threads: usize) -> Runner {
    Runner::exact(kernels(), threads)
}

pub fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/models")
}

/// The manifest entries of `kind` ("f32" or "quant").
pub fn fixtures(kind: &str) -> Vec<Value> {
    let path = fixtures_dir().join("manifest.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let man: Value = serde_json::from_str(&text).expect("manifest is JSON");
    let all = man["fixtures"].as_array().expect("manifest.fixtures");
    let out: Vec<Value> = all.iter().filter(|f| f["kind"] == kind).cloned().collect();
    assert!(!out.is_empty(), "no {kind} fixtures in the manifest");
    out
}

pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("id array")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

/// A float32 C-order .npy file: (shape, data).
pub fn read_npy(name: &str) -> (Vec<usize>, Vec<f32>) {
    let path = fixtures_dir().join(name);
    let bytes =
        std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    assert_eq!(&bytes[..6], b"\x93NUMPY", "{name}: not a .npy file");
    let (hlen, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        _ => (
            u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize,
            12,
        ),
    };
    let header = std::str::from_utf8(&bytes[start..start + hlen]).unwrap();
    assert!(header.contains("'<f4'"), "{name}: not float32: {header}");
    assert!(
        header.contains("'fortran_order': False"),
        "{name}: not C order"
    );
    let shape_str = header
        .split("'shape': (")
        .nth(1)
        .unwrap()
        .split(')')
        .next()
        .unwrap();
    let shape: Vec<usize> = shape_str
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    let data: Vec<f32> = bytes[start + hlen..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(data.len(), shape.iter().product::<usize>(), "{name}: size");
    (shape, data)
}

pub fn load(fixture: &Value) -> Model {
    let path = fixtures_dir().join(fixture["gguf"].as_str().unwrap());
    Model::open(&path).unwrap_or_else(|e| panic!("cannot load {}: {e}", path.display()))
}

/// (max abs, mean abs) of `a − b`.
pub fn diff(a: &[f32], b: &[f32]) -> (f32, f32) {
    assert_eq!(a.len(), b.len());
    let mut max = 0f32;
    let mut sum = 0f64;
    for (x, y) in a.iter().zip(b) {
        let d = (x - y).abs();
        assert!(d.is_finite(), "non-finite logits");
        max = max.max(d);
        sum += d as f64;
    }
    (max, (sum / a.len() as f64) as f32)
}

/// Logits of every position, the whole prompt in one batch.
pub fn batch_logits(model: &Model, run: &Runner, ids: &[u32]) -> Vec<f32> {
    let mut st = SequenceState::new(model, ids.len());
    model.forward(run, &mut st, ids, Rows::All).unwrap()
}

/// The greedy pick, as the engine's sampler makes it.
pub use rill_sampler::argmax;

/// Greedy decoding of up to `n` tokens after `prompt` on a fresh state.
/// After each pick, `each(step, logits, picked)` sees the logits it was
/// made from and says whether to go on.
pub fn greedy_until(
    model: &Model,
    run: &Runner,
    prompt: &[u32],
    n: usize,
    mut each: impl FnMut(usize, &[f32], u32) -> bool,
) -> Vec<u32> {
    let mut st = SequenceState::new(model, prompt.len() + n);
    let mut row = model.forward(run, &mut st, prompt, Rows::Last).unwrap();
    let mut got = Vec::new();
    for step in 0..n {
        let next = argmax(&row);
        got.push(next);
        if !each(step, &row, next) {
            break;
        }
        row = model.forward(run, &mut st, &[next], Rows::Last).unwrap();
    }
    got
}

/// [`greedy_until`] all `n` tokens.
pub fn greedy(model: &Model, run: &Runner, prompt: &[u32], n: usize) -> Vec<u32> {
    greedy_until(model, run, prompt, n, |_, _, _| true)
}

/// The trunk's post-final-norm hidden states of every position of `ids`.
pub fn trunk_hidden(model: &Model, run: &Runner, st: &mut SequenceState, ids: &[u32]) -> Vec<f32> {
    let mut out = StepOutputs::new();
    let o = Outputs::hidden(Rows::All);
    model.forward_into(run, st, ids, o, &mut out).unwrap();
    out.hidden(0).to_vec()
}

/// The hidden rows the head pairs with tokens `0..n`: `h[p − 1]`, zeros at 0.
pub fn shifted(h: &[f32], n_embd: usize) -> Vec<f32> {
    let mut prev = vec![0f32; n_embd];
    prev.extend_from_slice(&h[..h.len() - n_embd]);
    prev
}

/// The head's logits for every row, fed `ids` with `hidden` in one call.
pub fn mtp_logits(
    model: &Model,
    run: &Runner,
    st: &mut SequenceState,
    ids: &[u32],
    hidden: &[f32],
) -> Vec<f32> {
    let mut out = StepOutputs::new();
    let mut items = [MtpItem {
        state: st,
        tokens: ids,
        hidden,
        outputs: Outputs::logits(Rows::All),
    }];
    model.forward_mtp_into(run, &mut items, &mut out).unwrap();
    out.logits(0).to_vec()
}

/// Whether `a` and `b` hold the same bits, element by element over the
/// shorter of the two.
pub fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// Each fixture of `kind` with its name and its model.
pub fn models(kind: &str) -> impl Iterator<Item = (Value, String, Model)> {
    fixtures(kind).into_iter().map(|f| {
        let name = f["name"].as_str().unwrap().to_string();
        let model = load(&f);
        (f, name, model)
    })
}
