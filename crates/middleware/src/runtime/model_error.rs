//! [`ModelError`]: why a model call failed, with the [`HttpDetails`] of the exchange when there
//! was one.

use std::sync::Arc;
use std::time::Duration;

/// What the HTTP exchange of a failed call said, kept on the [`ModelError`]: the status, the
/// provider's request id (Anthropic `request-id`, OpenAI `x-request-id`; quote it to the
/// provider's support) and the underlying error (e.g. the connection failure).
#[derive(Debug, Clone, Default)]
pub struct HttpDetails {
    /// The HTTP status, when the server answered.
    pub status: Option<u16>,
    /// The provider's id of the request, when it sent one.
    pub request_id: Option<String>,
    /// The error below this one (a transport failure), when there is one.
    pub source: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

impl PartialEq for HttpDetails {
    /// Sources compare by their message.
    fn eq(&self, other: &Self) -> bool {
        self.status == other.status
            && self.request_id == other.request_id
            && self.source.as_ref().map(ToString::to_string) == other.source.as_ref().map(ToString::to_string)
    }
}

impl std::fmt::Display for HttpDetails {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.status, &self.request_id) {
            (Some(status), Some(id)) => write!(f, "HTTP {status}, request id {id}"),
            (Some(status), None) => write!(f, "HTTP {status}"),
            (None, Some(id)) => write!(f, "request id {id}"),
            (None, None) => f.write_str("HTTP exchange"),
        }
    }
}

impl std::error::Error for HttpDetails {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// ` [request id …]` when `http` names one: the CLI shows errors by their `Display`, and the id is
/// what a provider's support asks for.
fn request_id_note(http: &Option<Box<HttpDetails>>) -> String {
    match http.as_ref().and_then(|h| h.request_id.as_deref()) {
        Some(id) => format!(" [request id {id}]"),
        None => String::new(),
    }
}

/// Why a model call failed. Providers map their errors onto these kinds; middleware decides on the
/// kind (retry transient ones, summarize on [`ModelError::ContextTooLong`]). Every kind may carry
/// [`HttpDetails`] (`http`, also the error's [`source`](std::error::Error::source)): providers set
/// them on what came from an HTTP exchange, and the `Display` form ends with the request id.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// Too many requests; retry after the given delay if the provider said.
    #[error("rate limited: {message}{}", request_id_note(http))]
    RateLimited {
        /// The provider's message.
        message: String,
        /// How long the provider asked to wait.
        retry_after: Option<Duration>,
        /// The HTTP exchange, when there was one.
        #[source]
        http: Option<Box<HttpDetails>>,
    },
    /// The provider is overloaded (e.g. HTTP 529 or 503).
    #[error("provider overloaded: {message}{}", request_id_note(http))]
    Overloaded {
        /// The provider's message.
        message: String,
        /// How long the provider asked to wait.
        retry_after: Option<Duration>,
        /// The HTTP exchange, when there was one.
        #[source]
        http: Option<Box<HttpDetails>>,
    },
    /// The request does not fit the model's context window.
    #[error("context too long: {message}{}", request_id_note(http))]
    ContextTooLong {
        /// The provider's message.
        message: String,
        /// The HTTP exchange, when there was one.
        #[source]
        http: Option<Box<HttpDetails>>,
    },
    /// Credentials are missing, wrong or lack permission.
    #[error("authentication failed: {message}{}", request_id_note(http))]
    Auth {
        /// The provider's message.
        message: String,
        /// The HTTP exchange, when there was one.
        #[source]
        http: Option<Box<HttpDetails>>,
    },
    /// The provider rejected the request as malformed.
    #[error("bad request: {message}{}", request_id_note(http))]
    BadRequest {
        /// The provider's message.
        message: String,
        /// The HTTP exchange, when there was one.
        #[source]
        http: Option<Box<HttpDetails>>,
    },
    /// A network failure, timeout or 5xx: the same request may succeed later.
    #[error("transport error: {message}{}", request_id_note(http))]
    Transport {
        /// What failed.
        message: String,
        /// The HTTP exchange, when there was one.
        #[source]
        http: Option<Box<HttpDetails>>,
    },
    /// Anything else (e.g. a response that could not be parsed).
    #[error("model error: {message}{}", request_id_note(http))]
    Other {
        /// What failed.
        message: String,
        /// The HTTP exchange, when there was one.
        #[source]
        http: Option<Box<HttpDetails>>,
    },
}

impl ModelError {
    /// True when retrying the same request may succeed: rate limits, overload, transport failures.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::RateLimited { .. } | Self::Overloaded { .. } | Self::Transport { .. }
        )
    }

    /// The delay the provider asked for, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::RateLimited { retry_after, .. } | Self::Overloaded { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// A [`ModelError::Other`].
    pub fn other(message: impl Into<String>) -> Self {
        Self::Other {
            message: message.into(),
            http: None,
        }
    }

    /// The message and HTTP details every kind has.
    fn parts(&self) -> (&str, Option<&HttpDetails>) {
        match self {
            Self::RateLimited { message, http, .. }
            | Self::Overloaded { message, http, .. }
            | Self::ContextTooLong { message, http }
            | Self::Auth { message, http }
            | Self::BadRequest { message, http }
            | Self::Transport { message, http }
            | Self::Other { message, http } => (message, http.as_deref()),
        }
    }

    /// The HTTP exchange this error came from, when it came from one.
    pub fn http(&self) -> Option<&HttpDetails> {
        self.parts().1
    }

    /// The HTTP status the server answered with, if any.
    pub fn status(&self) -> Option<u16> {
        self.http()?.status
    }

    /// The provider's request id, if it sent one.
    pub fn request_id(&self) -> Option<&str> {
        self.http()?.request_id.as_deref()
    }

    /// The provider's message (without the kind's prefix and the request id).
    pub fn message(&self) -> &str {
        self.parts().0
    }

    /// This error with `details` attached (replacing any).
    pub fn with_http(mut self, details: HttpDetails) -> Self {
        let (Self::RateLimited { http, .. }
        | Self::Overloaded { http, .. }
        | Self::ContextTooLong { http, .. }
        | Self::Auth { http, .. }
        | Self::BadRequest { http, .. }
        | Self::Transport { http, .. }
        | Self::Other { http, .. }) = &mut self;
        *http = Some(Box::new(details));
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_kinds() {
        assert!(
            ModelError::RateLimited {
                message: String::new(),
                retry_after: Some(Duration::from_secs(2)),
                http: None
            }
            .is_transient()
        );
        assert!(
            ModelError::Transport {
                message: String::new(),
                http: None
            }
            .is_transient()
        );
        assert!(
            !ModelError::Auth {
                message: String::new(),
                http: None
            }
            .is_transient()
        );
        assert!(
            !ModelError::ContextTooLong {
                message: String::new(),
                http: None
            }
            .is_transient()
        );
    }
}
