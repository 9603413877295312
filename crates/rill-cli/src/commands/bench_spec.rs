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
    let tokens: Vec<u32> = (0..5u32).map(|i| (i * 131 + 17) % v).collect();
    // Each run keeps its first row (a decode step's one, a verify's token
    // with every draft rejected): the context grows by one a run.
    let step = |rows: usize, st: &mut SequenceState, out: &mut StepOutputs| -> Result<()> {
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
    // The MTP head's state, fed the prompt so its cache is as deep as the
    // trunk's.
    let h = model.config.n_embd;
    let hidden = vec![0.1f32; h];
    let mut head = None;
    if model.has_mtp() {
        let mut s = SequenceState::new(model, context + 8);
        let rows: Vec<f32> = vec![0.1f32; context * h];
        let mut items = [MtpItem {
            state: &mut s,
            tokens: &prompt,
            hidden: &rows,
            outputs: Outputs::NONE,
        }];
        model.forward_mtp_into(run, &mut items, &mut out)?;
        head = Some(s);
    }
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
    // Every shape once untimed (buffers grow to it), then the shapes in
    // turn, `reps` rounds: a machine whose speed drifts (a shared VM) moves
    // every shape alike, so the ratios hold where one shape's block of runs
    // after another's would not.
    for rows in 1..=5 {
        step(rows, &mut st, &mut out)?;
    }
    if let Some(s) = head.as_mut() {
        draft(s, &mut out)?;
    }
    let mut secs = [0f64; 6];
    for _ in 0..reps {
        for rows in 1..=5 {
            let t0 = Instant::now();
            step(rows, &mut st, &mut out)?;
            secs[rows - 1] += t0.elapsed().as_secs_f64();
        }
        if let Some(s) = head.as_mut() {
            let t0 = Instant::now();
            draft(s, &mut out)?;
            secs[5] += t0.elapsed().as_secs_f64();
        }
    }
    let ms = |i: usize| secs[i] * 1e3 / reps as f64;
    let mut costs: Vec<Cost> = (1..=5)
        .map(|rows| Cost {
            name: if rows == 1 {
                "decode (1 position)".to_string()
            } else {
                format!("verify ({rows} positions)")
            },
            ms: ms(rows - 1),
        })
        .collect();
    if head.is_some() {
        costs.push(Cost {
            name: if draft_vocab > 0 {
                format!("draft (MTP head, {draft_vocab} vocab)")
            } else {
                "draft (MTP head, 1 position)".into()
            },
            ms: ms(5),
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
