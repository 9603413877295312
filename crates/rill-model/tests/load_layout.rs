//! Matrices rewritten at load for the run's kernels ([`LoadLayout`]): the
//! model computes the bits it computes from the file's own layout, on the
//! same kernels, in prefill (the panels) and in decode.

mod common;

use std::sync::Arc;

use common::*;
use rill_dtype::DType;
use rill_gguf::GgufFile;
use rill_kernels::{Precision, Threads};
use rill_model::{GgufSource, LoadLayout, Model, Runner};

fn open(name: &str, layout: LoadLayout) -> Model {
    let path = fixtures_dir().join(name);
    let file = Arc::new(GgufFile::open(&path).unwrap());
    Model::from_source_with(Arc::new(GgufSource::new(file, name)), layout)
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn a_model_in_its_kernels_layout_gives_the_bits_of_the_files_layout() {
    let isa = kernels();
    let layout = LoadLayout::for_run(isa, Precision::Q8);
    let rewrites = layout.target(DType::Q6K, 1).is_some();
    let interleaves = layout.target(DType::Q4K, 8).is_some();
    let run = Runner::new(Threads::new(2), isa, Precision::Q8);
    // All Q6_K; Q4_K_M's LM head and some down projections.
    for name in ["qwen35moe_wide.q6_k.gguf", "qwen35moe_wide.q4_k_m.gguf"] {
        let file = open(name, LoadLayout::default());
        let laid = open(name, layout);
        assert_eq!(file.rewritten_bytes(), 0);
        assert_eq!(laid.rewritten_bytes() > 0, rewrites, "{name} on {isa}");
        // Q4_K_M: its Q4_K product matrices too (more than its Q6_K bytes).
        let q6k: u64 = GgufFile::open(&fixtures_dir().join(name))
            .unwrap()
            .tensors()
            .iter()
            .filter(|t| t.dtype().is_ok_and(|d| d == DType::Q6K))
            .map(|t| t.size_bytes().unwrap())
            .sum();
        if name.contains("q4_k_m") {
            assert_eq!(
                laid.rewritten_bytes() as u64 > q6k,
                interleaves,
                "{name} on {isa}"
            );
        }
        let vocab = file.config.n_vocab as u32;
        let ids: Vec<u32> = (0..40).map(|i| (i * 37 + 5) % vocab).collect();
        assert!(
            same_bits(
                &batch_logits(&file, &run, &ids),
                &batch_logits(&laid, &run, &ids)
            ),
            "{name}: prompt logits on {isa}"
        );
        assert_eq!(
            greedy(&file, &run, &ids, 8),
            greedy(&laid, &run, &ids, 8),
            "{name}: decode on {isa}"
        );
    }
}
