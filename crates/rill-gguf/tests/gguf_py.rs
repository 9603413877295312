//! Cross-check against the reference implementation: files written by gguf-py's GGUFWriter
//! (tests/fixtures/gen_fixtures.py) read back exactly as written, and tensor placement agrees
//! with what gguf-py's GGUFReader reports (the *.tensors.txt files).

use rill_gguf::{GgufFile, MetaValue};
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// Compare every tensor with gguf-py's reader: order, split, type, dims, absolute offset,
/// size and bytes.
fn check_tensors(f: &GgufFile, listing: &str) {
    let text = std::fs::read_to_string(fixture(listing)).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(f.tensors().len(), lines.len());
    for (t, line) in f.tensors().iter().zip(lines) {
        let fields: Vec<&str> = line.split(' ').collect();
        let [name, split, ty, dims, offset, n_bytes, data] = fields[..] else {
            panic!("bad line {line}")
        };
        assert_eq!(t.name, name);
        assert_eq!(t.split, split.parse::<usize>().unwrap(), "{name}");
        assert_eq!(t.ggml_type, ty.parse::<u32>().unwrap(), "{name}");
        let dims: Vec<u64> = dims.split(',').map(|d| d.parse().unwrap()).collect();
        assert_eq!(t.shape, dims, "{name}");
        let range = f.tensor_file_range(t).unwrap();
        assert_eq!(range.start, offset.parse::<u64>().unwrap(), "{name}");
        assert_eq!(
            range.end - range.start,
            n_bytes.parse::<u64>().unwrap(),
            "{name}"
        );
        assert_eq!(f.tensor_data(t), hex(data), "{name}");
    }
}

#[test]
fn reads_gguf_py_file() {
    use MetaValue::*;
    let f = GgufFile::open(&fixture("tiny.gguf")).unwrap();
    assert_eq!(f.version(), 3);
    assert_eq!(f.alignment(), 64);
    // gguf-py infers i32 / f32 / bool / string element types from Python values.
    let i32s = |v: &[i32]| Array(v.iter().map(|&x| I32(x)).collect());
    let f32s = |v: &[f32]| Array(v.iter().map(|&x| F32(x)).collect());
    let strs = |v: &[&str]| Array(v.iter().map(|&x| Str(x.into())).collect());
    let expected: Vec<(&str, MetaValue)> = vec![
        ("general.architecture", Str("rilltest".into())),
        ("general.alignment", U32(64)),
        ("t.u8", U8(200)),
        ("t.i8", I8(-100)),
        ("t.u16", U16(60000)),
        ("t.i16", I16(-30000)),
        ("t.u32", U32(4_000_000_000)),
        ("t.i32", I32(-2_000_000_000)),
        ("t.u64", U64(18_000_000_000_000_000_000)),
        ("t.i64", I64(-9_000_000_000_000_000_000)),
        ("t.f32", F32(1.5)),
        ("t.f64", F64(-2.25e300)),
        ("t.true", Bool(true)),
        ("t.false", Bool(false)),
        ("t.str", Str("héllo, wörld ✓".into())),
        ("t.arr.u8", Array(vec![U8(1), U8(2), U8(255)])),
        ("t.arr.i16", Array(vec![I16(-1), I16(2), I16(-3)])),
        ("t.arr.u64", Array(vec![U64(0), U64(u64::MAX)])),
        ("t.arr.f64", Array(vec![F64(0.5), F64(-1.0)])),
        ("t.arr.i32", i32s(&[7, -8, 9])),
        ("t.arr.f32", f32s(&[0.25, 3.0])),
        (
            "t.arr.bool",
            Array(vec![Bool(true), Bool(false), Bool(true)]),
        ),
        ("t.arr.str", strs(&["a", "", "ünïcode"])),
        ("t.arr.nested", Array(vec![i32s(&[1, 2]), i32s(&[3])])),
        (
            "t.arr.nested.str",
            Array(vec![strs(&["x"]), strs(&["y", "z"])]),
        ),
        (
            "t.arr.nested3",
            Array(vec![
                Array(vec![f32s(&[1.5])]),
                Array(vec![f32s(&[2.5]), f32s(&[3.5, 4.5])]),
            ]),
        ),
    ];
    let got: Vec<(&str, MetaValue)> = f.metadata().map(|(k, v)| (k, v.clone())).collect();
    assert_eq!(got, expected);

    check_tensors(&f, "tiny.tensors.txt");
    // Decode a couple of values to be sure of byte order and shape order.
    let t = f.tensor("f32").unwrap();
    let vals: Vec<f32> = f
        .tensor_data(t)
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(vals, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    assert_eq!(t.shape, [3, 2], "numpy (2, 3) is ggml [3, 2]");
    assert_eq!(
        f.tensor("q6_k.3d").unwrap().dtype().unwrap(),
        rill_dtype::DType::Q6K
    );
}

#[test]
fn reads_gguf_py_split_model() {
    for first in ["split-00001-of-00003.gguf", "split-00003-of-00003.gguf"] {
        let f = GgufFile::open(&fixture(first)).unwrap();
        assert_eq!(f.n_splits(), 3);
        assert_eq!(f.get("t.layers"), Some(&MetaValue::U32(5)));
        assert_eq!(
            f.get("t.name").and_then(MetaValue::as_str),
            Some("split model")
        );
        assert_eq!(
            f.get("split.tensors.count").and_then(MetaValue::as_u64),
            Some(5)
        );
        check_tensors(&f, "split.tensors.txt");
        let t = f.tensor("blk.4.w").unwrap();
        let first = f32::from_le_bytes(f.tensor_data(t)[..4].try_into().unwrap());
        assert_eq!(first, 40.0);
    }
}
