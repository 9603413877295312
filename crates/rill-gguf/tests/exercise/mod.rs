//! What the fuzz test and the fuzz target do with a file that parsed
//! (the target includes this file by path).

use rill_gguf::GgufFile;

/// Use everything a parsed file offers; handed-out data must match the declared size.
pub fn exercise(f: &GgufFile) {
    for (k, v) in f.metadata() {
        assert!(std::ptr::eq(f.get(k).unwrap(), v));
        let _ = (v.as_u64(), v.as_i64(), v.as_f64(), v.as_str(), v.as_array());
    }
    for t in f.tensors() {
        let _ = (t.dtype(), t.n_elements());
        match t.size_bytes() {
            Ok(size) => {
                assert_eq!(f.tensor_data(t).len() as u64, size);
                assert_eq!(f.try_tensor_data(t).unwrap().len() as u64, size);
            }
            Err(_) => assert!(f.try_tensor_data(t).is_err()),
        }
        assert!(std::ptr::eq(f.tensor(&t.name).unwrap(), t));
    }
}
