//! Shared fixtures: a small valid file built with the crate's writer, and a raw byte builder
//! for files the writer would never produce.
#![allow(dead_code)]

use rill_gguf::writer::GgufWriter;
use rill_gguf::MetaValue;

/// One value of every type, in file order, including nested arrays.
pub fn all_values() -> Vec<(&'static str, MetaValue)> {
    use MetaValue::*;
    vec![
        ("general.architecture", Str("rilltest".into())),
        ("v.u8", U8(250)),
        ("v.i8", I8(-5)),
        ("v.u16", U16(65535)),
        ("v.i16", I16(-32768)),
        ("v.u32", U32(u32::MAX)),
        ("v.i32", I32(i32::MIN)),
        ("v.u64", U64(u64::MAX)),
        ("v.i64", I64(i64::MIN)),
        ("v.f32", F32(-0.125)),
        ("v.f64", F64(1e-300)),
        ("v.bool", Bool(true)),
        ("v.str", Str("grüße ✓".into())),
        ("v.empty_str", Str(String::new())),
        ("v.arr.u8", Array(vec![U8(1), U8(2)])),
        ("v.arr.str", Array(vec![Str("a".into()), Str("bc".into())])),
        ("v.arr.f32", Array(vec![F32(1.0), F32(f32::INFINITY)])),
        ("v.arr.bool", Array(vec![Bool(false), Bool(true)])),
        ("v.arr.empty", Array(vec![])),
        (
            "v.arr.nested",
            Array(vec![
                Array(vec![I64(1), I64(-2)]),
                Array(vec![]),
                Array(vec![I64(3)]),
            ]),
        ),
        (
            "v.arr.nested3",
            Array(vec![Array(vec![Array(vec![Str("deep".into())])])]),
        ),
    ]
}

/// Deterministic bytes.
pub fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| seed.wrapping_add((i * 7) as u8)).collect()
}

/// A small valid file: every value type and tensors of a few types (F32, Q8_0, Q4_K, and a
/// zero-element tensor), with the given version and alignment.
pub fn sample_writer(version: u32, alignment: u64) -> GgufWriter {
    let mut w = GgufWriter::new();
    w.version(version).alignment(alignment);
    for (k, v) in all_values() {
        w.kv(k, v);
    }
    w.tensor("f32", &[3, 2], 0, bytes(24, 1));
    w.tensor("q8_0", &[64], 8, bytes(68, 2));
    w.tensor("q4_k", &[256, 1, 1, 1], 12, bytes(144, 3));
    w.tensor("empty", &[0, 4], 0, vec![]);
    w
}

pub fn sample_bytes() -> Vec<u8> {
    sample_writer(3, 32).to_bytes().unwrap()
}

/// A tiny file with no metadata and one 4-element F32 tensor, for targeted corruption.
/// Layout: 24-byte header, tensor info at 24 (name "t": 8+1, n_dims 4, dim 8, type 4,
/// offset 8) ending at 57, data at 64.
pub fn tiny_bytes() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.tensor("t", &[4], 0, bytes(16, 9));
    w.to_bytes().unwrap()
}

/// Builds files byte by byte.
#[derive(Default)]
pub struct Raw(pub Vec<u8>);

impl Raw {
    pub fn header(version: u32, n_tensors: u64, n_kv: u64) -> Raw {
        let mut r = Raw(b"GGUF".to_vec());
        r.u32(version).u64(n_tensors).u64(n_kv);
        r
    }
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn str(&mut self, s: &str) -> &mut Self {
        self.u64(s.len() as u64);
        self.0.extend_from_slice(s.as_bytes());
        self
    }
    /// A tensor info.
    pub fn tensor(&mut self, name: &str, shape: &[u64], ty: u32, offset: u64) -> &mut Self {
        self.str(name).u32(shape.len() as u32);
        for &d in shape {
            self.u64(d);
        }
        self.u32(ty).u64(offset)
    }
    /// Pad to the data section (alignment 32) and append `n` data bytes.
    pub fn data(&mut self, n: usize) -> &mut Self {
        let len = self.0.len().div_ceil(32) * 32;
        self.0.resize(len + n, 0xAB);
        self
    }
    pub fn bytes(&self) -> Vec<u8> {
        self.0.clone()
    }
}
