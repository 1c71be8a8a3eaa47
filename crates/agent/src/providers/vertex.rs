//! Claude on Google Vertex AI ([`AnthropicModel::vertex`], model string `vertex:MODEL`).
//!
//! The body is the Anthropic Messages body (the same mapping, caching and structured output as
//! [`anthropic`](super::anthropic)) with `anthropic_version: "vertex-2023-10-16"` and without
//! `model`, which travels in the path:
//! `POST {endpoint}/v1/projects/{project}/locations/{region}/publishers/anthropic/models/{model}:rawPredict`,
//! and `:streamRawPredict` for streamed calls, whose server-sent events are Anthropic's (the same
//! assembler reads them). The endpoint is `https://{region}-aiplatform.googleapis.com`
//! (`https://aiplatform.googleapis.com` for the `global` region). Beta flags go in the
//! `anthropic-beta` header. Every request carries `authorization: Bearer <token>` from
//! [`google_auth`](super::google_auth), reused until it is about to expire. Prompt caching uses
//! the same `cache_control` breakpoints, which Vertex AI supports for Claude.
//!
//! Errors are Google's (`{"error": {"code", "message", "status"}}`) or Anthropic's envelope
//! passed through; both are read by the Anthropic parser, by type where there is one, else by
//! status.

use std::sync::Arc;

use reqwest::header::HeaderMap;

use super::ProviderError;
use super::anthropic::{AnthropicConfig, AnthropicModel, Platform, parse_error};
use super::clock::Clock;
use super::google_auth::{GoogleAuth, GoogleCredentials};
use super::http::{HttpClient, normalize_base_url, plain_header};
use super::streamed::Framing;

/// The `anthropic_version` Vertex AI's Messages body carries.
pub const ANTHROPIC_VERSION: &str = "vertex-2023-10-16";

/// How to reach one Claude model on Vertex AI.
#[derive(Debug, Clone)]
pub struct VertexConfig {
    /// The Messages settings. `model` is the Vertex model name (`claude-sonnet-4-5@20250929`);
    /// `base_url` is the Vertex AI endpoint (see [`VertexConfig::new`]); `api_key` is not used.
    pub anthropic: AnthropicConfig,
    /// The Google Cloud project.
    pub project: String,
    /// The region (`us-east5`, `europe-west1`, `global`, …).
    pub region: String,
    /// Where access tokens come from.
    pub credentials: GoogleCredentials,
    /// The time tokens are checked against (the system clock unless a test fixes it).
    pub clock: Clock,
}

impl VertexConfig {
    /// A configuration for `model` in `project` and `region`, with the region's public endpoint.
    pub fn new(
        model: impl Into<String>,
        project: impl Into<String>,
        region: impl Into<String>,
        credentials: GoogleCredentials,
    ) -> Self {
        let region = region.into();
        let anthropic = AnthropicConfig::new(model, "").with_base_url(default_endpoint(&region));
        Self {
            anthropic,
            project: project.into(),
            region,
            credentials,
            clock: Clock::system(),
        }
    }
}

/// The public endpoint of `region`.
pub fn default_endpoint(region: &str) -> String {
    if region == "global" {
        "https://aiplatform.googleapis.com".to_owned()
    } else {
        format!("https://{region}-aiplatform.googleapis.com")
    }
}

impl AnthropicModel {
    /// Claude on Google Vertex AI (see [`vertex`](super::vertex)). Fails on an endpoint that is not
    /// http(s), or a project or region that is empty or not one path segment.
    pub fn vertex(config: VertexConfig) -> Result<Self, ProviderError> {
        let VertexConfig {
            mut anthropic,
            project,
            region,
            credentials,
            clock,
        } = config;
        for (what, value) in [
            ("project", &project),
            ("region", &region),
            ("model", &anthropic.model),
        ] {
            if value.is_empty() || value.contains(['/', '?', '#', ' ']) {
                return Err(ProviderError::InvalidConfig {
                    message: format!("the Vertex AI {what} `{value}` must be one non-empty path segment"),
                });
            }
        }
        anthropic.base_url = normalize_base_url(&anthropic.base_url)?;
        let model_url = format!(
            "{}/v1/projects/{project}/locations/{region}/publishers/anthropic/models/{}",
            anthropic.base_url, anthropic.model
        );
        let mut headers = HeaderMap::new();
        if !anthropic.beta.is_empty() {
            plain_header(&mut headers, "anthropic-beta", &anthropic.beta.join(","))?;
        }
        let auth = GoogleAuth::new(credentials, clock)?;
        let client = HttpClient::new(&anthropic.http, headers)?.with_auth(Arc::new(auth));
        let platform = Platform {
            name: "vertex",
            stream_endpoint: Some(format!("{model_url}:streamRawPredict")),
            framing: Framing::ServerSentEvents,
            anthropic_version: Some(ANTHROPIC_VERSION),
            beta_in_body: false,
            parse_error,
        };
        Ok(Self::on_platform(
            anthropic,
            format!("{model_url}:rawPredict"),
            client,
            platform,
        ))
    }
}
