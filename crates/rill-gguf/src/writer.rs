//! A small GGUF writer: enough to make test fixtures and to write files rill produces.
//! Tensors are laid out in the order they are added, each at an aligned offset.

use crate::header::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT};
use crate::value::{MetaValue, ValueType};
use crate::GgufError;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

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
        let sizes: Vec<u64> = self.tensors.iter().map(|t| t.data.len() as u64).collect();
        let mut out = self.header(&sizes)?;
        let pad = |n: usize| n.div_ceil(self.alignment as usize) * self.alignment as usize;
        for t in &self.tensors {
            out.extend_from_slice(&t.data);
            out.resize(pad(out.len()), 0);
        }
        Ok(out)
    }

    /// The header, metadata and tensor table of a file whose tensors (as added, their data
    /// ignored) hold `sizes[i]` bytes each, padded to the alignment: what precedes the data.
    fn header(&self, sizes: &[u64]) -> Result<Vec<u8>, GgufError> {
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
        for (t, size) in self.tensors.iter().zip(sizes) {
            write_str(&mut out, &t.name);
            out.extend_from_slice(&(t.shape.len() as u32).to_le_bytes());
            for d in &t.shape {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&t.ggml_type.to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            offset = pad(offset + size);
        }
        out.resize(pad(out.len() as u64) as usize, 0);
        Ok(out)
    }

    /// Start a file at `path` whose tensors are declared (with [`Self::tensor`], empty data)
    /// and sized `sizes[i]` bytes: the header is written now, the data of each tensor, in the
    /// order declared, with [`StreamedFile::write_tensor`]. For files too large for memory.
    pub fn stream_to(&self, path: &Path, sizes: Vec<u64>) -> Result<StreamedFile, GgufError> {
        if sizes.len() != self.tensors.len() {
            return Err(GgufError::Write(format!(
                "{} sizes for {} tensors",
                sizes.len(),
                self.tensors.len()
            )));
        }
        let io = |source| GgufError::Io {
            path: path.to_path_buf(),
            source,
        };
        let header = self.header(&sizes)?;
        let mut file = BufWriter::new(File::create(path).map_err(io)?);
        file.write_all(&header).map_err(io)?;
        Ok(StreamedFile {
            path: path.to_path_buf(),
            file,
            sizes,
            next: 0,
            alignment: self.alignment,
        })
    }

    pub fn write_to(&self, path: &Path) -> Result<(), GgufError> {
        let bytes = self.to_bytes()?;
        std::fs::write(path, bytes).map_err(|source| GgufError::Io {
            path: path.to_path_buf(),
            source,
        })
    }
}

/// A GGUF file being written tensor by tensor ([`GgufWriter::stream_to`]).
pub struct StreamedFile {
    path: PathBuf,
    file: BufWriter<File>,
    sizes: Vec<u64>,
    next: usize,
    alignment: u64,
}

impl StreamedFile {
    fn io(&self, source: std::io::Error) -> GgufError {
        GgufError::Io {
            path: self.path.clone(),
            source,
        }
    }

    /// The data of the next declared tensor; its length must be the size declared.
    pub fn write_tensor(&mut self, data: &[u8]) -> Result<(), GgufError> {
        let Some(&size) = self.sizes.get(self.next) else {
            return Err(GgufError::Write(format!(
                "more tensors written than the {} declared",
                self.sizes.len()
            )));
        };
        if data.len() as u64 != size {
            return Err(GgufError::Write(format!(
                "tensor {} has {} bytes, {size} declared",
                self.next,
                data.len()
            )));
        }
        self.next += 1;
        let pad = size.div_ceil(self.alignment) * self.alignment - size;
        self.file.write_all(data).map_err(|e| self.io(e))?;
        self.file
            .write_all(&vec![0u8; pad as usize])
            .map_err(|e| self.io(e))
    }

    /// Flush the file; every declared tensor must have been written.
    pub fn finish(mut self) -> Result<(), GgufError> {
        if self.next != self.sizes.len() {
            return Err(GgufError::Write(format!(
                "{} of {} tensors written",
                self.next,
                self.sizes.len()
            )));
        }
        self.file.flush().map_err(|e| self.io(e))
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
