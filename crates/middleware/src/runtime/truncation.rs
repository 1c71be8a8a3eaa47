//! Replies cut off at the output token limit while calling tools.
//!
//! A reply that stopped at [`StopReason::MaxTokens`] and holds tool calls may hold a call whose
//! arguments were cut mid-way (Anthropic: `stop_reason: "max_tokens"` with a half-written
//! `tool_use` block; OpenAI: `finish_reason: "length"` with `tool_calls`). Such a call is never
//! run: running `write_file` on half its content loses data silently. Instead the loop
//!
//! 1. keeps the reply in the thread with each call replaced by a text note (so no call waits for
//!    a result and the model sees what it tried),
//! 2. appends a user-side notice (source [`TRUNCATION_SOURCE`]) telling the model its call was cut
//!    and not run, and asks it again,
//! 3. after [`DEFAULT_TRUNCATED_CALL_RETRIES`] such replies in a row (configurable with
//!    [`AgentBuilder::truncated_call_retries`](crate::AgentBuilder::truncated_call_retries)), fails
//!    the run with [`AgentError::TruncatedToolCall`](crate::AgentError::TruncatedToolCall); the
//!    thread's checkpoint holds the stripped replies and notices, so nothing is lost.
//!
//! The counter is per run and resets on any reply that is not truncated. A truncated reply without
//! tool calls is an ordinary (short) final answer.

use crate::runtime::message::{AiMessage, ContentBlock, Message};
use crate::runtime::model::{ModelResponse, StopReason};

/// Truncated tool-calling replies in a row a run tolerates before it fails.
pub const DEFAULT_TRUNCATED_CALL_RETRIES: u32 = 2;

/// The `source` of the notice the loop appends after a truncated tool-calling reply.
pub const TRUNCATION_SOURCE: &str = "truncated_tool_call";

/// True when `response` stopped at the output token limit and calls tools.
pub(crate) fn is_truncated_call(response: &ModelResponse) -> bool {
    response.stop_reason == StopReason::MaxTokens && response.message.has_tool_calls()
}

/// Replace every tool call in `message` by a text note naming it; returns the calls' tool names in
/// order.
pub(crate) fn strip_calls(message: &mut AiMessage) -> Vec<String> {
    let mut names = Vec::new();
    for block in &mut message.content {
        if let ContentBlock::ToolUse(call) = block {
            let note = format!(
                "[call to `{}` cut off at the output token limit; it was not run]",
                call.name
            );
            names.push(std::mem::take(&mut call.name));
            *block = ContentBlock::text(note);
        }
    }
    names
}

/// The user-side notice telling the model its calls were cut off and not run.
pub(crate) fn notice(names: &[String]) -> Message {
    let list = names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ");
    Message::injected(
        format!(
            "Your previous reply reached the output token limit while writing a tool call ({list}), \
             so its arguments were incomplete and nothing was run. Call the tool again with \
             complete arguments; if they are long (for example a whole file), split the work into \
             several smaller calls."
        ),
        TRUNCATION_SOURCE,
        None,
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::runtime::message::ToolCall;
    use serde_json::json;

    #[test]
    fn only_max_tokens_with_calls_counts_as_truncated() {
        let calls = AiMessage::tool_calls([ToolCall::new("c1", "write_file", json!({"path": "/a"}))]);
        let mut response = ModelResponse::new(calls);
        assert!(!is_truncated_call(&response), "a tool_use stop is complete");
        response.stop_reason = StopReason::MaxTokens;
        assert!(is_truncated_call(&response));
        let mut text = ModelResponse::new(AiMessage::text("cut"));
        text.stop_reason = StopReason::MaxTokens;
        assert!(
            !is_truncated_call(&text),
            "a cut answer without calls is just short"
        );
    }

    #[test]
    fn stripping_keeps_text_and_names_the_calls() {
        let mut message = AiMessage::tool_calls([
            ToolCall::new("c1", "write_file", json!("{\"path\": \"/a")),
            ToolCall::new("c2", "ls", json!({})),
        ]);
        message.content.insert(0, ContentBlock::text("writing"));
        let names = strip_calls(&mut message);
        assert_eq!(names, ["write_file", "ls"]);
        assert!(!message.has_tool_calls());
        assert_eq!(message.content.len(), 3);
        assert!(message.text_content().contains("`write_file` cut off"));
        assert!(notice(&names).text().contains("`write_file`, `ls`"));
    }
}
