//! Model strings → providers.
//!
//! | model string | provider | key | base URL |
//! |---|---|---|---|
//! | `anthropic:<model>` | [`AnthropicModel`] | `ANTHROPIC_API_KEY` (required) | `ANTHROPIC_BASE_URL`, else `https://api.anthropic.com` |
//! | `openai:<model>` | [`OpenAiModel`] ([`OpenAiConfig::openai`]) | `OPENAI_API_KEY` (required) | `OPENAI_BASE_URL`, else `https://api.openai.com/v1` |
//! | `openai-compatible:<model>@<base_url>` | [`OpenAiModel`] ([`OpenAiConfig::compatible`]) | `OPENAI_API_KEY` (optional) | the URL after `@` (which must start with `http://` or `https://`); without `@<base_url>`, `OPENAI_BASE_URL` |
//! | `ollama:<model>` | [`OpenAiModel`] ([`OpenAiConfig::compatible`]) | none | `OLLAMA_HOST` + `/v1`, else `http://localhost:11434/v1` |
//!
//! The model part may itself contain `:` (`ollama:qwen3:8b`): only the first `:` separates the
//! provider. Empty environment variables count as unset.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use trellis_middleware::ChatModel;

use super::ProviderError;
use super::anthropic::{AnthropicConfig, AnthropicModel};
use super::openai::{OpenAiConfig, OpenAiModel};

/// The provider prefixes [`from_model_string`] knows.
pub const KNOWN_PROVIDERS: &[&str] = &["anthropic", "openai", "openai-compatible", "ollama"];

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
}

impl ModelSpec {
    /// Parse `<provider>:<model>`.
    pub fn parse(input: &str) -> Result<Self, ProviderError> {
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
            "ollama" => Self::Ollama { model },
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
            Self::OpenAiCompatible { .. } => "openai-compatible",
            Self::Ollama { .. } => "ollama",
        }
    }

    /// The model id.
    pub fn model(&self) -> &str {
        match self {
            Self::Anthropic { model }
            | Self::OpenAi { model }
            | Self::OpenAiCompatible { model, .. }
            | Self::Ollama { model } => model,
        }
    }

    /// Build the provider, reading keys and base URLs through `env` (see the module docs).
    pub fn build_with_env(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Arc<dyn ChatModel>, ProviderError> {
        let var = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        let missing = |provider: &'static str, var: &'static str| ProviderError::MissingApiKey {
            provider,
            var,
            model: self.to_string(),
        };
        Ok(match self {
            Self::Anthropic { model } => {
                let key =
                    var("ANTHROPIC_API_KEY").ok_or_else(|| missing("Anthropic", "ANTHROPIC_API_KEY"))?;
                let mut config = AnthropicConfig::new(model.clone(), key);
                if let Some(url) = var("ANTHROPIC_BASE_URL") {
                    config.base_url = url;
                }
                Arc::new(AnthropicModel::new(config)?)
            }
            Self::OpenAi { model } => {
                let key = var("OPENAI_API_KEY").ok_or_else(|| missing("OpenAI", "OPENAI_API_KEY"))?;
                let mut config = OpenAiConfig::openai(model.clone(), key);
                if let Some(url) = var("OPENAI_BASE_URL") {
                    config.base_url = url;
                }
                Arc::new(OpenAiModel::new(config)?)
            }
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
                Arc::new(OpenAiModel::new(config)?)
            }
            Self::Ollama { model } => {
                let url = match var("OLLAMA_HOST") {
                    Some(host) if host.starts_with("http://") || host.starts_with("https://") => {
                        format!("{}/v1", host.trim_end_matches('/'))
                    }
                    Some(host) => format!("http://{}/v1", host.trim_end_matches('/')),
                    None => "http://localhost:11434/v1".to_owned(),
                };
                Arc::new(OpenAiModel::new(OpenAiConfig::compatible(model.clone(), url))?)
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
    ModelSpec::parse(input)?.build_with_env(env)
}
