//! Building a [`Tokenizer`] from a Hugging Face `tokenizer.json` (and its
//! `tokenizer_config.json`), as a model folder ships them.
//!
//! The result is the tokenizer llama.cpp's converter would write into a GGUF
//! from the same files, so a folder and its converted GGUF tokenize alike:
//! the vocabulary by id (holes filled with `[PADn]`, type UNUSED, up to the
//! model's embedding rows), added tokens CONTROL when HF marks them special
//! or they look like `<|…|>`, USER_DEFINED otherwise, the merges in rank
//! order, and the pre-tokenizer recognised from the `Split` regex.

use crate::{PreTokenizer, SpecialTokens, TokenType, Tokenizer, TokenizerError};
use serde_json::Value;

/// The two `Split` regexes rill implements (see [`crate::pretokenize`]).
const QWEN2_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN35_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

fn bad(what: impl Into<String>) -> TokenizerError {
    TokenizerError::Json(what.into())
}

/// The `Split` regex of a `pre_tokenizer` (alone or in a `Sequence`).
fn split_regex(pre: &Value) -> Option<&str> {
    match pre.get("type")?.as_str()? {
        "Split" => pre.get("pattern")?.get("Regex")?.as_str(),
        "Sequence" => pre
            .get("pretokenizers")?
            .as_array()?
            .iter()
            .find_map(split_regex),
        _ => None,
    }
}

/// A token given by its text in `tokenizer_config.json` (`"eos_token":
/// "<|im_end|>"` or `{"content": "<|im_end|>", …}`).
fn token_field<'a>(config: Option<&'a Value>, key: &str) -> Option<&'a str> {
    let v = config?.get(key)?;
    v.as_str()
        .or_else(|| v.get("content").and_then(Value::as_str))
}

impl Tokenizer {
    /// Build from the text of `tokenizer.json` and, when the folder has one,
    /// `tokenizer_config.json` (bos / eos / pad tokens, `add_bos_token`).
    /// `n_vocab` pads the vocabulary with unused ids up to the model's
    /// embedding rows, as the converter does.
    pub fn from_hf_json(
        tokenizer_json: &str,
        tokenizer_config: Option<&str>,
        n_vocab: Option<usize>,
    ) -> Result<Tokenizer, TokenizerError> {
        let tj: Value = serde_json::from_str(tokenizer_json)
            .map_err(|e| bad(format!("tokenizer.json is not JSON: {e}")))?;
        let config: Option<Value> = match tokenizer_config {
            Some(t) => Some(
                serde_json::from_str(t)
                    .map_err(|e| bad(format!("tokenizer_config.json is not JSON: {e}")))?,
            ),
            None => None,
        };
        let model = tj
            .get("model")
            .ok_or_else(|| bad("tokenizer.json has no `model`"))?;
        let kind = model.get("type").and_then(Value::as_str).unwrap_or("?");
        if kind != "BPE" {
            return Err(TokenizerError::UnsupportedModel(kind.to_string()));
        }
        let byte_level = |v: Option<&Value>| {
            let v = v.map(|v| v.to_string()).unwrap_or_default();
            v.contains("\"ByteLevel\"")
        };
        if !byte_level(tj.get("pre_tokenizer")) || !byte_level(tj.get("decoder")) {
            return Err(TokenizerError::UnsupportedModel(
                "BPE without a ByteLevel pre-tokenizer and decoder".into(),
            ));
        }
        let regex = tj
            .get("pre_tokenizer")
            .and_then(split_regex)
            .ok_or_else(|| TokenizerError::UnsupportedPre("no Split regex".into()))?;
        let pre = match regex {
            QWEN35_REGEX => PreTokenizer::Qwen35,
            QWEN2_REGEX => PreTokenizer::Qwen2,
            other => return Err(TokenizerError::UnsupportedPre(other.to_string())),
        };

        let vocab = model
            .get("vocab")
            .and_then(Value::as_object)
            .ok_or_else(|| bad("tokenizer.json: `model.vocab` is not an object"))?;
        let added = match tj.get("added_tokens") {
            None => Vec::new(),
            Some(v) => v
                .as_array()
                .ok_or_else(|| bad("tokenizer.json: `added_tokens` is not an array"))?
                .clone(),
        };
        let mut entries: Vec<(u64, String, TokenType)> = Vec::with_capacity(vocab.len());
        for (text, id) in vocab {
            let id = id
                .as_u64()
                .ok_or_else(|| bad(format!("tokenizer.json: token {text:?} has no integer id")))?;
            entries.push((id, text.clone(), TokenType::Normal));
        }
        for a in &added {
            let id = a.get("id").and_then(Value::as_u64);
            let content = a.get("content").and_then(Value::as_str);
            let (Some(id), Some(content)) = (id, content) else {
                return Err(bad(format!(
                    "tokenizer.json: added token {a} lacks id or content"
                )));
            };
            let special = a.get("special").and_then(Value::as_bool).unwrap_or(false);
            let looks_control = content.starts_with("<|") && content.ends_with("|>");
            let ty = if special || looks_control {
                TokenType::Control
            } else {
                TokenType::UserDefined
            };
            entries.push((id, content.to_string(), ty));
        }
        let max_id = entries.iter().map(|e| e.0).max().unwrap_or(0) as usize;
        let n = n_vocab.unwrap_or(0).max(max_id + 1);
        if n >= u32::MAX as usize {
            return Err(TokenizerError::TooManyTokens(n));
        }
        let mut tokens: Vec<Option<String>> = vec![None; n];
        let mut types = vec![TokenType::Unused as i32; n];
        for (id, text, ty) in entries {
            let i = id as usize;
            // an added token overrides a vocabulary entry of the same id, as in HF
            tokens[i] = Some(text);
            types[i] = ty as i32;
        }
        let tokens: Vec<String> = tokens
            .into_iter()
            .enumerate()
            .map(|(i, t)| t.unwrap_or_else(|| format!("[PAD{i}]")))
            .collect();

        let merges = model
            .get("merges")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("tokenizer.json: `model.merges` is not an array"))?
            .iter()
            .enumerate()
            .map(|(rank, m)| match m {
                Value::String(s) => Ok(s.clone()),
                Value::Array(pair) if pair.len() == 2 => match (pair[0].as_str(), pair[1].as_str())
                {
                    (Some(a), Some(b)) => Ok(format!("{a} {b}")),
                    _ => Err(TokenizerError::BadMerge {
                        rank,
                        merge: m.to_string(),
                    }),
                },
                _ => Err(TokenizerError::BadMerge {
                    rank,
                    merge: m.to_string(),
                }),
            })
            .collect::<Result<Vec<String>, _>>()?;

        let cfg = config.as_ref();
        let find = |key: &'static str| -> Result<Option<u32>, TokenizerError> {
            match token_field(cfg, key) {
                None => Ok(None),
                Some(text) => tokens
                    .iter()
                    .position(|t| t == text)
                    .map(|i| Some(i as u32))
                    .ok_or_else(|| {
                        bad(format!(
                            "tokenizer_config.json: {key} {text:?} is not a token"
                        ))
                    }),
            }
        };
        let specials = SpecialTokens {
            bos: find("bos_token")?,
            eos: find("eos_token")?,
            eot: None,
            eom: None,
            pad: find("pad_token")?,
            add_bos: cfg
                .and_then(|c| c.get("add_bos_token"))
                .and_then(Value::as_bool)
                .unwrap_or(false),
        };
        Tokenizer::from_parts(tokens, types, merges, pre, specials)
    }
}
