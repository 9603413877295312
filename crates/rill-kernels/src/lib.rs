//! Numeric kernels. They know tensors and encodings, nothing of models or files.
pub mod quant;
