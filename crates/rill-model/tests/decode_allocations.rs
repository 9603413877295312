//! A steady-state decode step makes no heap allocation: once a step of the
//! same shape has run, decoding one token per sequence (alone, or several
//! sequences in one batch) calls neither `alloc` nor `realloc`.
//!
//! The counting allocator below sees the whole process, the test's thread
//! pool included (its workers run parts of every step), so this binary holds
//! a single test: nothing else runs while it counts.

mod common;

use common::*;
use rill_kernels::Precision;
use rill_model::{BatchItem, Model, MtpItem, Outputs, Rows, Runner, SequenceState, StepOutputs};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

/// The system allocator, counting allocations (`alloc`, `alloc_zeroed`,
/// `realloc`; frees are not counted).
struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, SeqCst);
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, SeqCst);
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, SeqCst);
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations made while `f` runs (on any thread).
fn allocations_in(f: impl FnOnce()) -> usize {
    let before = ALLOCATIONS.load(SeqCst);
    f();
    ALLOCATIONS.load(SeqCst) - before
}

/// One decode token for each of `N` sequences, in one step, into `out`.
/// The items are an array, not a `Vec`: the test's own bookkeeping must
/// not allocate either.
fn decode_step<const N: usize>(
    model: &Model,
    run: &Runner,
    states: &mut [SequenceState; N],
    tokens: &[[u32; 1]; N],
    out: &mut StepOutputs,
) {
    let mut next = tokens.iter();
    let mut items = states.each_mut().map(|state| BatchItem {
        state,
        tokens: next.next().expect("one token each"),
        outputs: Outputs::last_logits(),
        rewindable: false,
    });
    model.forward_batch_into(run, &mut items, out).unwrap();
}

/// A decode step followed by the MTP head's catch-up row and one chained
/// draft row for each of `N` sequences (the speculative loop's model calls):
/// `prev` holds each sequence's trunk hidden of the position before its
/// token (what the catch-up row pairs it with), and gets the new ones.
fn decode_and_draft_step<const N: usize>(
    model: &Model,
    run: &Runner,
    states: &mut [SequenceState; N],
    tokens: &[[u32; 1]; N],
    trunk: &mut StepOutputs,
    head: &mut StepOutputs,
    prev: &mut [f32],
) {
    let h = model.config.n_embd;
    let mut next = tokens.iter();
    let mut items = states.each_mut().map(|state| BatchItem {
        state,
        tokens: next.next().expect("one token each"),
        outputs: Outputs::last_logits().with_hidden(),
        rewindable: false,
    });
    model.forward_batch_into(run, &mut items, trunk).unwrap();
    // Catch-up: token t with the hidden of the position before it.
    let mut rows = prev.chunks_exact(h);
    let mut next = tokens.iter();
    let mut items = states.each_mut().map(|state| MtpItem {
        state,
        tokens: next.next().unwrap(),
        hidden: rows.next().unwrap(),
        outputs: Outputs::NONE,
    });
    model.forward_mtp_into(run, &mut items, head).unwrap();
    // A draft row: the next token with the trunk's hidden of t.
    let mut i = 0;
    let mut items = states.each_mut().map(|state| {
        i += 1;
        MtpItem {
            state,
            tokens: &[3],
            hidden: trunk.hidden(i - 1),
            outputs: Outputs::last_logits().with_hidden(),
        }
    });
    model.forward_mtp_into(run, &mut items, head).unwrap();
    for (i, row) in prev.chunks_exact_mut(h).enumerate() {
        row.copy_from_slice(trunk.hidden(i));
    }
    // The draft row is dropped again (as after a rejected draft).
    for st in states.iter_mut() {
        st.truncate_mtp(st.position());
    }
}

/// A speculative round's trunk work for each of `N` sequences: a
/// rewindable verify step of `tokens` (the last sampled token and the
/// drafts), then a rewind that keeps `keep` of its rows (a rejected draft).
fn verify_and_rewind_step<const N: usize>(
    model: &Model,
    run: &Runner,
    states: &mut [SequenceState; N],
    tokens: &[u32],
    keep: usize,
    out: &mut StepOutputs,
) {
    let mut items = states.each_mut().map(|state| BatchItem {
        state,
        tokens,
        outputs: Outputs::logits(Rows::All).with_hidden(),
        rewindable: true,
    });
    model.forward_batch_into(run, &mut items, out).unwrap();
    for st in states.iter_mut() {
        let at = st.position() - tokens.len() + keep;
        st.rewind(at).unwrap();
    }
}

/// Steps before the counted ones: the first decode step after a prefill
/// may still grow buffers to the decode step's shapes. (A step that starts
/// a KV page, every `KV_PAGE_POSITIONS` = 256 positions, allocates that
/// page: exempt by design; the counted steps here stay inside the first.)
const WARM_UP: u32 = 1;

#[test]
fn decode_steps_make_no_heap_allocation() {
    assert!(
        allocations_in(|| drop(std::hint::black_box(Vec::<u8>::with_capacity(1)))) > 0,
        "the allocator counts"
    );
    // Workers of its own, which the count covers.
    let mut run = common::runner(3);
    let mut all: Vec<_> = fixtures("f32")
        .into_iter()
        .map(|f| (f, Precision::Exact))
        .collect();
    for f in fixtures("quant") {
        all.push((f.clone(), Precision::Exact));
        all.push((f, Precision::Q8));
    }
    for (f, precision) in &all {
        let model = load(f);
        run.precision = *precision;
        let name = format!("{} ({})", f["gguf"].as_str().unwrap(), precision.name());
        let vocab = model.config.n_vocab as u32;
        let mut out = StepOutputs::new();

        // One sequence.
        let mut one = [SequenceState::new(&model, 64)];
        let prompt: Vec<u32> = (0..9).map(|i| (i * 37 + 5) % vocab).collect();
        model
            .forward_into(&run, &mut one[0], &prompt, Outputs::last_logits(), &mut out)
            .unwrap();
        for step in 0..WARM_UP + 4 {
            let tok = [[(step * 13 + 1) % vocab]];
            // The kept buffers change nothing: the same step as a fresh call,
            // on a clone that is dropped before the counted step (a clone
            // shares the KV pages, so a step on either copies the last one).
            let want = {
                let mut again = one[0].clone();
                model
                    .forward(&run, &mut again, &tok[0], Rows::Last)
                    .unwrap()
            };
            let n = allocations_in(|| decode_step(&model, &run, &mut one, &tok, &mut out));
            assert!(
                step < WARM_UP || n == 0,
                "{name}: decode step {step} of one sequence: {n} allocations"
            );
            assert_eq!(out.logits(0), &want[..], "{name}: step {step}");
        }

        // Three sequences at different positions, in one batch.
        let mut three = [(); 3].map(|_| SequenceState::new(&model, 64));
        for (i, st) in three.iter_mut().enumerate() {
            let prompt: Vec<u32> = (0..4 + 7 * i as u32)
                .map(|j| (j * 29 + 3) % vocab)
                .collect();
            model
                .forward_into(&run, st, &prompt, Outputs::last_logits(), &mut out)
                .unwrap();
        }
        for step in 0..WARM_UP + 4 {
            let toks = [0u32, 1, 2].map(|i| [(step * 11 + i * 5 + 2) % vocab]);
            let n = allocations_in(|| decode_step(&model, &run, &mut three, &toks, &mut out));
            assert!(
                step < WARM_UP || n == 0,
                "{name}: decode step {step} of a batch of 3: {n} allocations"
            );
            assert_eq!(out.len(), 3);
        }
    }

    // The MTP head: decode + catch-up + a draft row, one and two sequences.
    for f in fixtures("mtp") {
        let model = load(&f);
        run.precision = Precision::Exact;
        let name = f["gguf"].as_str().unwrap();
        let (h, vocab) = (model.config.n_embd, model.config.n_vocab as u32);
        let (mut trunk, mut head) = (StepOutputs::new(), StepOutputs::new());
        let mut one = [SequenceState::new(&model, 64)];
        let mut two = [(); 2].map(|_| SequenceState::new(&model, 64));
        let (mut h1, mut h2) = (vec![0f32; h], vec![0f32; 2 * h]);
        for step in 0..WARM_UP + 4 {
            let tok = [[(step * 13 + 1) % vocab]];
            let toks = [[(step * 7 + 2) % vocab], [(step * 5 + 4) % vocab]];
            let n1 = allocations_in(|| {
                decode_and_draft_step(&model, &run, &mut one, &tok, &mut trunk, &mut head, &mut h1)
            });
            let n2 = allocations_in(|| {
                decode_and_draft_step(
                    &model, &run, &mut two, &toks, &mut trunk, &mut head, &mut h2,
                )
            });
            assert!(
                step < WARM_UP || (n1 == 0 && n2 == 0),
                "{name}: MTP step {step}: {n1} allocations (one sequence), {n2} (two)"
            );
            assert_eq!(one[0].mtp_position(), Some(one[0].position()));
        }
    }

    // Speculative verification: a verify step of four rows and a rewind
    // to two of them, alone and for two sequences at once, copies no
    // state and allocates nothing once the rewind slots exist.
    for f in fixtures("f32") {
        let model = load(&f);
        run.precision = Precision::Exact;
        let name = f["gguf"].as_str().unwrap();
        let vocab = model.config.n_vocab as u32;
        let mut out = StepOutputs::new();
        let mut one = [SequenceState::new(&model, 128)];
        let mut two = [(); 2].map(|_| SequenceState::new(&model, 128));
        for step in 0..WARM_UP + 4 {
            let toks = [0u32, 1, 2, 3].map(|i| (step * 17 + i * 7 + 1) % vocab);
            let n1 = allocations_in(|| {
                verify_and_rewind_step(&model, &run, &mut one, &toks, 2, &mut out)
            });
            let n2 = allocations_in(|| {
                verify_and_rewind_step(&model, &run, &mut two, &toks, 3, &mut out)
            });
            assert!(
                step < WARM_UP || (n1 == 0 && n2 == 0),
                "{name}: verify step {step}: {n1} allocations (one sequence), {n2} (two)"
            );
        }
        assert_eq!(one[0].position(), 2 * (WARM_UP as usize + 4));
    }
}
