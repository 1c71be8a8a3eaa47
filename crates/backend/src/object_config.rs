//! Building an `object_store` store from a URL and [`StoreOptions`]: builder keys, retries, timeouts.

use std::sync::Arc;
use std::time::Duration;

use object_store::path::Path as StorePath;
use object_store::{BackoffConfig, ObjectStore, ObjectStoreScheme, RetryConfig};

use crate::error::{BackendError, Result};

/// How to build an [`ObjectStoreBackend`](crate::ObjectStoreBackend) from a URL.
///
/// The retry and timeout settings apply to the HTTP stores (S3, GCS, Azure); `file://` and
/// `memory://` ignore them. Their defaults suit an agent: a store that is down fails an operation in
/// seconds rather than minutes (object_store's own defaults retry for up to three minutes).
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Builder options as `object_store` spells them (`aws_endpoint`, `aws_allow_http`,
    /// `google_service_account`, `azure_storage_use_emulator`, `timeout`, …). Explicit options win
    /// over the environment, and both over [`timeout`](Self::timeout) and
    /// [`connect_timeout`](Self::connect_timeout).
    pub options: Vec<(String, String)>,
    /// Also read `AWS_*`, `GOOGLE_*` and `AZURE_*` variables from the environment (as the stores'
    /// own `from_env` builders do).
    pub from_env: bool,
    /// How failed requests are retried.
    pub retry: RetryOptions,
    /// Longest time one request may take, from sending it to the end of the reply's body
    /// (default 30 s). A request that times out is retried only when it is safe to repeat
    /// (reads, listings, unconditional writes).
    pub timeout: Duration,
    /// Longest time to open a connection (default 5 s).
    pub connect_timeout: Duration,
}

/// Default [`StoreOptions::timeout`].
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Default [`StoreOptions::connect_timeout`].
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            options: Vec::new(),
            from_env: false,
            retry: RetryOptions::default(),
            timeout: DEFAULT_REQUEST_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        }
    }
}

/// How the store client retries a failed request: 5xx replies, 429 and 408, connections refused
/// or closed before a reply, and timeouts and resets of requests that are safe to repeat (not of
/// create-only or version-checked writes). Other replies (404, 412, 403, …) are never retried. Waits grow exponentially with jitter, from
/// `init_backoff` up to `max_backoff`.
///
/// A request is sent at most `1 + max_retries` times, and no retry starts once `retry_timeout`
/// has passed since the first attempt; an operation on a store that keeps failing therefore ends
/// within about `retry_timeout` plus one [`StoreOptions::timeout`].
#[derive(Debug, Clone, PartialEq)]
pub struct RetryOptions {
    /// Retries after the first attempt (default 3; 0 turns retries off).
    pub max_retries: usize,
    /// No retry starts this long after the first attempt (default 15 s).
    pub retry_timeout: Duration,
    /// First wait (default 100 ms).
    pub init_backoff: Duration,
    /// Longest wait (default 2 s).
    pub max_backoff: Duration,
}

impl Default for RetryOptions {
    fn default() -> Self {
        Self {
            max_retries: 3,
            retry_timeout: Duration::from_secs(15),
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
        }
    }
}

impl RetryOptions {
    fn config(&self) -> RetryConfig {
        RetryConfig {
            backoff: BackoffConfig {
                init_backoff: self.init_backoff,
                max_backoff: self.max_backoff.max(self.init_backoff),
                base: 2.0,
            },
            max_retries: self.max_retries,
            retry_timeout: self.retry_timeout,
        }
    }
}

impl StoreOptions {
    /// Options from the environment only.
    pub fn from_env() -> Self {
        Self {
            from_env: true,
            ..Self::default()
        }
    }

    /// Options for an S3-compatible server at `endpoint` (MinIO, moto, R2, …): static credentials,
    /// path-style requests, region `us-east-1`; an `http://` endpoint is allowed.
    pub fn s3_compatible(
        endpoint: impl Into<String>,
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<String>,
    ) -> Self {
        let endpoint = endpoint.into();
        let allow_http = endpoint.starts_with("http://");
        Self::default()
            .with("aws_endpoint", endpoint)
            .with("aws_allow_http", allow_http.to_string())
            .with("aws_access_key_id", access_key_id)
            .with("aws_secret_access_key", secret_access_key)
            .with("aws_region", "us-east-1")
    }

    /// Add one option.
    pub fn with(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.options.push((key.into(), value.into()));
        self
    }

    /// Set how failed requests are retried.
    pub fn with_retry(mut self, retry: RetryOptions) -> Self {
        self.retry = retry;
        self
    }

    /// Set the timeout of one request.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Set the timeout for opening a connection.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }
}

/// Install the process-wide rustls crypto provider (ring) once; reqwest is built without one.
pub(crate) fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// The store a URL names, and the key prefix inside it.
pub(crate) fn build_store(url: &str, options: &StoreOptions) -> Result<(Arc<dyn ObjectStore>, StorePath)> {
    install_crypto_provider();
    let invalid = |reason: String| BackendError::InvalidPath {
        path: url.to_owned(),
        reason,
    };
    let parsed = url::Url::parse(url).map_err(|e| invalid(format!("not a URL: {e}")))?;
    let (scheme, path) = ObjectStoreScheme::parse(&parsed).map_err(|e| invalid(e.to_string()))?;
    let prefix = StorePath::parse(path).map_err(|e| invalid(e.to_string()))?;
    for (key, _) in &options.options {
        check_option_key(&scheme, key).map_err(invalid)?;
    }
    // Lowest precedence first: our typed settings, then the environment, then explicit options.
    let mut opts: Vec<(String, String)> = vec![
        ("timeout".to_owned(), millis(options.timeout)),
        ("connect_timeout".to_owned(), millis(options.connect_timeout)),
    ];
    if options.from_env {
        for (key, value) in std::env::vars() {
            if key.starts_with("AWS_") || key.starts_with("GOOGLE_") || key.starts_with("AZURE_") {
                opts.push((key.to_ascii_lowercase(), value));
            }
        }
    }
    opts.extend(options.options.iter().cloned());
    let retry = options.retry.config();
    let store_error = |e: object_store::Error| invalid(e.to_string());

    /// Apply every option the builder knows (others, from the environment, are ignored as
    /// object_store's own `parse_url_opts` ignores them), then the retry settings.
    macro_rules! build {
        ($builder:ty) => {{
            let builder = opts.iter().fold(
                <$builder>::new().with_url(parsed.to_string()),
                |builder, (key, value)| match key.to_ascii_lowercase().parse() {
                    Ok(k) => builder.with_config(k, value.clone()),
                    Err(_) => builder,
                },
            );
            Arc::new(builder.with_retry(retry).build().map_err(store_error)?) as Arc<dyn ObjectStore>
        }};
    }

    let store = match scheme {
        ObjectStoreScheme::Local => {
            // object_store's local store needs the directory to exist.
            if let Ok(dir) = parsed.to_file_path() {
                std::fs::create_dir_all(&dir).map_err(|e| BackendError::from_io(url, e))?;
            }
            Arc::new(object_store::local::LocalFileSystem::new()) as Arc<dyn ObjectStore>
        }
        ObjectStoreScheme::Memory => Arc::new(object_store::memory::InMemory::new()),
        ObjectStoreScheme::AmazonS3 => build!(object_store::aws::AmazonS3Builder),
        ObjectStoreScheme::GoogleCloudStorage => build!(object_store::gcp::GoogleCloudStorageBuilder),
        ObjectStoreScheme::MicrosoftAzure => build!(object_store::azure::MicrosoftAzureBuilder),
        other => return Err(invalid(format!("unsupported store {other:?}"))),
    };
    Ok((store, prefix))
}

fn millis(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

/// Refuse an explicit option the URL's store would silently ignore (object_store skips unknown
/// keys), so a typo is an error rather than a surprise.
fn check_option_key(scheme: &ObjectStoreScheme, key: &str) -> std::result::Result<(), String> {
    use object_store::ObjectStoreScheme as Scheme;
    let lower = key.to_ascii_lowercase();
    let known = match scheme {
        Scheme::AmazonS3 => lower.parse::<object_store::aws::AmazonS3ConfigKey>().is_ok(),
        Scheme::GoogleCloudStorage => lower.parse::<object_store::gcp::GoogleConfigKey>().is_ok(),
        Scheme::MicrosoftAzure => lower.parse::<object_store::azure::AzureConfigKey>().is_ok(),
        // Local and in-memory stores take no options.
        _ => false,
    };
    if known {
        Ok(())
    } else {
        Err(format!("unknown option `{key}` for this store"))
    }
}

#[cfg(test)]
mod tests {
    use object_store::ClientConfigKey;

    /// The keys `build_store` sets mean the client timeouts on every HTTP store.
    #[test]
    fn timeout_keys_are_client_keys() {
        use object_store::{
            aws::AmazonS3ConfigKey as S3, azure::AzureConfigKey as Az, gcp::GoogleConfigKey as Gcs,
        };
        for (key, want) in [
            ("timeout", ClientConfigKey::Timeout),
            ("connect_timeout", ClientConfigKey::ConnectTimeout),
        ] {
            assert_eq!(key.parse::<S3>().ok(), Some(S3::Client(want)));
            assert_eq!(key.parse::<Gcs>().ok(), Some(Gcs::Client(want)));
            assert_eq!(key.parse::<Az>().ok(), Some(Az::Client(want)));
        }
    }
}
