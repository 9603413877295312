//! Loading a model for a command: open, bind, and bring the weights into
//! memory with a progress bar (the mapping is lazy; touching every page up
//! front moves the disk reads out of the first forward pass).

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use rill_gguf::GgufFile;
use rill_kernels::Precision;
use rill_model::Model;
use std::path::Path;
use std::sync::Arc;

pub fn open_model(path: &Path, precision: Precision) -> Result<Model> {
    let file = GgufFile::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let file = Arc::new(file);
    prefault(&file);
    let mut model =
        Model::from_gguf(file).with_context(|| format!("cannot load model {}", path.display()))?;
    if precision == Precision::Q8 && !rill_kernels::q8::has_integer_kernels() {
        eprintln!(
            "warning: no integer kernels for this CPU ({} path; they need AVX2 on x86-64 or the \
             dot-product extension on aarch64): --precision q8 runs the scalar reference and is \
             slower than exact",
            rill_kernels::simd::Isa::best().name()
        );
    }
    model.set_precision(precision);
    Ok(model)
}

fn prefault(file: &GgufFile) {
    let total: u64 = file
        .tensors()
        .iter()
        .filter_map(|t| file.try_tensor_data(t).ok().map(|d| d.len() as u64))
        .sum();
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(
            "loading {bar:40} {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut sink = 0u8;
    for t in file.tensors() {
        let Ok(data) = file.try_tensor_data(t) else {
            continue;
        };
        for chunk in data.chunks(1 << 20) {
            for page in chunk.iter().step_by(4096) {
                // SAFETY: reading a valid reference; volatile keeps the read.
                sink ^= unsafe { std::ptr::read_volatile(page) };
            }
            bar.inc(chunk.len() as u64);
        }
    }
    std::hint::black_box(sink);
    bar.finish_and_clear();
}
