//! Byte-level BPE tokenizer for Qwen3.5 / Qwen3-Next (and Qwen2/Qwen3) models, encoding exactly
//! as Hugging Face `tokenizers` does with the model's `tokenizer.json`.
//!
//! Pipeline of [`Tokenizer::encode`]:
//! 1. added tokens (GGUF types CONTROL and USER_DEFINED) are matched in the raw text
//!    ([`special`]); CONTROL ones only when `parse_special` is true;
//! 2. each stretch of text between them is NFC-normalised;
//! 3. pre-tokenized by the `qwen35` / `qwen2` split rules ([`pretokenize`]);
//! 4. each piece's UTF-8 bytes are BPE-encoded by merge rank ([`bpe`]).
//!
//! Build one from a GGUF ([`Tokenizer::from_gguf`]), a Hugging Face `tokenizer.json`
//! ([`Tokenizer::from_hf_json`]) or from plain parts
//! ([`Tokenizer::from_parts`]). Decode with [`Tokenizer::decode`] or, token by token,
//! [`StreamDecoder`].
//!
//! Checked against HF `tokenizers` 0.23 on the real vocabulary (`tests/hf_corpus.rs`, fixtures
//! from `tests/fixtures/make_fixtures.py`): identical ids for every corpus string, the regex
//! classes of every code point, and HF's (Unicode 9.0) NFC tables. Where it may differ from HF:
//! - `parse_special = false` follows the GGUF token types: CONTROL tokens become text. The
//!   converter marks `<|…|>` tokens CONTROL even where HF has `special: false` (`<|fim_prefix|>`,
//!   `<|repo_name|>`, `<|file_sep|>`, …), so those are text too, where HF's
//!   `encode_special_tokens` would still match them. With `parse_special = true` all agree.
//! - added tokens decode to their own text; HF passes them through the byte-level decoder,
//!   which differs only for non-ASCII added tokens (Qwen has none).
//! - GGUF keeps no `lstrip`/`rstrip`/`single_word`/`normalized` flags for added tokens: they are
//!   taken as false, as they are for every Qwen added token.

mod bpe;
pub mod bytes;
mod decode;
mod gguf;
mod hf;
pub mod nfc;
pub mod pretokenize;
mod special;

pub use decode::StreamDecoder;
pub use nfc::nfc;
pub use pretokenize::PreTokenizer;

use rustc_hash::FxHashMap;

/// Errors building a tokenizer or looking up ids. Encoding itself cannot fail.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("GGUF metadata key `{0}` is missing")]
    MissingKey(&'static str),
    #[error("GGUF metadata key `{key}` has the wrong type (expected {expected})")]
    WrongType {
        key: &'static str,
        expected: &'static str,
    },
    #[error("unsupported tokenizer model `{0}` (only `gpt2`, byte-level BPE, is supported)")]
    UnsupportedModel(String),
    #[error("unsupported pre-tokenizer `{0}` (supported: `qwen35`, `qwen2`)")]
    UnsupportedPre(String),
    #[error("{tokens} tokens but {types} token types")]
    LengthMismatch { tokens: usize, types: usize },
    #[error("vocabulary too large ({0} tokens)")]
    TooManyTokens(usize),
    #[error("token {id} has unknown token type {ty}")]
    BadTokenType { id: u32, ty: i32 },
    #[error("merge {rank} `{merge}` is malformed or refers to tokens not in the vocabulary")]
    BadMerge { rank: usize, merge: String },
    #[error("no vocabulary token for byte 0x{0:02x}")]
    MissingByteToken(u8),
    #[error("{what} id {id} is outside the vocabulary")]
    BadSpecialId { what: &'static str, id: u64 },
    #[error("token id {0} is outside the vocabulary")]
    UnknownId(u32),
    #[error("reading GGUF: {0}")]
    Gguf(String),
    #[error("{0}")]
    Json(String),
}

/// GGUF token types (`tokenizer.ggml.token_type`, llama.cpp's `llama_token_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum TokenType {
    Undefined = 0,
    Normal = 1,
    Unknown = 2,
    /// special token (HF `special: true`, or looks like `<|…|>`); parsed only on request
    Control = 3,
    /// added token that is always parsed (`<think>`, `<tool_call>`, …)
    UserDefined = 4,
    /// padding id beyond the real vocabulary (`[PAD248077]`…)
    Unused = 5,
    Byte = 6,
}

impl TokenType {
    pub fn from_i32(v: i32) -> Option<TokenType> {
        Some(match v {
            0 => TokenType::Undefined,
            1 => TokenType::Normal,
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            4 => TokenType::UserDefined,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            _ => return None,
        })
    }
}

/// Special ids and flags (`tokenizer.ggml.{bos,eos,eot,eom,padding}_token_id`,
/// `add_bos_token`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpecialTokens {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    /// End of turn, where the file names one.
    pub eot: Option<u32>,
    /// End of message (a tool call's end in some vocabularies).
    pub eom: Option<u32>,
    pub pad: Option<u32>,
    pub add_bos: bool,
}

/// Texts of the tokens that end a generation in the vocabularies rill runs,
/// as llama.cpp's vocabulary adds them to its end-of-generation set beside
/// the file's eos / eot / eom ids: a chat model's turn end is often not the
/// file's `eos` (a base model's file names `<|endoftext|>`, its instruct
/// model stops at `<|im_end|>`).
const END_OF_GENERATION_TEXTS: &[&str] =
    &["<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|eom_id|>"];

/// A byte-level BPE tokenizer. Immutable once built; `Send + Sync`.
pub struct Tokenizer {
    tokens: Vec<String>,
    types: Vec<TokenType>,
    token_ids: FxHashMap<String, u32>,
    /// decoded bytes of every token, concatenated; token i is `piece_offs[i]..piece_offs[i+1]`
    piece_bytes: Vec<u8>,
    piece_offs: Vec<u32>,
    bpe: bpe::Bpe,
    added: special::SpecialMatcher,
    pre: PreTokenizer,
    specials: SpecialTokens,
    /// Every id that ends a generation, ascending.
    eog: Vec<u32>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.tokens.len())
            .field("pre", &self.pre)
            .field("specials", &self.specials)
            .finish_non_exhaustive()
    }
}

impl Tokenizer {
    /// Build from the plain GGUF-style parts: `tokens[i]` is the text of id `i` (byte-level
    /// alphabet for BPE tokens, plain text for added tokens), `token_types[i]` its GGUF type,
    /// `merges[rank]` a merge `"left right"`.
    pub fn from_parts(
        tokens: Vec<String>,
        token_types: Vec<i32>,
        merges: Vec<String>,
        pre: PreTokenizer,
        specials: SpecialTokens,
    ) -> Result<Tokenizer, TokenizerError> {
        if tokens.len() != token_types.len() {
            return Err(TokenizerError::LengthMismatch {
                tokens: tokens.len(),
                types: token_types.len(),
            });
        }
        if tokens.len() >= u32::MAX as usize {
            return Err(TokenizerError::TooManyTokens(tokens.len()));
        }
        let n = tokens.len();
        for (what, id) in [
            ("bos", specials.bos),
            ("eos", specials.eos),
            ("eot", specials.eot),
            ("eom", specials.eom),
            ("padding", specials.pad),
        ] {
            if let Some(id) = id {
                if id as usize >= n {
                    return Err(TokenizerError::BadSpecialId {
                        what,
                        id: id as u64,
                    });
                }
            }
        }
        let mut types = Vec::with_capacity(n);
        for (i, &t) in token_types.iter().enumerate() {
            let ty = TokenType::from_i32(t).ok_or(TokenizerError::BadTokenType {
                id: i as u32,
                ty: t,
            })?;
            types.push(ty);
        }

        // BPE vocabulary: the byte-level tokens (first id wins on duplicates)
        let mut bpe_vocab: FxHashMap<&str, u32> = FxHashMap::default();
        bpe_vocab.reserve(n);
        for (i, t) in tokens.iter().enumerate() {
            if matches!(
                types[i],
                TokenType::Normal | TokenType::Byte | TokenType::Unknown
            ) {
                bpe_vocab.entry(t.as_str()).or_insert(i as u32);
            }
        }
        let mut byte_ids = [0u32; 256];
        for (b, slot) in byte_ids.iter_mut().enumerate() {
            let c = bytes::byte_to_char(b as u8);
            let mut buf = [0u8; 4];
            *slot = *bpe_vocab
                .get(&*c.encode_utf8(&mut buf))
                .ok_or(TokenizerError::MissingByteToken(b as u8))?;
        }
        let mut merge_ids = Vec::with_capacity(merges.len());
        let mut joined = String::new();
        for (rank, m) in merges.iter().enumerate() {
            let bad = || TokenizerError::BadMerge {
                rank,
                merge: m.clone(),
            };
            let (a, b) = m.split_once(' ').ok_or_else(bad)?;
            joined.clear();
            joined.push_str(a);
            joined.push_str(b);
            let ids = (
                bpe_vocab.get(a),
                bpe_vocab.get(b),
                bpe_vocab.get(joined.as_str()),
            );
            let (Some(&ia), Some(&ib), Some(&im)) = ids else {
                return Err(bad());
            };
            merge_ids.push((ia, ib, im));
        }
        drop(bpe_vocab);
        let bpe = bpe::Bpe::new(&merge_ids, byte_ids);

        let mut added = Vec::new();
        let mut piece_bytes = Vec::with_capacity(n * 8);
        let mut piece_offs = Vec::with_capacity(n + 1);
        piece_offs.push(0u32);
        for (i, t) in tokens.iter().enumerate() {
            match types[i] {
                TokenType::Control | TokenType::UserDefined => {
                    added.push(special::Added {
                        content: t.as_str().into(),
                        id: i as u32,
                        special: types[i] == TokenType::Control,
                    });
                    piece_bytes.extend_from_slice(t.as_bytes());
                }
                _ => match bytes::token_to_bytes(t) {
                    Some(b) => piece_bytes.extend_from_slice(&b),
                    // not byte-level text: HF's ByteLevel decoder then keeps the token's UTF-8
                    None => piece_bytes.extend_from_slice(t.as_bytes()),
                },
            }
            let off =
                u32::try_from(piece_bytes.len()).map_err(|_| TokenizerError::TooManyTokens(n))?;
            piece_offs.push(off);
        }
        let mut token_ids = FxHashMap::default();
        token_ids.reserve(n);
        for (i, t) in tokens.iter().enumerate() {
            token_ids.entry(t.clone()).or_insert(i as u32);
        }
        let mut eog: Vec<u32> = [specials.eos, specials.eot, specials.eom]
            .into_iter()
            .flatten()
            .chain(
                END_OF_GENERATION_TEXTS
                    .iter()
                    .filter_map(|t| token_ids.get(*t).copied())
                    .filter(|&id| {
                        matches!(
                            types[id as usize],
                            TokenType::Control | TokenType::UserDefined
                        )
                    }),
            )
            .collect();
        eog.sort_unstable();
        eog.dedup();
        Ok(Tokenizer {
            tokens,
            types,
            token_ids,
            piece_bytes,
            piece_offs,
            bpe,
            added: special::SpecialMatcher::new(added),
            pre,
            specials,
            eog,
        })
    }

    /// Encode `text`. Added tokens of type USER_DEFINED (`<think>`, `<tool_call>`, …) are always
    /// recognised; CONTROL ones (`<|im_start|>`, …) only when `parse_special` is true, otherwise
    /// they are encoded as plain text. No BOS is added (see [`Tokenizer::add_bos_token`]).
    pub fn encode(&self, text: &str, parse_special: bool) -> Vec<u32> {
        let mut out = Vec::with_capacity(text.len() / 3 + 1);
        special::segments(&self.added, text, parse_special, |seg| match seg {
            special::Segment::Token(id) => out.push(id),
            special::Segment::Text(t) => self.encode_plain(t, &mut out),
        });
        out
    }

    /// Encode text that contains no added tokens (normalise, pre-tokenize, BPE).
    fn encode_plain(&self, text: &str, out: &mut Vec<u32>) {
        let norm = nfc(text);
        pretokenize::pre_tokenize(self.pre, &norm, |piece| {
            self.bpe.encode_word(piece.as_bytes(), out)
        });
    }

    /// Number of ids (including padding ids).
    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    /// The vocabulary entry of `id` as stored (byte-level alphabet for BPE tokens).
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }

    /// The id of a vocabulary entry (e.g. `"<|im_end|>"`).
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.token_ids.get(token).copied()
    }

    pub fn token_type(&self, id: u32) -> Option<TokenType> {
        self.types.get(id as usize).copied()
    }

    /// Is `id` a CONTROL token?
    pub fn is_control(&self, id: u32) -> bool {
        self.token_type(id) == Some(TokenType::Control)
    }

    pub fn pre_tokenizer(&self) -> PreTokenizer {
        self.pre
    }

    pub fn specials(&self) -> SpecialTokens {
        self.specials
    }

    pub fn bos_id(&self) -> Option<u32> {
        self.specials.bos
    }

    pub fn eos_id(&self) -> Option<u32> {
        self.specials.eos
    }

    pub fn pad_id(&self) -> Option<u32> {
        self.specials.pad
    }

    /// Whether a BOS should be put before a prompt (`tokenizer.ggml.add_bos_token`; false for
    /// Qwen).
    pub fn add_bos_token(&self) -> bool {
        self.specials.add_bos
    }

    /// The ids that end a generation: the file's eos / eot / eom and the
    /// vocabulary's turn-end tokens (see `END_OF_GENERATION_TEXTS`), ascending.
    pub fn eog_ids(&self) -> &[u32] {
        &self.eog
    }

    /// Also end generations at `ids` (a folder's `generation_config.json`
    /// names its eos ids there). Ids outside the vocabulary are refused.
    pub fn add_eog(&mut self, ids: &[u32]) -> Result<(), TokenizerError> {
        for &id in ids {
            if id as usize >= self.tokens.len() {
                return Err(TokenizerError::BadSpecialId {
                    what: "generation eos",
                    id: id as u64,
                });
            }
        }
        self.eog.extend_from_slice(ids);
        self.eog.sort_unstable();
        self.eog.dedup();
        Ok(())
    }

    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.binary_search(&id).is_ok()
    }

    /// The tokens of a prompt text (special tokens parsed), with a BOS in
    /// front when the vocabulary asks for one and the text does not already
    /// start with it. Every front end encodes prompts through this, so they
    /// agree on the ids.
    pub fn encode_prompt(&self, text: &str) -> Vec<u32> {
        let mut ids = Vec::new();
        if self.add_bos_token() {
            if let Some(bos) = self.bos_id() {
                let bos_text = self.token_text(bos).unwrap_or("");
                if bos_text.is_empty() || !text.starts_with(bos_text) {
                    ids.push(bos);
                }
            }
        }
        ids.extend(self.encode(text, true));
        ids
    }
}
