//! HTTP details around every route: `X-Request-Id` and CORS.
//!
//! - Every response carries `X-Request-Id`: the client's own (when it sent a
//!   usable one) or a fresh `req-…` id. Handlers and logs find it in the
//!   request's extensions as [`RequestId`].
//! - CORS is off unless `ServerConfig::cors_origins` lists origins (or `*`):
//!   then a request from an allowed `Origin` gets
//!   `Access-Control-Allow-Origin`, and a preflight `OPTIONS` from one is
//!   answered here with 204 (before the API-key check, as browsers send no
//!   credentials on a preflight); a preflight from any other origin gets a
//!   JSON 403.

use crate::errors::ApiError;
use crate::openai::params::random_id;
use crate::state::AppState;
use axum::extract::{Request, State};
use axum::http::header::{self, HeaderName, HeaderValue};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

pub static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The id of the request being served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestId(pub String);

/// A client's id is kept when it is 1..=128 visible ASCII characters.
fn usable(v: &HeaderValue) -> Option<&str> {
    let s = v.to_str().ok()?;
    (!s.is_empty() && s.len() <= 128 && s.bytes().all(|b| b.is_ascii_graphic())).then_some(s)
}

pub async fn request_id(mut req: Request, next: Next) -> Response {
    let id = req
        .headers()
        .get(&X_REQUEST_ID)
        .and_then(usable)
        .map(str::to_string)
        .unwrap_or_else(|| format!("req-{}", random_id(24)));
    req.extensions_mut().insert(RequestId(id.clone()));
    let mut resp = next.run(req).await;
    if let Ok(v) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert(X_REQUEST_ID.clone(), v);
    }
    resp
}

/// Which origins may call the API from a browser.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum CorsOrigins {
    /// No CORS headers at all (the default).
    #[default]
    None,
    Any,
    List(Vec<String>),
}

impl CorsOrigins {
    /// `--cors-origins`: `*`, or origins separated by commas
    /// (`https://a.example,http://localhost:3000`).
    pub fn parse(spec: &str) -> Result<CorsOrigins, String> {
        let items: Vec<&str> = spec
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        if items.is_empty() {
            return Ok(CorsOrigins::None);
        }
        if items.contains(&"*") {
            if items.len() > 1 {
                return Err("--cors-origins: `*` stands alone".into());
            }
            return Ok(CorsOrigins::Any);
        }
        let mut list = Vec::new();
        for o in items {
            let o = o.trim_end_matches('/');
            let rest = o
                .strip_prefix("http://")
                .or_else(|| o.strip_prefix("https://"));
            let ok = rest.is_some_and(|r| !r.is_empty() && !r.contains('/'))
                && HeaderValue::from_str(o).is_ok();
            if !ok {
                return Err(format!(
                    "--cors-origins: {o:?} is not an origin (scheme://host[:port], no path)"
                ));
            }
            list.push(o.to_ascii_lowercase());
        }
        Ok(CorsOrigins::List(list))
    }

    fn allows(&self, origin: &str) -> bool {
        match self {
            CorsOrigins::None => false,
            CorsOrigins::Any => true,
            CorsOrigins::List(l) => l.iter().any(|o| o.eq_ignore_ascii_case(origin)),
        }
    }
}

const ALLOW_METHODS: &str = "GET, POST, OPTIONS";
const DEFAULT_ALLOW_HEADERS: &str =
    "authorization, content-type, x-api-key, x-request-id, anthropic-version, anthropic-beta";
const EXPOSE_HEADERS: &str = "x-request-id, retry-after";

pub async fn cors(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let origins = &state.config.cors_origins;
    if *origins == CorsOrigins::None {
        return next.run(req).await;
    }
    let origin = req
        .headers()
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let preflight = req.method() == Method::OPTIONS
        && req
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    let Some(origin) = origin else {
        return next.run(req).await;
    };
    let allowed = origins.allows(&origin);
    let allow_origin = if *origins == CorsOrigins::Any {
        HeaderValue::from_static("*")
    } else {
        HeaderValue::from_str(&origin).unwrap_or(HeaderValue::from_static("null"))
    };
    if preflight {
        if !allowed {
            return ApiError::invalid(format!("origin {origin} is not allowed (--cors-origins)"))
                .with_status(StatusCode::FORBIDDEN)
                .with_code("origin_not_allowed")
                .into_response();
        }
        let allow_headers = req
            .headers()
            .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
            .cloned()
            .unwrap_or(HeaderValue::from_static(DEFAULT_ALLOW_HEADERS));
        let mut resp = StatusCode::NO_CONTENT.into_response();
        let h = resp.headers_mut();
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, allow_origin);
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static(ALLOW_METHODS),
        );
        h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, allow_headers);
        h.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static("600"),
        );
        h.insert(header::VARY, HeaderValue::from_static("Origin"));
        return resp;
    }
    let mut resp = next.run(req).await;
    if allowed {
        let h = resp.headers_mut();
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, allow_origin);
        h.insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static(EXPOSE_HEADERS),
        );
        h.append(header::VARY, HeaderValue::from_static("Origin"));
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_lists() {
        assert_eq!(CorsOrigins::parse(""), Ok(CorsOrigins::None));
        assert_eq!(CorsOrigins::parse("*"), Ok(CorsOrigins::Any));
        assert_eq!(
            CorsOrigins::parse("http://localhost:3000, https://A.example/"),
            Ok(CorsOrigins::List(vec![
                "http://localhost:3000".into(),
                "https://a.example".into()
            ]))
        );
        assert!(CorsOrigins::parse("*,http://a").is_err());
        assert!(CorsOrigins::parse("localhost:3000").is_err());
        assert!(CorsOrigins::parse("http://a/path").is_err());
        let l = CorsOrigins::parse("http://a.example").unwrap();
        assert!(l.allows("http://a.example") && l.allows("HTTP://A.EXAMPLE"));
        assert!(!l.allows("http://b.example"));
        assert!(!CorsOrigins::None.allows("http://a.example"));
    }

    #[test]
    fn client_request_ids() {
        let v = |s: &str| HeaderValue::from_str(s).unwrap();
        assert_eq!(usable(&v("abc-123")), Some("abc-123"));
        assert_eq!(usable(&v("")), None);
        assert_eq!(usable(&v("has space")), None);
        assert_eq!(usable(&v(&"x".repeat(129))), None);
    }
}
