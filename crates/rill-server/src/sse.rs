//! Server-sent events from an engine request.
//!
//! The response body stream owns the engine [`Handle`]: when the client goes
//! away, hyper drops the body, the handle goes with it, and the engine
//! cancels the sequence at its next step. Keep-alive comments are written
//! while a request waits in the queue, so a client that left is noticed
//! there too.

use crate::state::AppState;
use crate::ApiError;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, Stream, StreamExt};
use rill_engine::{Done, Event, Handle, PromptProgress, TokenInfo};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

/// llama-server's `prompt_progress` object.
pub fn progress_json(p: &PromptProgress) -> serde_json::Value {
    serde_json::json!({
        "total": p.total,
        "cache": p.cached,
        "processed": p.processed,
        "time_ms": p.elapsed.as_millis() as u64,
    })
}

/// Turns engine events into SSE `data:` payloads (JSON text).
pub trait ChunkBuilder: Send + 'static {
    /// Payloads sent before the first event (e.g. the role chunk).
    fn start(&mut self) -> Vec<String> {
        Vec::new()
    }
    /// The prompt's tokens with their log-probabilities (requests that ask
    /// for them), before any text.
    fn prompt(&mut self, _tokens: Vec<TokenInfo>) -> Vec<String> {
        Vec::new()
    }
    /// How far the prompt has run (requests with llama-server's
    /// `return_progress`); formats without such objects send nothing.
    fn progress(&mut self, _progress: PromptProgress) -> Vec<String> {
        Vec::new()
    }
    fn text(&mut self, text: String, tokens: Vec<TokenInfo>) -> Vec<String>;
    /// The last payloads (before `[DONE]`).
    fn done(&mut self, done: Done) -> Vec<String>;
    /// The event after the last payload: OpenAI's `[DONE]` (none in
    /// llama-server's own API).
    fn end_marker(&self) -> Option<&'static str> {
        Some("[DONE]")
    }
    /// An error payload, sent as the last event of a failed stream.
    fn error(&mut self, e: ApiError) -> String {
        e.body().to_string()
    }
}

/// Counts the stream while it is open, and whether it ended early.
struct Guard {
    state: Arc<AppState>,
    finished: bool,
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.state.http.streams_open.fetch_sub(1, Relaxed);
        if !self.finished {
            self.state.http.streams_disconnected.fetch_add(1, Relaxed);
        }
    }
}

struct Pump<B> {
    handle: Option<Handle>,
    builder: B,
    queue: VecDeque<String>,
    guard: Guard,
}

/// The payload stream of a request (without the SSE framing).
pub fn payloads<B: ChunkBuilder>(
    handle: Handle,
    mut builder: B,
    state: Arc<AppState>,
) -> impl Stream<Item = String> + Send {
    state.http.streams_open.fetch_add(1, Relaxed);
    let queue: VecDeque<String> = builder.start().into();
    let pump = Pump {
        handle: Some(handle),
        builder,
        queue,
        guard: Guard {
            state,
            finished: false,
        },
    };
    stream::unfold(pump, |mut p| async move {
        loop {
            if let Some(item) = p.queue.pop_front() {
                return Some((item, p));
            }
            let handle = p.handle.as_mut()?;
            match handle.events.recv().await {
                Some(Event::Text { text, tokens }) => {
                    p.queue.extend(p.builder.text(text, tokens));
                }
                Some(Event::Prompt { tokens }) => {
                    p.queue.extend(p.builder.prompt(tokens));
                }
                Some(Event::Progress(progress)) => {
                    p.queue.extend(p.builder.progress(progress));
                }
                Some(Event::Done(done)) => {
                    p.guard.state.observe_done(&done);
                    p.queue.extend(p.builder.done(done));
                    if let Some(end) = p.builder.end_marker() {
                        p.queue.push_back(end.to_string());
                    }
                    p.handle = None;
                    p.guard.finished = true;
                }
                Some(Event::Error(f)) => {
                    let e = p.builder.error(ApiError::failed(f));
                    p.queue.push_back(e);
                    p.handle = None;
                    p.guard.finished = true;
                }
                None => {
                    let e = p.builder.error(ApiError::engine_stopped());
                    p.queue.push_back(e);
                    p.handle = None;
                    p.guard.finished = true;
                }
            }
        }
    })
}

/// The SSE response of a request.
pub fn response<B: ChunkBuilder>(handle: Handle, builder: B, state: Arc<AppState>) -> Response {
    let events = payloads(handle, builder, state)
        .map(|data| Ok::<_, Infallible>(SseEvent::default().data(data)));
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(5)))
        .into_response()
}
