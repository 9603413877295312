//! Every way a request can fail, and its OpenAI-style HTTP response.
//!
//! Handlers return `Result<_, ApiError>`; this is the one place where an
//! error becomes a status code and a JSON body
//! `{"error": {"message", "type", "param", "code"}}`.

use axum::extract::rejection::BytesRejection;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use rill_engine::{Failure, SubmitError};
use serde_json::json;

/// A failed request.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// OpenAI error `type`.
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
    /// Seconds for a `Retry-After` header.
    pub retry_after: Option<u32>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
            retry_after: None,
        }
    }

    /// 501: a feature this model does not have (llama-server's
    /// `not_supported_error`).
    pub fn not_supported(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_IMPLEMENTED, "not_supported_error", message)
    }

    /// 400 `invalid_request_error`.
    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// 400 about one parameter.
    pub fn bad_param(param: &str, message: impl Into<String>) -> ApiError {
        ApiError::invalid(message)
            .with_param(param)
            .with_code("invalid_value")
    }

    pub fn with_param(mut self, param: &str) -> ApiError {
        self.param = Some(param.to_string());
        self
    }

    pub fn with_status(mut self, status: StatusCode) -> ApiError {
        self.status = status;
        self
    }

    pub fn with_code(mut self, code: &'static str) -> ApiError {
        self.code = Some(code);
        self
    }

    pub fn unauthorized() -> ApiError {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "invalid_request_error",
            "invalid or missing API key (send `Authorization: Bearer KEY`)",
        )
        .with_code("invalid_api_key")
    }

    pub fn model_not_found(name: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!("the model `{name}` does not exist"),
        )
        .with_param("model")
        .with_code("model_not_found")
    }

    pub fn not_found(path: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!("no route for {path}"),
        )
        .with_code("not_found")
    }

    pub fn method_not_allowed() -> ApiError {
        ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request_error",
            "method not allowed",
        )
        .with_code("method_not_allowed")
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    /// An accepted request that failed while it ran: its own grammar's
    /// dead end is a 400 (the client's constraint), anything else a 500.
    pub fn failed(f: Failure) -> ApiError {
        match f {
            Failure::Grammar(_) => ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                f.to_string(),
            )
            .with_code("grammar_failed"),
            Failure::Internal(_) => ApiError::internal(f.to_string()),
        }
    }

    /// The engine stopped before the request ended.
    pub fn engine_stopped() -> ApiError {
        ApiError::internal("the engine stopped")
    }

    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "server_error", message)
    }

    /// The JSON body, also sent as the last event of a failed stream.
    pub fn body(&self) -> serde_json::Value {
        json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        })
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status.as_u16(), self.message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (self.status, axum::Json(self.body())).into_response();
        if let Some(s) = self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        resp
    }
}

impl From<SubmitError> for ApiError {
    fn from(e: SubmitError) -> ApiError {
        let msg = e.to_string();
        match e {
            SubmitError::QueueFull(_) => ApiError {
                retry_after: Some(1),
                code: Some("queue_full"),
                ..ApiError::new(StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", msg)
            },
            SubmitError::PromptTooLong { .. } => ApiError::invalid(msg)
                .with_param("messages")
                .with_code("context_length_exceeded"),
            SubmitError::EmptyPrompt => ApiError::invalid(msg).with_param("prompt"),
            SubmitError::Invalid(_) => ApiError::invalid(msg).with_code("invalid_value"),
            SubmitError::ShuttingDown => ApiError::unavailable(msg),
            SubmitError::OverBudget { .. } => ApiError::invalid(msg)
                .with_param("max_tokens")
                .with_code("memory_budget_exceeded"),
        }
    }
}

impl From<BytesRejection> for ApiError {
    fn from(r: BytesRejection) -> ApiError {
        let status = r.status();
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                status,
                "invalid_request_error",
                "the request body is too large",
            )
            .with_code("request_too_large")
        } else {
            ApiError::new(status, "invalid_request_error", r.body_text())
        }
    }
}

/// The body as a typed request, with the path of a bad field as `param`.
pub fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let what = if inner.is_syntax() || inner.is_eof() {
            "the request body is not valid JSON"
        } else {
            "invalid request"
        };
        let err = ApiError::invalid(format!("{what}: {inner}"));
        // serde_path_to_error writes "?" when a syntax error leaves no path.
        if !(path.is_empty() || path == "." || path == "?") {
            err.with_param(&path)
        } else if let Some(key) = failing_key::<T>(body) {
            err.with_param(&key)
        } else {
            err
        }
    })?;
    de.end()
        .map_err(|e| ApiError::invalid(format!("the request body is not valid JSON: {e}")))?;
    Ok(value)
}

/// The top-level key whose value a body fails on, for the errors that come
/// with no path: a field of a `#[serde(flatten)]`ed part (the shared
/// sampling fields) is parsed from a buffered copy, out of the path
/// tracker's sight. The key is the first whose removal changes the error
/// (into success or another error) other than by making it missing.
fn failing_key<T: serde::de::DeserializeOwned>(body: &[u8]) -> Option<String> {
    let serde_json::Value::Object(all) = serde_json::from_slice(body).ok()? else {
        return None;
    };
    let error = |m: serde_json::Map<String, serde_json::Value>| {
        serde_json::from_value::<T>(serde_json::Value::Object(m))
            .err()
            .map(|e| e.to_string())
    };
    let whole = error(all.clone())?;
    all.keys().find_map(|key| {
        let mut without = all.clone();
        without.remove(key);
        match error(without) {
            None => Some(key.clone()),
            Some(e) if e != whole && !e.contains(&format!("missing field `{key}`")) => {
                Some(key.clone())
            }
            Some(_) => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    struct T {
        a: u32,
        b: Option<Vec<String>>,
    }

    #[test]
    fn parse_errors_name_the_field() {
        let e = parse_json::<T>(br#"{"a": 1, "b": [1]}"#).unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert_eq!(e.param.as_deref(), Some("b[0]"));
        let e = parse_json::<T>(b"{\"a\": ").unwrap_err();
        assert!(e.message.contains("not valid JSON"), "{}", e.message);
        let e = parse_json::<T>(b"{bad json").unwrap_err();
        assert!(e.message.contains("not valid JSON"), "{}", e.message);
        assert_eq!(
            e.param, None,
            "a syntax error outside any field names no param"
        );
        let e = parse_json::<T>(b"{\"a\": 1} x").unwrap_err();
        assert!(e.message.contains("not valid JSON"), "{}", e.message);
        assert!(parse_json::<T>(b"{\"a\": 1}").is_ok());
    }

    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    struct Outer {
        name: String,
        #[serde(flatten)]
        inner: Inner,
    }

    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    struct Inner {
        level: Option<f64>,
        tags: Option<Vec<String>>,
    }

    #[test]
    fn a_flattened_field_is_named_too() {
        let e = parse_json::<Outer>(br#"{"name": "x", "tags": ["a"], "level": "high"}"#);
        assert_eq!(e.unwrap_err().param.as_deref(), Some("level"));
        let e = parse_json::<Outer>(br#"{"tags": [1], "name": "x", "level": 2}"#);
        assert_eq!(e.unwrap_err().param.as_deref(), Some("tags"));
        let e = parse_json::<Outer>(br#"{"level": 2}"#).unwrap_err();
        assert!(e.message.contains("missing field `name`"), "{}", e.message);
        assert!(parse_json::<Outer>(br#"{"name": "x", "level": 2}"#).is_ok());
    }

    #[test]
    fn queue_full_is_429_with_retry_after() {
        let r = ApiError::from(SubmitError::QueueFull(3)).into_response();
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(r.headers()[header::RETRY_AFTER], "1");
    }
}
