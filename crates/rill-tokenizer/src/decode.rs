//! Decoding: ids → bytes → text, in one go or streamed.

use crate::{Tokenizer, TokenizerError};

/// Incremental decoder for generated tokens: holds the bytes of an incomplete UTF-8 sequence
/// until the tokens that complete it arrive, so it never emits half a character. Invalid bytes
/// come out as U+FFFD exactly where [`Tokenizer::decode`] (lossy UTF-8) would put them: the
/// concatenation of everything returned by `push` and `finish` equals `decode` of all the ids.
#[derive(Clone, Debug, Default)]
pub struct StreamDecoder {
    pending: Vec<u8>,
    skip_special: bool,
}

impl StreamDecoder {
    /// A decoder that prints special tokens as their text (as [`Tokenizer::decode`]).
    pub fn new() -> StreamDecoder {
        StreamDecoder::default()
    }

    /// A decoder that leaves out CONTROL tokens (as [`Tokenizer::decode_skip_special`]).
    pub fn skipping_special() -> StreamDecoder {
        StreamDecoder {
            pending: Vec::new(),
            skip_special: true,
        }
    }

    /// Feed one token; returns the text that became complete (often empty).
    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> Result<String, TokenizerError> {
        if !(self.skip_special && tok.is_control(id)) {
            self.pending.extend_from_slice(tok.token_to_piece(id)?);
        }
        Ok(self.drain(false))
    }

    /// Feed several tokens.
    pub fn push_all(&mut self, tok: &Tokenizer, ids: &[u32]) -> Result<String, TokenizerError> {
        let mut s = String::new();
        for &id in ids {
            s.push_str(&self.push(tok, id)?);
        }
        Ok(s)
    }

    /// Bytes held back (an incomplete UTF-8 sequence).
    pub fn pending(&self) -> &[u8] {
        &self.pending
    }

    /// Flush what is left (an incomplete sequence becomes U+FFFD) and reset.
    pub fn finish(&mut self) -> String {
        self.drain(true)
    }

    fn drain(&mut self, eof: bool) -> String {
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let good = e.valid_up_to();
                    // the prefix is valid UTF-8 by construction
                    out.push_str(&String::from_utf8_lossy(&rest[..good]));
                    match e.error_len() {
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            rest = &rest[good + bad..];
                        }
                        None if eof => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            rest = &[];
                            break;
                        }
                        None => {
                            rest = &rest[good..];
                            break;
                        }
                    }
                }
            }
        }
        let keep = rest.len();
        let len = self.pending.len();
        self.pending.drain(..len - keep);
        out
    }
}

impl Tokenizer {
    /// The bytes a token stands for (added tokens: their text; byte-level tokens: the bytes
    /// behind their chars). May be part of a UTF-8 sequence.
    pub fn token_to_piece(&self, id: u32) -> Result<&[u8], TokenizerError> {
        let i = id as usize;
        if i + 1 >= self.piece_offs.len() {
            return Err(TokenizerError::UnknownId(id));
        }
        Ok(&self.piece_bytes[self.piece_offs[i] as usize..self.piece_offs[i + 1] as usize])
    }

    /// Bytes of a sequence of tokens.
    pub fn decode_bytes(&self, ids: &[u32]) -> Result<Vec<u8>, TokenizerError> {
        let mut out = Vec::with_capacity(ids.len() * 4);
        for &id in ids {
            out.extend_from_slice(self.token_to_piece(id)?);
        }
        Ok(out)
    }

    /// Text of a sequence of tokens (invalid UTF-8 → U+FFFD, as HF's ByteLevel decoder).
    /// Special tokens are written as their text (HF `skip_special_tokens=False`).
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        Ok(String::from_utf8_lossy(&self.decode_bytes(ids)?).into_owned())
    }

    /// Like [`Tokenizer::decode`] but leaving out CONTROL tokens.
    pub fn decode_skip_special(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        let mut out = Vec::with_capacity(ids.len() * 4);
        for &id in ids {
            let piece = self.token_to_piece(id)?;
            if !self.is_control(id) {
                out.extend_from_slice(piece);
            }
        }
        Ok(String::from_utf8_lossy(&out).into_owned())
    }
}
