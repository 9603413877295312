//! `n > 1`: several choices for one request, each its own sequence in the
//! engine's batch; and several prompts in one completions request (a batch,
//! as vLLM and llama-server take it), `n` choices each, prompt-major.
//!
//! The first choice is submitted alone and the others once it has produced
//! its first event: by then its prompt is in the prompt cache (the engine
//! snapshots the end of every prompt), so the other choices resume from it
//! instead of prefilling the same prompt again. Choice `i` samples with
//! seed `seed + i`, so a seeded request is reproducible and its choices
//! differ.

use crate::errors::ApiError;
use crate::openai::responses::Usage;
use crate::sse::ChunkBuilder;
use crate::state::AppState;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, BoxStream, SelectAll, StreamExt};
use rill_engine::{Done, Event, Handle, Request};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

/// Usage of all choices, `n` per prompt in prompt order: each prompt once
/// (its cached tokens as its first choice found them), every choice's
/// completion.
pub fn usage_of(dones: &[Done], n: usize) -> Usage {
    let firsts = || dones.iter().step_by(n.max(1));
    let prompt_tokens = firsts().map(|d| d.prompt_tokens).sum();
    let mut u = Usage::from_done(&dones[0]);
    u.prompt_tokens = prompt_tokens;
    u.prompt_tokens_details.cached_tokens = firsts().map(|d| d.cached_tokens).sum();
    u.completion_tokens = dones.iter().map(|d| d.completion_tokens).sum();
    u.total_tokens = u.prompt_tokens + u.completion_tokens;
    u
}

/// Most choices one request may ask for.
pub const MAX_CHOICES: usize = 16;

/// Most sequences (prompts × `n`) one request may start: the engine's
/// default queue (`--queue`) holds them all.
pub const MAX_SEQUENCES: usize = 64;

/// `n` checked: 1 when absent.
pub fn count(n: Option<i64>) -> Result<usize, ApiError> {
    count_named("n", n)
}

/// [`count`] for a parameter of another name (llama-server's `n_cmpl`).
pub fn count_named(name: &str, n: Option<i64>) -> Result<usize, ApiError> {
    match n {
        None => Ok(1),
        Some(n) if (1..=MAX_CHOICES as i64).contains(&n) => Ok(n as usize),
        Some(n) => Err(ApiError::bad_param(
            name,
            format!("{name} must be in [1, {MAX_CHOICES}] (got {n})"),
        )),
    }
}

/// The engine's events of one choice, the first one (already read) first.
pub struct Choice {
    pub first: Option<Event>,
    pub handle: Handle,
}

impl Choice {
    pub async fn recv(&mut self) -> Option<Event> {
        match self.first.take() {
            Some(e) => Some(e),
            None => self.handle.events.recv().await,
        }
    }
}

/// Submit `n` choices of `req` (see the module's note on the prompt cache).
pub async fn submit(state: &AppState, req: Request, n: usize) -> Result<Vec<Choice>, ApiError> {
    submit_all(state, vec![req], n).await
}

/// Submit `n` choices of each of `reqs`, in that order: every prompt's
/// first choice at once (they prefill side by side), each prompt's others
/// once its first has produced an event. A failed submission drops the
/// handles made so far, which cancels their sequences.
pub async fn submit_all(
    state: &AppState,
    reqs: Vec<Request>,
    n: usize,
) -> Result<Vec<Choice>, ApiError> {
    let with_seed = |req: &Request, i: usize| {
        let mut r = req.clone();
        r.sampler.seed = req.sampler.seed.wrapping_add(i as u64);
        r
    };
    let firsts = reqs
        .iter()
        .map(|r| state.engine.submit(with_seed(r, 0)))
        .collect::<Result<Vec<_>, _>>()?;
    let mut choices = Vec::with_capacity(reqs.len() * n);
    for (req, mut first) in reqs.iter().zip(firsts) {
        let e = if n > 1 {
            first.events.recv().await
        } else {
            None
        };
        choices.push(Choice {
            first: e,
            handle: first,
        });
        for i in 1..n {
            choices.push(Choice {
                first: None,
                handle: state.engine.submit(with_seed(req, i))?,
            });
        }
    }
    Ok(choices)
}

/// What the stream of several choices sends after every choice is done
/// (the usage chunk), from their final figures in choice order.
pub type Tail = Box<dyn FnOnce(&[Done]) -> Vec<String> + Send>;

struct Pump<B> {
    events: SelectAll<BoxStream<'static, (usize, Option<Event>)>>,
    builders: Vec<B>,
    done: Vec<Option<Done>>,
    tail: Option<Tail>,
    queue: VecDeque<String>,
    state: Arc<AppState>,
    open: bool,
}

impl<B> Drop for Pump<B> {
    fn drop(&mut self) {
        self.state.http.streams_open.fetch_sub(1, Relaxed);
        if self.open {
            self.state.http.streams_disconnected.fetch_add(1, Relaxed);
        }
    }
}

/// The SSE response of several choices: each choice's payloads from its own
/// builder, interleaved as the engine produces them, then `tail`, then the
/// builders' end marker (`[DONE]`; none in llama-server's own API). A failing choice ends the stream with its error. Dropping the
/// stream (the client left) drops every handle, which cancels every choice.
pub fn response<B: ChunkBuilder>(
    choices: Vec<Choice>,
    mut builders: Vec<B>,
    tail: Tail,
    state: Arc<AppState>,
) -> Response {
    state.http.streams_open.fetch_add(1, Relaxed);
    let mut queue = VecDeque::new();
    for b in &mut builders {
        queue.extend(b.start());
    }
    let events = stream::select_all(choices.into_iter().enumerate().map(|(i, c)| {
        stream::unfold(Some(c), move |c| async move {
            let mut c = c?;
            let e = c.recv().await;
            let next = matches!(
                e,
                Some(Event::Text { .. } | Event::Prompt { .. } | Event::Progress(_))
            )
            .then_some(c);
            Some(((i, e), next))
        })
        .boxed()
    }));
    let pump = Pump {
        events,
        done: builders.iter().map(|_| None).collect(),
        builders,
        tail: Some(tail),
        queue,
        state,
        open: true,
    };
    let payloads = stream::unfold(pump, |mut p| async move {
        loop {
            if let Some(item) = p.queue.pop_front() {
                return Some((item, p));
            }
            if !p.open {
                return None;
            }
            let failed = match p.events.next().await {
                Some((i, Some(Event::Text { text, tokens }))) => {
                    let out = p.builders[i].text(text, tokens);
                    p.queue.extend(out);
                    None
                }
                Some((i, Some(Event::Prompt { tokens }))) => {
                    let out = p.builders[i].prompt(tokens);
                    p.queue.extend(out);
                    None
                }
                Some((i, Some(Event::Progress(progress)))) => {
                    let out = p.builders[i].progress(progress);
                    p.queue.extend(out);
                    None
                }
                Some((i, Some(Event::Done(done)))) => {
                    p.state.observe_done(&done);
                    let out = p.builders[i].done(done.clone());
                    p.queue.extend(out);
                    p.done[i] = Some(done);
                    if p.done.iter().all(Option::is_some) {
                        let all: Vec<Done> = p.done.iter().flatten().cloned().collect();
                        if let Some(tail) = p.tail.take() {
                            p.queue.extend(tail(&all));
                        }
                        if let Some(end) = p.builders[0].end_marker() {
                            p.queue.push_back(end.to_string());
                        }
                        p.open = false;
                    }
                    None
                }
                Some((i, Some(Event::Error(f)))) => Some((i, ApiError::failed(f))),
                Some((i, None)) => Some((i, ApiError::engine_stopped())),
                None => Some((0, ApiError::engine_stopped())),
            };
            if let Some((i, msg)) = failed {
                let e = p.builders[i].error(msg);
                p.queue.push_back(e);
                p.open = false;
            }
        }
    });
    let events = payloads.map(|data| Ok::<_, Infallible>(SseEvent::default().data(data)));
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(5)))
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn n_is_checked() {
        assert_eq!(count(None).unwrap(), 1);
        assert_eq!(count(Some(4)).unwrap(), 4);
        for bad in [0, -1, 17] {
            assert_eq!(count(Some(bad)).unwrap_err().status.as_u16(), 400);
        }
    }
}
