//! Running one request through the engine from the command line: submit,
//! stream the text as it comes, and return the final figures.

use anyhow::{Context, Result};
use rill_engine::{Done, Engine, Event, Request};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

/// The cancel flag of the request in flight, for a Ctrl-C handler.
pub type InFlight = Arc<Mutex<Option<Arc<AtomicBool>>>>;

/// What a finished request produced.
pub struct Finished {
    pub done: Done,
    pub tokens: Vec<u32>,
    pub text: String,
}

/// Submit `req`, hand each piece of final text to `on_text`, and wait for
/// the end. `in_flight` holds the request's cancel flag while it runs.
pub fn stream(
    engine: &Engine,
    req: Request,
    in_flight: &InFlight,
    mut on_text: impl FnMut(&str),
) -> Result<Finished> {
    let mut handle = engine
        .submit(req)
        .context("the engine refused the request")?;
    if let Ok(mut f) = in_flight.lock() {
        *f = Some(handle.cancel_flag());
    }
    let mut tokens = Vec::new();
    let mut text = String::new();
    let result = loop {
        match handle.recv_blocking() {
            Some(Event::Text {
                text: t,
                tokens: ts,
            }) => {
                tokens.extend(ts.iter().map(|t| t.id));
                if !t.is_empty() {
                    on_text(&t);
                    text.push_str(&t);
                }
            }
            // (Never asked for here.)
            Some(Event::Prompt { .. } | Event::Progress(_)) => {}
            Some(Event::Done(done)) => break Ok(done),
            Some(Event::Error(e)) => break Err(anyhow::anyhow!("generation failed: {e}")),
            None => break Err(anyhow::anyhow!("the engine stopped")),
        }
    };
    if let Ok(mut f) = in_flight.lock() {
        *f = None;
    }
    Ok(Finished {
        done: result?,
        tokens,
        text,
    })
}

/// The speed report llama.cpp users know, on stderr.
pub fn print_timings(d: &Done) {
    let computed = d.prompt_tokens - d.cached_tokens;
    let cached = if d.cached_tokens > 0 {
        format!(" ({} more from the prompt cache)", d.cached_tokens)
    } else {
        String::new()
    };
    eprintln!(
        "prompt eval: {:>8.2} ms / {:>5} tokens ({:>8.2} ms per token, {:>8.2} tokens per second){cached}",
        d.prefill_ms,
        computed,
        d.prefill_ms / computed.max(1) as f64,
        d.prefill_tok_s()
    );
    let steps = d.completion_tokens.saturating_sub(1);
    eprintln!(
        "       eval: {:>8.2} ms / {:>5} runs   ({:>8.2} ms per token, {:>8.2} tokens per second)",
        d.decode_ms,
        steps,
        d.decode_ms / steps.max(1) as f64,
        d.decode_tok_s()
    );
    if d.drafted_tokens > 0 {
        eprintln!(
            "      draft: {:>5} tokens drafted by the MTP head, {:>5} accepted ({:.1}%)",
            d.drafted_tokens,
            d.accepted_tokens,
            100.0 * d.accepted_tokens as f64 / d.drafted_tokens as f64
        );
    }
}
