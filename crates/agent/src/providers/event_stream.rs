//! Reading a reply streamed in the AWS event-stream binary framing (Bedrock's
//! `invoke-with-response-stream`), with the `aws-smithy-eventstream` frame decoder (the AWS SDK's
//! own: prelude, headers, payload and both CRCs checked).
//!
//! Each message has `:message-type` `event` (with `:event-type: chunk` and a JSON payload
//! `{"bytes": <base64 of one provider event>}`) or `exception` (with `:exception-type` and a
//! `{"message"}` payload). Chunks are decoded and handed to the provider's
//! [`Assemble`](super::streamed::Assemble)r by [`stream_reply`](super::streamed::stream_reply), as
//! the data of server-sent events are; an exception is the provider's error for the status its type
//! stands for. Failures are typed as for server-sent events (see [`sse`](super::sse)): a broken,
//! cut or stalled stream is `Transport`, a reply over the response limit is `Other`, and every error
//! carries the status and request id of the answer that opened the stream.

use std::pin::Pin;

use aws_smithy_eventstream::frame::{DecodedFrame, MessageFrameDecoder};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use reqwest::header::HeaderValue;
use serde_json::Value;
use trellis_middleware::runtime::model::ModelError;

use super::http::{ErrorParser, HttpClient, JsonBody, answered, request_id};
use super::streamed::{ReplyEvent, ReplyEvents, ReplyStream};

/// The status an exception type stands for (the Bedrock runtime API reference's error list).
fn exception_status(kind: &str) -> u16 {
    match kind {
        "throttlingException" | "ThrottlingException" => 429,
        "serviceUnavailableException" | "ServiceUnavailableException" => 503,
        "validationException" | "ValidationException" => 400,
        "accessDeniedException" | "AccessDeniedException" => 403,
        "modelTimeoutException" | "ModelTimeoutException" => 408,
        // internalServerException, modelStreamErrorException ("retry your request") and others.
        _ => 500,
    }
}

type Chunks = Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;

/// The events of one reply in the AWS event-stream framing: the chunk payloads, decoded.
#[derive(Debug)]
pub(crate) struct AwsEventStream {
    chunks: ReplyStream<Chunks>,
    buffer: BytesMut,
    decoder: MessageFrameDecoder,
    parse_error: ErrorParser,
    provider: String,
}

impl HttpClient {
    /// POST `body` to `url` asking for an AWS event stream; `provider` names the API in errors.
    /// An error status is read whole and parsed with `parse_error`.
    pub(crate) async fn open_event_stream(
        &self,
        url: &str,
        body: JsonBody,
        parse_error: ErrorParser,
        provider: &str,
    ) -> Result<AwsEventStream, ModelError> {
        let response = self
            .open_reply(
                url,
                body,
                HeaderValue::from_static("application/vnd.amazon.eventstream"),
                parse_error,
            )
            .await?;
        let http = answered(response.status().as_u16(), request_id(response.headers()));
        Ok(AwsEventStream {
            chunks: ReplyStream::new(response.bytes_stream().boxed(), self, http),
            buffer: BytesMut::new(),
            decoder: MessageFrameDecoder::new(),
            parse_error,
            provider: provider.to_owned(),
        })
    }
}

impl ReplyEvents for AwsEventStream {
    /// The next chunk's provider event; `None` at the end of the stream. An exception message is
    /// the provider's error for the status its type stands for.
    async fn next(&mut self) -> Result<Option<ReplyEvent>, ModelError> {
        match self.next_chunk().await {
            Ok(data) => Ok(data.map(|data| ReplyEvent { name: None, data })),
            Err(e) => Err(self.with_exchange(e)),
        }
    }

    fn with_exchange(&self, error: ModelError) -> ModelError {
        self.chunks.with_exchange(error)
    }
}

impl AwsEventStream {
    async fn next_chunk(&mut self) -> Result<Option<String>, ModelError> {
        loop {
            let frame = self
                .decoder
                .decode_frame(&mut self.buffer)
                .map_err(|e| ModelError::Other {
                    message: format!("the {} event stream sent a malformed frame: {e}", self.provider),
                    http: None,
                })?;
            let DecodedFrame::Complete(message) = frame else {
                if self.read_more().await? {
                    continue;
                }
                return Ok(None);
            };
            let header = |name: &str| {
                message
                    .headers()
                    .iter()
                    .find(|h| h.name().as_str() == name)
                    .and_then(|h| h.value().as_string().ok())
                    .map(|v| v.as_str().to_owned())
            };
            if header(":message-type").as_deref() == Some("exception") {
                let kind = header(":exception-type").unwrap_or_default();
                let status = exception_status(&kind);
                return Err((self.parse_error)(status, None, message.payload()));
            }
            if header(":event-type").as_deref() != Some("chunk") {
                continue;
            }
            let data = chunk_data(message.payload()).ok_or_else(|| ModelError::Other {
                message: format!(
                    "the {} event stream sent a chunk without base64 `bytes`",
                    self.provider
                ),
                http: None,
            })?;
            return Ok(Some(data));
        }
    }

    /// Buffer the next chunk; false at the end of the stream.
    async fn read_more(&mut self) -> Result<bool, ModelError> {
        let Some(chunk) = self.chunks.next(Bytes::len).await? else {
            return Ok(false);
        };
        self.buffer.extend_from_slice(&chunk);
        Ok(true)
    }
}

/// The provider event a chunk carries: `{"bytes": base64}` decoded, as text.
fn chunk_data(payload: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(payload).ok()?;
    let bytes = STANDARD.decode(value.get("bytes")?.as_str()?).ok()?;
    String::from_utf8(bytes).ok()
}
