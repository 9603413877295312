//! llama-server's `POST /infill`: code completion between a prefix and a
//! suffix, what editor plugins (llama.vim, llama.vscode) post. The prompt is
//! built with the model's fill-in-the-middle tokens in the repository-level
//! layout (Qwen2.5-Coder's report, arXiv 2409.12186), as llama-server builds
//! it, and runs as a `/completion` request: the same parameters, the same
//! reply.
//!
//! ```text
//! <|repo_name|>myproject\n
//! <|file_sep|>{filename}\n{text}          one per `input_extra` chunk
//! <|file_sep|>filename\n
//! <|fim_prefix|>{input_prefix}{prompt}<|fim_suffix|>{input_suffix}<|fim_middle|>
//! ```
//!
//! The prefix keeps its last ¾ of a 2048-token batch, the suffix its first
//! ¼ (less the prompt), and the extra chunks fill what the context has left
//! after a batch and twice `n_predict`, their ends kept.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::Response;
use rill_tokenizer::Tokenizer;
use serde_json::{Map, Value};
use std::sync::Arc;

use crate::errors::{parse_json, ApiError};
use crate::state::AppState;

/// llama-server's default logical batch, which bounds prefix and suffix.
const BATCH: usize = 2048;

/// The fill-in-the-middle tokens of a vocabulary (llama.cpp finds them by
/// these texts too, when the file names none).
struct FimTokens {
    prefix: u32,
    suffix: u32,
    middle: u32,
    repo: Option<u32>,
    file_sep: Option<u32>,
}

impl FimTokens {
    fn of(tok: &Tokenizer) -> Result<FimTokens, ApiError> {
        let find = |names: &[&str]| names.iter().find_map(|n| tok.token_to_id(n));
        let prefix = find(&["<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>"]);
        let suffix = find(&["<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<SUF>"]);
        let middle = find(&["<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<MID>"]);
        match (prefix, suffix, middle) {
            (Some(prefix), Some(suffix), Some(middle)) => Ok(FimTokens {
                prefix,
                suffix,
                middle,
                repo: find(&["<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>"]),
                file_sep: find(&["<|file_sep|>", "<|fim_sep|>", "<fim-sep>", "<SEP>"]),
            }),
            _ => Err(ApiError::not_supported(
                "infill is not supported by this model: it has no fill-in-the-middle tokens",
            )),
        }
    }
}

/// A piece of the request as tokens: a string (no special tokens parsed),
/// or a list of token ids and strings.
fn tokens_of(tok: &Tokenizer, v: &Value, param: &str) -> Result<Vec<u32>, ApiError> {
    let bad = || {
        ApiError::bad_param(
            param,
            format!("{param} must be a string or a list of token ids and strings"),
        )
    };
    match v {
        Value::String(s) => Ok(tok.encode(s, false)),
        Value::Array(items) => {
            let mut out = Vec::new();
            for item in items {
                match item {
                    Value::String(s) => out.extend(tok.encode(s, false)),
                    Value::Number(n) => {
                        let id = (n.as_u64())
                            .filter(|&i| (i as usize) < tok.vocab_size())
                            .ok_or_else(|| {
                                ApiError::bad_param(
                                    param,
                                    format!("token id {n} is outside the vocabulary"),
                                )
                            })?;
                        out.push(id as u32);
                    }
                    _ => return Err(bad()),
                }
            }
            Ok(out)
        }
        _ => Err(bad()),
    }
}

/// One `input_extra` chunk: its file name (default `tmp`) and text.
fn extra_chunk(v: &Value) -> Result<(String, String), ApiError> {
    let bad = |m: &str| ApiError::bad_param("input_extra", m);
    let text = match v.get("text") {
        Some(Value::String(t)) => t.clone(),
        _ => return Err(bad("an input_extra chunk needs a \"text\" string")),
    };
    let filename = match v.get("filename") {
        None | Some(Value::Null) => "tmp".to_string(),
        Some(Value::String(f)) => f.clone(),
        Some(_) => return Err(bad("an input_extra chunk's \"filename\" must be a string")),
    };
    Ok((filename, text))
}

/// What the prompt is built from.
struct InfillParts {
    prefix: Vec<u32>,
    suffix: Vec<u32>,
    /// (file name, text) per chunk.
    extra: Vec<(String, String)>,
    prompt: Vec<u32>,
}

impl InfillParts {
    /// The prompt's token ids in llama-server's layout, for a context of
    /// `n_ctx` positions and `n_predict` tokens to generate (-1: unbounded).
    fn prompt(self, tok: &Tokenizer, fim: &FimTokens, n_ctx: usize, n_predict: i64) -> Vec<u32> {
        let mut extra = Vec::new();
        if let Some(repo) = fim.repo {
            extra.push(repo);
            extra.extend(tok.encode("myproject\n", false));
        }
        for (filename, text) in &self.extra {
            match fim.file_sep {
                Some(sep) => {
                    extra.push(sep);
                    extra.extend(tok.encode(&format!("{filename}\n"), false));
                }
                None => extra.extend(tok.encode("\n\n--- snippet ---\n\n", false)),
            }
            extra.extend(tok.encode(text, false));
        }
        if let Some(sep) = fim.file_sep {
            extra.push(sep);
            extra.extend(tok.encode("filename\n", false));
        }
        let prefix_take = self.prefix.len().min(3 * (BATCH / 4));
        let suffix_take =
            (self.suffix.len()).min((BATCH / 4).saturating_sub(2 + self.prompt.len()));
        // (Saturating: `n_predict` is the request's, any i64.)
        let reserve = (BATCH as i64).saturating_add(n_predict.saturating_mul(2));
        let room = (n_ctx as i64).saturating_sub(reserve).max(0);
        let extra_take = extra.len().min(usize::try_from(room).unwrap_or(usize::MAX));

        // The extra files, then (BOS and) the prefix part, as llama-server
        // puts them.
        let mut out = extra[extra.len() - extra_take..].to_vec();
        if tok.add_bos_token() {
            out.extend(tok.bos_id());
        }
        out.push(fim.prefix);
        out.extend(&self.prefix[self.prefix.len() - prefix_take..]);
        out.extend(&self.prompt);
        out.push(fim.suffix);
        out.extend(&self.suffix[..suffix_take]);
        out.push(fim.middle);
        out
    }
}

pub async fn infill(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let mut data: Map<String, Value> = parse_json(&body?)?;
    let fim = FimTokens::of(&state.tok)?;
    let required = |key: &str| {
        data.get(key)
            .cloned()
            .ok_or_else(|| ApiError::bad_param(key, format!("\"{key}\" is required")))
    };
    let (prefix, suffix) = (required("input_prefix")?, required("input_suffix")?);
    let extra = match data.get("input_extra") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(chunks)) => chunks.iter().map(extra_chunk).collect::<Result<_, _>>()?,
        Some(_) => {
            return Err(ApiError::bad_param(
                "input_extra",
                "input_extra must be a list of {\"filename\": string, \"text\": string}",
            ))
        }
    };
    let prompt = match data.get("prompt") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(p)) => p.clone(),
        Some(_) => return Err(ApiError::bad_param("prompt", "\"prompt\" must be a string")),
    };
    let n_predict = match data.get("n_predict") {
        Some(v) => v.as_i64().unwrap_or(-1),
        None => state.config.n_predict.map_or(-1, |n| n as i64),
    };
    let (st, n_ctx) = (state.clone(), state.ctx_size());
    let ids = tokio::task::spawn_blocking(move || {
        let tok = &st.tok;
        let parts = InfillParts {
            prefix: tokens_of(tok, &prefix, "input_prefix")?,
            suffix: tokens_of(tok, &suffix, "input_suffix")?,
            extra,
            prompt: tok.encode(&prompt, true),
        };
        Ok::<_, ApiError>(parts.prompt(tok, &fim, n_ctx, n_predict))
    })
    .await
    .map_err(|e| ApiError::internal(format!("the tokenizer failed: {e}")))??;
    // The rest of the request is a `/completion` request's.
    data.insert("prompt".into(), ids.into());
    for key in ["input_prefix", "input_suffix", "input_extra"] {
        data.remove(key);
    }
    let body = serde_json::to_vec(&data).map_err(|e| ApiError::internal(e.to_string()))?;
    super::native::completion(State(state), Ok(Bytes::from(body))).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The prefix keeps its last ¾ batch, the suffix its first ¼ less the
    /// prompt and two, the extra chunks their last `n_ctx − batch −
    /// 2·n_predict` tokens.
    #[test]
    fn the_parts_are_cut_as_llama_server_cuts_them() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures/models/qwen35moe.f32.gguf");
        let tok = Tokenizer::from_gguf_path(&path).unwrap();
        let fim = FimTokens {
            prefix: 1,
            suffix: 2,
            middle: 3,
            repo: None,
            file_sep: Some(4),
        };
        let parts = |extra: Vec<(String, String)>| InfillParts {
            prefix: (0..2000).map(|i| 100 + i % 50).collect(),
            suffix: (0..1000).map(|i| 200 + i % 50).collect(),
            extra,
            prompt: vec![7, 8, 9],
        };
        let ids = parts(vec![]).prompt(&tok, &fim, 4096, 100);
        let sep = tok.encode("filename\n", false);
        let at = |id: u32| ids.iter().position(|&t| t == id).unwrap();
        assert_eq!(&ids[1..1 + sep.len()], sep.as_slice());
        assert_eq!(at(2) - at(1) - 1, 1536 + 3, "prefix and prompt");
        assert_eq!(&ids[at(2) - 3..at(2)], &[7, 8, 9]);
        assert_eq!(ids.len() - at(2) - 2, 512 - 2 - 3, "suffix");
        assert_eq!(ids[at(2) + 1], 200, "the suffix's start");
        assert_eq!(ids[at(1) + 1], 100 + 464 % 50, "the prefix's end");
        // A long extra chunk keeps its end, within the context's room.
        let long = "word ".repeat(3000);
        let ids = parts(vec![("a.py".into(), long.clone())]).prompt(&tok, &fim, 4096, 100);
        assert_eq!(at_of(&ids, 1), 4096 - 2048 - 200);
        // Any n_predict a request may send: no room, or all of it.
        let with = |n_predict| {
            parts(vec![("a.py".into(), long.clone())]).prompt(&tok, &fim, 4096, n_predict)
        };
        assert_eq!(at_of(&with(i64::MAX), 1), 0);
        assert!(at_of(&with(i64::MIN), 1) > 3000);
    }

    fn at_of(ids: &[u32], id: u32) -> usize {
        ids.iter().position(|&t| t == id).unwrap()
    }
}
