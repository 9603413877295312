//! Building a [`Tokenizer`] from a GGUF's `tokenizer.ggml.*` metadata.

use crate::{PreTokenizer, SpecialTokens, Tokenizer, TokenizerError};
use rill_gguf::{GgufFile, MetaValue};
use std::path::Path;

fn get<'a>(f: &'a GgufFile, key: &'static str) -> Result<&'a MetaValue, TokenizerError> {
    f.get(key).ok_or(TokenizerError::MissingKey(key))
}

fn get_str<'a>(f: &'a GgufFile, key: &'static str) -> Result<&'a str, TokenizerError> {
    get(f, key)?.as_str().ok_or(TokenizerError::WrongType {
        key,
        expected: "string",
    })
}

fn get_str_array(f: &GgufFile, key: &'static str) -> Result<Vec<String>, TokenizerError> {
    let wrong = || TokenizerError::WrongType {
        key,
        expected: "array of strings",
    };
    let arr = get(f, key)?.as_array().ok_or_else(wrong)?;
    arr.iter()
        .map(|v| v.as_str().map(str::to_owned).ok_or_else(wrong))
        .collect()
}

fn get_id(
    f: &GgufFile,
    key: &'static str,
    what: &'static str,
) -> Result<Option<u32>, TokenizerError> {
    let Some(v) = f.get(key) else {
        return Ok(None);
    };
    let id = v.as_u64().ok_or(TokenizerError::WrongType {
        key,
        expected: "unsigned integer",
    })?;
    u32::try_from(id)
        .map(Some)
        .map_err(|_| TokenizerError::BadSpecialId { what, id })
}

impl Tokenizer {
    /// Build from `tokenizer.ggml.*` metadata: model must be `gpt2` (byte-level BPE), pre-tokenizer
    /// `qwen35` or `qwen2`.
    pub fn from_gguf(file: &GgufFile) -> Result<Tokenizer, TokenizerError> {
        let model = get_str(file, "tokenizer.ggml.model")?;
        if model != "gpt2" {
            return Err(TokenizerError::UnsupportedModel(model.to_owned()));
        }
        let pre_name = get_str(file, "tokenizer.ggml.pre")?;
        let pre = PreTokenizer::from_gguf_name(pre_name)
            .ok_or_else(|| TokenizerError::UnsupportedPre(pre_name.to_owned()))?;
        let tokens = get_str_array(file, "tokenizer.ggml.tokens")?;
        let key = "tokenizer.ggml.token_type";
        let wrong = || TokenizerError::WrongType {
            key,
            expected: "array of int32",
        };
        let types = get(file, key)?
            .as_array()
            .ok_or_else(wrong)?
            .iter()
            .map(|v| {
                v.as_i64()
                    .and_then(|x| i32::try_from(x).ok())
                    .ok_or_else(wrong)
            })
            .collect::<Result<Vec<i32>, _>>()?;
        let merges = get_str_array(file, "tokenizer.ggml.merges")?;
        let add_bos = match file.get("tokenizer.ggml.add_bos_token") {
            None => false,
            Some(v) => v.as_bool().ok_or(TokenizerError::WrongType {
                key: "tokenizer.ggml.add_bos_token",
                expected: "bool",
            })?,
        };
        let specials = SpecialTokens {
            bos: get_id(file, "tokenizer.ggml.bos_token_id", "bos")?,
            eos: get_id(file, "tokenizer.ggml.eos_token_id", "eos")?,
            eot: get_id(file, "tokenizer.ggml.eot_token_id", "eot")?,
            eom: get_id(file, "tokenizer.ggml.eom_token_id", "eom")?,
            pad: get_id(file, "tokenizer.ggml.padding_token_id", "padding")?,
            add_bos,
        };
        Tokenizer::from_parts(tokens, types, merges, pre, specials)
    }

    /// Open a GGUF file and build its tokenizer.
    pub fn from_gguf_path(path: &Path) -> Result<Tokenizer, TokenizerError> {
        let file = GgufFile::open(path).map_err(|e| TokenizerError::Gguf(e.to_string()))?;
        Tokenizer::from_gguf(&file)
    }
}
