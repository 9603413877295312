//! The real Qwen3.5 vocabulary against Hugging Face `tokenizers` on a corpus of 1,398 strings
//! (fixtures made by `tests/fixtures/make_fixtures.py`).

mod common;

use common::{corpus, qwen2, qwen35, Case};
use rill_tokenizer::{nfc, StreamDecoder};

fn report(what: &str, bad: &[String], total: usize) {
    assert!(
        bad.is_empty(),
        "{what}: {} of {total} strings differ from HF; first ones:\n{}",
        bad.len(),
        bad.iter().take(8).cloned().collect::<Vec<_>>().join("\n")
    );
}

/// Every corpus string encodes as HF's `want` of it, with `special` parsing.
fn encodes_as_hf(special: bool, want: impl Fn(&Case) -> &[u32]) {
    let tok = qwen35();
    let cases = corpus();
    assert!(cases.len() >= 1000, "corpus has {} strings", cases.len());
    let bad: Vec<String> = cases
        .iter()
        .filter_map(|c| {
            let got = tok.encode(&c.text, special);
            (got != want(c))
                .then(|| format!("{:?}\n  hf:   {:?}\n  rill: {got:?}", c.text, want(c)))
        })
        .collect();
    report(
        &format!("encode(parse_special={special})"),
        &bad,
        cases.len(),
    );
}

#[test]
fn encode_matches_hf_qwen35() {
    encodes_as_hf(true, |c| &c.ids);
}

#[test]
fn encode_matches_hf_without_special_parsing() {
    encodes_as_hf(false, |c| &c.ids_nospecial);
}

#[test]
fn encode_matches_hf_qwen2_pretokenizer() {
    let tok = qwen2();
    let cases = corpus();
    let mut bad = Vec::new();
    let mut differs_from_qwen35 = 0;
    for c in &cases {
        let got = tok.encode(&c.text, true);
        differs_from_qwen35 += usize::from(c.ids_qwen2 != c.ids);
        if got != c.ids_qwen2 {
            bad.push(format!(
                "{:?}\n  hf:   {:?}\n  rill: {:?}",
                c.text, c.ids_qwen2, got
            ));
        }
    }
    report("qwen2 encode", &bad, cases.len());
    // the corpus does exercise the difference between the two patterns
    assert!(differs_from_qwen35 > 20, "{differs_from_qwen35}");
}

#[test]
fn decode_round_trips_to_nfc() {
    let tok = qwen35();
    let cases = corpus();
    let mut bad = Vec::new();
    for c in &cases {
        let dec = tok.decode(&c.ids).unwrap();
        // HF's decode of its own ids, and the NFC form of the input: all three agree
        if dec != c.decoded || dec != nfc(&c.text) {
            bad.push(format!("{:?} → {:?} (hf {:?})", c.text, dec, c.decoded));
        }
        // streaming, one token at a time, gives the same text and never splits a char
        let mut sd = StreamDecoder::new();
        let mut streamed = String::new();
        for &id in &c.ids {
            streamed.push_str(&sd.push(tok, id).unwrap());
            assert!(sd.pending().len() < 4);
        }
        streamed.push_str(&sd.finish());
        if streamed != dec {
            bad.push(format!("stream {:?} → {:?}", c.text, streamed));
        }
    }
    report("decode", &bad, cases.len());
}
