//! A bounds-checked little-endian reader over a byte slice. Every read names what it was
//! reading so a truncated file gives a useful message.

use crate::GgufError;

pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

/// `pub fn T(&mut self, what) -> Result<T, _>` for each type `T`: one
/// little-endian value of it.
macro_rules! le_readers {
    ($($t:ident),*) => {$(
        pub fn $t(&mut self, what: &str) -> Result<$t, GgufError> {
            Ok($t::from_le_bytes(self.array(what)?))
        }
    )*};
}

impl<'a> Cursor<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    pub fn pos(&self) -> usize {
        self.pos
    }

    pub fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    pub fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8], GgufError> {
        if n > self.remaining() {
            return Err(GgufError::Truncated {
                what: what.to_string(),
                offset: self.pos as u64,
                needed: n,
                available: self.remaining(),
            });
        }
        // n <= remaining, which fits in usize.
        let n = n as usize;
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], GgufError> {
        let s = self.take(N as u64, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    pub fn u8(&mut self, what: &str) -> Result<u8, GgufError> {
        Ok(self.array::<1>(what)?[0])
    }
    le_readers!(i8, u16, i16, u32, i32, u64, i64, f32, f64);

    /// A GGUF string: u64 byte length, then UTF-8 bytes. The length is checked against the
    /// bytes left before anything is allocated.
    pub fn string(&mut self, what: &str) -> Result<String, GgufError> {
        let at = self.pos as u64;
        let len = self.u64(what)?;
        let bytes = self.take(len, what)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(e) => Err(GgufError::Corrupt {
                what: what.to_string(),
                offset: at,
                reason: format!("string is not valid UTF-8 ({e})"),
            }),
        }
    }
}
