//! The web page `trellis serve` serves at `/` (off with `--no-ui` / [`Server::ui`]): plain HTML,
//! CSS and JavaScript modules of our own, embedded in the binary, no build step and no third-party
//! code. The page is a client of the public API and nothing else: it sends the same key as any
//! other client (`x-api-key`), so it sees exactly what its user may see, and it costs a run
//! nothing unless it is open: it reads runs and records like any client, and the extra stream
//! parts it asks for (`tasks`, `stream_subgraphs`) are made only for the runs it starts (see
//! docs/server.md, "What the page costs a run").
//!
//! | route | what |
//! |---|---|
//! | `GET /` | `index.html`, with a `<base>` naming the prefix the router is mounted under |
//! | `GET /ui/{file}` | the page's modules, stylesheet and icon |
//!
//! Both need no key (the page asks for one and sends it with its API calls). Every answer carries
//! a strict Content-Security-Policy: scripts, styles, images and connections from the server's own
//! origin only, no inline script, no frames, no form posts elsewhere.
//!
//! [`Server::ui`]: crate::server::Server::ui

use axum::Router;
use axum::extract::{NestedPath, Path, Request};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// The page's Content-Security-Policy: nothing from anywhere but the server's own origin, no
/// inline code, not framed.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; \
connect-src 'self'; base-uri 'self'; form-action 'none'; frame-ancestors 'none'";

/// The page's files: name under `/ui/`, media type, content.
const ASSETS: &[(&str, &str, &str)] = &[
    ("style.css", "text/css; charset=utf-8", include_str!("style.css")),
    ("app.js", JS, include_str!("app.js")),
    ("api.js", JS, include_str!("api.js")),
    ("sse.js", JS, include_str!("sse.js")),
    ("dom.js", JS, include_str!("dom.js")),
    ("key.js", JS, include_str!("key.js")),
    ("threads.js", JS, include_str!("threads.js")),
    ("conversation.js", JS, include_str!("conversation.js")),
    ("cards.js", JS, include_str!("cards.js")),
    ("runner.js", JS, include_str!("runner.js")),
    ("approvals.js", JS, include_str!("approvals.js")),
    ("todos.js", JS, include_str!("todos.js")),
    ("files.js", JS, include_str!("files.js")),
    ("runs.js", JS, include_str!("runs.js")),
    ("skills.js", JS, include_str!("skills.js")),
    ("icon.svg", "image/svg+xml", include_str!("icon.svg")),
];

const JS: &str = "text/javascript; charset=utf-8";

/// The page, before its `<base>` is filled in.
const INDEX: &str = include_str!("index.html");

/// The routes of the page (merged in front of the API's, outside its key check).
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(index))
        .route("/ui/{file}", get(asset))
}

/// `GET /`: the page, its `<base>` the path the router is mounted under (`/` on its own,
/// `/agents/` when nested there), so the page's relative URLs reach the API wherever it is.
async fn index(request: Request) -> Response {
    let nested = request.extensions().get::<NestedPath>();
    let prefix = nested.map_or("", |n| n.as_str()).trim_end_matches('/');
    let base = format!("{}/", escape(prefix));
    respond("text/html; charset=utf-8", INDEX.replace("{{BASE}}", &base))
}

/// `GET /ui/{file}`: one of [`ASSETS`], else 404.
async fn asset(Path(file): Path<String>) -> Response {
    match ASSETS.iter().find(|(name, _, _)| *name == file) {
        Some((_, media_type, body)) => respond(media_type, (*body).to_owned()),
        None => (StatusCode::NOT_FOUND, "no such file").into_response(),
    }
}

/// `body` as `media_type` with the page's security headers; revalidated on every load, so a new
/// binary's page is never mixed with an old one's modules.
fn respond(media_type: &'static str, body: String) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    let set = [
        (header::CONTENT_TYPE, media_type),
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::CACHE_CONTROL, "no-cache"),
    ];
    for (name, value) in set {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// `text` safe inside a double-quoted HTML attribute.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn every_module_the_page_imports_is_served() {
        // `import … from "./x.js"` in any module, and every file index.html names, is an asset.
        let mut sources: Vec<&str> = ASSETS.iter().map(|(_, _, body)| *body).collect();
        sources.push(INDEX);
        for source in sources {
            for piece in source.split("\"./").skip(1).chain(source.split("\"ui/").skip(1)) {
                let name = &piece[..piece.find('"').unwrap()];
                assert!(
                    ASSETS.iter().any(|(n, _, _)| *n == name),
                    "{name} is imported but not served"
                );
            }
        }
    }

    #[test]
    fn the_base_is_escaped() {
        assert_eq!(escape("/a\"<b>&"), "/a&quot;&lt;b&gt;&amp;");
    }
}
