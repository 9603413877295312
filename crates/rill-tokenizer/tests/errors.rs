//! Typed errors for malformed or unsupported tokenizer metadata, on small hand-made GGUFs.

use rill_gguf::writer::GgufWriter;
use rill_gguf::{GgufFile, MetaValue};
use rill_tokenizer::bytes::byte_to_char;
use rill_tokenizer::{PreTokenizer, SpecialTokens, Tokenizer, TokenizerError};

/// 256 byte tokens, then "he", "ll", "hell", "hello", then `<|end|>` (CONTROL) and `<x>` (USER).
fn toy_parts() -> (Vec<String>, Vec<i32>, Vec<String>) {
    let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_to_char(b).to_string()).collect();
    tokens.extend(["he", "ll", "hell", "hello", "<|end|>", "<x>"].map(String::from));
    let mut types = vec![1; tokens.len()];
    let n = types.len();
    types[n - 2] = 3;
    types[n - 1] = 4;
    let merges = ["h e", "l l", "he ll", "hell o"].map(String::from).to_vec();
    (tokens, types, merges)
}

fn strs(v: &[String]) -> MetaValue {
    MetaValue::Array(v.iter().cloned().map(MetaValue::Str).collect())
}

/// A GGUF of the toy vocabulary with `edit` applied to the key/value list.
fn toy_gguf(edit: impl FnOnce(&mut Vec<(&'static str, MetaValue)>)) -> GgufFile {
    let (tokens, types, merges) = toy_parts();
    let mut kv: Vec<(&'static str, MetaValue)> = vec![
        ("tokenizer.ggml.model", MetaValue::Str("gpt2".into())),
        ("tokenizer.ggml.pre", MetaValue::Str("qwen35".into())),
        ("tokenizer.ggml.tokens", strs(&tokens)),
        (
            "tokenizer.ggml.token_type",
            MetaValue::Array(types.into_iter().map(MetaValue::I32).collect()),
        ),
        ("tokenizer.ggml.merges", strs(&merges)),
        ("tokenizer.ggml.eos_token_id", MetaValue::U32(260)),
        ("tokenizer.ggml.add_bos_token", MetaValue::Bool(false)),
    ];
    edit(&mut kv);
    let mut w = GgufWriter::new();
    for (k, v) in kv {
        w.kv(k, v);
    }
    GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap()
}

fn set(kv: &mut [(&'static str, MetaValue)], key: &str, v: MetaValue) {
    kv.iter_mut().find(|(k, _)| *k == key).unwrap().1 = v;
}

#[test]
fn toy_tokenizer_works() {
    let t = Tokenizer::from_gguf(&toy_gguf(|_| {})).unwrap();
    assert_eq!(t.vocab_size(), 262);
    assert_eq!(t.eos_id(), Some(260));
    let ids = t.encode("hello<|end|>hell<x>", true);
    assert_eq!(ids, [259, 260, 258, 261]);
    assert_eq!(
        t.encode("hello<|end|>", false),
        [259, 60, 124, 101, 110, 100, 124, 62]
    );
    assert_eq!(t.decode(&ids).unwrap(), "hello<|end|>hell<x>");
    assert_eq!(t.encode("", true), Vec::<u32>::new());
    // the qwen2 pre-tokenizer from the same parts
    let (tokens, types, merges) = toy_parts();
    let t2 = Tokenizer::from_parts(
        tokens,
        types,
        merges,
        PreTokenizer::Qwen2,
        SpecialTokens::default(),
    )
    .unwrap();
    assert_eq!(t2.encode("hello", true), [259]);
}

#[test]
fn unsupported_model_and_pre() {
    let e = Tokenizer::from_gguf(&toy_gguf(|kv| {
        set(kv, "tokenizer.ggml.model", MetaValue::Str("llama".into()))
    }));
    assert!(matches!(e, Err(TokenizerError::UnsupportedModel(m)) if m == "llama"));
    let e = Tokenizer::from_gguf(&toy_gguf(|kv| {
        set(kv, "tokenizer.ggml.pre", MetaValue::Str("llama-bpe".into()))
    }));
    let err = e.unwrap_err();
    assert!(matches!(&err, TokenizerError::UnsupportedPre(p) if p == "llama-bpe"));
    assert!(err.to_string().contains("qwen35"), "{err}");
}

#[test]
fn missing_and_mistyped_keys() {
    let e = Tokenizer::from_gguf(&toy_gguf(|kv| {
        kv.retain(|(k, _)| *k != "tokenizer.ggml.merges")
    }));
    assert!(matches!(
        e,
        Err(TokenizerError::MissingKey("tokenizer.ggml.merges"))
    ));
    let e = Tokenizer::from_gguf(&toy_gguf(|kv| {
        set(kv, "tokenizer.ggml.tokens", MetaValue::U32(3))
    }));
    assert!(matches!(
        e,
        Err(TokenizerError::WrongType {
            key: "tokenizer.ggml.tokens",
            ..
        })
    ));
    let e = Tokenizer::from_gguf(&toy_gguf(|kv| {
        set(
            kv,
            "tokenizer.ggml.eos_token_id",
            MetaValue::Str("x".into()),
        )
    }));
    assert!(matches!(e, Err(TokenizerError::WrongType { .. })));
    let e = Tokenizer::from_gguf(&toy_gguf(|kv| {
        set(kv, "tokenizer.ggml.eos_token_id", MetaValue::U32(9999))
    }));
    assert!(matches!(
        e,
        Err(TokenizerError::BadSpecialId {
            what: "eos",
            id: 9999
        })
    ));
    // optional keys may be absent
    let t = Tokenizer::from_gguf(&toy_gguf(|kv| {
        kv.retain(|(k, _)| !k.ends_with("add_bos_token") && !k.ends_with("eos_token_id"))
    }))
    .unwrap();
    assert_eq!((t.eos_id(), t.add_bos_token()), (None, false));
}

#[test]
fn malformed_vocabularies() {
    let (tokens, types, merges) = toy_parts();
    let pre = PreTokenizer::Qwen35;
    let sp = SpecialTokens::default();
    let e = Tokenizer::from_parts(tokens.clone(), types[1..].to_vec(), merges.clone(), pre, sp);
    assert!(matches!(e, Err(TokenizerError::LengthMismatch { .. })));
    let mut bad_types = types.clone();
    bad_types[7] = 42;
    let e = Tokenizer::from_parts(tokens.clone(), bad_types, merges.clone(), pre, sp);
    assert!(matches!(
        e,
        Err(TokenizerError::BadTokenType { id: 7, ty: 42 })
    ));
    for m in ["h", "h q", "x y"] {
        let mut bad = merges.clone();
        bad.push(m.into());
        let e = Tokenizer::from_parts(tokens.clone(), types.clone(), bad, pre, sp);
        assert!(
            matches!(e, Err(TokenizerError::BadMerge { rank: 4, .. })),
            "{m}"
        );
    }
    let mut no_byte = tokens.clone();
    no_byte[b'a' as usize] = "zz".into();
    let e = Tokenizer::from_parts(no_byte, types.clone(), merges.clone(), pre, sp);
    assert!(matches!(e, Err(TokenizerError::MissingByteToken(b'a'))));
    let sp_bad = SpecialTokens {
        bos: Some(262),
        ..sp
    };
    let e = Tokenizer::from_parts(tokens, types, merges, pre, sp_bad);
    assert!(matches!(
        e,
        Err(TokenizerError::BadSpecialId {
            what: "bos",
            id: 262
        })
    ));
}
