//! The prompt cache shares its KV: snapshots and the sequences resumed
//! from them hold the same reference-counted pages, copied on write where
//! they diverge. A cached conversation of N turns holds its KV once; a
//! sequence resumed from a shared snapshot and then diverging gives the
//! bits of an uncached run (f32, f16 and q8_0 KV); evicting every snapshot
//! under a small budget frees no page a live sequence still reads.

mod common;

use rill_engine::prefix_cache::PrefixCache;
use rill_kernels::Isa;
use rill_model::{KvConfig, KvType, Model, Rows, Runner, SequenceState, SharedPages};

const PAGE: usize = rill_kernels::kv::KV_PAGE_POSITIONS;

fn model() -> std::sync::Arc<Model> {
    common::fixture("qwen35moe.f32.gguf").0
}

fn runner() -> Runner {
    Runner::exact(Isa::best(), 2)
}

fn tokens(seed: u32, n: usize, model: &Model) -> Vec<u32> {
    common::prompt_below(seed, n, model.config.n_vocab as u32 - 8)
}

fn kv(t: KvType) -> KvConfig {
    KvConfig {
        rotate: false,
        ..KvConfig::uniform(t)
    }
}

/// `state` fed `ids` in one step: the last row's logits.
fn feed(model: &Model, run: &Runner, state: &mut SequenceState, ids: &[u32]) -> Vec<f32> {
    model.forward(run, state, ids, Rows::Last).unwrap()
}

#[test]
fn a_cached_conversation_of_n_turns_holds_its_kv_once() {
    let (model, run) = (model(), runner());
    let turns = 6;
    let turn = PAGE + 37; // snapshots fall inside pages, not at their ends
    let mut live = SequenceState::with_kv(&model, turns * turn, kv(KvType::F16)).unwrap();
    let mut cache = PrefixCache::new(usize::MAX);
    let mut fed = Vec::new();
    // The KV that whole clones (before: one per snapshot) would hold.
    let mut kv_copies = 0;
    for t in 0..turns {
        let ids = tokens(t as u32, turn, &model);
        feed(&model, &run, &mut live, &ids);
        fed.extend(ids);
        cache.insert(&fed, &live, usize::MAX);
        kv_copies += live.bytes() - live.unpaged_bytes();
    }
    assert_eq!(cache.len(), turns);
    let kv_once = live.bytes() - live.unpaged_bytes();
    let (mut pages, mut page_bytes) = (0, 0);
    live.each_kv_page(|_, b| {
        pages += 1;
        page_bytes = b;
    });
    let sides = pages / live.position().div_ceil(PAGE);
    // The cache's KV: the conversation's once, plus per snapshot at most
    // the one page per layer side it shared with the live sequence before
    // that sequence wrote on into it (copied on write then).
    let cache_kv = cache.bytes() - turns * live.unpaged_bytes() - fed.len() * 4;
    let bound = kv_once + turns * sides * page_bytes;
    eprintln!(
        "{turns} turns of {turn} tokens: the cache's KV {} KiB in {} pages (bound {} KiB, the \
         conversation's {} KiB); one whole clone per snapshot would hold {} KiB of KV",
        cache_kv / 1024,
        cache.pages(),
        bound / 1024,
        kv_once / 1024,
        kv_copies / 1024,
    );
    assert!(cache_kv <= bound, "{cache_kv} > {bound}");
    assert!(cache_kv * 2 < kv_copies, "{cache_kv} vs {kv_copies}");
    // The live sequence shares all its full pages with the cache.
    assert!(cache.extra_bytes(&live) < live.bytes() / 2);
}

#[test]
fn a_resumed_snapshot_diverges_with_the_bits_of_an_uncached_run() {
    let (model, run) = (model(), runner());
    let prefix = tokens(1, PAGE + 100, &model);
    let (a, b) = (tokens(2, 90, &model), tokens(3, PAGE, &model));
    for t in [KvType::F32, KvType::F16, KvType::Q8_0] {
        let cap = prefix.len() + b.len() + 8;
        let mut first = SequenceState::with_kv(&model, cap, kv(t)).unwrap();
        feed(&model, &run, &mut first, &prefix);
        let snapshot = first.clone();
        // The first sequence goes on into the shared last page ...
        let first_logits = feed(&model, &run, &mut first, &a);
        // ... and a second resumes from the snapshot and writes other rows there.
        let mut second = snapshot.with_capacity(cap);
        let mut second_logits = feed(&model, &run, &mut second, &b);
        second_logits.extend(feed(&model, &run, &mut second, &a[..3]));
        // Uncached runs of the same tokens.
        let mut fresh = SequenceState::with_kv(&model, cap, kv(t)).unwrap();
        feed(&model, &run, &mut fresh, &prefix);
        let want_first = feed(&model, &run, &mut fresh, &a);
        let mut fresh2 = SequenceState::with_kv(&model, cap, kv(t)).unwrap();
        feed(&model, &run, &mut fresh2, &prefix);
        let mut want_second = feed(&model, &run, &mut fresh2, &b);
        want_second.extend(feed(&model, &run, &mut fresh2, &a[..3]));
        assert_eq!(first_logits, want_first, "{t}: the first sequence");
        assert_eq!(second_logits, want_second, "{t}: the resumed one");
        // The snapshot itself still holds the prefix's rows.
        let mut again = snapshot.with_capacity(cap);
        assert_eq!(
            feed(&model, &run, &mut again, &a),
            want_first,
            "{t}: the snapshot"
        );
        // The first full page is shared by all four; the diverged last pages are not.
        let mut shared = SharedPages::new();
        for s in [&first, &second, &snapshot, &again] {
            shared.add(s);
        }
        let mut one = SharedPages::new();
        one.add(&first);
        assert!(shared.pages() < 4 * one.pages(), "{t}");
    }
}

#[test]
fn eviction_frees_no_page_a_live_sequence_reads() {
    let (model, run) = (model(), runner());
    let prompt = tokens(4, PAGE + 50, &model);
    let more = tokens(5, 40, &model);
    for t in [KvType::F32, KvType::Q8_0] {
        let cap = prompt.len() + more.len() + 8;
        let mut st = SequenceState::with_kv(&model, cap, kv(t)).unwrap();
        feed(&model, &run, &mut st, &prompt[..PAGE + 10]);
        let budget = 3 * st.bytes();
        let mut cache = PrefixCache::new(budget);
        cache.insert(&prompt[..PAGE + 10], &st, usize::MAX);
        let hit = cache.lookup(&prompt, cap).expect("a hit");
        assert_eq!(hit.len, PAGE + 10);
        let mut live = hit.state;
        drop(st);
        // Other snapshots push the one the live sequence came from out.
        for seed in 10..16 {
            let other = tokens(seed, 120, &model);
            let mut s = SequenceState::with_kv(&model, cap, kv(t)).unwrap();
            feed(&model, &run, &mut s, &other);
            cache.insert(&other, &s, usize::MAX);
            assert!(cache.bytes() <= budget);
        }
        assert!(cache.lookup(&prompt, cap).is_none(), "{t}: evicted");
        cache.shrink_to(0);
        assert_eq!((cache.bytes(), cache.pages(), cache.len()), (0, 0, 0));
        let mut got = feed(&model, &run, &mut live, &prompt[PAGE + 10..]);
        got.extend(feed(&model, &run, &mut live, &more));
        let mut fresh = SequenceState::with_kv(&model, cap, kv(t)).unwrap();
        feed(&model, &run, &mut fresh, &prompt[..PAGE + 10]);
        let mut want = feed(&model, &run, &mut fresh, &prompt[PAGE + 10..]);
        want.extend(feed(&model, &run, &mut fresh, &more));
        assert_eq!(got, want, "{t}");
    }
}
