//! `rill bench --verify-costs`: what speculation's pieces cost on this
//! model and machine, each relative to a plain one-token decode step — a
//! rewindable verify step of 2…5 positions (the token and 1…4 drafts,
//! rewound after each run so the context stays put) and one draft step of
//! the MTP head. From these and an acceptance rate follows the speed-up:
//! tokens per step `1 + a₁ + a₁a₂ + …` over the cost `verify(k+1) + k·draft`.

use anyhow::{Context, Result};
use rill_model::{
    BatchItem, Model, MtpItem, MtpOptions, Outputs, Rows, Runner, SequenceState, StepOutputs,
};
use std::time::Instant;

/// One measured shape: its name and mean milliseconds per step.
pub struct Cost {
    pub name: String,
    pub ms: f64,
}

/// Time every shape `reps` times after a context of `context` tokens.
pub fn measure(
    model: &Model,
    run: &Runner,
    context: usize,
    reps: usize,
    draft_vocab: usize,
) -> Result<Vec<Cost>> {
    let v = model.config.n_vocab as u32;
    let prompt: Vec<u32> = (0..context as u32).map(|i| (i * 7919 + 11) % v).collect();
    let mut st = SequenceState::new(model, context + 8 * (reps + 2));
    let mut out = StepOutputs::new();
    model
        .forward_into(run, &mut st, &prompt, Outputs::NONE, &mut out)
        .context("prefill")?;
    let mut costs = Vec::new();
    let tokens: Vec<u32> = (0..5u32).map(|i| (i * 131 + 17) % v).collect();
    // The shapes, each warmed up once (buffers grow to it) before timing.
    for rows in 1..=5usize {
        // Each run keeps its first row (a decode step's one, a verify's
        // token with every draft rejected): the context grows by one a run.
        let step = |st: &mut SequenceState, out: &mut StepOutputs| -> Result<()> {
            let mut items = [BatchItem {
                state: st,
                tokens: &tokens[..rows],
                outputs: Outputs::logits(Rows::All).with_hidden(),
                rewindable: rows > 1,
            }];
            model.forward_batch_into(run, &mut items, out)?;
            if rows > 1 {
                let back = st.position() - rows + 1;
                st.rewind(back)?;
            }
            Ok(())
        };
        step(&mut st, &mut out)?;
        let t0 = Instant::now();
        for _ in 0..reps {
            step(&mut st, &mut out)?;
        }
        let ms = t0.elapsed().as_secs_f64() * 1e3 / reps as f64;
        let name = if rows == 1 {
            "decode (1 position)".to_string()
        } else {
            format!("verify ({rows} positions)")
        };
        costs.push(Cost { name, ms });
    }
    if model.has_mtp() {
        let h = model.config.n_embd;
        let hidden = vec![0.1f32; h];
        let mut head = SequenceState::new(model, context + 8);
        // Feed the head the prompt so its cache is as deep as the trunk's.
        let rows: Vec<f32> = vec![0.1f32; context * h];
        let mut items = [MtpItem {
            state: &mut head,
            tokens: &prompt,
            hidden: &rows,
            outputs: Outputs::NONE,
        }];
        model.forward_mtp_into(run, &mut items, &mut out)?;
        let draft = |s: &mut SequenceState, out: &mut StepOutputs| -> Result<()> {
            let mut items = [MtpItem {
                state: s,
                tokens: &tokens[..1],
                hidden: &hidden,
                outputs: Outputs::last_logits().with_hidden(),
            }];
            let options = MtpOptions {
                vocab_rows: (draft_vocab > 0).then_some(draft_vocab),
            };
            model.forward_mtp_with(run, &mut items, options, out)?;
            let p = s.mtp_position().unwrap_or(1);
            s.truncate_mtp(p - 1);
            Ok(())
        };
        draft(&mut head, &mut out)?;
        let t0 = Instant::now();
        for _ in 0..reps {
            draft(&mut head, &mut out)?;
        }
        costs.push(Cost {
            name: if draft_vocab > 0 {
                format!("draft (MTP head, {draft_vocab} vocab)")
            } else {
                "draft (MTP head, 1 position)".into()
            },
            ms: t0.elapsed().as_secs_f64() * 1e3 / reps as f64,
        });
    }
    Ok(costs)
}

/// The table, each cost also as a multiple of the decode step's.
pub fn print(costs: &[Cost]) {
    let base = costs.first().map_or(1.0, |c| c.ms.max(1e-9));
    println!("| step                          |      ms | × decode |");
    println!("| ----------------------------- | ------: | -------: |");
    for c in costs {
        println!("| {:<29} | {:>7.3} | {:>8.2} |", c.name, c.ms, c.ms / base);
    }
}
