pub mod bench;
pub mod chat;
pub mod inspect;
pub mod kernels;
pub mod logits;
pub mod run;
pub mod serve;
pub mod tokenize;
