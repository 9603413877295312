//! The real Qwen3.5 vocabulary (vocab-only GGUF from llama.cpp's converter): metadata, special
//! tokens, Unicode tables against Oniguruma / HF's NFC, streaming.

mod common;

use common::{gunzip, qwen35};
use rill_tokenizer::pretokenize::{char_class, pre_tokenize_ranges};
use rill_tokenizer::{nfc, PreTokenizer, StreamDecoder, TokenType};

#[test]
fn gguf_metadata() {
    let t = qwen35();
    assert_eq!(t.vocab_size(), 248_320);
    assert_eq!(t.pre_tokenizer(), PreTokenizer::Qwen35);
    assert_eq!(t.eos_id(), Some(248_046));
    assert_eq!(t.pad_id(), Some(248_044));
    assert_eq!(t.bos_id(), None);
    assert!(!t.add_bos_token());
    assert_eq!(t.token_to_id("<|im_start|>"), Some(248_045));
    assert_eq!(t.token_to_id("<|im_end|>"), Some(248_046));
    assert_eq!(t.token_to_id("<think>"), Some(248_068));
    assert_eq!(t.token_type(248_045), Some(TokenType::Control));
    assert_eq!(t.token_type(248_068), Some(TokenType::UserDefined));
    assert_eq!(t.token_type(248_077), Some(TokenType::Unused));
    assert_eq!(t.token_type(248_319), Some(TokenType::Unused));
    assert_eq!(t.token_type(248_320), None);
    assert_eq!(t.token_type(0), Some(TokenType::Normal));
    assert_eq!(t.token_text(220), Some("Ġ"));
    assert_eq!(t.token_to_piece(220).unwrap(), b" ");
    assert_eq!(t.token_to_piece(248_046).unwrap(), b"<|im_end|>");
    assert!(t.token_to_piece(248_320).is_err());
    assert!(t.decode(&[1, 248_320]).is_err());
}

#[test]
fn special_tokens_in_text() {
    let t = qwen35();
    let ids = t.encode("<|im_start|>user\nhi<think></think><|im_end|>", true);
    assert_eq!(ids.first(), Some(&248_045));
    assert_eq!(ids.last(), Some(&248_046));
    assert!(ids.contains(&248_068) && ids.contains(&248_069));
    // without special parsing CONTROL tokens are text, USER_DEFINED ones still tokens
    let ids = t.encode("<|im_start|>user<think>", false);
    assert!(!ids.contains(&248_045));
    assert!(ids.contains(&248_068));
    assert_eq!(t.decode(&ids).unwrap(), "<|im_start|>user<think>");
    assert_eq!(
        t.decode_skip_special(&[248_045, 9_707, 248_046]).unwrap(),
        t.decode(&[9_707]).unwrap()
    );
}

fn load_ranges(name: &str) -> Vec<Vec<u32>> {
    String::from_utf8(gunzip(name))
        .unwrap()
        .lines()
        .map(|l| l.split(' ').map(|x| x.parse().unwrap()).collect())
        .collect()
}

/// `\s`, `\p{L}`, `\p{M}`, `\p{N}` of every code point as HF's Oniguruma matches them.
#[test]
fn char_classes_match_oniguruma() {
    let mut checked = 0;
    let mut bad = Vec::new();
    for r in load_ranges("char_classes.txt.gz") {
        for u in r[0]..=r[1] {
            let c = char::from_u32(u).unwrap();
            let got = u32::from(char_class(c) & 15);
            if got != r[2] {
                bad.push(format!("U+{u:04X}: {got} vs {}", r[2]));
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 0x110000 - 0x800);
    assert!(
        bad.is_empty(),
        "{} differ: {:?}",
        bad.len(),
        &bad[..bad.len().min(20)]
    );
}

/// The characters our NFC treats as anything but inert starters are exactly those HF's does.
#[test]
fn nfc_tables_match_hf() {
    let mut active = vec![false; 0x110000];
    for r in load_ranges("hf_nfc_active.txt.gz") {
        active[r[0] as usize..=r[1] as usize]
            .iter_mut()
            .for_each(|x| *x = true);
    }
    let inert = |u: u32| {
        rill_tokenizer::nfc::HF_INERT
            .iter()
            .any(|&(a, b)| a <= u && u <= b)
    };
    let mut bad = Vec::new();
    for u in 0..0x110000u32 {
        let Some(c) = char::from_u32(u) else { continue };
        let relevant = rill_tokenizer::nfc::crate_nfc_relevant(c);
        // relevant for the crate and not in the table ⇒ HF normalises it too
        if relevant && !inert(u) && !active[u as usize] {
            bad.push(format!("U+{u:04X} missing from HF_INERT"));
        }
        if inert(u) && (active[u as usize] || !relevant) {
            bad.push(format!("U+{u:04X} wrongly in HF_INERT"));
        }
    }
    assert!(bad.is_empty(), "{:?}", &bad[..bad.len().min(20)]);
}

#[test]
fn pre_tokenizer_covers_text() {
    let s = "Hello  world\r\n\n  'S 'ſ ١٢ x\u{301}\u{AC3} 😶\u{200d}🌫️!!\n";
    for pre in [PreTokenizer::Qwen35, PreTokenizer::Qwen2] {
        let r = pre_tokenize_ranges(pre, s);
        assert_eq!(r.first().unwrap().0, 0);
        assert_eq!(r.last().unwrap().1, s.len());
        assert!(r.windows(2).all(|w| w[0].1 == w[1].0 && w[0].0 < w[0].1));
    }
}

#[test]
fn stream_decoder_holds_partial_chars() {
    let t = qwen35();
    // a rare CJK-extension char and an emoji sequence are split into byte tokens
    let text = "a𠀋b 😶\u{200d}🌫️ é";
    let ids = t.encode(text, true);
    let mut sd = StreamDecoder::new();
    let mut out = String::new();
    let mut held_back = false;
    for &id in &ids {
        let piece = sd.push(t, id).unwrap();
        held_back |= !sd.pending().is_empty();
        out.push_str(&piece);
    }
    out.push_str(&sd.finish());
    assert!(held_back, "expected some token to end inside a character");
    assert_eq!(out, text);
    // invalid and truncated UTF-8 come out as U+FFFD, like a lossy decode of everything
    let cut = [ids[1]]; // first part of 𠀋 only
    let mut sd = StreamDecoder::new();
    assert_eq!(sd.push_all(t, &cut).unwrap(), "");
    assert_eq!(sd.finish(), t.decode(&cut).unwrap());
    let mut sd = StreamDecoder::new();
    let mixed = [ids[1], ids[0], ids[1]];
    let s = sd.push_all(t, &mixed).unwrap() + &sd.finish();
    assert_eq!(s, t.decode(&mixed).unwrap());
    assert!(sd.pending().is_empty());
}

#[test]
fn round_trip_nfc_and_nfd_inputs() {
    let t = qwen35();
    for s in [
        "café",
        "cafe\u{301}",
        "한국어",
        "\u{1112}\u{1161}\u{11ab}",
        "Å",
        "\u{212b}",
    ] {
        let ids = t.encode(s, true);
        assert_eq!(t.decode(&ids).unwrap(), nfc(s), "{s:?}");
    }
    // NFD input decodes to its NFC form, not to itself
    assert_eq!(t.decode(&t.encode("cafe\u{301}", true)).unwrap(), "café");
}

/// Random strings over all of Unicode (and lossily decoded random bytes): no panic, and
/// `decode(encode(s)) == NFC(s)` with or without special-token parsing.
#[test]
fn random_strings_round_trip() {
    let t = qwen35();
    let mut rng = rill_sampler::Rng::new(0x9E37_79B9_7F4A_7C15);
    let mut next = move || rng.next_u64();
    for i in 0..3000 {
        let len = (next() % 40) as usize;
        let s: String = if i % 3 == 0 {
            let bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            String::from_utf8_lossy(&bytes).into_owned()
        } else {
            (0..len)
                .filter_map(|_| {
                    let r = next();
                    let u = match r % 4 {
                        0 => (r >> 8) % 0x80,
                        1 => (r >> 8) % 0x3000,
                        2 => (r >> 8) % 0x2_0000,
                        _ => (r >> 8) % 0x11_0000,
                    };
                    char::from_u32(u as u32)
                })
                .collect()
        };
        for parse_special in [true, false] {
            let ids = t.encode(&s, parse_special);
            assert_eq!(t.decode(&ids).unwrap(), nfc(&s), "{s:?}");
        }
    }
}
