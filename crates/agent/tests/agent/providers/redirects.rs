//! Keys never follow a redirect to another origin (security review F16).
//!
//! reqwest's default policy follows up to 10 redirects and strips only `Authorization`, `Cookie`
//! and the proxy headers on a cross-host hop, so Anthropic's `x-api-key` (and any custom header)
//! went wherever a proxy or a misconfigured base URL pointed. Providers now follow a redirect only
//! within the origin they were given, and answer a cross-origin one with a typed, non-transient
//! error that names where it pointed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use trellis_agent::providers::anthropic::{AnthropicConfig, AnthropicModel};
use trellis_agent::providers::openai::{OpenAiConfig, OpenAiModel};
use trellis_middleware::{ChatModel, Message, ModelError, ModelRequest};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn hello() -> ModelRequest {
    ModelRequest {
        messages: vec![Message::human("hi")].into(),
        ..ModelRequest::default()
    }
}

/// A server that answers every request with a 307 to `to`.
async fn redirecting_to(to: &str) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(307).insert_header("location", to))
        .mount(&server)
        .await;
    server
}

fn anthropic_at(base_url: &str, stream: bool) -> AnthropicModel {
    let mut config =
        AnthropicConfig::new("claude-sonnet-4-5", "secret-anthropic-key").with_base_url(base_url);
    config.stream = stream;
    AnthropicModel::new(config).unwrap()
}

fn openai_at(base_url: &str, stream: bool) -> OpenAiModel {
    let mut config = OpenAiConfig::openai("gpt-4.1", "sk-secret").with_base_url(base_url);
    config.stream = stream;
    OpenAiModel::new(config).unwrap()
}

fn assert_refused(error: &ModelError, elsewhere: &MockServer) {
    assert!(
        !error.is_transient(),
        "a cross-origin redirect is not worth retrying: {error:?}"
    );
    let text = error.to_string();
    assert!(text.contains("redirect"), "{text}");
    assert!(
        text.contains(&elsewhere.uri()),
        "the error names where it pointed: {text}"
    );
}

#[tokio::test]
async fn a_redirect_to_another_host_never_receives_the_anthropic_key() {
    let elsewhere = MockServer::start().await;
    let proxy = redirecting_to(&format!("{}/v1/messages", elsewhere.uri())).await;
    for stream in [false, true] {
        let model = anthropic_at(&proxy.uri(), stream);
        let error = model.invoke(hello()).await.expect_err("the redirect is refused");
        assert_refused(&error, &elsewhere);
    }
    let received = elsewhere.received_requests().await.unwrap_or_default();
    assert!(
        received.is_empty(),
        "the other host got {} requests",
        received.len()
    );
    assert_eq!(proxy.received_requests().await.unwrap_or_default().len(), 2);
}

#[tokio::test]
async fn a_redirect_to_another_host_never_receives_the_openai_key() {
    let elsewhere = MockServer::start().await;
    let proxy = redirecting_to(&format!("{}/v1/chat/completions", elsewhere.uri())).await;
    for stream in [false, true] {
        let model = openai_at(&format!("{}/v1", proxy.uri()), stream);
        let error = model.invoke(hello()).await.expect_err("the redirect is refused");
        assert_refused(&error, &elsewhere);
    }
    assert!(elsewhere.received_requests().await.unwrap_or_default().is_empty());
}

#[tokio::test]
async fn a_redirect_within_the_same_origin_is_followed() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/old/v1/messages"))
        .respond_with(ResponseTemplate::new(308).insert_header("location", "/v1/messages"))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": [{"type": "text", "text": "moved"}],
            "stop_reason": "end_turn", "stop_sequence": null,
            "usage": {"input_tokens": 1, "output_tokens": 1}
        })))
        .mount(&server)
        .await;
    let model = anthropic_at(&format!("{}/old", server.uri()), false);
    let reply = model
        .invoke(hello())
        .await
        .expect("the same-origin redirect is followed");
    assert_eq!(reply.message.text_content(), "moved");
    let keys: Vec<_> = server
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .map(|r| {
            r.headers
                .get("x-api-key")
                .map(|v| v.to_str().unwrap_or_default().to_owned())
        })
        .collect();
    assert_eq!(keys, vec![Some("secret-anthropic-key".to_owned()); 2]);
}
