//! The chat page served at `/` (and `/index.html`): one self-contained HTML
//! file (inline CSS and JS, no requests but to this server's `/v1` API),
//! compiled into the binary. `ServerConfig::webui` turns it off.

use axum::http::header;
use axum::response::{IntoResponse, Response};

/// The page itself (`src/webui/index.html`).
pub const INDEX_HTML: &str = include_str!("webui/index.html");

/// The page may run only its own inline script and style, and talk only to
/// the server it came from.
const CSP: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                   connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'";

pub async fn index() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        INDEX_HTML,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::INDEX_HTML;

    #[test]
    fn the_page_is_self_contained() {
        assert!(INDEX_HTML.starts_with("<!doctype html>"));
        // No external scripts, styles, fonts or images.
        for needle in [
            "src=\"http",
            "href=\"http",
            "url(http",
            "@import",
            "<script src",
        ] {
            assert!(!INDEX_HTML.contains(needle), "the page loads {needle}");
        }
        assert!(INDEX_HTML.contains("/v1/chat/completions"));
    }
}
