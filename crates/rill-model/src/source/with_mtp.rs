//! A trunk and its MTP head from two files: llama.cpp's converter writes the
//! head alone with `--mtp` (the head's block `blk.{n_layer}.*` with its
//! `nextn.*` tensors, plus copies of the embeddings, output norm and LM
//! head), for a trunk converted with `--no-mtp`.

use super::{TensorRef, WeightSource};
use crate::config::ModelConfig;
use crate::error::ModelError;
use std::sync::Arc;

/// The trunk's source, with the MTP head's block read from another.
pub struct WithMtpHead {
    trunk: Arc<dyn WeightSource>,
    head: Arc<dyn WeightSource>,
    config: ModelConfig,
    /// `blk.{n_layer}.`: the names the head's source answers.
    head_prefix: String,
}

impl WithMtpHead {
    /// Check that `head` is an MTP-only file for `trunk`'s model (same
    /// architecture, width, depth and vocabulary) and join them.
    pub fn new(
        trunk: Arc<dyn WeightSource>,
        head: Arc<dyn WeightSource>,
    ) -> Result<WithMtpHead, ModelError> {
        let mut config = trunk.config()?;
        let hc = head.config()?;
        let bad = |why: String| {
            Err(ModelError::NotMtpHead(format!(
                "{} is not an MTP head for {}: {why}",
                head.describe(),
                trunk.describe()
            )))
        };
        if hc.n_nextn == 0 {
            return bad("it has no MTP layer (nextn_predict_layers)".into());
        }
        if hc.arch != config.arch || hc.n_embd != config.n_embd || hc.n_layer != config.n_layer {
            return bad(format!(
                "{} with {} layers of width {}, the trunk is {} with {} of {}",
                hc.arch.name(),
                hc.n_layer,
                hc.n_embd,
                config.arch.name(),
                config.n_layer,
                config.n_embd
            ));
        }
        let vocab = |s: &dyn WeightSource| -> Result<Option<u64>, ModelError> {
            Ok(s.tensor("token_embd.weight")?
                .and_then(|t| t.shape.get(1).copied()))
        };
        if let (Some(a), Some(b)) = (vocab(&*trunk)?, vocab(&*head)?) {
            if a != b {
                return bad(format!("a vocabulary of {b} tokens, the trunk's has {a}"));
            }
        }
        config.n_nextn = hc.n_nextn;
        let head_prefix = format!("blk.{}.", config.n_layer);
        Ok(WithMtpHead {
            trunk,
            head,
            config,
            head_prefix,
        })
    }

    fn source_of(&self, name: &str) -> &dyn WeightSource {
        if name.starts_with(&self.head_prefix) {
            &*self.head
        } else {
            &*self.trunk
        }
    }
}

impl WeightSource for WithMtpHead {
    fn describe(&self) -> String {
        format!(
            "{} with the MTP head of {}",
            self.trunk.describe(),
            self.head.describe()
        )
    }

    fn config(&self) -> Result<ModelConfig, ModelError> {
        Ok(self.config.clone())
    }

    fn tensor(&self, name: &str) -> Result<Option<TensorRef<'_>>, ModelError> {
        self.source_of(name).tensor(name)
    }

    fn expert_tensors(&self, name: &str) -> Result<Option<Vec<TensorRef<'_>>>, ModelError> {
        self.source_of(name).expert_tensors(name)
    }

    fn release(&self, bytes: &[u8]) {
        // Each source lets go of its own bytes only.
        self.trunk.release(bytes);
        self.head.release(bytes);
    }

    fn vector(&self, name: &str, n: usize) -> Result<Vec<f32>, ModelError> {
        self.source_of(name).vector(name, n)
    }
}
