//! The HTTP routes and the router that joins them.

pub mod chat;
pub mod completions;
pub mod infill;
pub mod messages;
pub mod misc;
pub mod native;
pub mod responses;
pub mod utility;

use crate::state::AppState;
use crate::{auth, metrics, webui, wire};
use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::routing::{get, post};
use axum::Router;
use rill_engine::{Done, FinishReason};
use std::sync::Arc;

/// OpenAI `finish_reason` of a finished request.
pub fn finish_reason(done: &Done, called_tools: bool) -> &'static str {
    match done.finish {
        FinishReason::Length => "length",
        _ if called_tools => "tool_calls",
        _ => "stop",
    }
}

/// Every route, with the API-key check on `/v1/*` and the utility endpoints,
/// the body limit, and the request counters.
pub fn router(state: Arc<AppState>) -> Router {
    let v1 = Router::new()
        .route("/v1/chat/completions", post(chat::chat_completions))
        .route("/v1/completions", post(completions::completions))
        .route("/completion", post(native::completion))
        .route("/completions", post(native::completion))
        .route("/infill", post(infill::infill))
        .route("/v1/responses", post(responses::responses))
        .route("/v1/models", get(misc::models))
        .route("/tokenize", post(utility::tokenize))
        .route("/detokenize", post(utility::detokenize))
        .route("/apply-template", post(utility::apply_template))
        .route("/v1/chat/completions/render", post(utility::render_chat))
        .route("/v1/completions/render", post(utility::render_completion))
        .route("/props", get(utility::props))
        .route("/slots", get(utility::slots))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_key,
        ));
    // Anthropic's Messages API, with its own key header and error shape.
    let anthropic = Router::new()
        .route("/v1/messages", post(messages::messages))
        .route("/v1/messages/count_tokens", post(messages::count_tokens))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            crate::anthropic::require_key,
        ));
    let mut app = Router::new().merge(v1).merge(anthropic);
    if state.config.webui {
        app = app
            .route("/", get(webui::index))
            .route("/index.html", get(webui::index));
    }
    app.route("/health", get(misc::health))
        .route("/metrics", get(misc::metrics))
        .route("/get_load", get(misc::get_load))
        .route("/load", get(misc::server_load))
        .fallback(misc::not_found)
        .method_not_allowed_fallback(misc::method_not_allowed)
        .layer(DefaultBodyLimit::max(state.config.body_limit))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            metrics::track,
        ))
        .layer(middleware::from_fn_with_state(state.clone(), wire::cors))
        .layer(middleware::from_fn(wire::request_id))
        .with_state(state)
}

/// A finished request's figures, for the stream builders' unit tests.
#[cfg(test)]
pub(crate) fn test_done(finish: FinishReason, prompt_tokens: usize, cached_tokens: usize) -> Done {
    Done {
        stop_word: None,
        finish,
        prompt_tokens,
        cached_tokens,
        completion_tokens: 20,
        ttft_ms: 1.0,
        total_ms: 2.0,
        queue_ms: 0.0,
        prefill_ms: 0.0,
        decode_ms: 0.0,
        drafted_tokens: 0,
        accepted_tokens: 0,
    }
}
