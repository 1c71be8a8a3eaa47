//! Streaming model calls: [`ModelDelta`], the pieces of a reply as the model writes them, and the
//! sink a [`ChatModel::stream`] call passes them to.
//!
//! Deltas are for watching a reply being written (a UI, a terminal); the reply itself is still the
//! [`ModelResponse`] the call returns, assembled from the whole stream, and only that is committed
//! to the thread. A stream cut half-way is an error like any other failed call: the retry
//! middleware may try again from the start, and the deltas already sent are then superseded — the
//! agent loop announces each attempt with [`RunEvent::ModelStreamStarted`](super::events::RunEvent)
//! so a watcher knows to discard what it showed of the previous one.

use serde::{Deserialize, Serialize};

use super::message::ContentBlock;
use super::model::{ChatModel, ModelError, ModelRequest, ModelResponse, StopReason, Usage};

/// One piece of a reply. `index` is the position of the content block it belongs to in the
/// reply's [`AiMessage::content`](super::message::AiMessage::content).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ModelDelta {
    /// More text of a text block.
    Text {
        /// The block.
        index: usize,
        /// The new text.
        text: String,
    },
    /// More of the model's reasoning.
    Reasoning {
        /// The block.
        index: usize,
        /// The new text.
        text: String,
    },
    /// The signature of a reasoning block (sent whole, when the provider sends it).
    ReasoningSignature {
        /// The block.
        index: usize,
        /// The signature.
        signature: String,
    },
    /// A tool call begins.
    ToolCall {
        /// The block.
        index: usize,
        /// The call's id (empty when the provider has not sent one yet).
        id: String,
        /// The tool's name.
        name: String,
    },
    /// More of a tool call's JSON arguments (fragments join into the whole JSON text).
    ToolArguments {
        /// The block.
        index: usize,
        /// The new JSON text.
        json: String,
    },
    /// The reply is complete.
    Finished {
        /// Why the model stopped.
        stop_reason: StopReason,
        /// Token usage of the call.
        usage: Usage,
    },
}

/// Where a streaming call sends its deltas. Called on the task making the call; must be quick.
pub type DeltaSink<'a> = &'a (dyn Fn(ModelDelta) + Send + Sync);

/// A call of `model` that does not stream: [`ChatModel::invoke`], then the reply's blocks whole
/// ([`deltas_of`]). The default of [`ChatModel::stream`], and what a provider whose streaming is
/// switched off does.
pub async fn stream_by_invoking<M: ChatModel + ?Sized>(
    model: &M,
    request: ModelRequest,
    on_delta: DeltaSink<'_>,
) -> Result<ModelResponse, ModelError> {
    let response = model.invoke(request).await?;
    deltas_of(&response).into_iter().for_each(on_delta);
    Ok(response)
}

/// The deltas that would have built `response`, for models that do not stream: each block whole,
/// then [`ModelDelta::Finished`].
pub fn deltas_of(response: &ModelResponse) -> Vec<ModelDelta> {
    let mut out = Vec::new();
    for (index, block) in response.message.content.iter().enumerate() {
        match block {
            ContentBlock::Text { text } => out.push(ModelDelta::Text {
                index,
                text: text.clone(),
            }),
            ContentBlock::Reasoning { text, signature } => {
                if !text.is_empty() {
                    out.push(ModelDelta::Reasoning {
                        index,
                        text: text.clone(),
                    });
                }
                if let Some(signature) = signature {
                    out.push(ModelDelta::ReasoningSignature {
                        index,
                        signature: signature.clone(),
                    });
                }
            }
            ContentBlock::ToolUse(call) => {
                out.push(ModelDelta::ToolCall {
                    index,
                    id: call.id.clone(),
                    name: call.name.clone(),
                });
                out.push(ModelDelta::ToolArguments {
                    index,
                    json: call.args.to_string(),
                });
            }
            ContentBlock::Image { .. } => {}
        }
    }
    out.push(ModelDelta::Finished {
        stop_reason: response.stop_reason.clone(),
        usage: response.usage,
    });
    out
}
