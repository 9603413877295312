//! Truncated, corrupt and foreign files are refused with a typed error, never a panic.

mod common;

use common::*;
use rill_gguf::writer::GgufWriter;
use rill_gguf::{GgufError, GgufFile, MetaValue};

fn err(bytes: Vec<u8>) -> GgufError {
    match GgufFile::from_bytes(bytes) {
        Ok(_) => panic!("accepted a bad file"),
        Err(e) => e,
    }
}

/// A one-entry metadata file whose value is `value` (type id + payload), then `tail`.
fn kv_file(key: &str, type_id: u32, payload: &[u8]) -> Vec<u8> {
    let mut r = Raw::header(3, 0, 1);
    r.str(key).u32(type_id);
    r.0.extend_from_slice(payload);
    r.bytes()
}

#[test]
fn foreign_files_say_what_they_are() {
    assert!(matches!(err(vec![]), GgufError::Empty));
    assert!(matches!(err(b"GG".to_vec()), GgufError::NotGguf(_)));

    let mut st = 14u64.to_le_bytes().to_vec();
    st.extend_from_slice(br#"{"a":{"b":1}}  "#);
    let e = err(st);
    assert!(e.to_string().contains("safetensors"), "{e}");

    let e = err(b"hello, this is a README\nnot a model\n".to_vec());
    assert!(e.to_string().contains("text"), "{e}");

    let e = err(b"tjgg\x03\0\0\0 more bytes here".to_vec());
    assert!(e.to_string().contains("legacy"), "{e}");

    let e = err(vec![0xff, 0x00, 0x13, 0x37, 0, 0, 0, 0, 1]);
    assert!(matches!(e, GgufError::NotGguf(_)), "{e}");
}

#[test]
fn versions() {
    assert!(matches!(
        err(Raw::header(1, 0, 0).bytes()),
        GgufError::VersionOne
    ));
    assert!(matches!(
        err(Raw::header(4, 0, 0).bytes()),
        GgufError::UnsupportedVersion(4)
    ));
    let mut be = b"GGUF".to_vec();
    be.extend_from_slice(&3u32.to_be_bytes());
    be.extend_from_slice(&[0; 16]);
    let e = err(be);
    assert!(matches!(e, GgufError::BigEndian(3)), "{e}");
    assert!(e.to_string().contains("big-endian"));
    // Header fields missing.
    assert!(matches!(
        err(b"GGUF\x03\0\0\0".to_vec()),
        GgufError::Truncated { .. }
    ));
}

/// Cutting a valid file anywhere before the end of its last tensor's data is an error; cutting
/// only trailing padding is fine.
#[test]
fn truncation_at_every_offset() {
    for (version, alignment) in [(3, 32), (2, 64), (3, 1)] {
        let full = sample_writer(version, alignment).to_bytes().unwrap();
        let f = GgufFile::from_bytes(full.clone()).unwrap();
        let needed = f
            .tensors()
            .iter()
            .map(|t| f.tensor_file_range(t).unwrap().end as usize)
            .max()
            .unwrap();
        for len in 0..full.len() {
            let r = GgufFile::from_bytes(full[..len].to_vec());
            assert_eq!(r.is_ok(), len >= needed, "length {len} of {}", full.len());
        }
    }
}

#[test]
fn bogus_lengths_fail_without_allocating() {
    // Key length far past the end of the file.
    let mut r = Raw::header(3, 0, 1);
    r.u64(u64::MAX).u32(0).u64(0);
    assert!(matches!(err(r.bytes()), GgufError::Truncated { .. }));
    // String value length one past the end.
    let mut payload = 6u64.to_le_bytes().to_vec();
    payload.extend_from_slice(b"abcde");
    assert!(matches!(
        err(kv_file("k", 8, &payload)),
        GgufError::Truncated { .. }
    ));
    // Array counts that cannot fit in the file.
    for (elem, count) in [
        (10u32, u64::MAX),
        (0, 1 << 40),
        (8, 1 << 61),
        (9, u64::MAX / 2),
    ] {
        let mut payload = elem.to_le_bytes().to_vec();
        payload.extend_from_slice(&count.to_le_bytes());
        let e = err(kv_file("k", 9, &payload));
        assert!(matches!(e, GgufError::Corrupt { .. }), "{e}");
    }
    // Entry counts that cannot fit in the file.
    assert!(matches!(
        err(Raw::header(3, 0, u64::MAX).bytes()),
        GgufError::Corrupt { .. }
    ));
    assert!(matches!(
        err(Raw::header(3, 1 << 50, 0).bytes()),
        GgufError::Corrupt { .. }
    ));
    // A tensor count one larger than the infos present.
    let mut r = Raw::header(3, 2, 0);
    r.tensor("t", &[4], 0, 0).data(16);
    assert!(GgufFile::from_bytes(r.bytes()).is_err());
}

#[test]
fn corrupt_values() {
    let e = err(kv_file("k", 13, &[0; 8]));
    assert!(
        matches!(e, GgufError::UnknownValueType { type_id: 13, .. }),
        "{e}"
    );
    let mut arr = 99u32.to_le_bytes().to_vec();
    arr.extend_from_slice(&1u64.to_le_bytes());
    assert!(matches!(
        err(kv_file("k", 9, &arr)),
        GgufError::UnknownValueType { type_id: 99, .. }
    ));
    let e = err(kv_file("k", 7, &[2]));
    assert!(e.to_string().contains("bool"), "{e}");
    let mut bad_utf8 = 2u64.to_le_bytes().to_vec();
    bad_utf8.extend_from_slice(&[0xc3, 0x28]);
    let e = err(kv_file("k", 8, &bad_utf8));
    assert!(
        e.to_string().contains("UTF-8") && e.to_string().contains("`k`"),
        "{e}"
    );
    let mut r = Raw::header(3, 0, 1);
    r.u64(1).u8(0xff).u32(0).u8(0);
    assert!(err(r.bytes()).to_string().contains("UTF-8"));

    let mut w = GgufWriter::new();
    w.kv("dup", MetaValue::U8(1)).kv("dup", MetaValue::U8(2));
    assert!(matches!(err(w.to_bytes().unwrap()), GgufError::DuplicateKey(k) if k == "dup"));
}

#[test]
fn array_nesting_is_bounded() {
    let nest = |depth: usize| {
        let mut v = MetaValue::U8(1);
        for _ in 0..depth {
            v = MetaValue::Array(vec![v]);
        }
        let mut w = GgufWriter::new();
        w.kv("deep", v);
        w.to_bytes().unwrap()
    };
    assert!(GgufFile::from_bytes(nest(20)).is_ok());
    let e = err(nest(1000));
    assert!(e.to_string().contains("nested"), "{e}");
}

#[test]
fn alignment_must_be_a_power_of_two() {
    for v in [
        MetaValue::U32(0),
        MetaValue::U32(48),
        MetaValue::I32(-32),
        MetaValue::Str("32".into()),
    ] {
        let mut w = GgufWriter::new();
        w.kv("general.alignment", v.clone());
        assert!(
            matches!(err(w.to_bytes().unwrap()), GgufError::BadAlignment(_)),
            "{v:?}"
        );
    }
    // Other integer types are accepted.
    let mut w = GgufWriter::new();
    w.kv("general.alignment", MetaValue::U64(16));
    assert_eq!(
        GgufFile::from_bytes(w.to_bytes().unwrap())
            .unwrap()
            .alignment(),
        16
    );
    // An absurd alignment puts the data section past the end: tensors are out of bounds.
    let mut r = Raw::header(3, 1, 1);
    r.str("general.alignment")
        .u32(10)
        .u64(1 << 63)
        .tensor("t", &[4], 0, 0)
        .data(16);
    assert!(matches!(err(r.bytes()), GgufError::OutOfBounds { .. }));
}

#[test]
fn bad_tensor_infos() {
    let one = |shape: &[u64], ty: u32, offset: u64, data: usize| {
        let mut r = Raw::header(3, 1, 0);
        r.tensor("w", shape, ty, offset).data(data);
        GgufFile::from_bytes(r.bytes())
    };
    assert!(one(&[4], 0, 0, 16).is_ok());
    let e = one(&[1, 1, 1, 1, 1], 0, 0, 16).err().unwrap();
    assert!(matches!(e, GgufError::TooManyDims { n_dims: 5, .. }), "{e}");
    let e = one(&[1 << 32, 1 << 32], 0, 0, 16).err().unwrap();
    assert!(
        matches!(e, GgufError::BadShape { .. }) && e.to_string().contains("`w`"),
        "{e}"
    );
    assert!(matches!(
        one(&[u64::MAX], 24, 0, 16),
        Err(GgufError::BadShape { .. })
    ));
    // Q8_0 rows must be whole blocks of 32, even when the total is a multiple of 32.
    assert!(matches!(
        one(&[48], 8, 0, 64),
        Err(GgufError::BadShape { .. })
    ));
    assert!(matches!(
        one(&[16, 2], 8, 0, 64),
        Err(GgufError::BadShape { .. })
    ));
    assert!(one(&[32, 1], 8, 0, 34).is_ok());
    let e = one(&[4], 0, 4, 32).err().unwrap();
    assert!(matches!(e, GgufError::Misaligned { offset: 4, .. }), "{e}");
    let e = one(&[4], 0, 32, 40).err().unwrap();
    assert!(matches!(e, GgufError::OutOfBounds { .. }), "{e}");
    assert!(matches!(
        one(&[4], 0, 0, 15),
        Err(GgufError::OutOfBounds { .. })
    ));
    assert!(matches!(
        one(&[4], 0, u64::MAX - 31, 16),
        Err(GgufError::OutOfBounds { .. })
    ));
    // Unknown types cannot be sized; their offset must still be aligned and inside the file.
    assert!(one(&[4], 1234, 0, 16).is_ok());
    assert!(matches!(
        one(&[4], 1234, 64, 16),
        Err(GgufError::OutOfBounds { .. })
    ));
    assert!(matches!(
        one(&[4], 1234, 3, 16),
        Err(GgufError::Misaligned { .. })
    ));

    let mut r = Raw::header(3, 2, 0);
    r.tensor("a", &[8], 0, 0).tensor("b", &[8], 0, 0).data(64);
    assert!(matches!(err(r.bytes()), GgufError::Overlap(..)));
    let mut r = Raw::header(3, 2, 0);
    r.tensor("a", &[8], 0, 0).tensor("a", &[8], 0, 32).data(64);
    assert!(matches!(err(r.bytes()), GgufError::DuplicateTensor(n) if n == "a"));
}

#[test]
fn open_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.gguf");
    let mut bytes = tiny_bytes();
    bytes.truncate(70);
    std::fs::write(&path, bytes).unwrap();
    let e = GgufFile::open(&path).err().unwrap();
    assert!(e.to_string().contains("broken.gguf"), "{e}");
    assert!(matches!(e.root(), GgufError::OutOfBounds { .. }), "{e}");

    let empty = dir.path().join("empty.gguf");
    std::fs::write(&empty, b"").unwrap();
    assert!(matches!(
        GgufFile::open(&empty).err().unwrap().root(),
        GgufError::Empty
    ));

    let missing = dir.path().join("missing.gguf");
    let e = GgufFile::open(&missing).err().unwrap();
    assert!(matches!(e, GgufError::Io { .. }) && e.to_string().contains("missing.gguf"));
}
