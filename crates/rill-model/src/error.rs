use rill_dtype::DType;

/// Why a model file could not be bound.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Gguf(#[from] rill_gguf::GgufError),
    #[error("unsupported architecture '{0}' (rill runs qwen35moe, qwen35 and qwen3next)")]
    UnsupportedArch(String),
    #[error("missing metadata key '{0}'")]
    MissingKey(String),
    #[error("metadata key '{key}': {why}")]
    BadKey { key: String, why: String },
    #[error("missing tensor '{0}'")]
    MissingTensor(String),
    #[error("tensor '{name}' has shape {got:?}, expected {want:?}")]
    BadShape {
        name: String,
        got: Vec<u64>,
        want: Vec<u64>,
    },
    #[error("tensor '{name}' has type {dtype}, which rill cannot compute with")]
    UnsupportedType { name: String, dtype: DType },
    #[error("inconsistent hyperparameters: {0}")]
    Inconsistent(String),
    /// No memory for a matrix's copy in the layout its kernels read
    /// ([`crate::LoadLayout`]).
    #[error("out of memory: {bytes} bytes for tensor '{name}' in the {dtype} layout")]
    OutOfMemory {
        name: String,
        dtype: DType,
        bytes: usize,
    },
    /// A matrix's separate scale tensor (GGUF NVFP4's `.scale`) that does
    /// not fit it.
    #[error("scale tensor '{name}': {why}")]
    BadScale { name: String, why: String },
    #[error("{0}")]
    NotMtpHead(String),
    /// A file of a Hugging Face folder that rill cannot use (missing, not
    /// JSON, not safetensors, an unsupported setting).
    #[error("{file}: {why}")]
    Checkpoint { file: String, why: String },
    /// One tensor of a Hugging Face folder that rill cannot use.
    #[error("{file}: tensor '{tensor}': {why}")]
    CheckpointTensor {
        file: String,
        tensor: String,
        why: String,
    },
}

/// Why a forward pass was refused.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    #[error("token id {id} is out of range (vocabulary has {n_vocab} tokens)")]
    TokenOutOfRange { id: u32, n_vocab: usize },
    #[error("context full: {needed} positions needed, the sequence state holds {capacity}")]
    ContextFull { needed: usize, capacity: usize },
    #[error("empty batch")]
    Empty,
    #[error("the model has no MTP head (or the state was made for one without)")]
    NoMtp,
    #[error("MTP hidden rows: {got} values given, {want} expected (n_embd per token)")]
    HiddenRows { got: usize, want: usize },
    #[error("a rewindable step of {rows} tokens (at most {max})")]
    RewindRows { rows: usize, max: usize },
    #[error("{arch} steps cannot be rewound (its PLE history is not kept per row)")]
    NoRewind { arch: &'static str },
}
