//! GGUF reader (interface stub; the implementation lands next).
use rill_dtype::DType;
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("{0}")]
    Invalid(String),
}

#[derive(Clone, Debug, PartialEq)]
pub enum MetaValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    Str(String),
    Array(Vec<MetaValue>),
}

impl MetaValue {
    pub fn as_u64(&self) -> Option<u64> {
        todo!()
    }
    pub fn as_i64(&self) -> Option<i64> {
        todo!()
    }
    pub fn as_f64(&self) -> Option<f64> {
        todo!()
    }
    pub fn as_bool(&self) -> Option<bool> {
        todo!()
    }
    pub fn as_str(&self) -> Option<&str> {
        todo!()
    }
    pub fn as_array(&self) -> Option<&[MetaValue]> {
        todo!()
    }
}

#[derive(Clone, Debug)]
pub struct TensorInfo {
    pub name: String,
    /// ggml order: `shape[0]` is the contiguous (row) dimension.
    pub shape: Vec<u64>,
    pub ggml_type: u32,
}

impl TensorInfo {
    pub fn dtype(&self) -> Result<DType, GgufError> {
        todo!()
    }
    pub fn n_elements(&self) -> u64 {
        todo!()
    }
}

pub struct GgufFile {}

impl GgufFile {
    pub fn open(_path: &Path) -> Result<GgufFile, GgufError> {
        todo!()
    }
    pub fn from_bytes(_bytes: Vec<u8>) -> Result<GgufFile, GgufError> {
        todo!()
    }
    pub fn version(&self) -> u32 {
        todo!()
    }
    pub fn get(&self, _key: &str) -> Option<&MetaValue> {
        todo!()
    }
    pub fn metadata(&self) -> impl Iterator<Item = (&str, &MetaValue)> {
        std::iter::empty()
    }
    pub fn tensors(&self) -> &[TensorInfo] {
        todo!()
    }
    pub fn tensor(&self, _name: &str) -> Option<&TensorInfo> {
        todo!()
    }
    pub fn tensor_data(&self, _info: &TensorInfo) -> &[u8] {
        todo!()
    }
}
