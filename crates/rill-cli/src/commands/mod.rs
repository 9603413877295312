pub mod bench;
pub mod inspect;
pub mod logits;
pub mod run;
pub mod tokenize;
