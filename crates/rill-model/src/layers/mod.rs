//! One file per block type.
pub(crate) mod attention;
pub(crate) mod ffn;
pub(crate) mod gdn;
pub(crate) mod hyper;
pub(crate) mod ple;
pub(crate) mod qsa;
