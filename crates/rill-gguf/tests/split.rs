//! Split models: `name-0000i-of-0000n.gguf` files opened as one.

mod common;

use common::bytes;
use rill_gguf::writer::GgufWriter;
use rill_gguf::{GgufError, GgufFile, MetaValue};
use std::path::{Path, PathBuf};

/// Split `i` of `n` holding tensors `blk.i.0` and `blk.i.1`; the first carries the metadata.
fn split_writer(i: u16, n: u16, total_tensors: i32) -> GgufWriter {
    let mut w = GgufWriter::new();
    if i == 0 {
        w.kv("general.architecture", MetaValue::Str("rilltest".into()));
        w.kv("model.layers", MetaValue::U32(n as u32));
    }
    w.kv("split.no", MetaValue::U16(i))
        .kv("split.count", MetaValue::U16(n))
        .kv("split.tensors.count", MetaValue::I32(total_tensors));
    for j in 0..2u8 {
        let seed = (i as u8) * 16 + j;
        w.tensor(
            format!("blk.{i}.{j}"),
            &[4 + j as u64],
            0,
            bytes(4 * (4 + j as usize), seed),
        );
    }
    w
}

fn write_splits(dir: &Path, n: u16) -> Vec<PathBuf> {
    (0..n)
        .map(|i| {
            let p = dir.join(format!("model-{:05}-of-{:05}.gguf", i + 1, n));
            split_writer(i, n, 2 * n as i32).write_to(&p).unwrap();
            p
        })
        .collect()
}

fn check_merged(f: &GgufFile, n: u16) {
    assert_eq!(f.n_splits(), n as usize);
    assert_eq!(
        f.get("model.layers").and_then(MetaValue::as_u64),
        Some(n as u64)
    );
    assert_eq!(f.tensors().len(), 2 * n as usize);
    for i in 0..n {
        for j in 0..2u8 {
            let t = f.tensor(&format!("blk.{i}.{j}")).unwrap();
            assert_eq!(t.split, i as usize);
            let seed = (i as u8) * 16 + j;
            assert_eq!(f.tensor_data(t), bytes(4 * (4 + j as usize), seed));
        }
    }
    let names: Vec<_> = f.tensors().iter().map(|t| t.name.clone()).collect();
    assert_eq!(names[0], "blk.0.0");
    assert_eq!(names.last().unwrap(), &format!("blk.{}.1", n - 1));
}

#[test]
fn opening_any_split_opens_them_all() {
    let dir = tempfile::tempdir().unwrap();
    let paths = write_splits(dir.path(), 3);
    for p in &paths {
        let f = GgufFile::open(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        check_merged(&f, 3);
        assert_eq!(
            f.paths().collect::<Vec<_>>(),
            paths.iter().map(|p| p.as_path()).collect::<Vec<_>>()
        );
    }
    // Two splits too.
    let dir2 = tempfile::tempdir().unwrap();
    let paths2 = write_splits(dir2.path(), 2);
    check_merged(&GgufFile::open(&paths2[1]).unwrap(), 2);
}

#[test]
fn open_single_reads_one_split() {
    let dir = tempfile::tempdir().unwrap();
    let paths = write_splits(dir.path(), 3);
    let f = GgufFile::open_single(&paths[1]).unwrap();
    assert_eq!(f.split_position(), Some((1, 3)));
    assert_eq!(f.tensors().len(), 2);
    assert!(f.get("model.layers").is_none());
    let f = GgufFile::from_bytes(std::fs::read(&paths[0]).unwrap()).unwrap();
    assert_eq!(f.split_position(), Some((0, 3)));
}

#[test]
fn missing_split_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let paths = write_splits(dir.path(), 3);
    std::fs::remove_file(&paths[2]).unwrap();
    let e = GgufFile::open(&paths[0]).err().unwrap();
    assert!(
        matches!(
            e,
            GgufError::MissingSplit {
                no: 3,
                count: 3,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("model-00003-of-00003.gguf"), "{e}");
}

#[test]
fn inconsistent_splits_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let paths = write_splits(dir.path(), 3);
    // A sibling from another split set.
    split_writer(1, 4, 6).write_to(&paths[1]).unwrap();
    let e = GgufFile::open(&paths[0]).err().unwrap();
    assert!(matches!(e.root(), GgufError::Split(_)), "{e}");
    assert!(e.to_string().contains("00002-of-00003"), "{e}");

    // Wrong total tensor count.
    let paths = write_splits(dir.path(), 3);
    split_writer(0, 3, 7).write_to(&paths[0]).unwrap();
    assert!(matches!(
        GgufFile::open(&paths[2]),
        Err(GgufError::Split(_))
    ));

    // The same tensor name in two splits.
    let paths = write_splits(dir.path(), 3);
    let mut w = split_writer(2, 3, 6);
    w.tensor("blk.0.0", &[4], 0, bytes(16, 0));
    w.write_to(&paths[2]).unwrap();
    let e = GgufFile::open(&paths[0]).err().unwrap();
    assert!(
        matches!(e.root(), GgufError::DuplicateTensor(n) if n == "blk.0.0"),
        "{e}"
    );

    // A corrupt sibling is reported with its own name.
    let paths = write_splits(dir.path(), 3);
    std::fs::write(&paths[1], b"GGUF\x03\0\0\0").unwrap();
    let e = GgufFile::open(&paths[0]).err().unwrap();
    assert!(e.to_string().contains("model-00002-of-00003.gguf"), "{e}");
    assert!(matches!(e.root(), GgufError::Truncated { .. }), "{e}");
}

#[test]
fn split_names_must_match_metadata() {
    let dir = tempfile::tempdir().unwrap();
    // Metadata says split 1 of 3 but the name cannot be used to find siblings.
    let p = dir.path().join("renamed.gguf");
    split_writer(0, 3, 6).write_to(&p).unwrap();
    let e = GgufFile::open(&p).err().unwrap();
    assert!(
        matches!(e, GgufError::Split(_)) && e.to_string().contains("pattern"),
        "{e}"
    );
    // Name says split 2, metadata says split 1.
    let p = dir.path().join("m-00002-of-00003.gguf");
    split_writer(0, 3, 6).write_to(&p).unwrap();
    assert!(matches!(GgufFile::open(&p), Err(GgufError::Split(_))));
    // Bad split keys.
    let mut w = GgufWriter::new();
    w.kv("split.count", MetaValue::U16(3))
        .kv("split.no", MetaValue::U16(3));
    let p = dir.path().join("m-00004-of-00003.gguf");
    w.write_to(&p).unwrap();
    assert!(matches!(
        GgufFile::open(&p).err().unwrap().root(),
        GgufError::Split(_)
    ));
    // A name that looks split but no split keys: an ordinary file.
    let p = dir.path().join("plain-00001-of-00002.gguf");
    GgufWriter::new().write_to(&p).unwrap();
    assert_eq!(GgufFile::open(&p).unwrap().n_splits(), 1);
}

#[test]
fn in_memory_split_sets() {
    let parts: Vec<Vec<u8>> = (0..3)
        .map(|i| split_writer(i, 3, 6).to_bytes().unwrap())
        .collect();
    check_merged(&GgufFile::from_split_bytes(parts.clone()).unwrap(), 3);
    let mut swapped = parts.clone();
    swapped.swap(0, 1);
    assert!(matches!(
        GgufFile::from_split_bytes(swapped),
        Err(GgufError::Split(_))
    ));
    assert!(GgufFile::from_split_bytes(parts[..2].to_vec()).is_err());
    assert!(GgufFile::from_split_bytes(vec![]).is_err());
}
