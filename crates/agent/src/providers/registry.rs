//! Model strings → providers.
//!
//! | model string | provider | key | base URL |
//! |---|---|---|---|
//! | `anthropic:<model>` | [`AnthropicModel`] | `ANTHROPIC_API_KEY` (required) | `ANTHROPIC_BASE_URL`, else `https://api.anthropic.com` |
//! | `openai:<model>` | [`OpenAiModel`] ([`OpenAiConfig::openai`]) | `OPENAI_API_KEY` (required) | `OPENAI_BASE_URL`, else `https://api.openai.com/v1` |
//! | `openai-responses:<model>` | [`ResponsesModel`] (the Responses API) | `OPENAI_API_KEY` (required) | `OPENAI_BASE_URL`, else `https://api.openai.com/v1` |
//! | `openai-compatible:<model>@<base_url>` | [`OpenAiModel`] ([`OpenAiConfig::compatible`]) | `OPENAI_API_KEY` (optional) | the URL after `@` (which must start with `http://` or `https://`); without `@<base_url>`, `OPENAI_BASE_URL` |
//! | `ollama:<model>` | [`OpenAiModel`] ([`OpenAiConfig::compatible`], `max_tokens`) | none | `OLLAMA_HOST` (read as ollama reads it: no scheme means port 11434) + `/v1`, else `http://127.0.0.1:11434/v1` |
//! | `bedrock:<model id>` | [`AnthropicModel::bedrock`] | AWS keys or profile ([`aws`](super::aws)); region `AWS_REGION` / `AWS_DEFAULT_REGION` / the profile's | `AWS_ENDPOINT_URL_BEDROCK_RUNTIME`, else `AWS_ENDPOINT_URL`, else `https://bedrock-runtime.<region>.amazonaws.com` |
//! | `vertex:<model>` | [`AnthropicModel::vertex`] | Google credentials ([`google_auth`](super::google_auth)); project `ANTHROPIC_VERTEX_PROJECT_ID` / `GOOGLE_CLOUD_PROJECT` / the key's; region `CLOUD_ML_REGION` / `GOOGLE_CLOUD_LOCATION` | `ANTHROPIC_VERTEX_BASE_URL`, else `https://<region>-aiplatform.googleapis.com` |
//!
//! Options may follow after `?` (`anthropic:claude-sonnet-4-5?cache=off`, see [`ModelOptions`]).
//!
//! The model part may itself contain `:` (`ollama:qwen3:8b`): only the first `:` separates the
//! provider. Empty environment variables count as unset.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use trellis_middleware::ChatModel;

use super::anthropic::{AnthropicConfig, AnthropicModel};
use super::aws::AwsEnv;
use super::bedrock::BedrockConfig;
use super::google_auth::GoogleCredentials;
use super::openai::{MaxTokensField, OpenAiConfig, OpenAiModel};
use super::responses::ResponsesModel;
use super::vertex::VertexConfig;
use super::{ModelOptions, ProviderError};

/// The provider prefixes [`from_model_string`] knows.
pub const KNOWN_PROVIDERS: &[&str] = &[
    "anthropic",
    "openai",
    "openai-responses",
    "openai-compatible",
    "ollama",
    "bedrock",
    "vertex",
];

/// A parsed model string (no environment read yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSpec {
    /// `anthropic:<model>`.
    Anthropic {
        /// The model id.
        model: String,
    },
    /// `openai:<model>`.
    OpenAi {
        /// The model id.
        model: String,
    },
    /// `openai-responses:<model>`: the OpenAI Responses API.
    OpenAiResponses {
        /// The model id.
        model: String,
    },
    /// `openai-compatible:<model>[@<base_url>]`.
    OpenAiCompatible {
        /// The model id as the server names it.
        model: String,
        /// The server's base URL, when the string names one.
        base_url: Option<String>,
    },
    /// `ollama:<model>`.
    Ollama {
        /// The model id as ollama names it (e.g. `qwen3:8b`).
        model: String,
    },
    /// `bedrock:<model id>`: Claude on Amazon Bedrock.
    Bedrock {
        /// The Bedrock model id or inference profile (e.g.
        /// `us.anthropic.claude-sonnet-4-5-20250929-v1:0`).
        model: String,
    },
    /// `vertex:<model>`: Claude on Google Vertex AI.
    Vertex {
        /// The Vertex model name (e.g. `claude-sonnet-4-5@20250929`).
        model: String,
    },
}

impl ModelSpec {
    /// Parse `<provider>:<model>`; options after `?` are checked and left out (read them with
    /// [`ModelOptions::split`]).
    pub fn parse(input: &str) -> Result<Self, ProviderError> {
        let (spec, _) = ModelOptions::split(input)?;
        Self::parse_without_options(spec)
    }

    fn parse_without_options(input: &str) -> Result<Self, ProviderError> {
        let invalid = |reason: &str| ProviderError::InvalidModelString {
            input: input.to_owned(),
            reason: reason.to_owned(),
        };
        let Some((prefix, rest)) = input.trim().split_once(':') else {
            return Err(invalid(&format!(
                "expected <provider>:<model>, e.g. anthropic:claude-sonnet-4-5; known providers: {}",
                KNOWN_PROVIDERS.join(", ")
            )));
        };
        if rest.is_empty() {
            return Err(invalid("the model name after `:` is empty"));
        }
        let model = rest.to_owned();
        Ok(match prefix {
            "anthropic" => Self::Anthropic { model },
            "openai" => Self::OpenAi { model },
            "openai-responses" => Self::OpenAiResponses { model },
            "ollama" => Self::Ollama { model },
            "bedrock" => Self::Bedrock { model },
            "vertex" => Self::Vertex { model },
            "openai-compatible" => {
                let at = ["@http://", "@https://"]
                    .iter()
                    .filter_map(|marker| rest.find(marker))
                    .min();
                match at {
                    Some(0) => return Err(invalid("the model name before `@` is empty")),
                    Some(at) => Self::OpenAiCompatible {
                        model: rest[..at].to_owned(),
                        base_url: Some(rest[at + 1..].to_owned()),
                    },
                    None => Self::OpenAiCompatible {
                        model,
                        base_url: None,
                    },
                }
            }
            _ => {
                return Err(ProviderError::UnknownProvider {
                    input: input.to_owned(),
                    prefix: prefix.to_owned(),
                    known: KNOWN_PROVIDERS,
                });
            }
        })
    }

    /// The provider prefix.
    pub fn provider(&self) -> &'static str {
        match self {
            Self::Anthropic { .. } => "anthropic",
            Self::OpenAi { .. } => "openai",
            Self::OpenAiResponses { .. } => "openai-responses",
            Self::OpenAiCompatible { .. } => "openai-compatible",
            Self::Ollama { .. } => "ollama",
            Self::Bedrock { .. } => "bedrock",
            Self::Vertex { .. } => "vertex",
        }
    }

    /// The model id.
    pub fn model(&self) -> &str {
        match self {
            Self::Anthropic { model }
            | Self::OpenAi { model }
            | Self::OpenAiResponses { model }
            | Self::OpenAiCompatible { model, .. }
            | Self::Ollama { model }
            | Self::Bedrock { model }
            | Self::Vertex { model } => model,
        }
    }

    /// Build the provider, reading keys and base URLs through `env` (see the module docs).
    pub fn build_with_env(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Arc<dyn ChatModel>, ProviderError> {
        self.build_with_options(env, ModelOptions::default())
    }

    /// [`build_with_env`](Self::build_with_env) with the string's [`ModelOptions`] applied.
    pub fn build_with_options(
        &self,
        env: impl Fn(&str) -> Option<String>,
        options: ModelOptions,
    ) -> Result<Arc<dyn ChatModel>, ProviderError> {
        let var = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        let missing = |provider: &'static str, var: &'static str| ProviderError::MissingApiKey {
            provider,
            var,
            model: self.to_string(),
        };
        // OpenAI itself, for Chat Completions and the Responses API alike.
        let openai = |model: &str| -> Result<OpenAiConfig, ProviderError> {
            let key = var("OPENAI_API_KEY").ok_or_else(|| missing("OpenAI", "OPENAI_API_KEY"))?;
            let mut config = OpenAiConfig::openai(model, key);
            if let Some(url) = var("OPENAI_BASE_URL") {
                config.base_url = url;
            }
            config.context_window = options.context_window.or(config.context_window);
            Ok(config)
        };
        Ok(match self {
            Self::Anthropic { model } => {
                let key =
                    var("ANTHROPIC_API_KEY").ok_or_else(|| missing("Anthropic", "ANTHROPIC_API_KEY"))?;
                let mut config = AnthropicConfig::new(model.clone(), key);
                if let Some(url) = var("ANTHROPIC_BASE_URL") {
                    config.base_url = url;
                }
                config.prompt_caching = options.cache;
                if let Some(tokens) = options.context_window {
                    config.context_window = tokens;
                }
                Arc::new(AnthropicModel::new(config)?)
            }
            Self::OpenAi { model } => Arc::new(OpenAiModel::new(openai(model)?)?),
            Self::OpenAiResponses { model } => Arc::new(ResponsesModel::new(openai(model)?)?),
            Self::OpenAiCompatible { model, base_url } => {
                let Some(url) = base_url.clone().or_else(|| var("OPENAI_BASE_URL")) else {
                    return Err(ProviderError::InvalidModelString {
                        input: self.to_string(),
                        reason: "an OpenAI-compatible server needs a base URL: write \
                                 openai-compatible:<model>@<base_url> or set OPENAI_BASE_URL"
                            .to_owned(),
                    });
                };
                let mut config = OpenAiConfig::compatible(model.clone(), url);
                config.api_key = var("OPENAI_API_KEY").map(Into::into);
                config.context_window = options.context_window;
                Arc::new(OpenAiModel::new(config)?)
            }
            Self::Ollama { model } => {
                let url = format!("{}/v1", ollama_base_url(var("OLLAMA_HOST").as_deref()));
                let mut config = OpenAiConfig::compatible(model.clone(), url);
                // ollama's OpenAI endpoint reads `max_tokens` and ignores `max_completion_tokens`
                // (docs.ollama.com/api/openai-compatibility lists only `max_tokens`).
                config.max_tokens_field = MaxTokensField::MaxTokens;
                config.context_window = options.context_window;
                Arc::new(OpenAiModel::new(config)?)
            }
            Self::Bedrock { model } => {
                let aws = AwsEnv::new(&var);
                let credentials = aws.credentials(&self.to_string())?;
                let region = aws.region().ok_or_else(|| ProviderError::InvalidConfig {
                    message: format!(
                        "no AWS region for `{self}`: set AWS_REGION (or `region` in the profile of ~/.aws/config)"
                    ),
                })?;
                let mut config = BedrockConfig::new(model.clone(), region, credentials);
                if let Some(url) = aws.endpoint("BEDROCK_RUNTIME") {
                    config.anthropic.base_url = url;
                }
                config.anthropic.prompt_caching = options.cache;
                if let Some(tokens) = options.context_window {
                    config.anthropic.context_window = tokens;
                }
                Arc::new(AnthropicModel::bedrock(config)?)
            }
            Self::Vertex { model } => {
                let credentials = GoogleCredentials::from_env(&var)?;
                let project = var("ANTHROPIC_VERTEX_PROJECT_ID")
                    .or_else(|| var("GOOGLE_CLOUD_PROJECT"))
                    .or_else(|| credentials.project_id().map(str::to_owned))
                    .ok_or_else(|| ProviderError::InvalidConfig {
                        message: format!(
                            "no Google Cloud project for `{self}`: set GOOGLE_CLOUD_PROJECT \
                             (or ANTHROPIC_VERTEX_PROJECT_ID)"
                        ),
                    })?;
                let region = var("CLOUD_ML_REGION")
                    .or_else(|| var("GOOGLE_CLOUD_LOCATION"))
                    .ok_or_else(|| ProviderError::InvalidConfig {
                        message: format!(
                            "no Vertex AI region for `{self}`: set CLOUD_ML_REGION (e.g. us-east5 or global)"
                        ),
                    })?;
                let mut config = VertexConfig::new(model.clone(), project, region, credentials);
                if let Some(url) = var("ANTHROPIC_VERTEX_BASE_URL") {
                    config.anthropic.base_url = url;
                }
                config.anthropic.prompt_caching = options.cache;
                if let Some(tokens) = options.context_window {
                    config.anthropic.context_window = tokens;
                }
                Arc::new(AnthropicModel::vertex(config)?)
            }
        })
    }
}

impl fmt::Display for ModelSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OpenAiCompatible {
                model,
                base_url: Some(url),
            } => write!(f, "openai-compatible:{model}@{url}"),
            other => write!(f, "{}:{}", other.provider(), other.model()),
        }
    }
}

impl FromStr for ModelSpec {
    type Err = ProviderError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// Resolve a model string (`anthropic:claude-sonnet-4-5`, `openai:gpt-4.1`,
/// `openai-compatible:<model>@<base_url>`, `ollama:<model>`) to a provider, with keys and base URLs
/// from the process environment (see the module docs for the variables).
///
/// Errors: [`ProviderError::MissingApiKey`] names the variable to set;
/// [`ProviderError::UnknownProvider`] lists the known prefixes.
pub fn from_model_string(input: &str) -> Result<Arc<dyn ChatModel>, ProviderError> {
    from_model_string_with_env(input, |name| std::env::var(name).ok())
}

/// [`from_model_string`] with the environment read through `env` (for tests and embedders).
pub fn from_model_string_with_env(
    input: &str,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Arc<dyn ChatModel>, ProviderError> {
    let (spec, options) = ModelOptions::split(input)?;
    ModelSpec::parse_without_options(spec)?.build_with_options(env, options)
}

/// [`from_model_string`], and for `ollama:` models without a `context_window` option, the window
/// the server reports (`/api/show`, see [`ollama`](super::ollama)); a server that cannot say is
/// logged and the window stays unknown (the first call reports the real failure).
pub async fn connect_model_string(input: &str) -> Result<Arc<dyn ChatModel>, ProviderError> {
    connect_model_string_with_env(input, |name| std::env::var(name).ok()).await
}

/// [`connect_model_string`] with the environment read through `env`.
pub async fn connect_model_string_with_env(
    input: &str,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Arc<dyn ChatModel>, ProviderError> {
    let (spec_text, mut options) = ModelOptions::split(input)?;
    let spec = ModelSpec::parse_without_options(spec_text)?;
    if let ModelSpec::Ollama { model } = &spec
        && options.context_window.is_none()
    {
        let host = ollama_base_url(env("OLLAMA_HOST").filter(|v| !v.trim().is_empty()).as_deref());
        // A short timeout: this runs before the agent starts.
        let http = super::HttpConfig {
            request_timeout: std::time::Duration::from_secs(10),
            ..super::HttpConfig::default()
        };
        match super::ollama::context_window(&host, model, &http).await {
            Ok(window) => options.context_window = window,
            Err(error) => tracing::warn!(%error, "cannot read the context window of `{model}` from ollama"),
        }
    }
    spec.build_with_options(env, options)
}

/// The ollama server `OLLAMA_HOST` names, as ollama's own client reads it (`envconfig.Host` in
/// github.com/ollama/ollama): no scheme means `http` and port 11434; an explicit `http://` or
/// `https://` without a port means that scheme's port; unset or empty means `127.0.0.1:11434`.
pub(crate) fn ollama_base_url(host: Option<&str>) -> String {
    let host = host.map(str::trim).unwrap_or("");
    let (scheme, rest, default_port) = match host.split_once("://") {
        Some((scheme, rest)) => (scheme.to_owned(), rest, None),
        None => ("http".to_owned(), host, Some(11434)),
    };
    let hostport = rest.split('/').next().unwrap_or("").trim_end_matches('/');
    let has_port = match hostport.rsplit_once(':') {
        // `[::1]:11434` or `host:11434`, but not a bare IPv6 address.
        Some((h, p)) => {
            !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && (!h.contains(':') || h.ends_with(']'))
        }
        None => false,
    };
    let hostport = if hostport.is_empty() {
        "127.0.0.1"
    } else {
        hostport
    };
    match (has_port, default_port) {
        (false, Some(port)) => format!("{scheme}://{hostport}:{port}"),
        _ => format!("{scheme}://{hostport}"),
    }
}

#[cfg(test)]
mod ollama_host_tests {
    use super::ollama_base_url;

    #[test]
    fn ollama_host_reads_like_ollamas_own_client() {
        assert_eq!(ollama_base_url(None), "http://127.0.0.1:11434");
        assert_eq!(ollama_base_url(Some("")), "http://127.0.0.1:11434");
        assert_eq!(ollama_base_url(Some("localhost")), "http://localhost:11434");
        assert_eq!(ollama_base_url(Some("0.0.0.0:9999")), "http://0.0.0.0:9999");
        assert_eq!(ollama_base_url(Some("gpu-box")), "http://gpu-box:11434");
        assert_eq!(ollama_base_url(Some("http://gpu-box")), "http://gpu-box");
        assert_eq!(
            ollama_base_url(Some("https://ollama.example.com/")),
            "https://ollama.example.com"
        );
        assert_eq!(
            ollama_base_url(Some("http://10.0.0.2:11500")),
            "http://10.0.0.2:11500"
        );
        assert_eq!(ollama_base_url(Some("[::1]:11434")), "http://[::1]:11434");
    }
}
