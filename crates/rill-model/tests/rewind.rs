//! A rewindable step (speculative verification) gives every row the bits
//! that decoding those tokens one by one gives, and cutting it back to any
//! of its rows leaves the state exactly as if only those rows had run.

mod common;

use common::*;
use rill_kernels::Precision;
use rill_model::{BatchItem, Model, Outputs, Rows, Runner, SequenceState, StepOutputs};

/// Logits and hidden rows of decoding `tokens` one at a time.
fn decode_one_by_one(
    model: &Model,
    run: &Runner,
    st: &mut SequenceState,
    tokens: &[u32],
) -> (Vec<f32>, Vec<f32>) {
    let (mut logits, mut hidden) = (Vec::new(), Vec::new());
    let mut out = StepOutputs::new();
    for t in tokens {
        let o = Outputs::last_logits().with_hidden();
        model
            .forward_into(run, st, std::slice::from_ref(t), o, &mut out)
            .unwrap();
        logits.extend_from_slice(out.logits(0));
        hidden.extend_from_slice(out.hidden(0));
    }
    (logits, hidden)
}

fn verify(
    model: &Model,
    run: &Runner,
    st: &mut SequenceState,
    tokens: &[u32],
    out: &mut StepOutputs,
) {
    let mut items = [BatchItem {
        state: st,
        tokens,
        outputs: Outputs::logits(Rows::All).with_hidden(),
        rewindable: true,
    }];
    model.forward_batch_into(run, &mut items, out).unwrap();
}

fn cases() -> impl Iterator<Item = (serde_json::Value, Precision)> {
    fixtures("f32")
        .into_iter()
        .chain(fixtures("mtp"))
        .map(|f| (f, Precision::Exact))
        .chain(
            fixtures("quant")
                .into_iter()
                .flat_map(|f| [(f.clone(), Precision::Exact), (f, Precision::Q8)]),
        )
}

#[test]
fn verify_rows_equal_decoding_and_rewind_is_exact() {
    let mut run = runner(2);
    for (f, precision) in cases() {
        run.precision = precision;
        let model = load(&f);
        let name = format!("{} ({})", f["name"], precision.name());
        let v = model.config.n_vocab;
        let prompt: Vec<u32> = (0..11u32).map(|i| (i * 37 + 5) % 300).collect();
        let next: Vec<u32> = vec![17, 250, 3, 99, 42]
            .into_iter()
            .map(|t| t % v as u32)
            .collect();
        let mut plain = SequenceState::new(&model, 64);
        model
            .forward(&run, &mut plain, &prompt, Rows::None)
            .unwrap();
        let spec = plain.clone();
        let (want, want_hidden) = decode_one_by_one(&model, &run, &mut plain, &next);

        // One verify step over all five tokens: every row as decoding gave it.
        let mut out = StepOutputs::new();
        verify(&model, &run, &mut spec.clone(), &next, &mut out);
        assert!(
            out.logits(0) == &want[..],
            "{name}: verify rows differ from decoding"
        );
        assert!(
            out.hidden(0) == &want_hidden[..],
            "{name}: verify hidden rows differ"
        );

        // Cut back to each row in turn, then decode the rest one by one.
        for keep in 1..=next.len() {
            let mut st = spec.clone();
            verify(&model, &run, &mut st, &next, &mut out);
            let at = prompt.len() + keep;
            st.rewind(at).unwrap();
            assert_eq!(st.position(), at, "{name}");
            let (got, _) = decode_one_by_one(&model, &run, &mut st, &next[keep..]);
            assert!(
                got == want[keep * v..],
                "{name}: decoding after a rewind to row {keep} differs"
            );
        }
    }
}

#[test]
fn rewinds_outside_the_last_step_are_refused_and_change_nothing() {
    let run = runner(2);
    let f = &fixtures("f32")[0];
    let model = load(f);
    let prompt: Vec<u32> = (0..9u32).collect();
    let mut st = SequenceState::new(&model, 64);
    // A prompt step is not rewindable.
    model.forward(&run, &mut st, &prompt, Rows::None).unwrap();
    assert!(st.rewind(5).is_err());
    assert_eq!(st.position(), prompt.len());

    let mut out = StepOutputs::new();
    verify(&model, &run, &mut st, &[1, 2, 3, 4], &mut out);
    let end = prompt.len() + 4;
    // Before the step, and past its end: refused.
    assert!(st.rewind(prompt.len()).is_err());
    assert!(st.rewind(end + 1).is_err());
    assert_eq!(st.position(), end);
    // The current position is always fine; after a rewind the ring is spent.
    st.rewind(end).unwrap();
    assert!(st.rewind(end - 1).is_err());

    // A later ordinary step clears the ring too.
    verify(&model, &run, &mut st, &[5, 6], &mut out);
    model.forward(&run, &mut st, &[7], Rows::Last).unwrap();
    assert!(st.rewind(st.position() - 1).is_err());

    // Too many rows for a rewindable step.
    let long: Vec<u32> = (0..rill_model::MAX_REWIND_ROWS as u32 + 1).collect();
    let mut items = [BatchItem {
        state: &mut st,
        tokens: &long,
        outputs: Outputs::NONE,
        rewindable: true,
    }];
    assert!(model
        .forward_batch_into(&run, &mut items, &mut out)
        .is_err());
}

/// A snapshot of the state (what the prompt cache keeps) holds no rewind
/// slots, and a rewind does not copy states: its cost is a swap.
#[test]
fn snapshots_do_not_carry_the_rewind_slots() {
    let run = runner(2);
    let f = &fixtures("f32")[0];
    let model = load(f);
    let mut st = SequenceState::new(&model, 64);
    model
        .forward(&run, &mut st, &[1, 2, 3], Rows::None)
        .unwrap();
    let before = st.bytes();
    let mut out = StepOutputs::new();
    verify(&model, &run, &mut st, &[4, 5, 6, 7], &mut out);
    assert!(st.bytes() > before, "the ring holds the step's snapshots");
    let copy = st.clone();
    assert!(copy.bytes() < st.bytes(), "a clone leaves the ring behind");
}
