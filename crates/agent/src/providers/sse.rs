//! Reading a streamed reply: one POST answered with server-sent events, parsed by the
//! `sse-stream` crate (already in the dependency tree under rmcp; it implements the WHATWG event
//! stream rules, including events split across chunks at any byte).
//!
//! Failures are typed for the retry middleware: an error status is parsed as the provider's error
//! body, as for a non-streaming call; a connection that breaks, ends before the reply is complete,
//! or sends nothing for [`HttpConfig::stream_idle_timeout`](super::http::HttpConfig) is
//! [`ModelError::Transport`] (retried from the start); a reply larger than the response limit is
//! [`ModelError::Other`].

use std::pin::Pin;
use std::time::Duration;

use futures::{Stream, StreamExt};
use reqwest::header::{ACCEPT, HeaderValue};
use serde_json::Value;
use sse_stream::{Sse, SseStream};
use trellis_middleware::runtime::model::{HttpDetails, ModelError};

use trellis_middleware::ModelResponse;
use trellis_middleware::runtime::stream::{DeltaSink, ModelDelta, deltas_of};

use super::http::{
    ErrorParser, HttpClient, answered, note_request_id, obey_should_retry, request_id, retry_after,
    should_retry, transport,
};

type Events = Pin<Box<dyn Stream<Item = Result<Sse, sse_stream::Error>> + Send>>;

/// The events of one streamed reply.
pub(crate) struct EventStream {
    events: Events,
    idle: Duration,
    seen: usize,
    limit: usize,
    /// The status and request id of the answer that opened the stream, put on every error the
    /// stream ends with (a mid-stream `error` event has no id of its own).
    http: HttpDetails,
}

impl std::fmt::Debug for EventStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventStream")
            .field("seen", &self.seen)
            .finish_non_exhaustive()
    }
}

/// What a request for a stream got: events, or — from a server or gateway that ignores
/// `"stream": true` and answers with one JSON body — that body.
#[derive(Debug)]
pub(crate) enum Opened {
    /// An event stream.
    Events(EventStream),
    /// A whole reply.
    Whole(bytes::Bytes),
}

impl HttpClient {
    /// POST `body` to `url` asking for an event stream. An error status is read whole and parsed
    /// with `parse_error`; a success with a JSON content type is read whole.
    pub(crate) async fn open_stream(
        &self,
        url: &str,
        body: &Value,
        parse_error: ErrorParser,
    ) -> Result<Opened, ModelError> {
        let mut response = self
            .open_reply(
                url,
                body,
                HeaderValue::from_static("text/event-stream"),
                parse_error,
            )
            .await?;
        // A JSON body is a whole reply; anything else (`text/event-stream`, or a proxy that drops
        // the type) is read as events.
        let is_json = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.to_ascii_lowercase().contains("json"));
        if is_json {
            tracing::debug!("POST {url}: asked for a stream, got one body");
            return Ok(Opened::Whole(self.read_body(&mut response).await?));
        }
        let http = answered(response.status().as_u16(), request_id(response.headers()));
        let events = SseStream::from_bytes_stream(response.bytes_stream()).boxed();
        Ok(Opened::Events(EventStream {
            events,
            idle: self.stream_idle_timeout(),
            seen: 0,
            limit: self.max_response_bytes(),
            http,
        }))
    }

    /// POST `body` to `url` accepting `accept`, and give the response of a success, whose body is
    /// still to read. An error status is read whole and parsed with `parse_error`; failing to get
    /// an answer is `ModelError::Transport`.
    pub(crate) async fn open_reply(
        &self,
        url: &str,
        body: &Value,
        accept: HeaderValue,
        parse_error: ErrorParser,
    ) -> Result<reqwest::Response, ModelError> {
        let bytes = serde_json::to_vec(body).map_err(|e| ModelError::Other {
            message: format!("cannot serialize the request: {e}"),
            http: None,
        })?;
        tracing::debug!(bytes = bytes.len(), "POST {url} (stream)");
        let headers = self.request_headers(url, Some((ACCEPT, accept)), &bytes).await?;
        let mut response = self
            .client()
            .post(url)
            .headers(headers)
            .body(bytes)
            .send()
            .await
            .map_err(transport)?;
        let status = response.status().as_u16();
        note_request_id(request_id(response.headers()).as_deref());
        if !(200..300).contains(&status) {
            let retry = retry_after(response.headers());
            let should = should_retry(response.headers());
            let id = request_id(response.headers());
            let body = self.read_body(&mut response).await?;
            return Err(
                obey_should_retry(parse_error(status, retry, &body), should).with_http(answered(status, id))
            );
        }
        Ok(response)
    }
}

impl EventStream {
    /// `error` with the status and request id of the answer that opened this stream.
    pub(crate) fn with_exchange(&self, error: ModelError) -> ModelError {
        error.with_http(self.http.clone())
    }

    /// The next event with data; `None` at the end of the stream. Errors carry the exchange's
    /// status and request id.
    pub(crate) async fn next(&mut self) -> Result<Option<Sse>, ModelError> {
        self.next_event().await.map_err(|e| self.with_exchange(e))
    }

    async fn next_event(&mut self) -> Result<Option<Sse>, ModelError> {
        loop {
            let item = match tokio::time::timeout(self.idle, self.events.next()).await {
                Ok(item) => item,
                Err(_) => {
                    return Err(ModelError::Transport {
                        message: format!("the reply stream stalled: nothing for {} s", self.idle.as_secs()),
                        http: None,
                    });
                }
            };
            let event = match item {
                None => return Ok(None),
                Some(Ok(event)) => event,
                Some(Err(e)) => {
                    return Err(ModelError::Transport {
                        message: format!("the reply stream broke: {e}"),
                        http: None,
                    });
                }
            };
            self.seen += event.data.as_ref().map_or(0, String::len);
            if self.seen > self.limit {
                return Err(ModelError::Other {
                    message: format!("the streamed reply is larger than the {}-byte limit", self.limit),
                    http: None,
                });
            }
            if event.data.is_some() {
                return Ok(Some(event));
            }
        }
    }
}

/// The error for a stream that ended before the reply was complete.
pub(crate) fn ended_early(provider: &str) -> ModelError {
    ModelError::Transport {
        message: format!("the {provider} reply stream ended before the reply was complete"),
        http: None,
    }
}

/// The error for an event whose data is not the JSON the provider documents.
pub(crate) fn bad_event(provider: &str, event: &str, error: &serde_json::Error) -> ModelError {
    ModelError::Other {
        message: format!("the {provider} stream sent a `{event}` event that does not parse: {error}"),
        http: None,
    }
}

/// A provider's event-stream assembler: takes events, sends deltas, and finally gives the JSON
/// body a non-streaming call would have returned.
pub(crate) trait Assemble: Default {
    /// Take one event (its name, when the stream names events, and its data).
    fn take(&mut self, name: Option<&str>, data: &str, on_delta: DeltaSink<'_>) -> Result<(), ModelError>;
    /// True when the stream has said it is over.
    fn is_done(&self) -> bool;
    /// True when the reply is whole if the stream ends now.
    fn is_complete(&self) -> bool {
        self.is_done()
    }
    /// The reply as the non-streaming JSON body.
    fn finish(self) -> Vec<u8>;
}

/// A reply asked for as a stream: the body to parse, and whether it arrived as events (whose
/// deltas were sent) or whole (whose deltas are still to send).
#[derive(Debug)]
pub(crate) enum Streamed {
    /// Assembled from events.
    Events(Vec<u8>),
    /// One JSON body.
    Whole(bytes::Bytes),
}

impl Streamed {
    /// The body to parse.
    pub(crate) fn body(&self) -> &[u8] {
        match self {
            Self::Events(body) => body,
            Self::Whole(body) => body,
        }
    }

    /// Send what the caller has not seen yet of the parsed `response`: every block for a whole
    /// body, the finish for an assembled one.
    pub(crate) fn deliver(&self, response: &ModelResponse, on_delta: DeltaSink<'_>) {
        match self {
            Self::Whole(_) => deltas_of(response).into_iter().for_each(on_delta),
            Self::Events(_) => on_delta(ModelDelta::Finished {
                stop_reason: response.stop_reason.clone(),
                usage: response.usage,
            }),
        }
    }
}

/// POST `body` to `url` as a stream and assemble the reply with `A`.
pub(crate) async fn stream_reply<A: Assemble>(
    client: &HttpClient,
    url: &str,
    body: &Value,
    parse_error: ErrorParser,
    provider: &str,
    on_delta: DeltaSink<'_>,
) -> Result<Streamed, ModelError> {
    let mut events = match client.open_stream(url, body, parse_error).await? {
        Opened::Events(events) => events,
        Opened::Whole(body) => return Ok(Streamed::Whole(body)),
    };
    let mut reply = A::default();
    while let Some(event) = events.next().await? {
        reply
            .take(
                event.event.as_deref(),
                event.data.as_deref().unwrap_or(""),
                on_delta,
            )
            .map_err(|e| events.with_exchange(e))?;
        if reply.is_done() {
            break;
        }
    }
    if !reply.is_complete() {
        return Err(events.with_exchange(ended_early(provider)));
    }
    Ok(Streamed::Events(reply.finish()))
}

/// `body` delivered in chunks split at `cuts` (byte offsets, taken modulo the length), as an
/// event stream: for the assemblers' split-point tests.
#[cfg(test)]
pub(crate) fn split_events(body: &str, cuts: &[usize]) -> impl Stream<Item = Result<Sse, sse_stream::Error>> {
    let bytes = body.as_bytes();
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut chunks = Vec::new();
    let mut from = 0;
    for cut in cuts.into_iter().chain([bytes.len()]) {
        chunks.push(Ok::<_, std::io::Error>(bytes::Bytes::copy_from_slice(
            &bytes[from..cut],
        )));
        from = cut;
    }
    SseStream::from_bytes_stream(futures::stream::iter(chunks))
}

/// What [`assemble_split`] gives: the reply body and whether the stream said it was complete
/// (or the error), and every delta sent.
#[cfg(test)]
pub(crate) type Assembled = (Result<(Vec<u8>, bool), ModelError>, Vec<ModelDelta>);

/// A split-point test's assembly: `body` split at `cuts`, read with `A`.
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
pub(crate) fn assemble_split<A: Assemble>(body: &str, cuts: &[usize]) -> Assembled {
    let deltas = std::sync::Mutex::new(Vec::new());
    let on_delta = |d: ModelDelta| deltas.lock().unwrap().push(d);
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let result = rt.block_on(async {
        let mut events = std::pin::pin!(split_events(body, cuts));
        let mut reply = A::default();
        while let Some(event) = events.next().await {
            let event = event.map_err(|e| ModelError::Transport {
                message: e.to_string(),
                http: None,
            })?;
            let Some(data) = event.data else { continue };
            reply.take(event.event.as_deref(), &data, &on_delta)?;
        }
        let complete = reply.is_complete();
        Ok((reply.finish(), complete))
    });
    (result, deltas.into_inner().unwrap())
}
