//! `cargo fuzz run parse` (from crates/rill-gguf): any input must parse or fail cleanly, and
//! whatever parses must hand out exactly the tensor bytes it declares.
//! Seed the corpus with ../tests/fixtures/*.gguf for a head start.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rill_gguf::GgufFile;

fuzz_target!(|data: &[u8]| {
    let Ok(f) = GgufFile::from_bytes(data.to_vec()) else {
        return;
    };
    for (k, v) in f.metadata() {
        assert!(std::ptr::eq(f.get(k).unwrap(), v));
        let _ = (v.as_u64(), v.as_i64(), v.as_f64(), v.as_str(), v.as_array());
    }
    for t in f.tensors() {
        let _ = (t.dtype(), t.n_elements());
        match t.size_bytes() {
            Ok(size) => assert_eq!(f.tensor_data(t).len() as u64, size),
            Err(_) => assert!(f.try_tensor_data(t).is_err()),
        }
    }
});
