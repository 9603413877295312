//! Shared helpers of the fixture tests: the manifest, .npy reading, comparison.
#![allow(dead_code)]

use rill_kernels::Isa;
use rill_model::{Model, Rows, Runner, SequenceState};
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

pub fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best as u32
}
