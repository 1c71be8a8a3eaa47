//! A reply asked for as a stream, whatever its framing: the [`Assemble`] trait a provider's
//! assembler implements, the one loop ([`stream_reply`]) that feeds it the events of either framing
//! — server-sent events ([`sse`](super::sse)) or the AWS event stream
//! ([`event_stream`](super::event_stream)) — and what comes out ([`Streamed`]).
//!
//! A stream that ends before the assembler says the reply is complete is
//! [`ModelError::Transport`] (retried from the start); every error carries the status and request
//! id of the answer that opened the stream.

use std::time::Duration;

use futures::{Stream, StreamExt};
use trellis_middleware::ModelResponse;
use trellis_middleware::runtime::model::{HttpDetails, ModelError};
use trellis_middleware::runtime::stream::{DeltaSink, ModelDelta, deltas_of};

use super::http::{ErrorParser, HttpClient, JsonBody};
use super::sse::Opened;

/// The framing of a streamed reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// Server-sent events, asked for with `"stream": true` (Anthropic, Vertex AI, OpenAI).
    ServerSentEvents,
    /// The AWS event-stream binary framing, each chunk one provider event (Bedrock).
    AwsEventStream,
}

/// One event of a streamed reply: its name, where the framing names events, and its data.
#[derive(Debug)]
pub(crate) struct ReplyEvent {
    /// The event's name (`event:` of a server-sent event); `None` when the framing has none.
    pub name: Option<String>,
    /// The event's data: one JSON document of the provider's.
    pub data: String,
}

/// The events of one streamed reply, as a framing reads them.
pub(crate) trait ReplyEvents {
    /// The next event; `None` at the end of the stream. Errors carry the exchange's status and
    /// request id.
    async fn next(&mut self) -> Result<Option<ReplyEvent>, ModelError>;
    /// `error` with the status and request id of the answer that opened this stream.
    fn with_exchange(&self, error: ModelError) -> ModelError;
}

/// The raw stream of one streamed reply (events or byte chunks), read with the limits every
/// framing keeps: nothing for the client's idle timeout is a stall and a broken stream a break
/// (both [`ModelError::Transport`]), more than the response limit is [`ModelError::Other`]. It
/// keeps the status and request id of the answer that opened it, for the errors the stream ends
/// with (a mid-stream error has no id of its own).
pub(crate) struct ReplyStream<S> {
    inner: S,
    idle: Duration,
    seen: usize,
    limit: usize,
    http: HttpDetails,
}

impl<S> std::fmt::Debug for ReplyStream<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplyStream")
            .field("seen", &self.seen)
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

impl<S, T, E> ReplyStream<S>
where
    S: Stream<Item = Result<T, E>> + Unpin,
    E: std::fmt::Display,
{
    /// `inner`, answered with `http`, read with `client`'s idle timeout and response limit.
    pub(crate) fn new(inner: S, client: &HttpClient, http: HttpDetails) -> Self {
        Self {
            inner,
            idle: client.stream_idle_timeout(),
            seen: 0,
            limit: client.max_response_bytes(),
            http,
        }
    }

    /// The next item, `size(item)` bytes of the reply; `None` at the end of the stream. Errors
    /// do not carry the exchange yet (see [`with_exchange`](Self::with_exchange)).
    pub(crate) async fn next(&mut self, size: impl Fn(&T) -> usize) -> Result<Option<T>, ModelError> {
        let item = match tokio::time::timeout(self.idle, self.inner.next()).await {
            Err(_) => {
                return Err(ModelError::Transport {
                    message: format!("the reply stream stalled: nothing for {} s", self.idle.as_secs()),
                    http: None,
                });
            }
            Ok(None) => return Ok(None),
            Ok(Some(Err(e))) => {
                return Err(ModelError::Transport {
                    message: format!("the reply stream broke: {e}"),
                    http: None,
                });
            }
            Ok(Some(Ok(item))) => item,
        };
        self.seen += size(&item);
        if self.seen > self.limit {
            return Err(ModelError::Other {
                message: format!("the streamed reply is larger than the {}-byte limit", self.limit),
                http: None,
            });
        }
        Ok(Some(item))
    }
}

impl<S> ReplyStream<S> {
    /// `error` with the status and request id of the answer that opened this stream.
    pub(crate) fn with_exchange(&self, error: ModelError) -> ModelError {
        error.with_http(self.http.clone())
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

/// POST `body` to `url` for a reply framed as `framing`, and assemble it with `A`. `provider`
/// names the API in errors. A server that answers a request for server-sent events with one JSON
/// body gives [`Streamed::Whole`].
pub(crate) async fn stream_reply<A: Assemble>(
    client: &HttpClient,
    url: &str,
    body: JsonBody,
    parse_error: ErrorParser,
    framing: Framing,
    provider: &str,
    on_delta: DeltaSink<'_>,
) -> Result<Streamed, ModelError> {
    match framing {
        Framing::ServerSentEvents => match client.open_stream(url, body, parse_error).await? {
            Opened::Events(events) => assemble::<A>(events, provider, on_delta).await,
            Opened::Whole(body) => Ok(Streamed::Whole(body)),
        },
        Framing::AwsEventStream => {
            let events = client.open_event_stream(url, body, parse_error, provider).await?;
            assemble::<A>(events, provider, on_delta).await
        }
    }
}

/// Feed `events` to a fresh `A` until it is done or the stream ends.
async fn assemble<A: Assemble>(
    mut events: impl ReplyEvents,
    provider: &str,
    on_delta: DeltaSink<'_>,
) -> Result<Streamed, ModelError> {
    let mut reply = A::default();
    while let Some(event) = events.next().await? {
        reply
            .take(event.name.as_deref(), &event.data, on_delta)
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
