//! Deterministic fuzzing: thousands of mutations of small valid files (bit flips, byte
//! overwrites, truncation, corrupted length and count fields, insertions and deletions) must
//! each parse or fail cleanly. Any panic fails the test.

mod common;
mod exercise;

use common::*;
use exercise::exercise;
use rill_gguf::GgufFile;
use rill_sampler::Rng;

fn mutate(rng: &mut Rng, mut b: Vec<u8>) -> Vec<u8> {
    let rounds = 1 + rng.below(3);
    for _ in 0..rounds {
        if b.is_empty() {
            break;
        }
        let len = b.len();
        let at = rng.below(len);
        match rng.below(7) {
            0 => b[at] ^= 1 << rng.below(8),
            1 => b[at] = [0, 0xff, 0x7f, 0x80, 1, 9, 13][rng.below(7)],
            2 => b.truncate(rng.below(len)),
            // Length and count fields are u64 (strings, arrays, counts, dims, offsets).
            3 => {
                let v: u64 = match rng.below(7) {
                    0 => u64::MAX,
                    1 => u64::MAX / 2 + 1,
                    2 => len as u64,
                    3 => len as u64 + 1,
                    4 => 1 << 32,
                    5 => 0,
                    _ => rng.next_u64() % 256,
                };
                let at = at.min(len.saturating_sub(8));
                let end = (at + 8).min(len);
                b[at..end].copy_from_slice(&v.to_le_bytes()[..end - at]);
            }
            // Type ids, n_dims and the version are u32.
            4 => {
                let v: u32 = [0, 5, 8, 9, 12, 13, 31, 40, u32::MAX][rng.below(9)];
                let at = at.min(len.saturating_sub(4));
                let end = (at + 4).min(len);
                b[at..end].copy_from_slice(&v.to_le_bytes()[..end - at]);
            }
            5 => {
                let n = 1 + rng.below(16);
                b.splice(at..at, (0..n).map(|_| rng.next_u64() as u8));
            }
            _ => {
                let end = (at + 1 + rng.below(16)).min(len);
                b.drain(at..end);
            }
        }
    }
    b
}

fn run(seed: u64, base: &[u8], iterations: usize) -> (usize, usize) {
    let mut rng = Rng::new(seed);
    let (mut ok, mut err) = (0, 0);
    for _ in 0..iterations {
        let input = mutate(&mut rng, base.to_vec());
        match GgufFile::from_bytes(input) {
            Ok(f) => {
                exercise(&f);
                ok += 1;
            }
            Err(e) => {
                // Every error renders a message.
                assert!(!e.to_string().is_empty());
                err += 1;
            }
        }
    }
    (ok, err)
}

#[test]
fn mutated_sample_files_never_panic() {
    let (ok, err) = run(1, &sample_bytes(), 4000);
    // Both outcomes must be common, or the mutations are not exploring anything.
    assert!(ok > 100 && err > 1000, "ok {ok}, err {err}");
    let v2 = sample_writer(2, 64).to_bytes().unwrap();
    run(2, &v2, 1500);
    run(3, &tiny_bytes(), 2000);
}

#[test]
fn mutated_split_sets_never_panic() {
    let mut rng = Rng::new(4);
    let parts: Vec<Vec<u8>> = (0..2u16)
        .map(|i| {
            let mut w = rill_gguf::writer::GgufWriter::new();
            w.kv("split.no", rill_gguf::MetaValue::U16(i))
                .kv("split.count", rill_gguf::MetaValue::U16(2))
                .kv("split.tensors.count", rill_gguf::MetaValue::I32(2))
                .tensor(format!("t{i}"), &[8], 0, bytes(32, i as u8));
            w.to_bytes().unwrap()
        })
        .collect();
    assert!(GgufFile::from_split_bytes(parts.clone()).is_ok());
    for _ in 0..1000 {
        let mut set = parts.clone();
        let which = rng.below(2);
        set[which] = mutate(&mut rng, set[which].clone());
        if let Ok(f) = GgufFile::from_split_bytes(set) {
            exercise(&f);
        }
    }
}
