//! A batched step over several sequences gives each one exactly what it gets
//! alone (the serving engine's batch invariance rests on this).

mod common;

use common::*;
use rill_kernels::Precision;
use rill_model::{BatchItem, Outputs, Rows, SequenceState};

#[test]
fn a_mixed_batch_equals_each_sequence_alone() {
    let mut run = common::runner(2);
    // Quantized files too: alone, a decode step takes the in-register
    // kernels (few tokens); in the batch the blocked ones. Same bits, with
    // exact and with 8-bit activations.
    let cases = fixtures("f32")
        .into_iter()
        .map(|f| (f, Precision::Exact))
        .chain(
            fixtures("quant")
                .into_iter()
                .flat_map(|f| [(f.clone(), Precision::Exact), (f, Precision::Q8)]),
        );
    for (f, precision) in cases {
        let model = load(&f);
        run.precision = precision;
        let prompts: Vec<Vec<u32>> = (0..3u32)
            .map(|s| (0..(5 + 9 * s)).map(|i| (i * 31 + s * 7) % 500).collect())
            .collect();
        // Alone: prefill, then two decode steps.
        let mut alone = Vec::new();
        for p in &prompts {
            let mut st = SequenceState::new(&model, 64);
            let mut rows = model.forward(&run, &mut st, p, Rows::All).unwrap();
            rows.extend(model.forward(&run, &mut st, &[7], Rows::Last).unwrap());
            rows.extend(model.forward(&run, &mut st, &[8], Rows::Last).unwrap());
            alone.push(rows);
        }
        // Together: sequence 0 prefills while 1 and 2 are at other stages.
        let mut states: Vec<SequenceState> =
            (0..3).map(|_| SequenceState::new(&model, 64)).collect();
        let mut got: Vec<Vec<f32>> = vec![Vec::new(); 3];
        let steps: [[Option<Vec<u32>>; 3]; 4] = [
            [Some(prompts[0].clone()), Some(prompts[1].clone()), None],
            [Some(vec![7]), Some(vec![7]), Some(prompts[2].clone())],
            [Some(vec![8]), Some(vec![8]), Some(vec![7])],
            [None, None, Some(vec![8])],
        ];
        for step in &steps {
            let mut items = Vec::new();
            let mut who = Vec::new();
            for (i, (st, toks)) in states.iter_mut().zip(step).enumerate() {
                if let Some(t) = toks {
                    let outputs = Outputs::logits(if t.len() > 1 { Rows::All } else { Rows::Last });
                    items.push(BatchItem {
                        state: st,
                        tokens: t,
                        outputs,
                        rewindable: false,
                    });
                    who.push(i);
                }
            }
            let out = model.forward_batch(&run, &mut items).unwrap();
            for (i, rows) in who.into_iter().zip(out) {
                got[i].extend(rows);
            }
        }
        for i in 0..3 {
            assert!(
                got[i] == alone[i],
                "{} ({}): sequence {i} differs in a batch",
                f["name"],
                precision.name()
            );
        }
    }
}

/// The hidden-state output is the post-final-norm state the LM head reads:
/// the logits are exactly `W_out · hidden`, and asking for it (or for it
/// alone) changes nothing else in the step.
#[test]
fn hidden_states_are_what_the_head_reads() {
    use rill_model::StepOutputs;
    let run = common::runner(2);
    for f in fixtures("f32") {
        let model = load(&f);
        let (h, v) = (model.config.n_embd, model.config.n_vocab);
        let file =
            rill_gguf::GgufFile::open(&fixtures_dir().join(f["gguf"].as_str().unwrap())).unwrap();
        let head = file
            .tensor("output.weight")
            .or_else(|| file.tensor("token_embd.weight"))
            .unwrap();
        let w: Vec<f32> = file
            .tensor_data(head)
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        assert_eq!(w.len(), v * h);

        let p: Vec<u32> = (0..11u32).map(|i| (i * 37 + 3) % 500).collect();
        let q: Vec<u32> = (0..6u32).map(|i| (i * 11 + 9) % 500).collect();
        let (mut sa, mut sb, mut sc) = (
            SequenceState::new(&model, 32),
            SequenceState::new(&model, 32),
            SequenceState::new(&model, 32),
        );
        let mut out = StepOutputs::new();
        let mut items = [
            BatchItem {
                state: &mut sa,
                tokens: &p,
                outputs: Outputs::logits(Rows::All).with_hidden(),
                rewindable: false,
            },
            BatchItem {
                state: &mut sb,
                tokens: &q,
                outputs: Outputs::hidden(Rows::Last),
                rewindable: false,
            },
            BatchItem {
                state: &mut sc,
                tokens: &q,
                outputs: Outputs::NONE,
                rewindable: false,
            },
        ];
        model
            .forward_batch_into(&run, &mut items, &mut out)
            .unwrap();
        let name = f["gguf"].as_str().unwrap();
        assert_eq!(out.len(), 3);
        assert_eq!(
            (out.logits(0).len(), out.hidden(0).len()),
            (p.len() * v, p.len() * h)
        );
        assert_eq!((out.logits(1).len(), out.hidden(1).len()), (0, h));
        assert_eq!((out.logits(2).len(), out.hidden(2).len()), (0, 0));

        // The logits asked for alone are the same bits.
        let mut alone = SequenceState::new(&model, 32);
        let want = model.forward(&run, &mut alone, &p, Rows::All).unwrap();
        assert_eq!(out.logits(0), &want[..], "{name}");
        // ... and they are the head applied to the hidden states.
        for (t, hid) in out.hidden(0).chunks_exact(h).enumerate() {
            for (r, row) in w.chunks_exact(h).enumerate() {
                let dot: f64 = row
                    .iter()
                    .zip(hid)
                    .map(|(a, b)| *a as f64 * *b as f64)
                    .sum();
                let got = out.logits(0)[t * v + r] as f64;
                assert!(
                    (dot - got).abs() <= 1e-4 * (1.0 + dot.abs()),
                    "{name}: token {t} logit {r}: head(hidden) {dot} vs {got}"
                );
            }
        }
        // A hidden-only item's last row is the one it gets with all rows.
        let mut again = SequenceState::new(&model, 32);
        let mut all = StepOutputs::new();
        model
            .forward_into(&run, &mut again, &q, Outputs::hidden(Rows::All), &mut all)
            .unwrap();
        assert_eq!(out.hidden(1), &all.hidden(0)[(q.len() - 1) * h..], "{name}");
        assert_eq!(sb.position(), q.len());
        assert_eq!(sc.position(), q.len());
    }
}
