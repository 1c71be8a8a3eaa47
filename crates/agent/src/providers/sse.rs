//! Reading a streamed reply: one POST answered with server-sent events, parsed by the
//! `sse-stream` crate (already in the dependency tree under rmcp; it implements the WHATWG event
//! stream rules, including events split across chunks at any byte). The events are fed to the
//! provider's assembler by [`stream_reply`](super::streamed::stream_reply).
//!
//! Failures are typed for the retry middleware: an error status is parsed as the provider's error
//! body, as for a non-streaming call; a connection that breaks, ends before the reply is complete,
//! or sends nothing for [`HttpConfig::stream_idle_timeout`](super::http::HttpConfig) is
//! [`ModelError::Transport`] (retried from the start); a reply larger than the response limit is
//! [`ModelError::Other`].
//!
//! The limit counts the raw bytes as they arrive, before the event parser sees them: the parser
//! holds an unfinished line, and the data lines of an unfinished event, until their end comes, so
//! counting finished events only would let a line without an end grow until the idle timeout.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::{Stream, StreamExt};
use reqwest::header::{ACCEPT, HeaderValue};
use sse_stream::{Sse, SseStream};
use trellis_middleware::runtime::model::ModelError;
#[cfg(test)]
use trellis_middleware::runtime::stream::ModelDelta;

use super::http::{
    ErrorParser, HttpClient, JsonBody, answered, note_request_id, obey_should_retry, request_id, retry_after,
    should_retry, transport,
};
#[cfg(test)]
use super::streamed::Assemble;
use super::streamed::{ReplyEvent, ReplyEvents, ReplyStream};

type Events = Pin<Box<dyn Stream<Item = Result<Sse, sse_stream::Error>> + Send>>;

/// The events of one streamed reply.
#[derive(Debug)]
pub(crate) struct EventStream {
    events: ReplyStream<Events>,
    /// Set once the raw bytes passed the response limit (see [`capped`]).
    over_limit: Arc<AtomicBool>,
    limit: usize,
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
        body: JsonBody,
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
        let over_limit = Arc::new(AtomicBool::new(false));
        let limit = self.max_response_bytes();
        let bytes = capped(response.bytes_stream(), limit, over_limit.clone());
        let events = SseStream::from_bytes_stream(bytes).boxed();
        Ok(Opened::Events(EventStream {
            events: ReplyStream::new(events, self, http),
            over_limit,
            limit,
        }))
    }

    /// POST `body` to `url` accepting `accept`, and give the response of a success, whose body is
    /// still to read. An error status is read whole and parsed with `parse_error`; failing to get
    /// an answer is `ModelError::Transport`.
    pub(crate) async fn open_reply(
        &self,
        url: &str,
        body: JsonBody,
        accept: HeaderValue,
        parse_error: ErrorParser,
    ) -> Result<reqwest::Response, ModelError> {
        tracing::debug!(bytes = body.as_bytes().len(), "POST {url} (stream)");
        let headers = self
            .request_headers(url, Some((ACCEPT, accept)), body.as_bytes())
            .await?;
        let mut response = self
            .client()
            .post(url)
            .headers(headers)
            .body(body.into_bytes())
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

impl ReplyEvents for EventStream {
    /// The next event with data; `None` at the end of the stream.
    async fn next(&mut self) -> Result<Option<ReplyEvent>, ModelError> {
        // The raw bytes are counted (and capped) below the parser, by `capped`.
        let counted_below = |_: &Sse| 0;
        loop {
            match self.events.next(counted_below).await {
                Ok(None) => return Ok(None),
                Ok(Some(Sse {
                    event: name,
                    data: Some(data),
                    ..
                })) => return Ok(Some(ReplyEvent { name, data })),
                Ok(Some(_)) => {}
                Err(_) if self.over_limit.load(Ordering::Acquire) => {
                    return Err(self.with_exchange(ModelError::Other {
                        message: format!("the streamed reply is larger than the {}-byte limit", self.limit),
                        http: None,
                    }));
                }
                Err(e) => return Err(self.with_exchange(e)),
            }
        }
    }

    fn with_exchange(&self, error: ModelError) -> ModelError {
        self.events.with_exchange(error)
    }
}

/// `chunks` as they come, ending with an error (and `over_limit` set) once more than `limit` bytes
/// have come, so that nothing above ever holds more than `limit` bytes of the reply.
fn capped<S>(
    chunks: S,
    limit: usize,
    over_limit: Arc<AtomicBool>,
) -> impl Stream<Item = Result<bytes::Bytes, std::io::Error>>
where
    S: Stream<Item = reqwest::Result<bytes::Bytes>>,
{
    let mut seen = 0usize;
    chunks
        .map(move |chunk| {
            let chunk = chunk.map_err(std::io::Error::other)?;
            seen = seen.saturating_add(chunk.len());
            if seen > limit {
                over_limit.store(true, Ordering::Release);
                return Err(std::io::Error::other(format!("more than {limit} bytes")));
            }
            Ok(chunk)
        })
        // Nothing after the first error: a reader that goes on would buffer past the limit.
        .scan(false, |failed, item| {
            if *failed {
                return futures::future::ready(None);
            }
            *failed = item.is_err();
            futures::future::ready(Some(item))
        })
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
