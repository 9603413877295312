//! Files written by the crate's writer read back exactly.

mod common;

use common::*;
use rill_dtype::DType;
use rill_gguf::writer::GgufWriter;
use rill_gguf::{GgufFile, MetaValue};

fn check_sample(f: &GgufFile, version: u32, alignment: u64) {
    assert_eq!(f.version(), version);
    assert_eq!(f.alignment(), alignment);
    assert_eq!(f.n_splits(), 1);
    let mut expected: Vec<(String, MetaValue)> = all_values()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    if alignment != 32 {
        expected.insert(
            0,
            ("general.alignment".into(), MetaValue::U32(alignment as u32)),
        );
    }
    let got: Vec<(String, MetaValue)> = f
        .metadata()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    assert_eq!(got, expected, "metadata in file order");
    for (k, v) in &expected {
        assert_eq!(f.get(k), Some(v), "{k}");
    }
    assert_eq!(f.get("missing"), None);

    let names: Vec<&str> = f.tensors().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["f32", "q8_0", "q4_k", "empty"]);
    let t = f.tensor("f32").unwrap();
    assert_eq!(
        (t.shape.as_slice(), t.dtype().unwrap(), t.n_elements()),
        (&[3, 2][..], DType::F32, 6)
    );
    assert_eq!(f.tensor_data(t), bytes(24, 1));
    let t = f.tensor("q8_0").unwrap();
    assert_eq!(t.dtype().unwrap(), DType::Q8_0);
    assert_eq!(f.tensor_data(t), bytes(68, 2));
    let t = f.tensor("q4_k").unwrap();
    assert_eq!(
        (t.shape.as_slice(), t.size_bytes().unwrap()),
        (&[256, 1, 1, 1][..], 144)
    );
    assert_eq!(f.tensor_data(t), bytes(144, 3));
    let t = f.tensor("empty").unwrap();
    assert_eq!((t.n_elements(), f.tensor_data(t).len()), (0, 0));
    for t in f.tensors() {
        assert_eq!(t.offset % alignment, 0);
        assert_eq!(t.split, 0);
        assert_eq!(
            f.try_tensor_data(t).unwrap().len() as u64,
            t.size_bytes().unwrap()
        );
    }
    assert!(f.tensor("nope").is_none());
}

#[test]
fn every_value_type_round_trips_v2_and_v3() {
    for version in [2, 3] {
        let f = GgufFile::from_bytes(sample_writer(version, 32).to_bytes().unwrap()).unwrap();
        check_sample(&f, version, 32);
    }
}

#[test]
fn other_alignments() {
    for alignment in [1, 2, 8, 64, 256, 4096] {
        let bytes = sample_writer(3, alignment).to_bytes().unwrap();
        let f =
            GgufFile::from_bytes(bytes).unwrap_or_else(|e| panic!("alignment {alignment}: {e}"));
        check_sample(&f, 3, alignment);
    }
}

#[test]
fn open_from_disk_is_zero_copy_mapping() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.gguf");
    sample_writer(3, 64).write_to(&path).unwrap();
    let f = GgufFile::open(&path).unwrap();
    check_sample(&f, 3, 64);
    assert_eq!(f.paths().collect::<Vec<_>>(), [path.as_path()]);
    // Two calls give the same memory: the data is not copied.
    let t = f.tensor("q4_k").unwrap();
    assert_eq!(f.tensor_data(t).as_ptr(), f.tensor_data(t).as_ptr());
    assert_eq!(
        f.tensor_data(t).as_ptr() as usize % 64,
        0,
        "mapping is page aligned"
    );
}

#[test]
fn metadata_only_file_without_data_section() {
    // No tensors: the file may end right after the header, before the aligned data start.
    let mut w = GgufWriter::new();
    w.kv("a", MetaValue::U8(1));
    let mut bytes = w.to_bytes().unwrap();
    bytes.truncate(24 + 8 + 1 + 4 + 1);
    let f = GgufFile::from_bytes(bytes).unwrap();
    assert_eq!(f.get("a"), Some(&MetaValue::U8(1)));
    assert!(f.tensors().is_empty());
}

#[test]
fn zero_dim_tensor_is_a_scalar() {
    let mut w = GgufWriter::new();
    w.tensor("s", &[], 0, vec![1, 2, 3, 4]);
    let f = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    let t = f.tensor("s").unwrap();
    assert_eq!((t.n_elements(), f.tensor_data(t)), (1, &[1u8, 2, 3, 4][..]));
}

#[test]
fn unknown_tensor_type_parses_but_has_no_data() {
    let mut w = GgufWriter::new();
    w.tensor("known", &[2], 0, bytes(8, 0));
    w.tensor("odd", &[16], 31, bytes(40, 0));
    let f = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    let t = f.tensor("odd").unwrap();
    assert_eq!(t.ggml_type, 31);
    let e = t.dtype().unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("odd") && msg.contains("31"), "{msg}");
    assert!(f.tensor_data(t).is_empty());
    assert!(f.try_tensor_data(t).is_err());
    assert_eq!(f.tensor_data(f.tensor("known").unwrap()), bytes(8, 0));
}

#[test]
fn foreign_tensor_info_is_refused() {
    let f = GgufFile::from_bytes(sample_bytes()).unwrap();
    let mut t = f.tensor("f32").unwrap().clone();
    t.offset += 32;
    assert!(matches!(
        f.try_tensor_data(&t),
        Err(rill_gguf::GgufError::ForeignTensor(_))
    ));
    t.name = "other".into();
    assert!(f.try_tensor_data(&t).is_err());
}

#[test]
fn writer_refuses_mixed_arrays() {
    let mut w = GgufWriter::new();
    w.kv(
        "x",
        MetaValue::Array(vec![MetaValue::U8(1), MetaValue::I8(1)]),
    );
    assert!(w.to_bytes().is_err());
}
