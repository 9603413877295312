pub mod inspect;
pub mod logits;
