//! Token estimates of a whole request: [`TokenEstimator`] and the default [`BytesEstimator`].
//!
//! The summarization trigger is decided on these estimates, never on the usage a provider reports
//! (providers count differently, some cumulatively, and a report arrives only after the call that
//! was already too large). Everything the model receives is counted: every system block (the skills
//! catalog and the memory section included), every message with its tool calls and images, and every
//! tool definition.

use std::fmt::Debug;
use std::io;

use serde::Serialize;
use serde_json::Value;

use crate::runtime::message::{ContentBlock, Message};
use crate::runtime::model::{ModelRequest, ToolSpec};
use crate::token_estimate::tokens_for_bytes;

/// Tokens added per message for the role and framing.
pub const MESSAGE_OVERHEAD_TOKENS: u64 = 4;
/// Tokens added per tool definition for its framing.
pub const TOOL_OVERHEAD_TOKENS: u64 = 4;
/// Tokens counted for one image (providers bill images by size; this is a large image's cost).
pub const IMAGE_TOKENS: u64 = 1_600;

/// Estimated tokens of a request, by part.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RequestEstimate {
    /// System blocks (instructions, skills catalog, memory, every middleware's section).
    pub system: u64,
    /// The conversation.
    pub messages: u64,
    /// Tool definitions and the response format's schema.
    pub tools: u64,
    /// The sum of the parts.
    pub total: u64,
}

/// Estimates tokens. Implement [`TokenEstimator::text`] (and, for speed, [`TokenEstimator::json`])
/// to plug in a real tokenizer; the provided methods compose them into message and request estimates
/// and may be overridden too.
///
/// Contract: estimates are deterministic (the same input gives the same number) and monotone enough
/// that removing text never increases an estimate.
pub trait TokenEstimator: Send + Sync + Debug {
    /// Tokens of a piece of text.
    fn text(&self, text: &str) -> u64;

    /// Tokens of a JSON value as sent on the wire (tool arguments, schemas). The default serializes
    /// the value and counts the text.
    fn json(&self, value: &Value) -> u64 {
        self.text(&value.to_string())
    }

    /// Tokens of one content block.
    fn block(&self, block: &ContentBlock) -> u64 {
        match block {
            ContentBlock::Text { text } => self.text(text),
            ContentBlock::Image { .. } => IMAGE_TOKENS,
            ContentBlock::ToolUse(call) => {
                self.text(&call.id) + self.text(&call.name) + self.json(&call.args)
            }
            ContentBlock::Reasoning { text, signature } => {
                self.text(text) + signature.as_deref().map_or(0, |s| self.text(s))
            }
        }
    }

    /// Tokens of one message, framing included.
    fn message(&self, message: &Message) -> u64 {
        let content: u64 = message.content().iter().map(|b| self.block(b)).sum();
        let extra = match message {
            Message::Tool(t) => self.text(&t.call_id) + self.text(&t.name),
            Message::System(s) => s.tools.iter().map(|t| self.tool(t)).sum(),
            Message::Human(_) | Message::Ai(_) => 0,
        };
        MESSAGE_OVERHEAD_TOKENS + content + extra
    }

    /// Tokens of one tool definition, framing included.
    fn tool(&self, spec: &ToolSpec) -> u64 {
        TOOL_OVERHEAD_TOKENS
            + self.text(&spec.name)
            + self.text(&spec.description)
            + self.json(&spec.parameters)
    }

    /// Tokens of a whole request.
    fn request(&self, request: &ModelRequest) -> RequestEstimate {
        let system = request.system.iter().map(|b| self.text(&b.text)).sum();
        let messages = request.messages.iter().map(|m| self.message(m)).sum();
        let tools = request.tools.iter().map(|t| self.tool(t)).sum::<u64>()
            + request
                .response_format
                .as_ref()
                .map_or(0, |f| self.json(&f.schema));
        RequestEstimate {
            system,
            messages,
            tools,
            total: system + messages + tools,
        }
    }
}

/// The default estimator: UTF-8 bytes / 4, rounded up ([`tokens_for_bytes`]). Cheap (no allocation, JSON is measured while
/// being serialized into a byte counter) and close for English prose and code; it undercounts
/// scripts that take one token per character (CJK), which is why the default trigger leaves a margin.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BytesEstimator;

impl TokenEstimator for BytesEstimator {
    fn text(&self, text: &str) -> u64 {
        tokens_for_bytes(text.len() as u64)
    }

    fn json(&self, value: &Value) -> u64 {
        tokens_for_bytes(json_bytes(value))
    }
}

/// The length in bytes of `value` serialized compactly, without building the string.
pub fn json_bytes(value: &Value) -> u64 {
    struct Counter(u64);
    impl io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    // Serializing a `Value` into a writer that never fails cannot fail.
    let _ = serde_json::to_writer(&mut counter, value);
    counter.0
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::runtime::message::{AiMessage, SystemBlock, ToolCall};
    use serde_json::json;
    use std::sync::Arc;

    #[test]
    fn json_bytes_matches_serialization() {
        let v = json!({"a": [1, "two", {"b": null}], "ü": "x\"y"});
        assert_eq!(json_bytes(&v), v.to_string().len() as u64);
    }

    #[test]
    fn request_counts_every_part() {
        let est = BytesEstimator;
        let request = ModelRequest {
            system: vec![
                SystemBlock::new("x".repeat(400)),
                SystemBlock::new("y".repeat(40)),
            ],
            messages: vec![
                Message::human("abcd"),
                Message::Ai(AiMessage::tool_calls([ToolCall::new("c", "ls", json!({}))])),
            ]
            .into(),
            tools: vec![Arc::new(ToolSpec {
                name: "ls".into(),
                description: "list".into(),
                parameters: json!({}),
            })],
            ..ModelRequest::default()
        };
        let e = est.request(&request);
        assert_eq!(e.system, 100 + 10);
        // human: 4 + 1; ai: 4 + (1 + 1 + 1)
        assert_eq!(e.messages, 5 + 7);
        assert_eq!(e.tools, 4 + 1 + 1 + 1);
        assert_eq!(e.total, e.system + e.messages + e.tools);
    }
}
