//! Constraints on the fixture vocabulary: whatever a sampler picks among the
//! allowed tokens, the text obeys the grammar, and bad grammars are refused.

use rill_grammar::{GrammarSpec, Grammars};
use rill_load::{LoadOptions, ModelSource};
use rill_tokenizer::Tokenizer;
use std::path::PathBuf;
use std::sync::Arc;

fn tokenizer() -> Arc<Tokenizer> {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/models/qwen35moe.f32.gguf");
    Arc::new(
        rill_load::load(&ModelSource::File(path), &LoadOptions::default())
            .expect("fixture")
            .tokenizer,
    )
}

/// Generate under `spec` with seeded random logits (a stand-in for a model
/// that would write anything): the text up to the end-of-turn token.
fn generate(g: &Grammars, tok: &Tokenizer, spec: &GrammarSpec, seed: u64) -> String {
    let mut c = g.compile(spec).expect("compiles");
    let end = tok.token_to_id("<|im_end|>").unwrap();
    // A model that would rather close what it opened: the end, quotes and
    // closing brackets are likely whenever they are allowed.
    let closers: Vec<usize> = ["\"", "}", "]"]
        .iter()
        .map(|s| tok.encode(s, false)[0] as usize)
        .chain([end as usize])
        .collect();
    let mut rng = rill_sampler::Rng::new(seed);
    let mut ids = Vec::new();
    for _ in 0..400 {
        let mut logits = rng.uniform_vec(tok.vocab_size(), 10.0);
        for &c in &closers {
            logits[c] += 8.0;
        }
        let allowed = c.mask(&mut logits).expect("mask");
        assert!(allowed > 0, "the grammar left no token");
        let id = (0..logits.len())
            .max_by(|&a, &b| logits[a].total_cmp(&logits[b]))
            .unwrap() as u32;
        if id == end {
            assert!(
                c.is_accepting(),
                "the end came before the grammar could end"
            );
            break;
        }
        c.commit(id).expect("commit");
        ids.push(id);
    }
    tok.decode(&ids).unwrap()
}

#[test]
fn json_schema_output_validates() {
    let tok = tokenizer();
    let g = Grammars::new(tok.clone()).unwrap();
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 8},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3}
        },
        "required": ["name", "age"],
        "additionalProperties": false
    });
    for seed in 0..6 {
        let text = generate(&g, &tok, &GrammarSpec::JsonSchema(schema.clone()), seed);
        let v: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        let o = v.as_object().expect("an object");
        assert!(o["name"].is_string() && o["name"].as_str().unwrap().chars().count() <= 8);
        let age = o["age"].as_i64().expect("an integer age");
        assert!((0..=150).contains(&age), "{text}");
        assert!(
            o.keys()
                .all(|k| ["name", "age", "tags"].contains(&k.as_str())),
            "{text}"
        );
        if let Some(t) = o.get("tags") {
            let t = t.as_array().unwrap();
            assert!(
                t.len() <= 3 && t.iter().all(|x| x == "a" || x == "b"),
                "{text}"
            );
        }
    }
}

#[test]
fn json_object_regex_and_choice() {
    let tok = tokenizer();
    let g = Grammars::new(tok.clone()).unwrap();
    for seed in 0..3 {
        let text = generate(&g, &tok, &GrammarSpec::JsonObject, seed);
        let v: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert!(v.is_object(), "{text}");

        let text = generate(
            &g,
            &tok,
            &GrammarSpec::Regex("[0-9]{3}-[a-z]{2,4}".into()),
            seed,
        );
        let (d, w) = text.split_once('-').unwrap_or_else(|| panic!("{text:?}"));
        assert!(
            d.len() == 3 && d.bytes().all(|b| b.is_ascii_digit()),
            "{text}"
        );
        assert!(
            (2..=4).contains(&w.len()) && w.bytes().all(|b| b.is_ascii_lowercase()),
            "{text}"
        );

        let options = vec!["yes".to_string(), "no".to_string(), "maybe so".to_string()];
        let text = generate(&g, &tok, &GrammarSpec::Choice(options.clone()), seed);
        assert!(options.contains(&text), "{text:?}");

        let text = generate(
            &g,
            &tok,
            &GrammarSpec::Lark("start: \"(\" NUM (\",\" NUM)* \")\"\nNUM: /[0-9]+/".into()),
            seed,
        );
        assert!(text.starts_with('(') && text.ends_with(')'), "{text:?}");
    }
}

#[test]
fn bad_grammars_are_refused_with_a_message() {
    let tok = tokenizer();
    let g = Grammars::new(tok).unwrap();
    let bad = [
        GrammarSpec::JsonSchema(serde_json::json!("not a schema")),
        GrammarSpec::JsonSchema(serde_json::json!({"type": "no-such-type"})),
        GrammarSpec::JsonSchema(serde_json::json!({"$ref": "#/definitions/missing"})),
        GrammarSpec::Regex("(unclosed".into()),
        GrammarSpec::Lark("start: undefined_rule".into()),
        GrammarSpec::Lark("this is not a grammar ::: {".into()),
        GrammarSpec::Choice(vec![]),
    ];
    for spec in bad {
        let e = g
            .compile(&spec)
            .err()
            .unwrap_or_else(|| panic!("{spec:?} compiled"));
        assert!(!e.0.is_empty(), "{spec:?}");
    }
    // Deep nesting is refused with a message, never a crash.
    let mut deep = serde_json::json!({"type": "string"});
    for _ in 0..2000 {
        deep = serde_json::json!({"type": "array", "items": deep});
    }
    let e = g.compile(&GrammarSpec::JsonSchema(deep)).unwrap_err();
    assert!(e.0.contains("levels deep"), "{e}");
    let e = g
        .compile(&GrammarSpec::Regex("(".repeat(5000) + &")".repeat(5000)))
        .unwrap_err();
    assert!(e.0.contains("levels deep"), "{e}");
    // Within the limit, deep schemas compile.
    let mut ok = serde_json::json!({"type": "integer"});
    for _ in 0..30 {
        ok = serde_json::json!({"type": "array", "items": ok});
    }
    g.compile(&GrammarSpec::JsonSchema(ok))
        .expect("30 levels compile");
}
