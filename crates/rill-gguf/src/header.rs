//! Parsing of one GGUF file's header: magic, version, metadata and tensor infos, plus the
//! checks that can be made without the data section.

use crate::cursor::Cursor;
use crate::value::{MetaValue, ValueType};
use crate::{GgufError, TensorInfo};
use std::collections::HashSet;

pub(crate) const DEFAULT_ALIGNMENT: u64 = 32;
pub(crate) const ALIGNMENT_KEY: &str = "general.alignment";
/// GGML_MAX_DIMS.
pub(crate) const MAX_DIMS: u32 = 4;
/// Arrays of arrays are legal; a bound on nesting keeps a malicious file from overflowing the
/// stack with recursion (every level costs only 12 bytes of file).
const MAX_ARRAY_DEPTH: u32 = 32;
/// Every metadata value becomes a 32-byte `MetaValue`, so a file full of u8 arrays would
/// allocate 32 times its size. Real files have well under a million values (tokenizers are the
/// biggest); this cap bounds the worst case at 2 GiB.
const MAX_META_VALUES: u64 = 1 << 26;
/// Fewest bytes a tensor info takes: name length, n_dims, type, offset.
const MIN_TENSOR_INFO_LEN: u64 = 8 + 4 + 4 + 8;
/// Fewest bytes a metadata entry takes: key length, value type, a 1-byte value.
const MIN_KV_LEN: u64 = 8 + 4 + 1;

/// Everything in one file up to its data section.
#[derive(Debug)]
pub(crate) struct Header {
    pub version: u32,
    pub metadata: Vec<(String, MetaValue)>,
    /// Tensor infos with `split` still 0; the caller assigns it.
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    /// Absolute offset of the data section (may lie past the end of a file without tensors).
    pub data_start: u64,
}

impl Header {
    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }
}

pub(crate) fn parse_header(buf: &[u8]) -> Result<Header, GgufError> {
    check_magic(buf)?;
    let mut cur = Cursor::new(buf);
    cur.take(4, "magic")?;
    let version = cur.u32("version")?;
    match version {
        2 | 3 => {}
        1 => return Err(GgufError::VersionOne),
        // The magic is written byte-wise, so a big-endian file shows up as a byte-swapped
        // small version number.
        v if (1..=3).contains(&v.swap_bytes()) => return Err(GgufError::BigEndian(v.swap_bytes())),
        v => return Err(GgufError::UnsupportedVersion(v)),
    }
    let n_tensors = cur.u64("tensor count")?;
    let n_kv = cur.u64("metadata entry count")?;
    // Counts are bounded by what could fit in the rest of the file, so a bogus count fails
    // at the first missing entry instead of reserving gigabytes.
    check_count(&cur, n_kv, MIN_KV_LEN, "metadata entry count")?;
    check_count(&cur, n_tensors, MIN_TENSOR_INFO_LEN, "tensor count")?;

    let mut metadata = Vec::with_capacity(n_kv as usize);
    let mut keys = HashSet::with_capacity(n_kv as usize);
    let mut budget = MAX_META_VALUES;
    for _ in 0..n_kv {
        let key = cur.string("metadata key")?;
        let at = cur.pos() as u64;
        let type_id = cur.u32("metadata value type")?;
        let ty = ValueType::from_id(type_id).ok_or(GgufError::UnknownValueType {
            type_id,
            offset: at,
        })?;
        let what = format!("value of `{key}`");
        let value = parse_value(&mut cur, ty, 0, &what, &mut budget)?;
        if !keys.insert(key.clone()) {
            return Err(GgufError::DuplicateKey(key));
        }
        metadata.push((key, value));
    }

    let alignment = match metadata.iter().find(|(k, _)| k == ALIGNMENT_KEY) {
        None => DEFAULT_ALIGNMENT,
        Some((_, v)) => {
            let a = v.as_u64().ok_or_else(|| {
                GgufError::BadAlignment(format!("expected an unsigned integer, found {v:?}"))
            })?;
            if a == 0 || !a.is_power_of_two() {
                return Err(GgufError::BadAlignment(format!(
                    "{a} is not a non-zero power of two"
                )));
            }
            a
        }
    };

    let mut tensors = Vec::with_capacity(n_tensors as usize);
    let mut names = HashSet::with_capacity(n_tensors as usize);
    for _ in 0..n_tensors {
        let info = parse_tensor_info(&mut cur)?;
        if !names.insert(info.name.clone()) {
            return Err(GgufError::DuplicateTensor(info.name));
        }
        tensors.push(info);
    }

    let header_end = cur.pos() as u64;
    let data_start = header_end
        .div_ceil(alignment)
        .checked_mul(alignment)
        .ok_or_else(|| {
            GgufError::BadAlignment(format!("{alignment} puts the data section past 2^64"))
        })?;
    Ok(Header {
        version,
        metadata,
        tensors,
        alignment,
        data_start,
    })
}

fn check_count(cur: &Cursor, count: u64, min_len: u64, what: &str) -> Result<(), GgufError> {
    let needed = count.saturating_mul(min_len);
    if needed > cur.remaining() {
        return Err(GgufError::Corrupt {
            what: what.to_string(),
            offset: cur.pos() as u64,
            reason: format!(
                "{count} entries need at least {needed} bytes but only {} are left",
                cur.remaining()
            ),
        });
    }
    Ok(())
}

fn parse_value(
    cur: &mut Cursor,
    ty: ValueType,
    depth: u32,
    what: &str,
    budget: &mut u64,
) -> Result<MetaValue, GgufError> {
    Ok(match ty {
        ValueType::U8 => MetaValue::U8(cur.u8(what)?),
        ValueType::I8 => MetaValue::I8(cur.i8(what)?),
        ValueType::U16 => MetaValue::U16(cur.u16(what)?),
        ValueType::I16 => MetaValue::I16(cur.i16(what)?),
        ValueType::U32 => MetaValue::U32(cur.u32(what)?),
        ValueType::I32 => MetaValue::I32(cur.i32(what)?),
        ValueType::U64 => MetaValue::U64(cur.u64(what)?),
        ValueType::I64 => MetaValue::I64(cur.i64(what)?),
        ValueType::F32 => MetaValue::F32(cur.f32(what)?),
        ValueType::F64 => MetaValue::F64(cur.f64(what)?),
        ValueType::Bool => {
            let at = cur.pos() as u64;
            match cur.u8(what)? {
                0 => MetaValue::Bool(false),
                1 => MetaValue::Bool(true),
                b => {
                    return Err(GgufError::Corrupt {
                        what: what.to_string(),
                        offset: at,
                        reason: format!("bool byte is {b}, expected 0 or 1"),
                    })
                }
            }
        }
        ValueType::Str => MetaValue::Str(cur.string(what)?),
        ValueType::Array => {
            let at = cur.pos() as u64;
            let type_id = cur.u32(what)?;
            let elem = ValueType::from_id(type_id).ok_or(GgufError::UnknownValueType {
                type_id,
                offset: at,
            })?;
            if elem == ValueType::Array && depth + 1 >= MAX_ARRAY_DEPTH {
                return Err(GgufError::Corrupt {
                    what: what.to_string(),
                    offset: at,
                    reason: format!("arrays nested more than {MAX_ARRAY_DEPTH} deep"),
                });
            }
            let count = cur.u64(what)?;
            check_count(cur, count, elem.min_encoded_len(), what)?;
            if count > *budget {
                return Err(GgufError::Corrupt {
                    what: what.to_string(),
                    offset: at,
                    reason: format!("more than {MAX_META_VALUES} metadata values in the file"),
                });
            }
            *budget -= count;
            let mut items = Vec::with_capacity(count as usize);
            for _ in 0..count {
                items.push(parse_value(cur, elem, depth + 1, what, budget)?);
            }
            MetaValue::Array(items)
        }
    })
}

fn parse_tensor_info(cur: &mut Cursor) -> Result<TensorInfo, GgufError> {
    let name = cur.string("tensor name")?;
    let what = format!("tensor info of `{name}`");
    let n_dims = cur.u32(&what)?;
    if n_dims > MAX_DIMS {
        return Err(GgufError::TooManyDims {
            tensor: name,
            n_dims,
        });
    }
    let mut shape = Vec::with_capacity(n_dims as usize);
    for _ in 0..n_dims {
        shape.push(cur.u64(&what)?);
    }
    let ggml_type = cur.u32(&what)?;
    let offset = cur.u64(&what)?;
    // ggml keeps dimensions and element counts in int64.
    let mut n: u64 = 1;
    for &d in &shape {
        n = match n.checked_mul(d) {
            Some(n) if n <= i64::MAX as u64 && d <= i64::MAX as u64 => n,
            _ => {
                return Err(GgufError::BadShape {
                    tensor: name,
                    shape,
                    reason: "element count overflows int64".into(),
                })
            }
        };
    }
    Ok(TensorInfo {
        name,
        shape,
        ggml_type,
        offset,
        split: 0,
    })
}

/// Refuse foreign files with a message that says what they look like.
fn check_magic(buf: &[u8]) -> Result<(), GgufError> {
    if buf.is_empty() {
        return Err(GgufError::Empty);
    }
    if buf.starts_with(b"GGUF") {
        return Ok(());
    }
    let looks_like = if buf.len() < 4 {
        format!("the file is only {} bytes long", buf.len())
    } else if buf.len() > 8 && buf[8] == b'{' {
        // safetensors: u64 header length, then a JSON header.
        "this looks like a safetensors file".to_string()
    } else if matches!(&buf[..4], b"lmgg" | b"fmgg" | b"tjgg") {
        "this is a legacy GGML/GGMF/GGJT file; convert it to GGUF".to_string()
    } else if buf
        .iter()
        .take(64)
        .all(|b| b.is_ascii_graphic() || b.is_ascii_whitespace())
    {
        "this looks like a text file".to_string()
    } else {
        format!("magic bytes are {:02x?}, expected \"GGUF\"", &buf[..4])
    };
    Err(GgufError::NotGguf(looks_like))
}
