//! `cargo fuzz run parse` (from crates/rill-gguf): any input must parse or fail cleanly, and
//! whatever parses must hand out exactly the tensor bytes it declares (`tests/exercise`, the
//! same checks as `tests/fuzz.rs`).
//! Seed the corpus with ../tests/fixtures/*.gguf for a head start.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/exercise/mod.rs"]
mod exercise;
use rill_gguf::GgufFile;

fuzz_target!(|data: &[u8]| {
    let Ok(f) = GgufFile::from_bytes(data.to_vec()) else {
        return;
    };
    exercise::exercise(&f);
});
