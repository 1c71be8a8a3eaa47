//! Claude on Amazon Bedrock ([`AnthropicModel::bedrock`], model string `bedrock:MODEL_ID`).
//!
//! The body is the Anthropic Messages body (the same mapping, caching and structured output as
//! [`anthropic`](super::anthropic)) with `anthropic_version: "bedrock-2023-05-31"` and without
//! `model`, which travels in the path: `POST {endpoint}/model/{model id}/invoke`, the id
//! percent-encoded as the AWS SDKs encode path labels (`anthropic.claude-sonnet-4-5-20250929-v1:0`
//! → `…-v1%3A0`; inference profile ids and ARNs work the same way). Beta flags go in the body as
//! `anthropic_beta`. Every request is signed with SigV4 (service `bedrock`, see [`aws`](super::aws)).
//! Prompt caching is Bedrock's: the same `cache_control` breakpoints, on the models Bedrock caches
//! for (see docs/providers.md).
//!
//! Streamed calls go to `POST {endpoint}/model/{model id}/invoke-with-response-stream` (the same
//! body: Bedrock takes no `stream` field). The reply is in the AWS event-stream binary framing,
//! each `chunk` carrying one Anthropic streaming event (base64 in `bytes`), read by
//! `event_stream` into the same assembler as Anthropic's server-sent
//! events; a mid-stream exception (`throttlingException`, `modelStreamErrorException`, …) is the
//! error its type stands for. With [`AnthropicConfig::stream`] off, calls are plain.
//!
//! Errors are Bedrock's (`{"message": …}` with the exception in `x-amzn-ErrorType`), read by
//! status as the Anthropic parser reads them: 400 `ValidationException` → `BadRequest` (or
//! `ContextTooLong` for "Input is too long"), 403 `AccessDeniedException` → `Auth`, 429
//! `ThrottlingException` → `RateLimited`, 503 `ServiceUnavailableException` → `Overloaded`, 500 →
//! `Transport`. The request id is `x-amzn-RequestId`.

use std::sync::Arc;
use std::time::Duration;

use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use trellis_middleware::runtime::model::ModelError;

use super::ProviderError;
use super::anthropic::{AnthropicConfig, AnthropicModel, Platform};
use super::aws::{AwsCredentials, SigV4};
use super::clock::Clock;
use super::http::{HttpClient, normalize_base_url};
use super::streamed::Framing;

/// The `anthropic_version` Bedrock's Messages body carries.
pub const ANTHROPIC_VERSION: &str = "bedrock-2023-05-31";

/// How to reach one Claude model on Bedrock.
#[derive(Debug, Clone)]
pub struct BedrockConfig {
    /// The Messages settings. `model` is the Bedrock model id or inference profile (id or ARN);
    /// `base_url` is the runtime endpoint (default `https://bedrock-runtime.{region}.amazonaws.com`);
    /// `api_key` is not used.
    pub anthropic: AnthropicConfig,
    /// The AWS region signed for.
    pub region: String,
    /// The credentials signed with.
    pub credentials: AwsCredentials,
    /// The time signatures are made at (the system clock unless a test fixes it).
    pub clock: Clock,
}

impl BedrockConfig {
    /// A configuration for `model` in `region`, with the public endpoint of the region.
    pub fn new(model: impl Into<String>, region: impl Into<String>, credentials: AwsCredentials) -> Self {
        let region = region.into();
        let anthropic = AnthropicConfig::new(model, "")
            .with_base_url(format!("https://bedrock-runtime.{region}.amazonaws.com"));
        Self {
            anthropic,
            region,
            credentials,
            clock: Clock::system(),
        }
    }
}

impl AnthropicModel {
    /// Claude on Amazon Bedrock (see [`bedrock`](super::bedrock)). Fails on an endpoint that is not
    /// http(s) or an empty region.
    pub fn bedrock(config: BedrockConfig) -> Result<Self, ProviderError> {
        let BedrockConfig {
            mut anthropic,
            region,
            credentials,
            clock,
        } = config;
        if region.trim().is_empty() {
            return Err(ProviderError::InvalidConfig {
                message: "the Bedrock region is empty: set AWS_REGION".to_owned(),
            });
        }
        anthropic.base_url = normalize_base_url(&anthropic.base_url)?;
        let model_url = format!("{}/model/{}", anthropic.base_url, encode_label(&anthropic.model));
        let signer = SigV4 {
            credentials,
            region,
            service: "bedrock",
            clock,
        };
        let client = HttpClient::new(&anthropic.http, HeaderMap::new())?.with_auth(Arc::new(signer));
        let platform = Platform {
            name: "bedrock",
            stream_endpoint: Some(format!("{model_url}/invoke-with-response-stream")),
            framing: Framing::AwsEventStream,
            anthropic_version: Some(ANTHROPIC_VERSION),
            beta_in_body: true,
            parse_error,
        };
        Ok(Self::on_platform(
            anthropic,
            format!("{model_url}/invoke"),
            client,
            platform,
        ))
    }
}

/// A path label as the AWS SDKs encode it: everything but unreserved characters
/// (RFC 3986 `A-Z a-z 0-9 - . _ ~`) percent-encoded.
pub(crate) fn encode_label(label: &str) -> String {
    let mut out = String::with_capacity(label.len());
    for byte in label.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// A Bedrock error answer (`{"message": …}`, or an Anthropic error envelope passed through) as a
/// typed error; see the module docs for the mapping.
pub fn parse_error(status: u16, retry_after: Option<Duration>, body: &[u8]) -> ModelError {
    let value: Option<Value> = serde_json::from_slice(body).ok();
    let message = value
        .as_ref()
        .filter(|v| v.get("error").is_none())
        .and_then(|v| v.get("message").or_else(|| v.get("Message")))
        .and_then(Value::as_str);
    match message {
        Some(message) => {
            let envelope = json!({"type": "error", "error": {"message": message}});
            super::anthropic::parse_error(status, retry_after, envelope.to_string().as_bytes())
        }
        None => super::anthropic::parse_error(status, retry_after, body),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_ids_and_arns_are_encoded_as_path_labels() {
        assert_eq!(
            encode_label("anthropic.claude-sonnet-4-5-20250929-v1:0"),
            "anthropic.claude-sonnet-4-5-20250929-v1%3A0"
        );
        assert_eq!(
            encode_label("arn:aws:bedrock:us-east-1:123:inference-profile/us.anthropic.x"),
            "arn%3Aaws%3Abedrock%3Aus-east-1%3A123%3Ainference-profile%2Fus.anthropic.x"
        );
    }

    #[test]
    fn bedrock_errors_are_typed_by_status_and_text() {
        let e = parse_error(
            429,
            None,
            br#"{"message":"Too many requests, please wait before trying again."}"#,
        );
        assert!(matches!(e, ModelError::RateLimited { .. }), "{e:?}");
        assert!(e.message().contains("Too many requests"));
        let e = parse_error(
            400,
            None,
            br#"{"message":"Input is too long for requested model."}"#,
        );
        assert!(matches!(e, ModelError::ContextTooLong { .. }), "{e:?}");
        let e = parse_error(403, None, br#"{"Message":"User is not authorized"}"#);
        assert!(matches!(e, ModelError::Auth { .. }), "{e:?}");
        let e = parse_error(503, None, b"not json");
        assert!(matches!(e, ModelError::Overloaded { .. }), "{e:?}");
    }
}
