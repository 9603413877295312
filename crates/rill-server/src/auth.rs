//! `Authorization: Bearer KEY` on `/v1/*` when the server has an API key.

use crate::errors::ApiError;
use crate::state::AppState;
use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// Whether `header` (the `Authorization` value) carries `key`. The key
/// bytes are compared in constant time.
pub fn authorized(header: Option<&[u8]>, key: &str) -> bool {
    let Some(h) = header else {
        return false;
    };
    let Some(token) = h
        .strip_prefix(b"Bearer ")
        .or_else(|| h.strip_prefix(b"bearer "))
    else {
        return false;
    };
    let token = token.trim_ascii();
    bool::from(token.ct_eq(key.as_bytes()))
}

pub async fn require_key(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    if let Some(key) = &state.config.api_key {
        let header = req.headers().get(AUTHORIZATION).map(|v| v.as_bytes());
        if !authorized(header, key) {
            return ApiError::unauthorized().into_response();
        }
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::authorized;

    #[test]
    fn bearer_keys() {
        assert!(authorized(Some(b"Bearer sk-1"), "sk-1"));
        assert!(authorized(Some(b"bearer sk-1 "), "sk-1"));
        assert!(!authorized(Some(b"Bearer sk-2"), "sk-1"));
        assert!(!authorized(Some(b"Bearer sk-10"), "sk-1"));
        assert!(!authorized(Some(b"sk-1"), "sk-1"));
        assert!(!authorized(None, "sk-1"));
        assert!(!authorized(Some(b"Bearer "), "sk-1"));
    }
}
