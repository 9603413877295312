//! The real Qwen3.5 `tokenizer.json` (the team's copy in
//! `shared/oracle/tokenizer_qwen35`, beside the repository) through
//! `Tokenizer::from_hf_json`: the same vocabulary, types and merges as the
//! converted GGUF vocabulary, and Hugging Face's ids on the corpus.

mod common;

use common::{corpus, qwen35};
use rill_tokenizer::Tokenizer;
use std::path::PathBuf;

/// The real tokenizer files, when the shared folder is beside the repository.
fn real_files() -> Option<(String, String)> {
    let dir =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/oracle/tokenizer_qwen35");
    let tj = std::fs::read_to_string(dir.join("tokenizer.json")).ok()?;
    let tc = std::fs::read_to_string(dir.join("tokenizer_config.json")).ok()?;
    Some((tj, tc))
}

#[test]
fn the_real_tokenizer_json_is_the_converted_vocabulary() {
    let Some((tj, tc)) = real_files() else {
        eprintln!(
            "shared/oracle/tokenizer_qwen35 is not beside the repository: nothing to compare"
        );
        return;
    };
    let gguf = qwen35();
    let tok = Tokenizer::from_hf_json(&tj, Some(&tc), Some(gguf.vocab_size())).unwrap();
    assert_eq!(tok.vocab_size(), gguf.vocab_size());
    for id in 0..tok.vocab_size() as u32 {
        assert_eq!(tok.token_text(id), gguf.token_text(id), "token {id}");
        assert_eq!(
            tok.token_type(id),
            gguf.token_type(id),
            "type of token {id}"
        );
    }
    assert_eq!(tok.eos_id(), gguf.eos_id());
    assert_eq!(tok.pad_id(), gguf.pad_id());
    assert_eq!(tok.eog_ids(), gguf.eog_ids());
    let cases = corpus();
    let mut bad = 0;
    for c in &cases {
        if tok.encode(&c.text, true) != c.ids || tok.encode(&c.text, false) != c.ids_nospecial {
            bad += 1;
        }
    }
    assert_eq!(
        bad,
        0,
        "{bad} of {} corpus strings differ from HF",
        cases.len()
    );
}

#[test]
fn malformed_tokenizer_json_is_a_typed_error() {
    for (text, want) in [
        ("{", "not JSON"),
        (r#"{"model": {"type": "Unigram"}}"#, "Unigram"),
        (
            r#"{"model": {"type": "BPE", "vocab": {}, "merges": []}, "pre_tokenizer": {"type": "ByteLevel"}, "decoder": {"type": "ByteLevel"}}"#,
            "Split",
        ),
    ] {
        let e = Tokenizer::from_hf_json(text, None, None).unwrap_err();
        assert!(e.to_string().contains(want), "{text}: {e}");
    }
}
