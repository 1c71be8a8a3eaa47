//! The HTTP plumbing every provider shares: a reqwest client with timeouts, one POST of a JSON body,
//! transport failures mapped to [`ModelError::Transport`], and the `retry-after` hint.
//!
//! No retries happen here: the retry middleware owns them, so they can be configured and observed.

use std::fmt;
use std::time::Duration;
use trellis_middleware::tools::canonical::Sorted;

use bytes::Bytes;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;
use std::sync::Arc;

use trellis_middleware::runtime::model::{HttpDetails, ModelError};

use super::ProviderError;

/// Timeouts of a provider's HTTP client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpConfig {
    /// Time allowed to open a connection (TCP and TLS).
    pub connect_timeout: Duration,
    /// Time allowed for a whole call, from sending the request to reading the last byte of the answer.
    /// Non-streaming calls that write long answers take minutes, hence the generous default.
    pub request_timeout: Duration,
    /// Largest response body accepted, in bytes. A longer body is abandoned as soon as it crosses the
    /// limit (a [`ModelError::Other`]), so a misbehaving endpoint cannot make the agent buffer without
    /// bound.
    pub max_response_bytes: usize,
    /// Longest a streamed reply may send nothing before it counts as stalled (default 90 s; the
    /// providers send keep-alive events well within that).
    pub stream_idle_timeout: Duration,
}

impl HttpConfig {
    /// The default limit on a response body: 32 MiB, far above any real completion (the largest
    /// answers with images stay in the low megabytes).
    pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 32 * 1024 * 1024;
}

impl Default for HttpConfig {
    /// 10 s to connect, 10 minutes per call, 32 MiB per response body.
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(600),
            max_response_bytes: Self::DEFAULT_MAX_RESPONSE_BYTES,
            stream_idle_timeout: Duration::from_secs(90),
        }
    }
}

/// An API key. Its `Debug` output never shows the key.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wrap a key.
    pub fn new(key: impl Into<String>) -> Self {
        Self(key.into())
    }

    /// The key itself, for a request header.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

impl<S: Into<String>> From<S> for ApiKey {
    fn from(key: S) -> Self {
        Self::new(key)
    }
}

/// A provider's parser for error bodies: status, retry hint, body → typed error.
pub(crate) type ErrorParser = fn(u16, Option<Duration>, &[u8]) -> ModelError;

/// A request body as the bytes sent: JSON with sorted keys, so the same bytes whatever serde_json's
/// map order is in this build.
///
/// Made before the request goes out, so the `Value` it came from can be dropped while the reply is
/// awaited. The bytes themselves live until the reply arrives (reqwest keeps them to follow a
/// redirect), so they are held at their exact length, without the serializer's spare capacity.
///
/// Measured on the serve bench (a model answering in 2–3 s, 2026-12-06): with 200 runs in flight,
/// heaptrack found the request's `Value` held across the wait, 33 KB of each run's 225 KB of heap.
/// With 1,000 runs in flight, the server's peak RSS went from 233 to 182 MB.
#[derive(Debug)]
pub(crate) struct JsonBody(Bytes);

impl JsonBody {
    /// `body` serialized, every object's keys sorted.
    pub(crate) fn encode(body: &Value) -> Result<Self, ModelError> {
        Self::encode_as(&Sorted(body))
    }

    /// `body` serialized as it writes itself (for a body whose parts are kept serialized, with
    /// keys sorted as [`encode`](Self::encode) sorts them).
    pub(crate) fn encode_as(body: &impl serde::Serialize) -> Result<Self, ModelError> {
        let bytes = serde_json::to_vec(body).map_err(|e| ModelError::Other {
            message: format!("cannot serialize the request: {e}"),
            http: None,
        })?;
        Ok(Self(Bytes::from(bytes.into_boxed_slice())))
    }

    /// The bytes sent.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The bytes, for the request.
    pub(crate) fn into_bytes(self) -> Bytes {
        self.0
    }
}

/// What came back from one POST: status, the retry hint and the whole body.
#[derive(Debug)]
pub(crate) struct HttpReply {
    pub status: u16,
    pub retry_after: Option<Duration>,
    pub should_retry: Option<bool>,
    pub request_id: Option<String>,
    pub body: Bytes,
}

impl HttpReply {
    pub(crate) fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// Authorizes each request of a provider whose credentials are per request: a signature over
/// the body (SigV4 on Bedrock) or a token that expires (OAuth on Vertex AI). Called with the
/// final URL, the headers so far and the exact body bytes, just before sending.
#[async_trait::async_trait]
pub(crate) trait Authorize: Send + Sync + fmt::Debug {
    /// Add the authorizing headers. A failure to get credentials is the call's error.
    async fn authorize(&self, url: &str, headers: &mut HeaderMap, body: &[u8]) -> Result<(), ModelError>;
}

/// A reqwest client plus the headers sent with every request.
#[derive(Debug, Clone)]
pub(crate) struct HttpClient {
    client: reqwest::Client,
    headers: HeaderMap,
    max_response_bytes: usize,
    stream_idle_timeout: Duration,
    auth: Option<Arc<dyn Authorize>>,
}

impl HttpClient {
    /// Build a client; `headers` go on every request (`content-type: application/json` is added).
    pub(crate) fn new(config: &HttpConfig, mut headers: HeaderMap) -> Result<Self, ProviderError> {
        install_crypto_provider();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let client = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .timeout(config.request_timeout)
            .redirect(same_origin_redirects())
            .build()
            .map_err(|e| ProviderError::Client {
                message: error_chain(&e),
            })?;
        Ok(Self {
            client,
            headers,
            max_response_bytes: config.max_response_bytes,
            stream_idle_timeout: config.stream_idle_timeout,
            auth: None,
        })
    }

    /// Authorize every request with `auth` (after the fixed headers are set).
    pub(crate) fn with_auth(mut self, auth: Arc<dyn Authorize>) -> Self {
        self.auth = Some(auth);
        self
    }

    /// The headers of one POST of `body` to `url`: the fixed ones, `extra`, then authorization.
    pub(crate) async fn request_headers(
        &self,
        url: &str,
        extra: Option<(reqwest::header::HeaderName, HeaderValue)>,
        body: &[u8],
    ) -> Result<HeaderMap, ModelError> {
        let mut headers = self.headers.clone();
        if let Some((name, value)) = extra {
            headers.insert(name, value);
        }
        if let Some(auth) = &self.auth {
            auth.authorize(url, &mut headers, body).await?;
        }
        Ok(headers)
    }

    /// POST a JSON request body to `url` and return the body of a successful reply. A non-2xx answer
    /// becomes the provider's typed error through `parse_error`; failing to get an answer at all is
    /// `ModelError::Transport`.
    pub(crate) async fn exchange(
        &self,
        url: &str,
        body: JsonBody,
        parse_error: ErrorParser,
    ) -> Result<Bytes, ModelError> {
        tracing::debug!(bytes = body.as_bytes().len(), "POST {url}");
        let reply = self.post_json(url, body).await?;
        if !reply.is_success() {
            let error = parse_error(reply.status, reply.retry_after, &reply.body);
            return Err(obey_should_retry(error, reply.should_retry)
                .with_http(answered(reply.status, reply.request_id)));
        }
        Ok(reply.body)
    }

    /// POST `body` (JSON bytes) to `url`. Any answer with a status is `Ok`; only failures to get one
    /// (connection, TLS, timeout, a body cut short) are `Err(ModelError::Transport)`; a body over the
    /// configured limit is `Err(ModelError::Other)`.
    pub(crate) async fn post_json(&self, url: &str, body: JsonBody) -> Result<HttpReply, ModelError> {
        let headers = self.request_headers(url, None, body.as_bytes()).await?;
        let mut response = self
            .client
            .post(url)
            .headers(headers)
            .body(body.into_bytes())
            .send()
            .await
            .map_err(transport)?;
        let status = response.status().as_u16();
        let retry_after = retry_after(response.headers());
        let should_retry = should_retry(response.headers());
        let request_id = request_id(response.headers());
        note_request_id(request_id.as_deref());
        let body = self.read_body(&mut response).await?;
        Ok(HttpReply {
            status,
            retry_after,
            should_retry,
            request_id,
            body,
        })
    }
}

impl HttpClient {
    pub(crate) fn client(&self) -> &reqwest::Client {
        &self.client
    }

    pub(crate) fn max_response_bytes(&self) -> usize {
        self.max_response_bytes
    }

    pub(crate) fn stream_idle_timeout(&self) -> Duration {
        self.stream_idle_timeout
    }

    /// The body of `response`, refusing to grow past `max_response_bytes` ([`read_capped`]).
    pub(crate) async fn read_body(&self, response: &mut reqwest::Response) -> Result<Bytes, ModelError> {
        read_capped(response, self.max_response_bytes).await
    }
}

/// The body of `response`, chunk by chunk, refusing to grow past `limit` bytes (checked against
/// `content-length` first, then against what actually arrives): every body a provider, a token
/// endpoint or a collector sends is remote input.
pub(crate) async fn read_capped(response: &mut reqwest::Response, limit: usize) -> Result<Bytes, ModelError> {
    let too_large = |size: String| ModelError::Other {
        message: format!("the response body is larger than the {limit}-byte limit ({size})"),
        http: None,
    };
    if let Some(declared) = response.content_length()
        && declared > limit as u64
    {
        return Err(too_large(format!("content-length {declared}")));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(transport)? {
        if body.len() + chunk.len() > limit {
            return Err(too_large(format!("at least {} bytes", body.len() + chunk.len())));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(body))
}

/// A header value that is never logged; an unusable value is a configuration error naming `what`.
pub(crate) fn secret_header(value: &str, what: &str) -> Result<HeaderValue, ProviderError> {
    let mut value = HeaderValue::from_str(value).map_err(|_| ProviderError::InvalidConfig {
        message: format!("{what} contains characters that cannot be sent in an HTTP header"),
    })?;
    value.set_sensitive(true);
    Ok(value)
}

/// Insert a plain header.
pub(crate) fn plain_header(
    headers: &mut HeaderMap,
    name: &'static str,
    value: &str,
) -> Result<(), ProviderError> {
    let value = HeaderValue::from_str(value).map_err(|_| ProviderError::InvalidConfig {
        message: format!("the value of header {name} is not a valid header value"),
    })?;
    headers.insert(HeaderName::from_static(name), value);
    Ok(())
}

/// `base_url` without trailing slashes, checked to be an http(s) URL.
pub(crate) fn normalize_base_url(base_url: &str) -> Result<String, ProviderError> {
    let trimmed = base_url.trim().trim_end_matches('/');
    let parsed = url::Url::parse(trimmed).map_err(|e| ProviderError::InvalidConfig {
        message: format!("base URL `{base_url}` does not parse: {e}"),
    })?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(ProviderError::InvalidConfig {
            message: format!("base URL `{base_url}` must start with http:// or https://"),
        });
    }
    Ok(trimmed.to_owned())
}

/// The delay a server asked for: `retry-after-ms` (milliseconds, sent by OpenAI) or `retry-after`
/// (seconds, integer or decimal). HTTP-date values are ignored.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    retry_after_at(headers, std::time::SystemTime::now())
}

/// Longest `retry-after` honoured. The official SDKs ignore longer hints (the OpenAI and
/// Anthropic Python SDKs honour up to 60 s) and fall back to their own backoff, so a proxy that
/// answers `retry-after: 86400` cannot stall a run for a day.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// [`retry_after`] as of `now`: `retry-after-ms` (milliseconds), else `retry-after` as seconds or
/// as an HTTP-date (RFC 9110 §10.2.3); `None` when absent, unparsable, or over [`MAX_RETRY_AFTER`].
pub(crate) fn retry_after_at(headers: &HeaderMap, now: std::time::SystemTime) -> Option<Duration> {
    let text = |name: &str| headers.get(name)?.to_str().ok().map(str::trim);
    let number = |name: &str| -> Option<f64> {
        let value = text(name)?.parse::<f64>().ok()?;
        (value.is_finite() && value >= 0.0).then_some(value)
    };
    let hint = if let Some(ms) = number("retry-after-ms") {
        Duration::try_from_secs_f64(ms / 1000.0).ok()
    } else if let Some(s) = number("retry-after") {
        Duration::try_from_secs_f64(s).ok()
    } else {
        let date = httpdate::parse_http_date(text("retry-after")?).ok()?;
        Some(date.duration_since(now).unwrap_or(Duration::ZERO))
    }?;
    if hint > MAX_RETRY_AFTER {
        tracing::debug!(?hint, "retry-after over {MAX_RETRY_AFTER:?} ignored");
        return None;
    }
    Some(hint)
}

/// The provider's `x-should-retry` header (`true` / `false`), which the official SDKs obey over
/// their own classification.
pub(crate) fn should_retry(headers: &HeaderMap) -> Option<bool> {
    match headers.get("x-should-retry")?.to_str().ok()?.trim() {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

/// `error`, made retryable or final as `x-should-retry` says.
pub(crate) fn obey_should_retry(error: ModelError, should_retry: Option<bool>) -> ModelError {
    match should_retry {
        Some(true) if !error.is_transient() => ModelError::Transport {
            message: format!("{error} (the server asked for a retry)"),
            http: None,
        },
        Some(false) if error.is_transient() => ModelError::Other {
            message: format!("{error} (the server asked not to retry)"),
            http: None,
        },
        _ => error,
    }
}

/// A failure to get an answer, as [`ModelError::Transport`] keeping `error` as its source.
/// Most redirects one provider request follows (reqwest's default is 10).
const MAX_REDIRECTS: usize = 5;

/// Follow a redirect only to the origin (scheme, host, port) the request was sent to. Provider
/// requests carry keys in headers reqwest does not strip on a cross-host hop (`x-api-key`,
/// `api-key`, signed headers), so a proxy or base URL that redirects elsewhere would hand them
/// over (security review F16); such a redirect becomes an error that [`transport`] reports.
fn same_origin_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let same_origin = attempt
            .previous()
            .first()
            .is_some_and(|first| first.origin() == attempt.url().origin());
        if !same_origin {
            let to = attempt.url().origin().ascii_serialization();
            attempt.error(format!("redirected to another origin ({to})"))
        } else if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
        } else {
            attempt.follow()
        }
    })
}

pub(crate) fn transport(error: reqwest::Error) -> ModelError {
    if error.is_redirect() {
        // Not transient: the same request would be redirected again.
        return ModelError::Other {
            message: format!(
                "the endpoint answered with a redirect that was not followed ({}): provider \
                 requests carry keys, so they follow redirects only within the same origin; \
                 set the base URL to the address it redirects to if you trust it",
                error_chain(&error)
            ),
            http: Some(Box::new(HttpDetails {
                status: error.status().map(|s| s.as_u16()),
                request_id: None,
                source: Some(Arc::new(error)),
            })),
        };
    }
    let what = if error.is_timeout() {
        "timed out: "
    } else if error.is_connect() {
        "cannot connect: "
    } else {
        ""
    };
    let message = format!("{what}{}", error_chain(&error));
    ModelError::Transport {
        message,
        http: Some(Box::new(HttpDetails {
            status: error.status().map(|s| s.as_u16()),
            request_id: None,
            source: Some(Arc::new(error)),
        })),
    }
}

/// Put the provider's request id on the current span (the runtime's `chat` span declares
/// `trellis.provider.request_id`), so a trace leads to the provider's own logs.
pub(crate) fn note_request_id(id: Option<&str>) {
    if let Some(id) = id {
        tracing::Span::current().record("trellis.provider.request_id", id);
    }
}

/// The provider's id of the request: `request-id` (Anthropic), `x-request-id` (OpenAI, and
/// most OpenAI-compatible servers and proxies) or `x-amzn-requestid` (AWS, Bedrock).
pub(crate) fn request_id(headers: &HeaderMap) -> Option<String> {
    ["request-id", "x-request-id", "x-amzn-requestid"]
        .iter()
        .find_map(|name| headers.get(*name)?.to_str().ok())
        .map(str::trim)
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
}

/// The [`HttpDetails`] of an answer with `status`.
pub(crate) fn answered(status: u16, request_id: Option<String>) -> HttpDetails {
    HttpDetails {
        status: Some(status),
        request_id,
        source: None,
    }
}

/// The error and its sources, joined with `: ` (reqwest's own message hides the cause).
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}

/// Install the process-wide rustls crypto provider (ring) once; reqwest is built without one. Every
/// HTTP client the crate builds (providers, MCP over HTTP) calls this first.
pub(crate) fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_body_is_sent_with_sorted_keys_at_every_depth() {
        let body = serde_json::json!({"b": 1, "a": {"d": [{"f": 1, "e": 2}], "c": 3}});
        let sent = JsonBody::encode(&body).unwrap();
        assert_eq!(sent.as_bytes(), br#"{"a":{"c":3,"d":[{"e":2,"f":1}]},"b":1}"#);
        assert_eq!(sent.into_bytes().len(), 39);
    }

    #[test]
    fn retry_after_reads_seconds_and_milliseconds() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert("retry-after", HeaderValue::from_static("7"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(7)));
        h.insert("retry-after", HeaderValue::from_static("1.5"));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(1500)));
        h.insert("retry-after-ms", HeaderValue::from_static("250"));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(250)));
        let mut h = HeaderMap::new();
        h.insert(
            "retry-after",
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        // A date in the past means "now".
        assert_eq!(retry_after(&h), Some(Duration::ZERO));
        h.insert("retry-after", HeaderValue::from_static("-3"));
        assert_eq!(retry_after(&h), None);
    }

    #[test]
    fn retry_after_dates_count_from_now_and_long_hints_are_ignored() {
        let now = httpdate::parse_http_date("Wed, 21 Oct 2015 07:28:00 GMT").unwrap();
        let mut h = HeaderMap::new();
        h.insert(
            "retry-after",
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:30 GMT"),
        );
        assert_eq!(retry_after_at(&h, now), Some(Duration::from_secs(30)));
        h.insert(
            "retry-after",
            HeaderValue::from_static("Thu, 22 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after_at(&h, now), None, "a day is over the cap");
        h.insert("retry-after", HeaderValue::from_static("86400"));
        assert_eq!(retry_after_at(&h, now), None);
        h.insert("retry-after", HeaderValue::from_static("60"));
        assert_eq!(retry_after_at(&h, now), Some(MAX_RETRY_AFTER));
        h.insert("retry-after", HeaderValue::from_static("soon"));
        assert_eq!(retry_after_at(&h, now), None);
    }

    #[test]
    fn x_should_retry_overrides_the_classification() {
        let mut h = HeaderMap::new();
        assert_eq!(should_retry(&h), None);
        h.insert("x-should-retry", HeaderValue::from_static("true"));
        assert_eq!(should_retry(&h), Some(true));
        let bad = ModelError::BadRequest {
            message: "x".into(),
            http: None,
        };
        assert!(obey_should_retry(bad, Some(true)).is_transient());
        let flaky = ModelError::Transport {
            message: "x".into(),
            http: None,
        };
        assert!(!obey_should_retry(flaky, Some(false)).is_transient());
        let flaky = ModelError::Transport {
            message: "x".into(),
            http: None,
        };
        assert!(obey_should_retry(flaky, None).is_transient());
    }

    #[test]
    fn base_urls_are_checked_and_trimmed() {
        assert_eq!(
            normalize_base_url("http://localhost:11434/v1/").unwrap(),
            "http://localhost:11434/v1"
        );
        assert!(normalize_base_url("localhost:8080").is_err());
        assert!(normalize_base_url("ftp://x").is_err());
    }

    #[test]
    fn api_keys_do_not_leak_through_debug() {
        let key = ApiKey::new("sk-secret");
        assert!(!format!("{key:?}").contains("secret"));
        assert_eq!(key.expose(), "sk-secret");
    }
}
