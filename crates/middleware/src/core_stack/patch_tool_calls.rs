//! [`PatchToolCallsMiddleware`]: answer tool calls that were left without a result.

use std::collections::HashSet;

use async_trait::async_trait;

use crate::runtime::context::RunContext;
use crate::runtime::error::AgentError;
use crate::runtime::message::{Message, ToolMessage};
use crate::runtime::message_list::Messages;
use crate::runtime::middleware::Middleware;
use crate::runtime::state::State;
use crate::runtime::tool_step::is_waiting;

/// Gives every AI tool call that has no result a cancellation result, before the run's first model
/// call. Such calls are left behind when a run is interrupted (cancelled, crashed, stopped by an
/// error) between the model's reply and its tool results; providers reject a conversation that
/// contains them.
///
/// The calls of a step waiting for decisions (see [`crate::runtime::interrupt`]) are left alone.
///
/// The result is an error tool message tagged with source `patch_tool_calls`, placed right after the
/// results the AI message did get (so each reply's results stay together).
#[derive(Debug, Clone, Copy, Default)]
pub struct PatchToolCallsMiddleware;

const NAME: &str = "patch_tool_calls";

impl PatchToolCallsMiddleware {
    /// The middleware.
    pub fn new() -> Self {
        Self
    }
}

/// The result of a call left without one: it was cancelled, its effects are unknown.
pub(crate) fn cancellation(call_id: &str, name: &str) -> Message {
    let mut msg = ToolMessage::error(
        call_id,
        name,
        format!(
            "The call to {name} (id {call_id}) never finished: the run was interrupted before it returned, so \
             it was cancelled. Its effects, if any, are unknown. Call it again if you still need its result."
        ),
    );
    msg.meta.source = Some(NAME.to_owned());
    Message::Tool(msg)
}

/// The messages with a cancellation result added for every unanswered call, or `None` when every
/// call has a result.
pub(crate) fn patch(messages: &Messages) -> Option<Messages> {
    let answered: HashSet<&str> = messages
        .iter()
        .filter_map(|m| m.as_tool().map(|t| t.call_id.as_str()))
        .collect();
    let dangling = |m: &Message| {
        m.as_ai()
            .is_some_and(|ai| ai.calls().any(|c| !answered.contains(c.id.as_str())))
    };
    if !messages.iter().any(dangling) {
        return None;
    }
    let shared = messages.shared();
    let mut out = Messages::new();
    let mut i = 0;
    while i < messages.len() {
        let msg = &messages[i];
        out.push_shared(shared[i].clone());
        i += 1;
        let Some(ai) = msg.as_ai() else { continue };
        // Keep the results that follow the reply together, then add the missing ones.
        while i < messages.len() && messages[i].as_tool().is_some() {
            out.push_shared(shared[i].clone());
            i += 1;
        }
        for call in ai.calls().filter(|c| !answered.contains(c.id.as_str())) {
            out.push(cancellation(&call.id, &call.name));
        }
    }
    Some(out)
}

#[async_trait]
impl Middleware for PatchToolCallsMiddleware {
    fn name(&self) -> &str {
        NAME
    }

    async fn before_agent(&self, state: &mut State, _cx: &RunContext) -> Result<(), AgentError> {
        // A reply whose calls wait for decisions is not dangling: the resumed run answers it.
        if is_waiting(state)
            && let Some(last) = state.messages.shared().last().cloned()
        {
            let earlier = state.messages.slice(..state.messages.len() - 1);
            if let Some(mut patched) = patch(&earlier) {
                patched.push_shared(last);
                state.messages = patched;
            }
            return Ok(());
        }
        if let Some(patched) = patch(&state.messages) {
            let added = patched.len() - state.messages.len();
            tracing::info!(added, "answered tool calls left without a result");
            state.messages = patched;
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::runtime::message::{AiMessage, ToolCall};
    use serde_json::json;

    fn call(id: &str) -> ToolCall {
        ToolCall::new(id, "ls", json!({}))
    }

    #[test]
    fn complete_conversations_are_left_alone() {
        let msgs: Messages = vec![
            Message::human("hi"),
            Message::Ai(AiMessage::tool_calls([call("a")])),
            Message::Tool(ToolMessage::text("a", "ls", "ok")),
            Message::ai("done"),
        ]
        .into();
        assert!(patch(&msgs).is_none());
    }

    #[test]
    fn missing_results_follow_the_existing_ones() {
        let msgs: Messages = vec![
            Message::human("hi"),
            Message::Ai(AiMessage::tool_calls([call("a"), call("b"), call("c")])),
            Message::Tool(ToolMessage::text("b", "ls", "ok")),
            Message::human("new question"),
        ]
        .into();
        let out = patch(&msgs).unwrap();
        let shape: Vec<String> = out
            .iter()
            .map(|m| match m {
                Message::Tool(t) => format!("tool:{}:{}", t.call_id, t.is_error),
                Message::Human(_) => "human".into(),
                Message::Ai(_) => "ai".into(),
                Message::System(_) => "system".into(),
            })
            .collect();
        assert_eq!(
            shape,
            [
                "human",
                "ai",
                "tool:b:false",
                "tool:a:true",
                "tool:c:true",
                "human"
            ]
        );
        assert_eq!(out[3].source(), Some("patch_tool_calls"));
        assert!(out[3].text().contains("interrupted"));
        assert!(patch(&out).is_none(), "patching is idempotent");
    }
}
