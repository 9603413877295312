//! Shared test helpers: the real Qwen3.5 vocabulary (vocab-only GGUF, as llama.cpp's converter
//! writes it) and the corpus of strings with Hugging Face's ids.
#![allow(dead_code)]

use rill_gguf::GgufFile;
use rill_tokenizer::{PreTokenizer, SpecialTokens, Tokenizer};
use std::io::Read;
use std::path::PathBuf;
use std::sync::OnceLock;

pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

pub fn gunzip(name: &str) -> Vec<u8> {
    let f = std::fs::File::open(fixture(name)).expect("fixture missing");
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(f)
        .read_to_end(&mut out)
        .expect("bad gzip");
    out
}

pub fn gguf() -> &'static GgufFile {
    static G: OnceLock<GgufFile> = OnceLock::new();
    G.get_or_init(|| GgufFile::from_bytes(gunzip("qwen35-vocab.gguf.gz")).expect("bad GGUF"))
}

/// The Qwen3.5 tokenizer, through `Tokenizer::from_gguf`.
pub fn qwen35() -> &'static Tokenizer {
    static T: OnceLock<Tokenizer> = OnceLock::new();
    T.get_or_init(|| Tokenizer::from_gguf(gguf()).expect("from_gguf"))
}

/// The same vocabulary with the qwen2 pre-tokenizer, through `Tokenizer::from_parts`.
pub fn qwen2() -> &'static Tokenizer {
    static T: OnceLock<Tokenizer> = OnceLock::new();
    T.get_or_init(|| {
        let g = gguf();
        let strs = |k: &str| -> Vec<String> {
            g.get(k)
                .unwrap()
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_owned())
                .collect()
        };
        let types: Vec<i32> = g
            .get("tokenizer.ggml.token_type")
            .unwrap()
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_i64().unwrap() as i32)
            .collect();
        let specials = qwen35().specials();
        let _: SpecialTokens = specials;
        Tokenizer::from_parts(
            strs("tokenizer.ggml.tokens"),
            types,
            strs("tokenizer.ggml.merges"),
            PreTokenizer::Qwen2,
            specials,
        )
        .expect("from_parts")
    })
}

pub struct Case {
    pub text: String,
    pub ids: Vec<u32>,
    pub ids_nospecial: Vec<u32>,
    pub ids_qwen2: Vec<u32>,
    pub decoded: String,
}

pub fn corpus() -> Vec<Case> {
    let raw = gunzip("corpus.jsonl.gz");
    let text = String::from_utf8(raw).expect("corpus is UTF-8");
    let ids = |v: &serde_json::Value, k: &str| -> Vec<u32> {
        v[k].as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    text.lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).expect("bad JSON line");
            Case {
                text: v["text"].as_str().unwrap().to_owned(),
                ids: ids(&v, "ids"),
                ids_nospecial: ids(&v, "ids_nospecial"),
                ids_qwen2: ids(&v, "ids_qwen2"),
                decoded: v["decoded"].as_str().unwrap().to_owned(),
            }
        })
        .collect()
}
