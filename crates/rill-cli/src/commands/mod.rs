pub mod bench;
mod bench_spec;
pub mod chat;
pub mod inspect;
pub mod logits;
pub mod perplexity;
pub mod run;
pub mod serve;
pub mod tokenize;
