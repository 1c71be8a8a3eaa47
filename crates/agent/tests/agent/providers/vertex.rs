//! Claude on Google Vertex AI against mock token and model endpoints. Written from Anthropic's
//! "Claude on Vertex AI" page (docs.anthropic.com/en/api/claude-on-vertex-ai: `anthropic_version:
//! "vertex-2023-10-16"`, the model in the URL `…/publishers/anthropic/models/{model}:rawPredict`
//! and `:streamRawPredict`, no `model` in the body), Google's "Using OAuth 2.0 for Server to
//! Server Applications" (developers.google.com/identity/protocols/oauth2/service-account: an RS256
//! JWT with `iss`, `scope`, `aud`, `iat`, `exp`, exchanged with
//! `grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer`; the answer's `access_token` and
//! `expires_in`) and the metadata server's token endpoint
//! (`/computeMetadata/v1/instance/service-accounts/default/token`, `Metadata-Flavor: Google`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};
use trellis_agent::providers::{
    AnthropicModel, Clock, GoogleCredentials, VertexConfig, from_model_string_with_env,
};
use trellis_middleware::runtime::model::ModelError;
use trellis_middleware::runtime::stream::{DeltaSink, ModelDelta};
use trellis_middleware::{ChatModel, Message, ModelRequest};
use wiremock::matchers::{header as header_is, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::providers::anthropic_common::text_response;
use crate::providers::common::*;

const PRIVATE_KEY: &str = include_str!("../../fixtures/vertex-test-key.pem");
const PUBLIC_KEY: &[u8] = include_bytes!("../../fixtures/vertex-test-key.pub.der");
const MODEL: &str = "claude-sonnet-4-5@20250929";
const EMAIL: &str = "trellis-test@test-project.iam.gserviceaccount.com";
const MODEL_PATH: &str =
    "/v1/projects/test-project/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929";

fn key_json(token_uri: &str) -> String {
    json!({
        "type": "service_account", "project_id": "test-project", "private_key_id": "kid-1",
        "private_key": PRIVATE_KEY, "client_email": EMAIL, "client_id": "1234",
        "token_uri": token_uri
    })
    .to_string()
}

fn token_answer(token: &str) -> ResponseTemplate {
    ResponseTemplate::new(200)
        .set_body_string(
            json!({"access_token": token, "expires_in": 3599, "token_type": "Bearer"}).to_string(),
        )
        .insert_header("content-type", "application/json")
}

/// A server whose token endpoint answers `tokens` in turn, and whose model answers `model`.
async fn vertex_server(tokens: &[&str], suffix: &str, model: ResponseTemplate) -> MockServer {
    let server = MockServer::start().await;
    for (i, token) in tokens.iter().enumerate() {
        Mock::given(method("POST"))
            .and(path("/token"))
            .respond_with(token_answer(token))
            .up_to_n_times(1)
            .with_priority(u8::try_from(i + 1).unwrap())
            .mount(&server)
            .await;
    }
    Mock::given(method("POST"))
        .and(path(format!("{MODEL_PATH}{suffix}")))
        .respond_with(model)
        .mount(&server)
        .await;
    server
}

/// A clock the test moves, starting at 2026-01-01T00:00:00Z.
fn movable_clock() -> (Clock, Arc<AtomicU64>) {
    let seconds = Arc::new(AtomicU64::new(1_767_225_600));
    let read = seconds.clone();
    let clock =
        Clock::from_fn(move || SystemTime::UNIX_EPOCH + Duration::from_secs(read.load(Ordering::SeqCst)));
    (clock, seconds)
}

fn model_at(server: &MockServer, clock: Clock) -> AnthropicModel {
    let credentials =
        GoogleCredentials::from_json(&key_json(&format!("{}/token", server.uri())), "test").unwrap();
    let mut config = VertexConfig::new(MODEL, "test-project", "us-east5", credentials);
    config.anthropic.base_url = server.uri();
    config.clock = clock;
    AnthropicModel::vertex(config).unwrap()
}

fn request() -> ModelRequest {
    ModelRequest {
        messages: vec![Message::human("Hi")].into(),
        max_output_tokens: Some(512),
        ..ModelRequest::default()
    }
}

async fn requests_to(server: &MockServer, route: &str) -> Vec<wiremock::Request> {
    let all = server.received_requests().await.unwrap();
    all.into_iter()
        .filter(|r| r.url.path().ends_with(route))
        .collect()
}

/// The JWT's claims, after checking its RS256 signature with the key's public half.
fn verified_claims(jwt: &str) -> Value {
    let (signing_input, signature) = jwt.rsplit_once('.').unwrap();
    let signature = URL_SAFE_NO_PAD.decode(signature).unwrap();
    ring::signature::UnparsedPublicKey::new(&ring::signature::RSA_PKCS1_2048_8192_SHA256, PUBLIC_KEY)
        .verify(signing_input.as_bytes(), &signature)
        .expect("the JWT is signed with the service account's key");
    let (header, claims) = signing_input.split_once('.').unwrap();
    let header: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(header).unwrap()).unwrap();
    assert_eq!(header, json!({"alg": "RS256", "typ": "JWT", "kid": "kid-1"}));
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(claims).unwrap()).unwrap()
}

#[tokio::test]
async fn raw_predict_sends_the_vertex_body_with_a_service_account_token() {
    let server = vertex_server(
        &["ya29.first"],
        ":rawPredict",
        ResponseTemplate::new(200).set_body_json(text_response()),
    )
    .await;
    let (clock, _) = movable_clock();
    let model = model_at(&server, clock);
    assert_eq!(model.provider(), Some("vertex"));
    let response = model.invoke(request()).await.unwrap();
    assert_eq!(response.message.text_content(), "Hi! My name is Claude.");

    let sent = requests_to(&server, ":rawPredict").await;
    assert_eq!(sent.len(), 1);
    assert_eq!(
        header(&sent[0], "authorization").as_deref(),
        Some("Bearer ya29.first")
    );
    assert_eq!(header(&sent[0], "x-api-key"), None);
    assert_json_eq(
        &body_json(&sent[0]),
        &json!({
            "anthropic_version": "vertex-2023-10-16",
            "max_tokens": 512,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]
        }),
    );

    let token = requests_to(&server, "/token").await;
    assert_eq!(token.len(), 1);
    let form: std::collections::HashMap<String, String> =
        url::form_urlencoded::parse(&token[0].body).into_owned().collect();
    assert_eq!(form["grant_type"], "urn:ietf:params:oauth:grant-type:jwt-bearer");
    let claims = verified_claims(&form["assertion"]);
    assert_eq!(
        claims,
        json!({"iss": EMAIL, "scope": "https://www.googleapis.com/auth/cloud-platform",
               "aud": format!("{}/token", server.uri()),
               "iat": 1_767_225_600u64, "exp": 1_767_229_200u64})
    );
}

#[tokio::test]
async fn the_token_is_reused_until_a_minute_before_it_expires() {
    let server = vertex_server(
        &["ya29.first", "ya29.second"],
        ":rawPredict",
        ResponseTemplate::new(200).set_body_json(text_response()),
    )
    .await;
    let (clock, seconds) = movable_clock();
    let model = model_at(&server, clock);
    model.invoke(request()).await.unwrap();
    seconds.fetch_add(3000, Ordering::SeqCst);
    model.invoke(request()).await.unwrap();
    // 3,545 s after the token was issued for 3,599 s: inside the one-minute margin.
    seconds.fetch_add(545, Ordering::SeqCst);
    model.invoke(request()).await.unwrap();

    let bearers: Vec<String> = requests_to(&server, ":rawPredict")
        .await
        .iter()
        .map(|r| header(r, "authorization").unwrap())
        .collect();
    assert_eq!(
        bearers,
        ["Bearer ya29.first", "Bearer ya29.first", "Bearer ya29.second"]
    );
    assert_eq!(requests_to(&server, "/token").await.len(), 2);
}

#[tokio::test]
async fn concurrent_calls_share_one_token_request() {
    let server = vertex_server(
        &["ya29.only"],
        ":rawPredict",
        ResponseTemplate::new(200).set_body_json(text_response()),
    )
    .await;
    let (clock, _) = movable_clock();
    let model = model_at(&server, clock);
    let calls = (0..4).map(|_| model.invoke(request()));
    for result in futures::future::join_all(calls).await {
        result.unwrap();
    }
    assert_eq!(requests_to(&server, "/token").await.len(), 1);
}

#[tokio::test]
async fn stream_raw_predict_is_read_as_anthropic_events() {
    let events = [
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_vrtx_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5-20250929\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello from \"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Vertex.\"}}\n\n",
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":5}}\n\n",
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    ]
    .concat();
    let server = vertex_server(
        &["ya29.stream"],
        ":streamRawPredict",
        ResponseTemplate::new(200)
            .set_body_string(events)
            .insert_header("content-type", "text/event-stream"),
    )
    .await;
    let (clock, _) = movable_clock();
    let model = model_at(&server, clock);
    let deltas = std::sync::Mutex::new(Vec::new());
    let on_delta = |d: ModelDelta| deltas.lock().unwrap().push(d);
    let sink: DeltaSink<'_> = &on_delta;
    let response = model.stream(request(), sink).await.unwrap();
    assert_eq!(response.message.text_content(), "Hello from Vertex.");
    let text: String = deltas
        .into_inner()
        .unwrap()
        .iter()
        .filter_map(|d| match d {
            ModelDelta::Text { text, .. } => Some(text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(text, "Hello from Vertex.");
    let sent = requests_to(&server, ":streamRawPredict").await;
    assert_eq!(sent.len(), 1);
    assert_eq!(
        header(&sent[0], "authorization").as_deref(),
        Some("Bearer ya29.stream")
    );
    let body = body_json(&sent[0]);
    assert_eq!(body["stream"], json!(true));
    assert_eq!(body["anthropic_version"], json!("vertex-2023-10-16"));
    assert!(body.get("model").is_none());
}

#[tokio::test]
async fn a_refused_token_is_an_auth_error_and_a_failing_one_is_retried() {
    for (status, transient) in [(400u16, false), (503, true)] {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path("/token"))
            .respond_with(
                ResponseTemplate::new(status).set_body_string(
                    r#"{"error":"invalid_grant","error_description":"Invalid JWT Signature."}"#,
                ),
            )
            .mount(&server)
            .await;
        let (clock, _) = movable_clock();
        let err = model_at(&server, clock).invoke(request()).await.unwrap_err();
        assert_eq!(err.is_transient(), transient, "{status}: {err:?}");
        if !transient {
            assert!(matches!(err, ModelError::Auth { .. }), "{err:?}");
            assert!(err.message().contains("Invalid JWT Signature"), "{err}");
        }
        assert!(
            requests_to(&server, ":rawPredict").await.is_empty(),
            "no call without a token"
        );
    }
}

#[tokio::test]
async fn the_model_string_uses_the_metadata_server_without_a_key_file() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(
            "/computeMetadata/v1/instance/service-accounts/default/token",
        ))
        .and(header_is("metadata-flavor", "Google"))
        .respond_with(token_answer("ya29.metadata"))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(
            "/v1/projects/env-project/locations/europe-west1/publishers/anthropic/models/claude-haiku-4-5@20251001:rawPredict",
        ))
        .respond_with(ResponseTemplate::new(200).set_body_json(text_response()))
        .mount(&server)
        .await;
    let home = tempfile::tempdir().unwrap();
    let host = server.uri().trim_start_matches("http://").to_owned();
    let pairs = [
        ("HOME", home.path().display().to_string()),
        ("GCE_METADATA_HOST", host),
        ("GOOGLE_CLOUD_PROJECT", "env-project".to_owned()),
        ("CLOUD_ML_REGION", "europe-west1".to_owned()),
        ("ANTHROPIC_VERTEX_BASE_URL", server.uri()),
    ];
    let env = move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.clone());
    let model = from_model_string_with_env("vertex:claude-haiku-4-5@20251001", env).unwrap();
    assert_eq!(model.provider(), Some("vertex"));
    model.invoke(request()).await.unwrap();
    let sent = requests_to(&server, ":rawPredict").await;
    assert_eq!(
        header(&sent[0], "authorization").as_deref(),
        Some("Bearer ya29.metadata")
    );
}

#[test]
fn the_model_string_names_a_missing_project_or_region() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key.json");
    std::fs::write(&key, key_json("http://127.0.0.1:1/token")).unwrap();
    let key = key.display().to_string();
    // The key's project is used when no variable names one; the region has no default.
    let env = |name: &str| (name == "GOOGLE_APPLICATION_CREDENTIALS").then(|| key.clone());
    let err = from_model_string_with_env("vertex:claude-sonnet-4-5@20250929", env)
        .err()
        .unwrap();
    assert!(err.to_string().contains("CLOUD_ML_REGION"), "{err}");
    let env = |name: &str| match name {
        "GOOGLE_APPLICATION_CREDENTIALS" => Some(key.clone()),
        "CLOUD_ML_REGION" => Some("us-east5".into()),
        _ => None,
    };
    assert!(from_model_string_with_env("vertex:claude-sonnet-4-5@20250929", env).is_ok());
    let env =
        |name: &str| (name == "GOOGLE_APPLICATION_CREDENTIALS").then(|| "/nonexistent/key.json".to_owned());
    let err = from_model_string_with_env("vertex:m", env).err().unwrap();
    assert!(err.to_string().contains("/nonexistent/key.json"), "{err}");
}

/// A token server answering every token request with `answer`.
async fn token_server(answer: ResponseTemplate) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/token"))
        .respond_with(answer)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(format!("{MODEL_PATH}:rawPredict")))
        .respond_with(ResponseTemplate::new(200).set_body_json(text_response()))
        .mount(&server)
        .await;
    server
}

#[tokio::test]
async fn a_token_that_never_expires_does_not_overflow_the_clock() {
    // Security review F15: `now + expires_in` panicked for `expires_in: u64::MAX`.
    let answer = ResponseTemplate::new(200).set_body_json(
        json!({"access_token": "ya29.forever", "expires_in": u64::MAX, "token_type": "Bearer"}),
    );
    let server = token_server(answer).await;
    let (clock, seconds) = movable_clock();
    let model = model_at(&server, clock);
    model.invoke(request()).await.expect("the call goes through");
    // Clamped to a day: still reused an hour later, fetched again two days later.
    seconds.fetch_add(3600, Ordering::SeqCst);
    model.invoke(request()).await.expect("the token is reused");
    assert_eq!(requests_to(&server, "/token").await.len(), 1);
    seconds.fetch_add(2 * 86_400, Ordering::SeqCst);
    model.invoke(request()).await.expect("a new token");
    assert_eq!(requests_to(&server, "/token").await.len(), 2);
}

#[tokio::test]
async fn a_token_answer_past_the_cap_is_refused_before_any_model_call() {
    // Security review F15: the token answer was read whole.
    let padding = "x".repeat(1024 * 1024);
    let answer = ResponseTemplate::new(200)
        .set_body_json(json!({"access_token": "ya29.big", "expires_in": 3599, "padding": padding}));
    let server = token_server(answer).await;
    let (clock, _) = movable_clock();
    let error = model_at(&server, clock)
        .invoke(request())
        .await
        .expect_err("refused");
    assert!(error.message().contains("larger than"), "{error}");
    assert!(!error.is_transient(), "{error:?}");
    assert!(requests_to(&server, ":rawPredict").await.is_empty());
}
