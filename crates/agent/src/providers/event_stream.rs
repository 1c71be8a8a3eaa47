//! Reading a reply streamed in the AWS event-stream binary framing (Bedrock's
//! `invoke-with-response-stream`), with the `aws-smithy-eventstream` frame decoder (the AWS SDK's
//! own: prelude, headers, payload and both CRCs checked).
//!
//! Each message has `:message-type` `event` (with `:event-type: chunk` and a JSON payload
//! `{"bytes": <base64 of one provider event>}`) or `exception` (with `:exception-type` and a
//! `{"message"}` payload). Chunks are decoded and handed to the provider's [`Assemble`]r, as the
//! data of server-sent events are; an exception is the provider's error for the status its type
//! stands for. Failures are typed as for server-sent events (see [`sse`](super::sse)): a broken,
//! cut or stalled stream is `Transport`, a reply over the response limit is `Other`, and every error
//! carries the status and request id of the answer that opened the stream.

use aws_smithy_eventstream::frame::{DecodedFrame, MessageFrameDecoder};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::BytesMut;
use futures::StreamExt;
use reqwest::header::HeaderValue;
use serde_json::Value;
use trellis_middleware::runtime::model::ModelError;
use trellis_middleware::runtime::stream::DeltaSink;

use super::http::{ErrorParser, HttpClient, answered, request_id};
use super::sse::{Assemble, Streamed, ended_early};

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

/// POST `body` to `url` and assemble the event-stream reply with `A`.
pub(crate) async fn event_stream_reply<A: Assemble>(
    client: &HttpClient,
    url: &str,
    body: &Value,
    parse_error: ErrorParser,
    provider: &str,
    on_delta: DeltaSink<'_>,
) -> Result<Streamed, ModelError> {
    let response = client
        .open_reply(
            url,
            body,
            HeaderValue::from_static("application/vnd.amazon.eventstream"),
            parse_error,
        )
        .await?;
    let exchange = answered(response.status().as_u16(), request_id(response.headers()));
    let with_exchange = |e: ModelError| e.with_http(exchange.clone());
    let mut chunks = response.bytes_stream();
    let mut buffer = BytesMut::new();
    let mut decoder = MessageFrameDecoder::new();
    let mut reply = A::default();
    let mut seen = 0usize;
    let idle = client.stream_idle_timeout();
    let limit = client.max_response_bytes();
    loop {
        let chunk = match tokio::time::timeout(idle, chunks.next()).await {
            Err(_) => {
                return Err(with_exchange(ModelError::Transport {
                    message: format!("the reply stream stalled: nothing for {} s", idle.as_secs()),
                    http: None,
                }));
            }
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                return Err(with_exchange(ModelError::Transport {
                    message: format!("the reply stream broke: {e}"),
                    http: None,
                }));
            }
            Ok(Some(Ok(chunk))) => chunk,
        };
        seen += chunk.len();
        if seen > limit {
            return Err(with_exchange(ModelError::Other {
                message: format!("the streamed reply is larger than the {limit}-byte limit"),
                http: None,
            }));
        }
        buffer.extend_from_slice(&chunk);
        loop {
            let frame = decoder.decode_frame(&mut buffer).map_err(|e| {
                with_exchange(ModelError::Other {
                    message: format!("the {provider} event stream sent a malformed frame: {e}"),
                    http: None,
                })
            })?;
            let DecodedFrame::Complete(message) = frame else {
                break;
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
                return Err(with_exchange(parse_error(status, None, message.payload())));
            }
            if header(":event-type").as_deref() != Some("chunk") {
                continue;
            }
            let data = chunk_data(message.payload()).ok_or_else(|| {
                with_exchange(ModelError::Other {
                    message: format!("the {provider} event stream sent a chunk without base64 `bytes`"),
                    http: None,
                })
            })?;
            reply.take(None, &data, on_delta).map_err(with_exchange)?;
            if reply.is_done() {
                return Ok(Streamed::Events(reply.finish()));
            }
        }
    }
    if !reply.is_complete() {
        return Err(with_exchange(ended_early(provider)));
    }
    Ok(Streamed::Events(reply.finish()))
}

/// The provider event a chunk carries: `{"bytes": base64}` decoded, as text.
fn chunk_data(payload: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(payload).ok()?;
    let bytes = STANDARD.decode(value.get("bytes")?.as_str()?).ok()?;
    String::from_utf8(bytes).ok()
}
