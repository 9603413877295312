//! `rill serve`: an OpenAI-compatible HTTP server over the rill engine.
//!
//! The server only talks to [`rill_engine::Engine`]: it checks requests,
//! renders chat prompts with the model's template, submits token ids, and
//! turns the engine's events into OpenAI responses (whole or as server-sent
//! events). Batching, the prompt cache and sampling live in the engine.
//!
//! - [`routes`]: the endpoints and the router.
//! - [`openai`]: request and response shapes, parameter checks.
//! - a chat reply is split into thinking, content and tool calls as it
//!   streams by `rill_chat::reply`, which `rill chat` uses too.
//! - [`sse`]: streaming, with cancellation when the client leaves.
//! - [`errors`]: every failure as an OpenAI-style JSON error.
//! - [`webui`]: the chat page at `/`.

pub mod anthropic;
pub mod auth;
pub mod choices;
pub mod errors;
pub mod fleet;
pub mod logging;
pub mod metrics;
pub mod openai;
pub mod routes;
pub mod sse;
pub mod state;
pub mod structured;
pub mod tool_choice;
pub mod urls;
pub mod webui;
pub mod wire;

pub use errors::ApiError;
pub use routes::router;
pub use state::{AppState, ServerConfig};

use std::future::Future;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tokio::net::TcpListener;

/// Serve until `shutdown` resolves; then stop accepting connections, let the
/// requests in flight finish (streams included), and shut the engine down
/// (which drains anything it still holds).
pub async fn serve(
    listener: TcpListener,
    state: Arc<AppState>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = router(state.clone());
    let st = state.clone();
    let signal = async move {
        shutdown.await;
        st.shutting_down.store(true, Relaxed);
        tracing::info!("shutting down: no new connections; finishing requests in flight");
    };
    let result = axum::serve(listener, app)
        .with_graceful_shutdown(signal)
        .await;
    let engine = state.engine.clone();
    let _ = tokio::task::spawn_blocking(move || engine.shutdown()).await;
    tracing::info!("engine stopped");
    result
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
