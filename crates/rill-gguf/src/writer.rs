//! A small GGUF writer: enough to make test fixtures and to write files rill produces.
//! Tensors are laid out in the order they are added, each at an aligned offset.

use crate::header::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT};
use crate::value::{MetaValue, ValueType};
use crate::GgufError;
use std::path::Path;

pub struct GgufWriter {
    version: u32,
    alignment: u64,
    metadata: Vec<(String, MetaValue)>,
    tensors: Vec<WriterTensor>,
}

struct WriterTensor {
    name: String,
    shape: Vec<u64>,
    ggml_type: u32,
    data: Vec<u8>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl GgufWriter {
    /// A version-3 file with the default alignment (32).
    pub fn new() -> Self {
        GgufWriter {
            version: 3,
            alignment: DEFAULT_ALIGNMENT,
            metadata: Vec::new(),
            tensors: Vec::new(),
        }
    }

    /// The version number written in the header (the layout of versions 2 and 3 is the same).
    pub fn version(&mut self, version: u32) -> &mut Self {
        self.version = version;
        self
    }

    /// Lay tensors out at multiples of `alignment`, and record it as `general.alignment`
    /// (u32) unless it is the default.
    pub fn alignment(&mut self, alignment: u64) -> &mut Self {
        self.alignment = alignment;
        self.metadata.retain(|(k, _)| k != ALIGNMENT_KEY);
        if alignment != DEFAULT_ALIGNMENT {
            let a = u32::try_from(alignment).unwrap_or(u32::MAX);
            self.metadata
                .push((ALIGNMENT_KEY.into(), MetaValue::U32(a)));
        }
        self
    }

    /// Add a metadata entry (in order; the writer does not check for duplicates).
    pub fn kv(&mut self, key: impl Into<String>, value: MetaValue) -> &mut Self {
        self.metadata.push((key.into(), value));
        self
    }

    /// Add a tensor. `shape` is in ggml order; `data` is written as given (its length is not
    /// checked against the shape, so tests can write inconsistent files).
    pub fn tensor(
        &mut self,
        name: impl Into<String>,
        shape: &[u64],
        ggml_type: u32,
        data: Vec<u8>,
    ) -> &mut Self {
        self.tensors.push(WriterTensor {
            name: name.into(),
            shape: shape.to_vec(),
            ggml_type,
            data,
        });
        self
    }

    /// The file as bytes. Fails only for arrays whose elements are not all of one type, or an
    /// alignment that is not a non-zero power of two.
    pub fn to_bytes(&self) -> Result<Vec<u8>, GgufError> {
        let align = self.alignment;
        if align == 0 || !align.is_power_of_two() {
            return Err(GgufError::Write(format!(
                "alignment {align} is not a non-zero power of two"
            )));
        }
        let pad = |n: u64| n.div_ceil(align) * align;
        let mut out = Vec::new();
        out.extend_from_slice(b"GGUF");
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (k, v) in &self.metadata {
            write_str(&mut out, k);
            out.extend_from_slice(&(v.value_type() as u32).to_le_bytes());
            write_value(&mut out, v)?;
        }
        let mut offset = 0u64;
        for t in &self.tensors {
            write_str(&mut out, &t.name);
            out.extend_from_slice(&(t.shape.len() as u32).to_le_bytes());
            for d in &t.shape {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&t.ggml_type.to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            offset = pad(offset + t.data.len() as u64);
        }
        out.resize(pad(out.len() as u64) as usize, 0);
        for t in &self.tensors {
            out.extend_from_slice(&t.data);
            out.resize(pad(out.len() as u64) as usize, 0);
        }
        Ok(out)
    }

    pub fn write_to(&self, path: &Path) -> Result<(), GgufError> {
        let bytes = self.to_bytes()?;
        std::fs::write(path, bytes).map_err(|source| GgufError::Io {
            path: path.to_path_buf(),
            source,
        })
    }
}

fn write_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn write_value(out: &mut Vec<u8>, v: &MetaValue) -> Result<(), GgufError> {
    match v {
        MetaValue::U8(x) => out.push(*x),
        MetaValue::I8(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::Bool(x) => out.push(u8::from(*x)),
        MetaValue::Str(s) => write_str(out, s),
        MetaValue::Array(items) => {
            // An empty array still needs an element type; any will do.
            let elem = items.first().map_or(ValueType::U8, MetaValue::value_type);
            if let Some(bad) = items.iter().find(|i| i.value_type() != elem) {
                return Err(GgufError::Write(format!(
                    "array mixes {} and {} elements",
                    elem.name(),
                    bad.value_type().name()
                )));
            }
            out.extend_from_slice(&(elem as u32).to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for i in items {
                write_value(out, i)?;
            }
        }
    }
    Ok(())
}
