//! `--cache-dir`: the prompt cache survives a restart; a damaged file or
//! one of another model is ignored, not trusted.

mod common;

use common::*;
use rill_engine::{Engine, EngineConfig};
use rill_kernels::Precision;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;

fn engine(model: &str, dir: Option<&Path>) -> Engine {
    engine_with_cache(model, dir, EngineConfig::default().cache_bytes)
}

/// An engine whose prompt cache holds at most `cache_bytes` in memory.
fn engine_with_cache(model: &str, dir: Option<&Path>, cache_bytes: usize) -> Engine {
    let (m, t) = fixture(model);
    Engine::start(
        m,
        t,
        EngineConfig {
            threads: 2,
            precision: Precision::Exact,
            prefill_chunk: 64,
            cache_dir: dir.map(Path::to_path_buf),
            cache_bytes,
            ..Default::default()
        },
    )
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "rillcache"))
        .collect();
    v.sort();
    v
}

#[test]
fn the_second_turn_after_a_restart_hits_the_files_and_a_bad_file_is_ignored() {
    let dir = std::env::temp_dir().join(format!("rill-cache-dir-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let first = prompt_below(5, 150, 500);
    let mut second = first.clone();
    second.extend(prompt_below(6, 40, 500));
    let model = "qwen35moe.f32.gguf";
    let want = collect(
        engine(model, None)
            .submit(greedy(second.clone(), 6))
            .unwrap(),
    )
    .0;

    let a = engine(model, Some(&dir));
    collect(a.submit(greedy(first.clone(), 6)).unwrap());
    a.shutdown();
    assert!(!files(&dir).is_empty(), "written at shutdown");

    let b = engine(model, Some(&dir));
    let (ids, done) = collect(b.submit(greedy(second.clone(), 6)).unwrap());
    assert_eq!(ids, want, "the same tokens as without the restart");
    assert_eq!(done.cached_tokens, first.len(), "resumed from the file");
    assert_eq!(b.metrics().cache_disk_hits_total.load(Relaxed), 1);
    assert!(b
        .metrics()
        .render()
        .contains("rill_prompt_cache_disk_hits_total 1"));
    b.shutdown();

    // Another model's engine does not take them.
    let other = engine("qwen35.f32.gguf", Some(&dir));
    let (_, done) = collect(other.submit(greedy(second.clone(), 2)).unwrap());
    assert_eq!(done.cached_tokens, 0);
    drop(other);

    // Damage every file: ignored with a warning, the request runs cold.
    for f in files(&dir) {
        let mut b = std::fs::read(&f).unwrap();
        let mid = b.len() / 2;
        b[mid] ^= 0x40;
        std::fs::write(&f, b).unwrap();
    }
    let c = engine(model, Some(&dir));
    let (ids, done) = collect(c.submit(greedy(second, 6)).unwrap());
    assert_eq!((ids, done.cached_tokens), (want, 0));
    assert_eq!(c.metrics().cache_disk_hits_total.load(Relaxed), 0);
    drop(c);
    let _ = std::fs::remove_dir_all(&dir);
}

/// An entry the memory cache evicts is written to the folder at once, and
/// its conversation resumes from the file in the same run.
#[test]
fn an_entry_evicted_from_memory_is_written_and_resumed_from_its_file() {
    let dir = std::env::temp_dir().join(format!("rill-cache-evict-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let model = "qwen35moe.f32.gguf";
    let (a, b) = (prompt_below(11, 150, 500), prompt_below(12, 150, 500));
    let mut a_next = a.clone();
    a_next.extend(prompt_below(13, 30, 500));
    let want = collect(
        engine(model, None)
            .submit(greedy(a_next.clone(), 6))
            .unwrap(),
    )
    .0;
    // What one conversation's entries take: the budget holds one, not two.
    let probe = engine(model, None);
    collect(probe.submit(greedy(a.clone(), 6)).unwrap());
    let one = probe.metrics().cache_bytes.load(Relaxed) as usize;
    drop(probe);
    assert!(one > 0);

    let e = engine_with_cache(model, Some(&dir), one + one / 2);
    collect(e.submit(greedy(a.clone(), 6)).unwrap());
    assert!(files(&dir).is_empty(), "nothing evicted yet");
    // The second conversation pushes the first out of memory, onto disk.
    collect(e.submit(greedy(b, 6)).unwrap());
    // (written at the start of the engine's next step)
    let (ids, done) = collect(e.submit(greedy(a_next, 6)).unwrap());
    assert!(!files(&dir).is_empty(), "the evicted entry is on disk");
    assert_eq!(ids, want, "the same tokens as uncached");
    assert!(done.cached_tokens > 0, "resumed from the file");
    assert_eq!(e.metrics().cache_disk_hits_total.load(Relaxed), 1);
    drop(e);
    let _ = std::fs::remove_dir_all(&dir);
}
