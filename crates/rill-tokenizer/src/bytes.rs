//! GPT-2 byte-level alphabet: every byte is mapped to a printable Unicode char so that BPE tokens
//! are strings. Printable Latin-1 bytes (`!`..=`~`, `¡`..=`¬`, `®`..=`ÿ`) map to themselves; the
//! remaining 68 bytes map, in byte order, to U+0100, U+0101, …

/// Does byte `b` map to itself in the GPT-2 alphabet?
const fn is_direct(b: u8) -> bool {
    matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF)
}

/// Table byte → char, built at compile time.
const BYTE_TO_CHAR: [char; 256] = {
    let mut table = ['\0'; 256];
    let mut next = 0x100u32;
    let mut b = 0usize;
    while b < 256 {
        if is_direct(b as u8) {
            table[b] = b as u8 as char;
        } else {
            table[b] = match char::from_u32(next) {
                Some(c) => c,
                None => '\0',
            };
            next += 1;
        }
        b += 1;
    }
    table
};

/// Inverse of the non-direct part: U+0100 + n → byte.
const EXTRA_TO_BYTE: [u8; 68] = {
    let mut table = [0u8; 68];
    let mut n = 0usize;
    let mut b = 0usize;
    while b < 256 {
        if !is_direct(b as u8) {
            table[n] = b as u8;
            n += 1;
        }
        b += 1;
    }
    table
};

/// The char that stands for byte `b`.
#[inline]
pub fn byte_to_char(b: u8) -> char {
    BYTE_TO_CHAR[b as usize]
}

/// The byte a char of the byte-level alphabet stands for, or `None` for chars outside it.
#[inline]
pub fn char_to_byte(c: char) -> Option<u8> {
    let u = c as u32;
    if u < 256 && is_direct(u as u8) {
        return Some(u as u8);
    }
    if (0x100..0x100 + 68).contains(&u) {
        return Some(EXTRA_TO_BYTE[(u - 0x100) as usize]);
    }
    None
}

/// Bytes of a vocabulary token written in the byte-level alphabet, or `None` if some char is
/// outside the alphabet (added tokens such as `<|im_start|>` are plain text; the caller then uses
/// the token's own UTF-8, as HF's ByteLevel decoder does).
pub fn token_to_bytes(token: &str) -> Option<Vec<u8>> {
    token.chars().map(char_to_byte).collect()
}

/// Write `bytes` in the byte-level alphabet.
pub fn bytes_to_token(bytes: &[u8]) -> String {
    bytes.iter().map(|&b| byte_to_char(b)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_all_bytes() {
        let mut seen = std::collections::HashSet::new();
        for b in 0..=255u8 {
            let c = byte_to_char(b);
            assert!(seen.insert(c), "duplicate char for byte {b}");
            assert_eq!(char_to_byte(c), Some(b));
        }
        assert_eq!(byte_to_char(b' '), 'Ġ');
        assert_eq!(byte_to_char(b'\n'), 'Ċ');
        assert_eq!(byte_to_char(0), '\u{100}');
        assert_eq!(byte_to_char(0xAD), '\u{143}');
        assert_eq!(char_to_byte('\u{144}'), None);
        assert_eq!(char_to_byte('é'), Some(0xE9));
    }
}
