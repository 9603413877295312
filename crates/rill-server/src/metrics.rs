//! The server's own counters, appended to the engine's on `/metrics`.

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use crate::state::AppState;

#[derive(Default)]
pub struct HttpMetrics {
    /// Responses by (route, status).
    responses: Mutex<BTreeMap<(String, u16), u64>>,
    /// Streams being sent.
    pub streams_open: AtomicU64,
    /// Streams whose client went away before the end.
    pub streams_disconnected: AtomicU64,
}

impl HttpMetrics {
    pub fn record(&self, route: &str, status: u16) {
        if let Ok(mut m) = self.responses.lock() {
            *m.entry((route.to_string(), status)).or_insert(0) += 1;
        }
    }

    /// Responses counted for `route` with `status`.
    pub fn count(&self, route: &str, status: u16) -> u64 {
        self.responses
            .lock()
            .ok()
            .and_then(|m| m.get(&(route.to_string(), status)).copied())
            .unwrap_or(0)
    }

    pub fn render(&self) -> String {
        let mut s = String::new();
        s.push_str("# HELP rill_http_requests_total HTTP responses by route and status.\n");
        s.push_str("# TYPE rill_http_requests_total counter\n");
        if let Ok(m) = self.responses.lock() {
            for ((route, status), n) in m.iter() {
                let _ = writeln!(
                    s,
                    "rill_http_requests_total{{route=\"{}\",status=\"{status}\"}} {n}",
                    route.replace('\\', "\\\\").replace('"', "\\\"")
                );
            }
        }
        let _ = writeln!(
            s,
            "# HELP rill_http_streams_open Streaming responses being sent.\n# TYPE rill_http_streams_open gauge\nrill_http_streams_open {}",
            self.streams_open.load(Relaxed)
        );
        let _ = writeln!(
            s,
            "# HELP rill_http_streams_disconnected_total Streams the client left before the end.\n# TYPE rill_http_streams_disconnected_total counter\nrill_http_streams_disconnected_total {}",
            self.streams_disconnected.load(Relaxed)
        );
        s
    }
}

/// Middleware: count every response by its route (the matched pattern, so
/// unknown paths do not grow the table) and status, and log it.
pub async fn track(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "unmatched".to_string());
    let method = req.method().clone();
    let request_id = req
        .extensions()
        .get::<crate::wire::RequestId>()
        .map(|r| r.0.clone())
        .unwrap_or_default();
    let t0 = std::time::Instant::now();
    let resp = next.run(req).await;
    let status = resp.status().as_u16();
    state.http.record(&route, status);
    tracing::info!(
        target: "rill_server::http",
        %method,
        route,
        status,
        request_id,
        ms = t0.elapsed().as_secs_f64() * 1e3,
        "request"
    );
    resp
}
