//! A GGUF file as a weight source: its names and layout are the canonical
//! ones, so tensors are handed out as they are stored — with, for a matrix
//! `X.weight` beside which the file holds `X.scale` (llama.cpp's converter
//! of NVFP4 checkpoints writes the checkpoint's global scales so: one f32
//! per tensor, or one per expert of a stack), that tensor as the matrix's
//! output scales ([`Scales::Rows`]). Its `X.input_scale` (the
//! activations' scale of 4-bit-activation GPU kernels) is not used.

use super::{Scales, TensorRef, WeightSource};
use crate::config::ModelConfig;
use crate::error::ModelError;
use rill_dtype::DType;
use rill_gguf::GgufFile;
use std::sync::Arc;

pub struct GgufSource {
    file: Arc<GgufFile>,
    label: String,
}

impl GgufSource {
    /// `label` names the file in messages (its path, or `embedded demo model`).
    pub fn new(file: Arc<GgufFile>, label: impl Into<String>) -> GgufSource {
        GgufSource {
            file,
            label: label.into(),
        }
    }

    pub fn file(&self) -> &GgufFile {
        &self.file
    }
}

impl WeightSource for GgufSource {
    fn describe(&self) -> String {
        format!("GGUF file {}", self.label)
    }

    fn config(&self) -> Result<ModelConfig, ModelError> {
        ModelConfig::from_gguf(&self.file)
    }

    fn tensor(&self, name: &str) -> Result<Option<TensorRef<'_>>, ModelError> {
        let Some(info) = self.file.tensor(name) else {
            return Ok(None);
        };
        Ok(Some(TensorRef {
            name: &info.name,
            dtype: info.dtype()?,
            shape: &info.shape,
            data: self.file.try_tensor_data(info)?,
            scales: self.output_scales(name, &info.shape)?,
        }))
    }

    fn release(&self, bytes: &[u8]) {
        self.file.release(bytes);
    }
}

impl GgufSource {
    /// The `.scale` tensor of matrix `name` (shape `shape`, ggml order) as
    /// per-row output scales, or none.
    fn output_scales(&self, name: &str, shape: &[u64]) -> Result<Scales<'_>, ModelError> {
        let Some(stem) = name.strip_suffix(".weight") else {
            return Ok(Scales::None);
        };
        let scale_name = format!("{stem}.scale");
        let Some(info) = self.file.tensor(&scale_name) else {
            return Ok(Scales::None);
        };
        let bad = |why: String| ModelError::BadScale {
            name: scale_name.clone(),
            why,
        };
        if info.dtype()? != DType::F32 {
            return Err(bad(format!("type {}, not F32", info.dtype()?)));
        }
        let count: u64 = info.shape.iter().product();
        let rows: u64 = shape.iter().skip(1).product();
        if shape.len() < 2 || count == 0 || !rows.is_multiple_of(count) {
            return Err(bad(format!(
                "{count} values do not split the {rows} rows of '{name}' {shape:?} evenly"
            )));
        }
        Ok(Scales::Rows {
            data: self.file.try_tensor_data(info)?,
            block_rows: (rows / count) as usize,
            row0: 0,
        })
    }
}
