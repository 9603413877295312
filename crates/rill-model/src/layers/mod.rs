//! One file per block type.
pub(crate) mod attention;
pub(crate) mod ffn;
pub(crate) mod gdn;
