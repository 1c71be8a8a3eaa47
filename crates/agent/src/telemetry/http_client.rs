//! [`OtlpHttpClient`]: the OTLP exporter's HTTP client, on the reqwest client the providers use.
//!
//! opentelemetry-otlp would otherwise build a second HTTP stack (reqwest 0.12 or hyper) beside
//! ours. The exporters call the client from their own threads (the metrics reader's) or from our
//! export task, so each request is spawned on the tokio runtime the client was made on and
//! awaited there; the caller only waits for its result.

use std::time::Duration;

use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};

/// Sends OTLP requests with reqwest on a tokio runtime.
#[derive(Debug, Clone)]
pub struct OtlpHttpClient {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

impl OtlpHttpClient {
    /// A client whose requests time out after `timeout` (connect, send and the whole response),
    /// run on the current tokio runtime. Errors: called outside a tokio runtime.
    pub fn new(timeout: Duration) -> Result<Self, String> {
        crate::providers::http::install_crypto_provider();
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| "telemetry export needs a tokio runtime".to_owned())?;
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .build()
            .map_err(|e| format!("cannot build the OTLP HTTP client: {e}"))?;
        Ok(Self { client, runtime })
    }
}

#[async_trait::async_trait]
impl HttpClient for OtlpHttpClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let request = reqwest::Request::try_from(request)?;
        let sent = self.runtime.spawn(async move {
            let response = client.execute(request).await?;
            let status = response.status();
            let headers = response.headers().clone();
            let body = response.bytes().await?;
            Ok::<_, reqwest::Error>((status, headers, body))
        });
        let (status, headers, body) = sent.await??;
        let mut response = Response::builder().status(status);
        if let Some(h) = response.headers_mut() {
            *h = headers;
        }
        Ok(response.body(body)?)
    }
}
