//! Claude on Amazon Bedrock against a mock server. Written from the Bedrock user guide's
//! "Anthropic Claude Messages API" page (docs.aws.amazon.com/bedrock/latest/userguide/
//! model-parameters-anthropic-claude-messages.html: the body of `InvokeModel` is the Messages body
//! with `anthropic_version: "bedrock-2023-05-31"` and no `model`; `anthropic_beta` in the body),
//! the Bedrock runtime API reference (`POST /model/{modelId}/invoke`; errors
//! `ThrottlingException` 429, `ValidationException` 400, `AccessDeniedException` 403;
//! `x-amzn-RequestId`; `InvokeModelWithResponseStream` at `/invoke-with-response-stream`, its
//! `chunk` events' `bytes` holding Anthropic streaming events), and SigV4 (see `providers_sigv4.rs`, which recomputes the signature).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, SystemTime};

use serde_json::json;
use trellis_agent::providers::{
    AnthropicModel, AwsCredentials, BedrockConfig, Clock, ProviderError, from_model_string_with_env,
};
use trellis_middleware::runtime::message::CacheTtl;
use trellis_middleware::runtime::model::ModelError;
use trellis_middleware::runtime::stream::{DeltaSink, ModelDelta};
use trellis_middleware::{ChatModel, Message, ModelRequest, SystemBlock};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::providers::anthropic_common::text_response;
use crate::providers::common::*;
use crate::providers::sigv4::{Signed, parse_authorization, signature};

const MODEL_ID: &str = "anthropic.claude-sonnet-4-5-20250929-v1:0";
/// The model id as the path carries it (`:` percent-encoded, as the AWS SDKs encode labels).
const INVOKE_PATH: &str = "/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke";
const STREAM_PATH: &str = "/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke-with-response-stream";
/// AWS's documentation example credentials.
const KEY_ID: &str = "AKIDEXAMPLE";
const SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
const TOKEN: &str = "session-token-example";

/// 2015-08-30T12:36:00Z, the time of AWS's signing examples.
fn signing_time() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_440_938_160)
}

fn config(base_url: &str) -> BedrockConfig {
    let credentials = AwsCredentials::new(KEY_ID, SECRET, Some(TOKEN.into()));
    let mut config = BedrockConfig::new(MODEL_ID, "us-east-1", credentials);
    config.anthropic.base_url = base_url.to_owned();
    config.clock = Clock::fixed(signing_time());
    config
}

async fn server_with(response: ResponseTemplate) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(INVOKE_PATH))
        .respond_with(response)
        .mount(&server)
        .await;
    server
}

fn request() -> ModelRequest {
    ModelRequest {
        system: vec![SystemBlock::new("You are Trellis.").with_cache_breakpoint(CacheTtl::FiveMinutes)],
        messages: vec![Message::human("Hi")].into(),
        tools: vec![read_file_tool()],
        max_output_tokens: Some(1024),
        ..ModelRequest::default()
    }
}

/// Recompute the signature of `sent` from its signed headers and body and compare.
#[track_caller]
fn assert_signed(sent: &wiremock::Request) {
    let auth = parse_authorization(&header(sent, "authorization").expect("an authorization header"));
    assert_eq!(auth.access_key_id, KEY_ID);
    assert_eq!(auth.date, "20150830");
    assert_eq!(auth.region, "us-east-1");
    assert_eq!(auth.service, "bedrock");
    for needed in ["content-type", "host", "x-amz-date", "x-amz-security-token"] {
        assert!(
            auth.signed_headers.iter().any(|h| h == needed),
            "{needed} unsigned: {auth:?}"
        );
    }
    assert_eq!(header(sent, "x-amz-date").as_deref(), Some("20150830T123600Z"));
    assert_eq!(header(sent, "x-amz-security-token").as_deref(), Some(TOKEN));
    assert!(verifies(sent), "the signature does not verify");
}

/// True when the signature of `sent` is the one recomputed from its signed headers and body.
fn verifies(sent: &wiremock::Request) -> bool {
    let auth = parse_authorization(&header(sent, "authorization").expect("an authorization header"));
    let headers: Vec<(String, String)> = auth
        .signed_headers
        .iter()
        .map(|name| {
            (
                name.clone(),
                header(sent, name).expect("a signed header was sent"),
            )
        })
        .collect();
    let expected = signature(
        SECRET,
        &auth.region,
        &auth.service,
        &header(sent, "x-amz-date").expect("x-amz-date"),
        &Signed {
            method: "POST",
            path: sent.url.path(),
            headers: &headers,
            body: &sent.body,
        },
    );
    auth.signature == expected
}

#[tokio::test]
async fn invoke_sends_the_bedrock_body_signed_with_sigv4() {
    let server = server_with(ResponseTemplate::new(200).set_body_json(text_response())).await;
    let mut config = config(&server.uri());
    config.anthropic.beta = vec!["context-1m-2025-08-07".into()];
    let model = AnthropicModel::bedrock(config).unwrap();
    assert_eq!(model.provider(), Some("bedrock"));
    let response = model.invoke(request()).await.unwrap();
    assert_eq!(response.message.text_content(), "Hi! My name is Claude.");
    assert_eq!(response.usage.cache_write_tokens, 2051);

    let sent = only_request(&server).await;
    assert_eq!(sent.url.path(), INVOKE_PATH);
    assert_eq!(header(&sent, "x-api-key"), None, "no Anthropic key goes to AWS");
    assert_eq!(header(&sent, "anthropic-version"), None);
    assert_json_eq(
        &body_json(&sent),
        &json!({
            "anthropic_version": "bedrock-2023-05-31",
            "anthropic_beta": ["context-1m-2025-08-07"],
            "max_tokens": 1024,
            "system": [{"type": "text", "text": "You are Trellis.", "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
            "tools": [{"name": "read_file", "description": "Read a file.",
                       "input_schema": {"type": "object", "properties": {"path": {"type": "string"}},
                                        "required": ["path"]}}]
        }),
    );
    assert_signed(&sent);
}

#[tokio::test]
async fn a_tampered_body_does_not_verify() {
    // The verifier is not a rubber stamp: the same request with one byte changed fails it.
    let server = server_with(ResponseTemplate::new(200).set_body_json(text_response())).await;
    let model = AnthropicModel::bedrock(config(&server.uri())).unwrap();
    model.invoke(request()).await.unwrap();
    let mut sent = only_request(&server).await;
    assert!(verifies(&sent));
    let last = sent.body.len() - 2;
    sent.body[last] = b' ';
    assert!(!verifies(&sent), "a changed body must not verify");
}

/// CRC-32 (IEEE, as the event-stream prelude and message checksums use).
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = 0xFFFF_FFFFu32;
    for byte in bytes {
        crc ^= u32::from(*byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// One AWS event-stream message, framed by hand from the format's description (AWS SDK
/// "Event stream encoding": total length, headers length, prelude CRC, headers as name length,
/// name, type 7 = string, value length, value; the payload; the message CRC).
fn frame(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
    let mut encoded = Vec::new();
    for (name, value) in headers {
        encoded.push(u8::try_from(name.len()).unwrap());
        encoded.extend_from_slice(name.as_bytes());
        encoded.push(7);
        encoded.extend_from_slice(&u16::try_from(value.len()).unwrap().to_be_bytes());
        encoded.extend_from_slice(value.as_bytes());
    }
    let total = u32::try_from(12 + encoded.len() + payload.len() + 4).unwrap();
    let mut out = Vec::new();
    out.extend_from_slice(&total.to_be_bytes());
    out.extend_from_slice(&u32::try_from(encoded.len()).unwrap().to_be_bytes());
    out.extend_from_slice(&crc32(&out).to_be_bytes());
    out.extend_from_slice(&encoded);
    out.extend_from_slice(payload);
    out.extend_from_slice(&crc32(&out).to_be_bytes());
    out
}

/// A `chunk` event carrying one Anthropic streaming event (InvokeModelWithResponseStream's
/// `PayloadPart`: `{"bytes": base64}`).
fn chunk(event: serde_json::Value) -> Vec<u8> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD.encode(event.to_string());
    frame(
        &[
            (":event-type", "chunk"),
            (":content-type", "application/json"),
            (":message-type", "event"),
        ],
        json!({"bytes": bytes}).to_string().as_bytes(),
    )
}

fn anthropic_events(text: &[&str]) -> Vec<Vec<u8>> {
    let mut frames = vec![
        chunk(
            json!({"type": "message_start", "message": {"id": "msg_bdrk_1", "type": "message", "role": "assistant",
              "model": "claude-sonnet-4-5-20250929", "content": [], "stop_reason": null,
              "usage": {"input_tokens": 12, "output_tokens": 1}}}),
        ),
        chunk(
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
    ];
    for piece in text {
        frames.push(chunk(json!({"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "text_delta", "text": piece}})));
    }
    frames
}

fn anthropic_tail() -> Vec<Vec<u8>> {
    vec![
        chunk(json!({"type": "content_block_stop", "index": 0})),
        chunk(
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 6}}),
        ),
        chunk(json!({"type": "message_stop",
                     "amazon-bedrock-invocationMetrics": {"inputTokenCount": 12, "outputTokenCount": 6}})),
    ]
}

async fn stream_server(body: Vec<u8>) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(STREAM_PATH))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_bytes(body)
                .insert_header("content-type", "application/vnd.amazon.eventstream")
                .insert_header("x-amzn-RequestId", "stream-req-7"),
        )
        .mount(&server)
        .await;
    server
}

async fn streamed(model: &AnthropicModel) -> (Result<trellis_middleware::ModelResponse, ModelError>, String) {
    let text = std::sync::Mutex::new(String::new());
    let on_delta = |d: ModelDelta| {
        if let ModelDelta::Text { text: piece, .. } = d {
            text.lock().unwrap().push_str(&piece);
        }
    };
    let sink: DeltaSink<'_> = &on_delta;
    let result = model.stream(request(), sink).await;
    (result, text.into_inner().unwrap())
}

#[tokio::test]
async fn streaming_reads_the_event_stream_of_invoke_with_response_stream() {
    let frames: Vec<u8> = [anthropic_events(&["Hello from ", "Bedrock ✓"]), anthropic_tail()]
        .concat()
        .concat();
    let server = stream_server(frames).await;
    let model = AnthropicModel::bedrock(config(&server.uri())).unwrap();
    let (response, text) = streamed(&model).await;
    let response = response.unwrap();
    assert_eq!(response.message.text_content(), "Hello from Bedrock ✓");
    assert_eq!(text, "Hello from Bedrock ✓");
    assert_eq!(response.usage.output_tokens, 6);
    let sent = only_request(&server).await;
    assert_eq!(sent.url.path(), STREAM_PATH);
    assert!(
        body_json(&sent).get("stream").is_none(),
        "Bedrock takes no `stream` field"
    );
    assert_eq!(body_json(&sent)["anthropic_version"], "bedrock-2023-05-31");
    assert_signed(&sent);
}

#[tokio::test]
async fn a_mid_stream_exception_and_a_corrupt_frame_are_typed() {
    // InvokeModelWithResponseStream's stream errors: `throttlingException` and others, as
    // exception messages with a `{"message"}` payload.
    let mut frames = anthropic_events(&["Half"]).concat();
    frames.extend(frame(
        &[
            (":exception-type", "throttlingException"),
            (":content-type", "application/json"),
            (":message-type", "exception"),
        ],
        br#"{"message":"Too many tokens, please wait before trying again."}"#,
    ));
    let server = stream_server(frames).await;
    let model = AnthropicModel::bedrock(config(&server.uri())).unwrap();
    let err = streamed(&model).await.0.unwrap_err();
    assert!(matches!(err, ModelError::RateLimited { .. }), "{err:?}");
    assert_eq!(err.request_id(), Some("stream-req-7"));
    assert!(err.message().contains("Too many tokens"), "{err}");

    let mut frames = anthropic_events(&["Half"]).concat();
    let last = frames.len() - 1;
    frames[last] ^= 0xFF;
    let server = stream_server(frames).await;
    let model = AnthropicModel::bedrock(config(&server.uri())).unwrap();
    let err = streamed(&model).await.0.unwrap_err();
    assert!(matches!(err, ModelError::Other { .. }), "a bad checksum: {err:?}");

    let server = stream_server(anthropic_events(&["Cut short"]).concat()).await;
    let model = AnthropicModel::bedrock(config(&server.uri())).unwrap();
    let err = streamed(&model).await.0.unwrap_err();
    assert!(
        matches!(err, ModelError::Transport { .. }),
        "an early end is retried: {err:?}"
    );
    assert_eq!(err.request_id(), Some("stream-req-7"));
}

#[tokio::test]
async fn with_streaming_off_stream_makes_one_plain_signed_call() {
    let server = server_with(ResponseTemplate::new(200).set_body_json(text_response())).await;
    let mut config = config(&server.uri());
    config.anthropic.stream = false;
    let model = AnthropicModel::bedrock(config).unwrap();
    let (response, text) = streamed(&model).await;
    assert_eq!(response.unwrap().message.text_content(), "Hi! My name is Claude.");
    assert_eq!(text, "Hi! My name is Claude.");
    assert_signed(&only_request(&server).await);
}

#[tokio::test]
async fn bedrock_errors_are_typed_and_keep_the_aws_request_id() {
    let throttled = ResponseTemplate::new(429)
        .set_body_string(r#"{"message":"Too many requests, please wait before trying again."}"#)
        .insert_header("content-type", "application/json")
        .insert_header(
            "x-amzn-ErrorType",
            "ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/",
        )
        .insert_header("x-amzn-RequestId", "5f2c1a7e-0d3b-4c6e-9a1f-2b8d7e6c5a40");
    let server = server_with(throttled).await;
    let err = AnthropicModel::bedrock(config(&server.uri()))
        .unwrap()
        .invoke(request())
        .await
        .unwrap_err();
    assert!(matches!(err, ModelError::RateLimited { .. }), "{err:?}");
    assert_eq!(err.request_id(), Some("5f2c1a7e-0d3b-4c6e-9a1f-2b8d7e6c5a40"));
    assert!(err.message().contains("Too many requests"), "{err}");

    let too_long = ResponseTemplate::new(400)
        .set_body_string(r#"{"message":"Input is too long for requested model."}"#)
        .insert_header("content-type", "application/json");
    let server = server_with(too_long).await;
    let err = AnthropicModel::bedrock(config(&server.uri()))
        .unwrap()
        .invoke(request())
        .await
        .unwrap_err();
    assert!(matches!(err, ModelError::ContextTooLong { .. }), "{err:?}");
}

fn env_of(pairs: Vec<(&'static str, String)>) -> impl Fn(&str) -> Option<String> {
    move |name| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.clone())
}

#[tokio::test]
async fn the_model_string_reads_keys_region_and_endpoint_from_the_environment() {
    let server = server_with(ResponseTemplate::new(200).set_body_json(text_response())).await;
    let env = env_of(vec![
        ("AWS_ACCESS_KEY_ID", "AKIAENVEXAMPLE".into()),
        ("AWS_SECRET_ACCESS_KEY", "env-secret".into()),
        ("AWS_REGION", "eu-central-1".into()),
        ("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", server.uri()),
    ]);
    let model = from_model_string_with_env(&format!("bedrock:{MODEL_ID}?cache=off"), env).unwrap();
    assert_eq!(model.provider(), Some("bedrock"));
    assert_eq!(model.id(), MODEL_ID);
    assert!(!model.capabilities().prompt_caching);
    model.invoke(request()).await.unwrap();
    let sent = only_request(&server).await;
    let auth = parse_authorization(&header(&sent, "authorization").unwrap());
    assert_eq!(auth.access_key_id, "AKIAENVEXAMPLE");
    assert_eq!(auth.region, "eu-central-1");
    assert_eq!(
        header(&sent, "x-amz-security-token"),
        None,
        "long-term keys carry no token"
    );
    assert!(
        !String::from_utf8_lossy(&sent.body).contains("cache_control"),
        "cache=off sends no cache_control"
    );
}

#[tokio::test]
async fn a_profile_in_the_shared_files_gives_keys_and_region() {
    let home = tempfile::tempdir().unwrap();
    let aws = home.path().join(".aws");
    std::fs::create_dir(&aws).unwrap();
    std::fs::write(
        aws.join("credentials"),
        "[default]\naws_access_key_id = AKIADEFAULT\naws_secret_access_key = d\n\n[work]\n\
         aws_access_key_id = AKIAWORK\naws_secret_access_key = work-secret\naws_session_token = work-token\n",
    )
    .unwrap();
    std::fs::write(
        aws.join("config"),
        "[default]\nregion = us-west-2\n[profile work]\nregion = ap-south-1\n",
    )
    .unwrap();
    let server = server_with(ResponseTemplate::new(200).set_body_json(text_response())).await;
    let env = env_of(vec![
        ("HOME", home.path().display().to_string()),
        ("AWS_PROFILE", "work".into()),
        ("AWS_ENDPOINT_URL", server.uri()),
    ]);
    let model = from_model_string_with_env(&format!("bedrock:{MODEL_ID}"), env).unwrap();
    model.invoke(request()).await.unwrap();
    let sent = only_request(&server).await;
    let auth = parse_authorization(&header(&sent, "authorization").unwrap());
    assert_eq!(auth.access_key_id, "AKIAWORK");
    assert_eq!(auth.region, "ap-south-1");
    assert_eq!(
        header(&sent, "x-amz-security-token").as_deref(),
        Some("work-token")
    );
}

#[test]
fn missing_credentials_or_region_are_named() {
    let home = tempfile::tempdir().unwrap();
    let env = env_of(vec![("HOME", home.path().display().to_string())]);
    let err = from_model_string_with_env("bedrock:m", env).err().unwrap();
    assert!(matches!(err, ProviderError::MissingCredentials { .. }), "{err:?}");
    assert!(err.to_string().contains("AWS_ACCESS_KEY_ID"), "{err}");

    let env = env_of(vec![
        ("HOME", home.path().display().to_string()),
        ("AWS_ACCESS_KEY_ID", "a".into()),
        ("AWS_SECRET_ACCESS_KEY", "b".into()),
    ]);
    let err = from_model_string_with_env("bedrock:m", env).err().unwrap();
    assert!(err.to_string().contains("AWS_REGION"), "{err}");
}
