//! `GET /v1/models`, `GET /health`, `GET /metrics`, the load that routers
//! poll (`GET /get_load`, `GET /load`), and unknown routes.

use crate::errors::ApiError;
use crate::openai::responses::{ModelCard, ModelList};
use crate::state::AppState;
use axum::extract::State;
use axum::http::{header, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::sync::OnceLock;

/// When the server started (the `created` of its model).
fn started() -> u64 {
    static AT: OnceLock<u64> = OnceLock::new();
    *AT.get_or_init(crate::openai::responses::now)
}

pub async fn models(State(state): State<Arc<AppState>>) -> Json<ModelList> {
    let card = |id: &str| ModelCard {
        id: id.to_string(),
        object: "model",
        created: started(),
        owned_by: "rill",
        max_model_len: state.ctx_size(),
    };
    let mut data = vec![card(&state.config.model_id)];
    data.extend(
        state
            .config
            .aliases
            .iter()
            .filter(|a| **a != state.config.model_id)
            .map(|a| card(a)),
    );
    Json(ModelList {
        object: "list",
        data,
    })
}

pub async fn health(State(state): State<Arc<AppState>>) -> Response {
    if state.shutting_down.load(Relaxed) {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "shutting down"})),
        )
            .into_response()
    } else {
        Json(json!({"status": "ok"})).into_response()
    }
}

pub async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let mut text = state.engine.metrics().render();
    text.push_str(&state.http.render());
    text.push_str(&state.fleet.render(&state));
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

/// The load that vLLM's router (`vllm-router --policy power_of_two`, of
/// SGLang's router lineage) polls from each worker: `load` is the requests
/// running plus waiting; the other fields say which is which.
pub async fn get_load(State(state): State<Arc<AppState>>) -> Json<serde_json::Value> {
    let load = crate::fleet::Load::of(&state);
    Json(json!({
        "load": load.running + load.waiting,
        "num_reqs": load.running,
        "num_waiting_reqs": load.waiting,
        "kv_cache_usage_perc": load.usage,
    }))
}

/// vLLM's `GET /load`: the requests in flight (running plus waiting).
pub async fn server_load(State(state): State<Arc<AppState>>) -> Json<serde_json::Value> {
    let load = crate::fleet::Load::of(&state);
    Json(json!({"server_load": load.running + load.waiting}))
}

pub async fn not_found(uri: Uri) -> ApiError {
    ApiError::not_found(uri.path())
}

pub async fn method_not_allowed() -> ApiError {
    ApiError::method_not_allowed()
}
