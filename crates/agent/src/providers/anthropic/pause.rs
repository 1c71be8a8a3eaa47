//! `stop_reason: "pause_turn"`: the API paused a long turn (typically one running server tools
//! such as web search) and asks the caller to send the paused content back, unchanged, as the
//! last `assistant` message, so the model continues the same turn ("Handling stop reasons",
//! docs.anthropic.com/en/api/handling-stop-reasons, `pause_turn`).
//!
//! The provider does that itself, at most [`MAX_CONTINUATIONS`] times per call, and returns one
//! [`ModelResponse`]: the content of every part in order, usage summed, the last part's stop
//! reason. The content goes back as the raw JSON blocks the API sent (blocks Trellis does not
//! model, such as `server_tool_use`, included). A turn still paused after the last continuation is
//! returned as it is, with [`StopReason::Other`]`("pause_turn")`, for the caller to see.
//! Streamed deltas of later parts are shifted past the blocks of earlier ones, so their indexes
//! keep pointing at the merged message's blocks.

use serde_json::Value;
use trellis_middleware::ModelResponse;
use trellis_middleware::runtime::model::StopReason;
use trellis_middleware::runtime::stream::ModelDelta;

/// Continuations of one paused turn the provider sends before it gives the turn back paused.
pub const MAX_CONTINUATIONS: u32 = 3;

/// The stop reason of a paused turn.
pub const PAUSE_TURN: &str = "pause_turn";

/// True when `response` is a paused turn.
pub(crate) fn is_paused(response: &ModelResponse) -> bool {
    matches!(&response.stop_reason, StopReason::Other(reason) if reason == PAUSE_TURN)
}

/// A turn being continued: what came back so far.
#[derive(Debug, Default)]
pub(crate) struct Paused {
    /// The merged response of the parts so far.
    so_far: Option<ModelResponse>,
    /// The raw content blocks of the parts so far, as they go back to the API.
    raw_content: Vec<Value>,
    continuations: u32,
}

impl Paused {
    /// Blocks of the merged message so far (the index offset of the next part's deltas).
    pub(crate) fn blocks(&self) -> usize {
        self.so_far.as_ref().map_or(0, |r| r.message.content.len())
    }

    /// Continuations sent so far.
    pub(crate) fn continuations(&self) -> u32 {
        self.continuations
    }

    /// `next` appended to what came before: content in order, usage summed, `next`'s stop reason.
    pub(crate) fn merge(&mut self, next: ModelResponse) -> ModelResponse {
        match self.so_far.take() {
            None => next,
            Some(mut merged) => {
                merged.message.content.extend(next.message.content);
                merged.usage += next.usage;
                merged.stop_reason = next.stop_reason;
                merged.model = next.model.or(merged.model);
                merged
            }
        }
    }

    /// Keep `merged` and make `body` ask for the continuation: its `messages` end with one
    /// `assistant` message holding every raw block so far (`raw` is the last part's JSON body).
    pub(crate) fn continue_from(&mut self, raw: &[u8], merged: ModelResponse, body: &mut Value) {
        let content = serde_json::from_slice::<Value>(raw)
            .ok()
            .and_then(|mut v| v.get_mut("content").map(Value::take))
            .and_then(|c| match c {
                Value::Array(blocks) => Some(blocks),
                _ => None,
            })
            .unwrap_or_default();
        self.raw_content.extend(content);
        self.so_far = Some(merged);
        if let Some(Value::Array(messages)) = body.get_mut("messages") {
            if self.continuations > 0 {
                messages.pop();
            }
            messages.push(serde_json::json!({
                "role": "assistant",
                "content": self.raw_content.clone(),
            }));
        }
        self.continuations += 1;
    }
}

/// `delta` with its block index moved `offset` places; `None` for [`ModelDelta::Finished`], which
/// only the whole call sends.
pub(crate) fn shift(delta: ModelDelta, offset: usize) -> Option<ModelDelta> {
    Some(match delta {
        ModelDelta::Finished { .. } => return None,
        ModelDelta::Text { index, text } => ModelDelta::Text {
            index: index + offset,
            text,
        },
        ModelDelta::Reasoning { index, text } => ModelDelta::Reasoning {
            index: index + offset,
            text,
        },
        ModelDelta::ReasoningSignature { index, signature } => ModelDelta::ReasoningSignature {
            index: index + offset,
            signature,
        },
        ModelDelta::ToolCall { index, id, name } => ModelDelta::ToolCall {
            index: index + offset,
            id,
            name,
        },
        ModelDelta::ToolArguments { index, json } => ModelDelta::ToolArguments {
            index: index + offset,
            json,
        },
        other => other,
    })
}
