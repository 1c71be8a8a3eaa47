//! Helpers shared by the provider wire-format tests.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use serde_json::Value;
use trellis_middleware::runtime::message::CacheTtl;
use trellis_middleware::runtime::model::{ModelError, ToolSpec};
use trellis_middleware::{ChatModel, Message, ModelRequest};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// Compare JSON values, printing both pretty on mismatch.
#[track_caller]
pub fn assert_json_eq(actual: &Value, expected: &Value) {
    if actual != expected {
        panic!(
            "JSON differs\n--- actual ---\n{}\n--- expected ---\n{}",
            serde_json::to_string_pretty(actual).unwrap(),
            serde_json::to_string_pretty(expected).unwrap()
        );
    }
}

/// A mock server answering every POST to `route` with `response`.
pub async fn server_answering(route: &str, response: ResponseTemplate) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(route))
        .respond_with(response)
        .mount(&server)
        .await;
    server
}

/// The single request the server received.
pub async fn only_request(server: &MockServer) -> wiremock::Request {
    let mut requests = server.received_requests().await.expect("recording is on");
    assert_eq!(requests.len(), 1, "expected exactly one request");
    requests.remove(0)
}

/// The JSON body of a request.
pub fn body_json(request: &wiremock::Request) -> Value {
    serde_json::from_slice(&request.body).expect("the body is JSON")
}

/// A header's value as text.
pub fn header(request: &wiremock::Request, name: &str) -> Option<String> {
    request
        .headers
        .get(name)
        .map(|v| v.to_str().expect("ASCII header").to_owned())
}

/// A tool spec.
pub fn tool(name: &str, description: &str, parameters: Value) -> Arc<ToolSpec> {
    Arc::new(ToolSpec {
        name: name.to_owned(),
        description: description.to_owned(),
        parameters,
    })
}

/// The `read_file` tool used across tests.
pub fn read_file_tool() -> Arc<ToolSpec> {
    tool(
        "read_file",
        "Read a file.",
        serde_json::json!({
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"]
        }),
    )
}

/// `message` with a cache breakpoint.
pub fn with_breakpoint(mut message: Message, ttl: CacheTtl) -> Message {
    message.meta_mut().cache_breakpoint = Some(ttl);
    message
}

/// Each answer, given to `error_for` (one call answered with it), is a `ModelError::Other`: a
/// success body that does not parse is a typed error, not a panic.
pub async fn assert_malformed_bodies_are_other<F, Fut>(
    error_for: F,
    answers: impl IntoIterator<Item = ResponseTemplate>,
) where
    F: Fn(ResponseTemplate) -> Fut,
    Fut: std::future::Future<Output = ModelError>,
{
    for answer in answers {
        let error = error_for(answer).await;
        assert!(matches!(error, ModelError::Other { .. }), "{error:?}");
    }
}

/// `model`, whose server does not listen, fails a call with `ModelError::Transport`.
pub async fn assert_unreachable_is_transport(model: impl ChatModel) {
    let error = model
        .invoke(ModelRequest {
            messages: vec![Message::human("hi")].into(),
            ..ModelRequest::default()
        })
        .await
        .unwrap_err();
    assert!(matches!(error, ModelError::Transport { .. }), "{error:?}");
}

/// An address on loopback where nothing listens.
pub fn dead_address() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("http://127.0.0.1:{port}")
}
