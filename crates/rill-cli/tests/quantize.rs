//! `rill quantize` against llama-quantize: on the embedded demo model, every
//! file type gives llama.cpp's per-tensor types, an error no larger than
//! its, tensor by tensor, and — since the encoders are ggml's reference
//! quantizers and the mix is its rules — llama-quantize's file byte for
//! byte (`fixtures/quantize/demo_llama_quantize.json`, made by
//! `scripts/fixtures/make_quantize_reference.py`).

mod common;

use common::{rill, root};
use rill_gguf::GgufFile;
use rill_kernels::quant::dequantize_with;
use rill_kernels::Isa;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn demo() -> PathBuf {
    root().join("assets/demo/rill-demo.gguf")
}

fn reference() -> Value {
    let text = std::fs::read_to_string(root().join("fixtures/quantize/demo_llama_quantize.json"))
        .expect("the llama-quantize reference");
    serde_json::from_str(&text).unwrap()
}

fn out_path(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("rill-quantize-{}-{tag}.gguf", std::process::id()))
}

fn values(f: &GgufFile, name: &str) -> Vec<f64> {
    let t = f.tensor(name).unwrap();
    let mut v = vec![0f32; t.n_elements() as usize];
    dequantize_with(Isa::Scalar, t.dtype().unwrap(), f.tensor_data(t), &mut v);
    v.into_iter().map(f64::from).collect()
}

/// The checksum the reference script writes: Σ wᵢ·(2i + 1) mod 2⁶⁴ over
/// the file's little-endian u64 words (zero-padded).
fn checksum(path: &Path) -> String {
    let bytes = std::fs::read(path).unwrap();
    let sum = bytes.chunks(8).enumerate().fold(0u64, |h, (i, c)| {
        let mut w = [0u8; 8];
        w[..c.len()].copy_from_slice(c);
        h.wrapping_add(u64::from_le_bytes(w).wrapping_mul(2 * i as u64 + 1))
    });
    format!("{sum:016x}")
}

#[test]
fn every_file_type_is_llama_quantizes_file() {
    let reference = reference();
    let source = GgufFile::open(&demo()).unwrap();
    let types = reference["types"].as_object().unwrap();
    assert!(types.len() >= 10);
    for (ft, theirs) in types {
        let out = out_path(ft);
        let o = rill(&[
            "quantize",
            "--quiet",
            "--allow-requantize",
            demo().to_str().unwrap(),
            out.to_str().unwrap(),
            &ft.to_lowercase(),
        ]);
        assert!(
            o.status.success(),
            "{ft}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let ours = GgufFile::open(&out).unwrap();
        let tensors = theirs["tensors"].as_object().unwrap();
        assert_eq!(ours.tensors().len(), tensors.len(), "{ft}");
        for (name, t) in tensors {
            let info = ours
                .tensor(name)
                .unwrap_or_else(|| panic!("{ft}: no {name}"));
            assert_eq!(
                info.dtype().unwrap().name(),
                t["type"].as_str().unwrap(),
                "{ft}: {name}"
            );
            let (a, b) = (values(&ours, name), values(&source, name));
            let rms = (a
                .iter()
                .zip(&b)
                .map(|(x, y)| (x - y) * (x - y))
                .sum::<f64>()
                / a.len() as f64)
                .sqrt();
            let llama = t["rms"].as_f64().unwrap();
            assert!(
                rms <= llama * (1.0 + 1e-9) + 1e-12,
                "{ft}: {name}: rms {rms} > llama-quantize's {llama}"
            );
        }
        let size = std::fs::metadata(&out).unwrap().len();
        assert_eq!(Some(size), theirs["bytes"].as_u64(), "{ft}: file size");
        assert_eq!(
            checksum(&out),
            theirs["checksum"].as_str().unwrap(),
            "{ft}: not llama-quantize's file"
        );
        std::fs::remove_file(out).ok();
    }
}

#[test]
fn requantizing_needs_to_be_asked_for_and_bad_names_are_refused() {
    let out = out_path("refused");
    let (src, dst) = (demo(), out.to_string_lossy().into_owned());
    let o = rill(&["quantize", src.to_str().unwrap(), &dst, "q4_k_m"]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--allow-requantize"), "{err}");
    let o = rill(&["quantize", src.to_str().unwrap(), &dst, "q3_k_xl"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("q4_k_m"), "names the types rill writes: {err}");
    let o = rill(&["quantize", "/nonexistent.gguf", &dst, "q8_0"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(!out.exists());
    // a full disk: the error says so, and the device is left alone
    if Path::new("/dev/full").exists() {
        let o = rill(&["quantize", src.to_str().unwrap(), "/dev/full", "q8_0"]);
        assert_eq!(o.status.code(), Some(1));
        assert!(Path::new("/dev/full").exists());
    }
}
