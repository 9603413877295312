//! A Hugging Face folder through the one loader: the tokenizer built from
//! `tokenizer.json` is the one llama.cpp's converter wrote into the GGUF of
//! the same model, the template and `generation_config.json` are picked up,
//! and the vision tower is reported as skipped.

use rill_chat::{ChatRequest, Message};
use rill_load::{load, LoadOptions, ModelSource};
use std::path::PathBuf;

fn fixture(p: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/models")
        .join(p)
}

fn open(p: &str) -> rill_load::Loaded {
    load(&ModelSource::File(fixture(p)), &LoadOptions::default())
        .unwrap_or_else(|e| panic!("{p}: {e}"))
}

const TEXTS: &[&str] = &[
    "Hello, world! It's 2026.",
    "<|im_start|>user\nwhat is 12+30?<|im_end|>\n<|im_start|>assistant\n",
    "  spaces\tand\ttabs\n\n\nnew lines",
    "naïve café — ünïcödé, 日本語",
];

#[test]
fn the_folder_tokenizer_is_the_converted_gguf_tokenizer() {
    // the folder and the GGUF come from the same tokenizer files
    let folder = open("hf/qwen35moe_mtp");
    let gguf = open("qwen35moe_mtp.f32.gguf");
    let (a, b) = (&folder.tokenizer, &gguf.tokenizer);
    assert_eq!(a.vocab_size(), b.vocab_size());
    for id in 0..a.vocab_size() as u32 {
        assert_eq!(a.token_text(id), b.token_text(id), "token {id}");
        assert_eq!(a.token_type(id), b.token_type(id), "type of token {id}");
    }
    assert_eq!(a.pre_tokenizer(), b.pre_tokenizer());
    assert_eq!(a.eos_id(), b.eos_id());
    assert_eq!(a.add_bos_token(), b.add_bos_token());
    for t in TEXTS {
        assert_eq!(a.encode(t, true), b.encode(t, true), "{t:?}");
        assert_eq!(a.encode(t, false), b.encode(t, false), "{t:?}");
    }
}

#[test]
fn generation_config_gives_eos_ids_and_sampling_defaults() {
    for name in ["hf/qwen35moe_mtp", "hf/qwen35_mtp", "hf/qwen3next_mtp"] {
        let l = open(name);
        let n = l.model.config.n_vocab as u32;
        // generation_config.json: eos_token_id [n-1, n-3]
        assert!(l.tokenizer.is_eog(n - 1), "{name}");
        assert!(l.tokenizer.is_eog(n - 3), "{name}");
        let s = &l.info.sampling;
        assert_eq!(s.temperature, Some(0.6), "{name}");
        assert_eq!(s.top_k, Some(20), "{name}");
        assert_eq!(s.top_p, Some(0.95), "{name}");
    }
}

#[test]
fn the_chat_template_comes_from_either_file() {
    let gguf = open("qwen35moe_mtp.f32.gguf");
    let req = ChatRequest::new(vec![Message::new("user", "hi")]);
    let want = gguf.template.as_ref().unwrap().render(&req).unwrap();
    // chat_template.jinja, and tokenizer_config.json's chat_template
    for name in ["hf/qwen35moe_mtp", "hf/qwen35_mtp"] {
        let l = open(name);
        let t = l
            .template
            .as_ref()
            .unwrap_or_else(|| panic!("{name}: no template"));
        assert_eq!(t.render(&req).unwrap(), want, "{name}");
        assert_eq!(l.info.chat_template, gguf.info.chat_template, "{name}");
    }
}

#[test]
fn the_vision_tower_is_skipped_and_said() {
    let l = open("hf/qwen35moe_mtp");
    assert!(l.info.is_folder());
    assert_eq!(l.info.n_files, 2);
    assert_eq!(l.info.arch_name, "qwen35moe");
    let visual: Vec<_> = l
        .info
        .skipped
        .iter()
        .filter(|(n, _)| n.starts_with("model.visual."))
        .collect();
    assert_eq!(visual.len(), 2);
    assert!(visual.iter().all(|(_, why)| why.contains("vision")));
    assert_eq!(l.info.skipped.len(), 2, "{:?}", l.info.skipped);
    assert!(l.model.has_mtp());
}
