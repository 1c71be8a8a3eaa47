//! Issue 21, item 10: a failed call keeps the HTTP status, the provider's request id and the
//! source error, and the CLI shows the request id. Anthropic sends `request-id` on every answer
//! ("Errors", docs.anthropic.com/en/api/errors: "every API response includes a unique
//! request-id header"); OpenAI sends `x-request-id` (openai-python `_request_id`, read from
//! `x-request-id`). Before the fix, `ModelError` carried only a message.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::error::Error as _;

use serde_json::json;
use trellis_agent::providers::anthropic::{AnthropicConfig, AnthropicModel};
use trellis_agent::providers::openai::{OpenAiConfig, OpenAiModel};
use trellis_middleware::runtime::model::ModelError;
use trellis_middleware::runtime::stream::{DeltaSink, ModelDelta};
use trellis_middleware::{ChatModel, ModelRequest};
use wiremock::ResponseTemplate;

use crate::cli::{example, trellis};
use crate::providers::common::server_answering;

fn anthropic_overloaded() -> ResponseTemplate {
    ResponseTemplate::new(529)
        .set_body_string(
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
                .to_string(),
        )
        .insert_header("content-type", "application/json")
        .insert_header("request-id", "req_011CSHoEeqs5C35K2UUqR7Fy")
}

#[tokio::test]
async fn anthropic_errors_keep_status_and_request_id_streamed_or_not() {
    let server = server_answering("/v1/messages", anthropic_overloaded()).await;
    let model =
        AnthropicModel::new(AnthropicConfig::new("claude-sonnet-4-5", "k").with_base_url(server.uri()))
            .unwrap();
    let err = model.invoke(ModelRequest::default()).await.unwrap_err();
    assert!(matches!(err, ModelError::Overloaded { .. }), "{err:?}");
    assert_eq!(err.status(), Some(529));
    assert_eq!(err.request_id(), Some("req_011CSHoEeqs5C35K2UUqR7Fy"));
    assert!(
        err.to_string()
            .ends_with("[request id req_011CSHoEeqs5C35K2UUqR7Fy]"),
        "{err}"
    );
    assert!(err.is_transient(), "the kind still decides retries");

    let ignore = |_: ModelDelta| {};
    let sink: DeltaSink<'_> = &ignore;
    let err = model.stream(ModelRequest::default(), sink).await.unwrap_err();
    assert_eq!(err.request_id(), Some("req_011CSHoEeqs5C35K2UUqR7Fy"), "{err:?}");
    assert_eq!(err.status(), Some(529));
}

#[tokio::test]
async fn openai_errors_keep_x_request_id() {
    let server = server_answering(
        "/v1/chat/completions",
        ResponseTemplate::new(400)
            .set_body_string(
                json!({"error": {"message": "Invalid value for 'model'", "type": "invalid_request_error",
                                 "param": "model", "code": null}})
                .to_string(),
            )
            .insert_header("content-type", "application/json")
            .insert_header("x-request-id", "req_f3e5a1b2c3d4"),
    )
    .await;
    let mut config = OpenAiConfig::openai("gpt-4.1", "sk").with_base_url(format!("{}/v1", server.uri()));
    config.stream = false;
    let err = OpenAiModel::new(config)
        .unwrap()
        .invoke(ModelRequest::default())
        .await
        .unwrap_err();
    assert!(matches!(err, ModelError::BadRequest { .. }), "{err:?}");
    assert_eq!(err.status(), Some(400));
    assert_eq!(err.request_id(), Some("req_f3e5a1b2c3d4"));
    assert!(err.message().contains("Invalid value for 'model'"));
}

#[tokio::test]
async fn a_transport_failure_keeps_its_source_error() {
    // A port nothing listens on: bind one, then drop the listener.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut config =
        AnthropicConfig::new("claude-sonnet-4-5", "k").with_base_url(format!("http://127.0.0.1:{port}"));
    config.stream = false;
    let err = AnthropicModel::new(config)
        .unwrap()
        .invoke(ModelRequest::default())
        .await
        .unwrap_err();
    assert!(matches!(err, ModelError::Transport { .. }), "{err:?}");
    assert_eq!(err.status(), None);
    let details = err.source().expect("the HTTP details are the source");
    let cause = details.source().expect("the reqwest error is kept");
    assert!(cause.to_string().contains("error sending request"), "{cause}");
}

#[tokio::test]
async fn the_cli_shows_the_request_id_of_a_failed_call() {
    let server = server_answering(
        "/v1/messages",
        ResponseTemplate::new(401)
            .set_body_string(
                json!({"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}})
                    .to_string(),
            )
            .insert_header("content-type", "application/json")
            .insert_header("request-id", "req_cli_0042"),
    )
    .await;
    let uri = server.uri();
    let state = tempfile::tempdir().unwrap();
    let state_dir = state.path().display().to_string();
    let output = tokio::task::spawn_blocking(move || {
        trellis()
            .args([
                "run",
                "--model",
                "anthropic:claude-sonnet-4-5",
                "--memory",
                &example("AGENTS.md"),
            ])
            .args(["--state-dir", &state_dir, "hello"])
            .env("ANTHROPIC_API_KEY", "bad-key")
            .env("ANTHROPIC_BASE_URL", uri)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("authentication failed"), "{stderr}");
    assert!(stderr.contains("request id req_cli_0042"), "{stderr}");
}
