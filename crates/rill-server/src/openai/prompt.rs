//! `prompt` of a completion request, in every shape the OpenAI-compatible
//! servers accept: vLLM's four (text, token ids, a list of either) and
//! llama-server's additions — one prompt mixing token ids and text
//! (`[12, "text", 34]`: each text piece tokenized, the ids kept, all in
//! order) and a list of prompts of mixed forms, `{"prompt_string": …}`
//! objects among them.
//!
//! Classified as llama-server classifies (`tokenize_input_prompts`): a list
//! holding an integer anywhere at its top level is *one* prompt, any other
//! list is a list of prompts.

use serde::de::{Deserialize, Deserializer, Error as _};
use serde_json::Value as Json;

/// A completion request's prompt (see the module doc).
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    Text(String),
    Tokens(Vec<i64>),
    Texts(Vec<String>),
    TokenBatch(Vec<Vec<i64>>),
    /// One prompt of token ids and text pieces, in order.
    Pieces(Vec<Piece>),
    /// Prompts of mixed forms (none of them a list of prompts itself).
    Batch(Vec<Prompt>),
}

/// A piece of a [`Prompt::Pieces`] prompt.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    Id(i64),
    Text(String),
}

impl Prompt {
    /// Whether the request holds a list of prompts (the reply is a list).
    pub fn is_batch(&self) -> bool {
        matches!(
            self,
            Prompt::Texts(_) | Prompt::TokenBatch(_) | Prompt::Batch(_)
        )
    }

    /// The prompts of a list, or the one prompt.
    pub fn into_list(self) -> Vec<Prompt> {
        match self {
            Prompt::Texts(v) => v.into_iter().map(Prompt::Text).collect(),
            Prompt::TokenBatch(v) => v.into_iter().map(Prompt::Tokens).collect(),
            Prompt::Batch(v) => v,
            one => vec![one],
        }
    }

    fn from_json(v: Json) -> Result<Prompt, String> {
        match v {
            Json::Array(items) if items.is_empty() => Ok(Prompt::Tokens(Vec::new())),
            Json::Array(items) if !items.iter().any(is_integer) => {
                let list = (items.into_iter().map(one_prompt)).collect::<Result<Vec<_>, _>>()?;
                Ok(Self::tidy_list(list))
            }
            v => one_prompt(v),
        }
    }

    /// A list of prompts in the narrowest variant that holds it.
    fn tidy_list(list: Vec<Prompt>) -> Prompt {
        if list.iter().all(|p| matches!(p, Prompt::Text(_))) {
            let texts = list.into_iter().filter_map(|p| match p {
                Prompt::Text(t) => Some(t),
                _ => None,
            });
            return Prompt::Texts(texts.collect());
        }
        if list.iter().all(|p| matches!(p, Prompt::Tokens(_))) {
            let ids = list.into_iter().filter_map(|p| match p {
                Prompt::Tokens(t) => Some(t),
                _ => None,
            });
            return Prompt::TokenBatch(ids.collect());
        }
        Prompt::Batch(list)
    }
}

fn is_integer(v: &Json) -> bool {
    v.as_i64().is_some() || v.as_u64().is_some()
}

const SHAPES: &str = "a prompt must be a string, a list of token ids, a list of token ids and \
    strings, or an object with a \"prompt_string\"";

/// One prompt: text, ids, ids mixed with text, or `{"prompt_string": …}`.
fn one_prompt(v: Json) -> Result<Prompt, String> {
    match v {
        Json::String(s) => Ok(Prompt::Text(s)),
        Json::Array(items) => {
            let pieces = (items.into_iter())
                .map(|item| match item {
                    Json::String(s) => Ok(Piece::Text(s)),
                    Json::Number(n) => n
                        .as_i64()
                        .map(Piece::Id)
                        .ok_or_else(|| format!("token id {n} is not an integer id")),
                    _ => Err(format!("{SHAPES} (a list holds a list or an object)")),
                })
                .collect::<Result<Vec<_>, _>>()?;
            if pieces.iter().all(|p| matches!(p, Piece::Id(_))) {
                let ids = pieces.into_iter().filter_map(|p| match p {
                    Piece::Id(i) => Some(i),
                    Piece::Text(_) => None,
                });
                Ok(Prompt::Tokens(ids.collect()))
            } else {
                Ok(Prompt::Pieces(pieces))
            }
        }
        Json::Object(mut o) => {
            if o.contains_key("multimodal_data") {
                return Err("multimodal prompts are not supported by this model".into());
            }
            match o.remove("prompt_string") {
                Some(Json::String(s)) => Ok(Prompt::Text(s)),
                _ => Err(SHAPES.into()),
            }
        }
        _ => Err(SHAPES.into()),
    }
}

impl<'de> Deserialize<'de> for Prompt {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Prompt, D::Error> {
        Prompt::from_json(Json::deserialize(d)?).map_err(D::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Prompt, String> {
        serde_json::from_str::<Prompt>(s).map_err(|e| e.to_string())
    }

    #[test]
    fn vllm_shapes() {
        assert_eq!(p(r#""hi""#), Ok(Prompt::Text("hi".into())));
        assert_eq!(p("[1, 2]"), Ok(Prompt::Tokens(vec![1, 2])));
        assert_eq!(p("[]"), Ok(Prompt::Tokens(vec![])));
        assert_eq!(
            p(r#"["a", "b"]"#),
            Ok(Prompt::Texts(vec!["a".into(), "b".into()]))
        );
        assert_eq!(
            p("[[1], [2, 3]]"),
            Ok(Prompt::TokenBatch(vec![vec![1], vec![2, 3]]))
        );
    }

    #[test]
    fn llama_server_shapes() {
        use Piece::{Id, Text};
        let mixed = || vec![Id(12), Text("a".into()), Id(34)];
        // An integer at the top level: one prompt.
        assert_eq!(p(r#"[12, "a", 34]"#), Ok(Prompt::Pieces(mixed())));
        assert_eq!(
            p(r#"["a", 12]"#),
            Ok(Prompt::Pieces(vec![Text("a".into()), Id(12)]))
        );
        // No integer at the top level: a list of prompts.
        assert_eq!(
            p(r#"[[12, "a", 34], [5], "b", {"prompt_string": "c"}]"#),
            Ok(Prompt::Batch(vec![
                Prompt::Pieces(mixed()),
                Prompt::Tokens(vec![5]),
                Prompt::Text("b".into()),
                Prompt::Text("c".into()),
            ]))
        );
        assert_eq!(
            p(r#"[{"prompt_string": "c"}]"#),
            Ok(Prompt::Texts(vec!["c".into()]))
        );
        assert_eq!(p(r#"{"prompt_string": "c"}"#), Ok(Prompt::Text("c".into())));
        assert!(p(r#"[12, "a", 34]"#).unwrap().into_list().len() == 1);
        assert!(!p(r#"[12, "a"]"#).unwrap().is_batch());
        assert!(p(r#"[[12, "a"], "b"]"#).unwrap().is_batch());
        assert_eq!(p(r#"[[12, "a"], "b"]"#).unwrap().into_list().len(), 2);
    }

    #[test]
    fn bad_shapes_are_named() {
        for bad in [
            "12",
            "null",
            r#"[[[1]]]"#,
            r#"[12, [1]]"#,
            r#"[1.5, "a"]"#,
            r#"{"text": "a"}"#,
            r#"[{"prompt_string": 3}]"#,
            r#"{"prompt_string": "a", "multimodal_data": ["eA=="]}"#,
        ] {
            let e = p(bad).expect_err(bad);
            assert!(e.contains("prompt") || e.contains("token id"), "{bad}: {e}");
        }
    }
}
