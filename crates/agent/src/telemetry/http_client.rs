//! [`OtlpHttpClient`]: the OTLP exporter's HTTP client, on the reqwest client the providers use.
//!
//! opentelemetry-otlp would otherwise build a second HTTP stack (reqwest 0.12 or hyper) beside
//! ours. The exporters call the client from their own threads (the metrics reader's) or from our
//! export task, so each request is spawned on the tokio runtime the client was made on and
//! awaited there; the caller only waits for its result.

use std::time::Duration;

use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};

/// Largest collector answer read. An OTLP answer is an empty or partial-success message of a few
/// hundred bytes; the collector is remote input, so a larger body is an error, not memory
/// (security review F15).
const MAX_ANSWER_BYTES: usize = 64 * 1024;

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
            let mut response = client.execute(request).await?;
            let status = response.status();
            let headers = response.headers().clone();
            let mut body = Vec::new();
            while let Some(chunk) = response.chunk().await? {
                if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                    return Err(HttpError::from(format!(
                        "the OTLP collector's answer is larger than {MAX_ANSWER_BYTES} bytes"
                    )));
                }
                body.extend_from_slice(&chunk);
            }
            Ok::<_, HttpError>((status, headers, Bytes::from(body)))
        });
        let (status, headers, body) = sent.await??;
        let mut response = Response::builder().status(status);
        if let Some(h) = response.headers_mut() {
            *h = headers;
        }
        Ok(response.body(body)?)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use wiremock::matchers::method;
    use wiremock::{Mock, MockServer, ResponseTemplate};

    use super::*;

    async fn answering(body: Vec<u8>) -> MockServer {
        let collector = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(200).set_body_bytes(body))
            .mount(&collector)
            .await;
        collector
    }

    fn export_to(collector: &MockServer) -> Request<Bytes> {
        Request::post(format!("{}/v1/traces", collector.uri()))
            .body(Bytes::from_static(b"spans"))
            .unwrap()
    }

    #[tokio::test]
    async fn a_collector_answer_past_the_cap_is_an_error_not_memory() {
        // Security review F15: the answer was read whole with `bytes()`.
        let client = OtlpHttpClient::new(Duration::from_secs(10)).unwrap();
        let collector = answering(vec![b'x'; 4 * MAX_ANSWER_BYTES]).await;
        let Err(error) = client.send_bytes(export_to(&collector)).await else {
            panic!("an answer over the cap was read whole");
        };
        assert!(error.to_string().contains("larger than"), "{error}");

        let collector = answering(b"partial success".to_vec()).await;
        let answer = client
            .send_bytes(export_to(&collector))
            .await
            .expect("a small answer is read");
        assert_eq!(answer.body().as_ref(), b"partial success");
    }
}
