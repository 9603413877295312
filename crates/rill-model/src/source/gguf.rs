//! A GGUF file as a weight source: its names and layout are the canonical
//! ones, so tensors are handed out as they are stored.

use super::{Scales, TensorRef, WeightSource};
use crate::config::ModelConfig;
use crate::error::ModelError;
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
            scales: Scales::None,
        }))
    }
}
