//! The one error type of the crate. Every way a file can be wrong has its own variant so
//! callers (and tests) can tell them apart, and every message says where the problem is.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A parse error inside a named file (open() wraps every error from a file with its path).
    #[error("{}: {source}", path.display())]
    InFile {
        path: PathBuf,
        #[source]
        source: Box<GgufError>,
    },

    #[error("empty file: not a GGUF file")]
    Empty,

    #[error("not a GGUF file: {0}")]
    NotGguf(String),

    #[error("GGUF version 1 is obsolete and not supported (re-convert the model with a current llama.cpp)")]
    VersionOne,

    #[error("big-endian GGUF file (version {0}) is not supported; convert it to little-endian")]
    BigEndian(u32),

    #[error("unsupported GGUF version {0} (supported: 2, 3)")]
    UnsupportedVersion(u32),

    #[error("file truncated while reading {what} at byte {offset}: need {needed} bytes, {available} left")]
    Truncated {
        what: String,
        offset: u64,
        needed: u64,
        available: u64,
    },

    #[error("corrupt {what} at byte {offset}: {reason}")]
    Corrupt {
        what: String,
        offset: u64,
        reason: String,
    },

    #[error("unknown metadata value type {type_id} at byte {offset}")]
    UnknownValueType { type_id: u32, offset: u64 },

    #[error("duplicate metadata key `{0}`")]
    DuplicateKey(String),

    #[error("invalid general.alignment: {0}")]
    BadAlignment(String),

    #[error("tensor `{tensor}` has {n_dims} dimensions (at most 4 allowed)")]
    TooManyDims { tensor: String, n_dims: u32 },

    #[error("tensor `{tensor}`: bad shape {shape:?}: {reason}")]
    BadShape {
        tensor: String,
        shape: Vec<u64>,
        reason: String,
    },

    #[error("tensor `{tensor}` has unknown ggml type id {type_id}")]
    UnknownTensorType { tensor: String, type_id: u32 },

    #[error("duplicate tensor name `{0}`")]
    DuplicateTensor(String),

    #[error(
        "tensor `{tensor}`: data offset {offset} is not a multiple of the alignment {alignment}"
    )]
    Misaligned {
        tensor: String,
        offset: u64,
        alignment: u64,
    },

    #[error("tensor `{tensor}`: data [{start}, {end}) (relative to the data section) lies outside the file's {data_len}-byte data section")]
    OutOfBounds {
        tensor: String,
        start: u64,
        end: u64,
        data_len: u64,
    },

    #[error("tensors `{0}` and `{1}` overlap in the data section")]
    Overlap(String, String),

    #[error("split file {} (split {no} of {count}) is missing", path.display())]
    MissingSplit { path: PathBuf, no: u64, count: u64 },

    #[error("tensor `{0}` is not a tensor of this file")]
    ForeignTensor(String),

    #[error("split files: {0}")]
    Split(String),

    #[error("cannot write GGUF: {0}")]
    Write(String),
}

impl GgufError {
    /// The underlying error with any file-name wrappers removed (useful for matching).
    pub fn root(&self) -> &GgufError {
        match self {
            GgufError::InFile { source, .. } => source.root(),
            e => e,
        }
    }

    pub(crate) fn in_file(self, path: &std::path::Path) -> GgufError {
        match self {
            // Already located (or an I/O error, which names its path itself).
            e @ (GgufError::InFile { .. }
            | GgufError::Io { .. }
            | GgufError::MissingSplit { .. }) => e,
            e => GgufError::InFile {
                path: path.to_path_buf(),
                source: Box::new(e),
            },
        }
    }
}
