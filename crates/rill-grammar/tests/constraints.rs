//! Constraints on the fixture vocabulary: whatever a sampler picks among the
//! allowed tokens, the text obeys the grammar, and bad grammars are refused.

use rill_grammar::{GrammarSpec, Grammars, MaskTiming};
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
    for timing in [MaskTiming::Ahead, MaskTiming::OnDemand] {
        json_schema_output_validates_with(&tok, &Grammars::new(tok.clone(), timing).unwrap());
    }
}

fn json_schema_output_validates_with(tok: &Arc<Tokenizer>, g: &Grammars) {
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
        let text = generate(g, tok, &GrammarSpec::JsonSchema(schema.clone()), seed);
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
    let g = Grammars::new(tok.clone(), MaskTiming::OnDemand).unwrap();
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

/// llama-server's GBNF grammars: a JSON grammar written in GBNF gives JSON,
/// a list grammar with repetition bounds, optional parts, an empty
/// alternative and `.` gives text of its shape.
#[test]
fn gbnf_grammars_constrain_like_their_lark_translation() {
    let tok = tokenizer();
    let g = Grammars::new(tok.clone(), MaskTiming::OnDemand).unwrap();
    let json = r#"
root    ::= object
value   ::= object | array | string | number | ("true" | "false" | "null")
object  ::= "{" ( string ": " value ( ", " string ": " value )* )? "}"
array   ::= "[" ( value ( ", " value )* )? "]"
string  ::= "\"" ( [^"\\\x00-\x1F] | "\\" ["\\/bfnrt] )* "\""
number  ::= "-"? ( "0" | [1-9] [0-9]{0,8} ) ( "." [0-9]+ )?
"#;
    let items = r#"
root ::= item ( "," item ){1,3} tail
item ::= [a-c] | "x" [0-9]   # a letter, or x and a digit
tail ::= "" | "!" .
"#;
    for seed in 0..3 {
        let spec = GrammarSpec::grammar_text(json.into());
        assert!(matches!(spec, GrammarSpec::Gbnf(_)));
        let text = generate(&g, &tok, &spec, seed);
        let v: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert!(v.is_object(), "{text}");

        let text = generate(&g, &tok, &GrammarSpec::grammar_text(items.into()), seed);
        let body = match text.find('!') {
            Some(i) => {
                assert_eq!(text[i + 1..].chars().count(), 1, "{text:?}");
                &text[..i]
            }
            None => &text[..],
        };
        let parts: Vec<&str> = body.split(',').collect();
        assert!((2..=4).contains(&parts.len()), "{text:?}");
        for p in parts {
            let ok = matches!(p, "a" | "b" | "c")
                || (p.len() == 2 && p.starts_with('x') && p.as_bytes()[1].is_ascii_digit());
            assert!(ok, "{p:?} in {text:?}");
        }
    }
    // Broken GBNF is refused with a message that says GBNF.
    let e = g
        .compile(&GrammarSpec::Gbnf("root ::= missing".into()))
        .err()
        .unwrap();
    assert!(e.0.contains("GBNF") && e.0.contains("missing"), "{}", e.0);
}

/// A vocabulary without a `</think>` token: every kind of grammar, wrapped
/// to come after the thinking block, lets the thinking run free up to its
/// `</think>` and binds what follows.
#[test]
fn a_grammar_after_thinking_text_binds_only_the_answer() {
    let tok = tokenizer();
    assert!(
        tok.token_to_id("</think>").is_none(),
        "the fixture vocabulary has no such token"
    );
    let g = Grammars::new(tok.clone(), MaskTiming::OnDemand).unwrap();
    let schema = serde_json::json!({"type": "object", "properties": {"a": {"type": "integer"}},
                                    "required": ["a"], "additionalProperties": false});
    let cases = [
        (GrammarSpec::JsonSchema(schema), "{\"a\": 12}", "{\"b\": 1}"),
        (GrammarSpec::JsonObject, "{}", "[]"),
        (GrammarSpec::Regex("[0-9]{2}/x".into()), "42/x", "4/x"),
        (
            GrammarSpec::Choice(vec!["yes".into(), "no".into()]),
            "no",
            "maybe",
        ),
        (
            GrammarSpec::Lark("start: \"(\" /[a-z]+/ \")\"".into()),
            "(ok)",
            "(OK)",
        ),
        (
            GrammarSpec::Gbnf("root ::= [0-9]+ \"!\"".into()),
            "7!",
            "x!",
        ),
    ];
    // Feeds `text`, token by token: whether the grammar took all of it and
    // may end there.
    let feed = |spec: &GrammarSpec, text: &str| -> bool {
        let mut c = g.compile(&spec.clone().after_thinking_text()).unwrap();
        for id in tok.encode(text, false) {
            if !c.allows(id).unwrap() || c.commit(id).is_err() {
                return false;
            }
        }
        c.is_accepting()
    };
    for (spec, good, bad) in cases {
        let thought = "Hmm {not json} [0-9]? maybe yes.";
        assert!(
            feed(&spec, &format!("{thought}</think>\n\n{good}")),
            "{spec:?}"
        );
        assert!(
            !feed(&spec, &format!("{thought}</think>\n\n{bad}")),
            "{spec:?}"
        );
        assert!(
            !feed(&spec, thought),
            "{spec:?}: it may not end while thinking"
        );
    }
}

#[test]
fn bad_grammars_are_refused_with_a_message() {
    let tok = tokenizer();
    let g = Grammars::new(tok, MaskTiming::Ahead).unwrap();
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

/// `allows` answers from one token's walk through the parser where it can,
/// instead of the mask: in every state of generations under several
/// grammars, that answer must be the mask's, for the allowed tokens, for
/// random others and for the shorter tokens a forced text would tempt.
#[test]
fn the_walk_agrees_with_the_mask() {
    let tok = tokenizer();
    let g = Grammars::new(tok.clone(), MaskTiming::OnDemand).unwrap();
    let n = tok.vocab_size();
    let end = tok.token_to_id("<|im_end|>").unwrap();
    let specs = walk_specs();
    let (mut walked, mut states) = (0usize, 0usize);
    for (i, spec) in specs.iter().enumerate() {
        let mut c = g.compile(spec).expect("compiles");
        let mut rng = rill_sampler::Rng::new(17 + i as u64);
        for _ in 0..60 {
            let mut row = vec![0f32; n];
            c.mask(&mut row).expect("mask");
            let allowed: Vec<u32> = (0..n as u32).filter(|&t| row[t as usize] == 0.0).collect();
            let mut ids: Vec<u32> = (0..200).map(|_| rng.below(n) as u32).collect();
            for k in 0..allowed.len().min(100) {
                let t = allowed[if allowed.len() <= 100 {
                    k
                } else {
                    rng.below(allowed.len())
                }];
                ids.push(t);
                // Tokens whose text is a prefix of an allowed token's.
                let text = tok.decode(&[t]).unwrap_or_default();
                for (cut, _) in text.char_indices().skip(1) {
                    ids.extend(tok.encode(&text[..cut], false).first().copied());
                }
            }
            ids.push(end);
            states += 1;
            let mut here = 0;
            for &id in &ids {
                if let Some(answer) = c.allows_by_walk(id) {
                    here += 1;
                    assert_eq!(
                        answer.expect("walk"),
                        row[id as usize] == 0.0,
                        "{spec:?}: token {id} {:?} after {} tokens",
                        tok.decode(&[id]),
                        states
                    );
                }
            }
            walked += (here > 0) as usize;
            // Go on with a random allowed token (the end ends the run).
            let next = allowed[rng.below(allowed.len())];
            if next == end || c.commit(next).is_err() || c.is_done() {
                break;
            }
        }
    }
    // Most states must have been answered by the walk, or this tests nothing.
    assert!(
        walked * 2 > states,
        "the walk answered in {walked} of {states} states"
    );
}

/// Grammars whose states range from free text to one forced byte.
fn walk_specs() -> Vec<GrammarSpec> {
    vec![
        GrammarSpec::JsonSchema(serde_json::json!({
            "type": "object",
            "properties": {
                "topic": {"type": "string", "maxLength": 12},
                "facts": {"type": "array", "items": {"type": "string", "minLength": 3, "maxLength": 9},
                          "minItems": 2, "maxItems": 3},
                "n": {"type": "number"},
                "kind": {"enum": ["alpha", "beta gamma"]}
            },
            "required": ["topic", "facts", "n", "kind"],
            "additionalProperties": false
        })),
        GrammarSpec::JsonObject,
        GrammarSpec::Regex("[0-9]{3}-[a-z]{2,4}( ok)?".into()),
        GrammarSpec::Choice(vec!["yes".into(), "no".into(), "maybe so".into()]),
        GrammarSpec::Lark("start: \"(\" NUM (\",\" NUM)* \")\"\nNUM: /[0-9]+/".into()),
    ]
}

/// `best_allowed` walks a row's best tokens through the parser before it
/// computes a mask: in every state of generations under several grammars,
/// for rows whose best tokens are refused ones (a few, many, or all of the
/// first sixteen), with ties among allowed tokens and NaNs, its token must
/// be the masked row's greedy pick (highest logit, ties to the lower id).
#[test]
fn best_allowed_is_the_masked_rows_greedy_pick() {
    let tok = tokenizer();
    let g = Grammars::new(tok.clone(), MaskTiming::OnDemand).unwrap();
    let n = tok.vocab_size();
    let end = tok.token_to_id("<|im_end|>").unwrap();
    let (mut states, mut by_walk, mut past_refused) = (0usize, 0usize, 0usize);
    for (i, spec) in walk_specs().iter().enumerate() {
        // `c` is under test; `r`, fed the same tokens, gives the masks.
        let (mut c, mut r) = (g.compile(spec).unwrap(), g.compile(spec).unwrap());
        let mut rng = rill_sampler::Rng::new(91 + i as u64);
        for step in 0..60 {
            let mut mask = vec![0f32; n];
            r.mask(&mut mask).expect("mask");
            let allowed: Vec<u32> = (0..n as u32).filter(|&t| mask[t as usize] == 0.0).collect();
            let refused: Vec<u32> = (0..n as u32).filter(|&t| mask[t as usize] != 0.0).collect();
            let mut row = rng.uniform_vec(n, 1.0);
            // Refused tokens above everything: none, a few, or more than
            // the walk tries.
            let above = [0, 3, 40][step % 3].min(refused.len());
            for _ in 0..above {
                row[refused[rng.below(refused.len())] as usize] = 5.0 + rng.below(100) as f32;
            }
            // Two allowed tokens tied just below them (the lower id wins).
            for _ in 0..2 {
                row[allowed[rng.below(allowed.len())] as usize] = 4.5;
            }
            if step % 7 == 0 {
                row[rng.below(n)] = f32::NAN;
            }
            let want = allowed
                .iter()
                .copied()
                .filter(|&t| !row[t as usize].is_nan())
                .fold(None::<u32>, |b, t| match b {
                    Some(b) if row[b as usize] >= row[t as usize] => Some(b),
                    _ => Some(t),
                });
            // (The start state's mask comes with the compiled grammar.)
            let fresh = !c.has_mask();
            let got = c.best_allowed(&row).expect("best");
            assert_eq!(
                got,
                want,
                "{spec:?}, step {step}: {:?}",
                got.map(|t| tok.decode(&[t]))
            );
            states += 1;
            if fresh && !c.has_mask() {
                by_walk += 1;
                past_refused += (above > 0) as usize;
            }
            let next = allowed[rng.below(allowed.len())];
            if next == end || c.commit(next).is_err() || c.is_done() {
                break;
            }
            r.commit(next).expect("the same token");
        }
    }
    // The walks must have answered often, past refused tokens too, or the
    // path under test is the mask's.
    assert!(
        by_walk * 3 > states && past_refused * 6 > states,
        "walks answered {by_walk} of {states} states, {past_refused} past refused tokens"
    );
}

/// A token the walk cannot answer for (the end, a special token) ranked
/// above allowed ones: the mask decides, and where the grammar may end
/// but need not, the end is the pick.
#[test]
fn best_allowed_leaves_the_end_to_the_mask() {
    let tok = tokenizer();
    let g = Grammars::new(tok.clone(), MaskTiming::OnDemand).unwrap();
    let end = tok.token_to_id("<|im_end|>").unwrap();
    let mut c = g.compile(&GrammarSpec::Regex("[a-z]+".into())).unwrap();
    for id in tok.encode("abc", false) {
        c.commit(id).unwrap();
    }
    let letter = tok.encode("d", false)[0];
    let mut row = vec![0f32; tok.vocab_size()];
    row[end as usize] = 9.0;
    row[letter as usize] = 8.0;
    assert_eq!(c.best_allowed(&row).unwrap(), Some(end));
    assert!(c.has_mask(), "the mask answered");
    // Where it may not end, the best letter.
    let mut c = g.compile(&GrammarSpec::Regex("[a-z]{5}".into())).unwrap();
    for id in tok.encode("abc", false) {
        c.commit(id).unwrap();
    }
    assert_eq!(c.best_allowed(&row).unwrap(), Some(letter));
}
