//! [`ProviderError`]: why a provider could not be set up (as opposed to a failed call, which is a
//! [`ModelError`](trellis_middleware::runtime::model::ModelError)).

/// Why a provider could not be built from a model string or a configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderError {
    /// The environment variable holding the API key is not set (or empty).
    #[error("{var} is not set: export {var}=<your {provider} API key> to use `{model}`")]
    MissingApiKey {
        /// The provider (`anthropic`, `openai`).
        provider: &'static str,
        /// The variable to set, e.g. `ANTHROPIC_API_KEY`.
        var: &'static str,
        /// The model string that needed it.
        model: String,
    },
    /// A cloud platform's credentials (AWS keys, Google credentials) were not found.
    #[error("no {provider} credentials for `{model}`: {looked_at}")]
    MissingCredentials {
        /// The platform (`Amazon Bedrock`, `Google Vertex AI`).
        provider: &'static str,
        /// The model string that needed them.
        model: String,
        /// Where they were looked for, and what to set.
        looked_at: String,
    },
    /// The part before `:` names no provider this crate knows.
    #[error("unknown model provider `{prefix}` in `{input}`; known providers: {}", .known.join(", "))]
    UnknownProvider {
        /// The whole model string.
        input: String,
        /// The unknown prefix.
        prefix: String,
        /// The providers that are known.
        known: &'static [&'static str],
    },
    /// The model string is not of the form `<provider>:<model>` (or a provider-specific variant).
    #[error("invalid model string `{input}`: {reason}")]
    InvalidModelString {
        /// The whole model string.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A configuration value is unusable (a base URL that does not parse, an API key that cannot be a
    /// header value, …).
    #[error("invalid provider configuration: {message}")]
    InvalidConfig {
        /// What is wrong.
        message: String,
    },
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {message}")]
    Client {
        /// Why.
        message: String,
    },
}
