//! A batched step over several sequences gives each one exactly what it gets
//! alone (the serving engine's batch invariance rests on this).

mod common;

use common::*;
use rill_kernels::{Precision, Threads};
use rill_model::{BatchItem, Outputs, Rows, SequenceState};

#[test]
fn a_mixed_batch_equals_each_sequence_alone() {
    let threads = Threads::new(2);
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
        let mut model = load(&f);
        model.set_precision(precision);
        let prompts: Vec<Vec<u32>> = (0..3u32)
            .map(|s| (0..(5 + 9 * s)).map(|i| (i * 31 + s * 7) % 500).collect())
            .collect();
        // Alone: prefill, then two decode steps.
        let mut alone = Vec::new();
        for p in &prompts {
            let mut st = SequenceState::new(&model, 64);
            let mut rows = model.forward(&threads, &mut st, p, Rows::All).unwrap();
            rows.extend(model.forward(&threads, &mut st, &[7], Rows::Last).unwrap());
            rows.extend(model.forward(&threads, &mut st, &[8], Rows::Last).unwrap());
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
                    });
                    who.push(i);
                }
            }
            let out = model.forward_batch(&threads, &mut items).unwrap();
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
