//! `session/load`: a thread's conversation as the updates that would have shown it
//! ([`replay`]): the person's messages as `user_message_chunk`s, the model's text as
//! `agent_message_chunk`s, and each tool call as a `tool_call` (kind, title, raw input, locations,
//! an edit's diff) with its final status, `completed` or `failed` from its result (`failed` when it
//! has none). Messages a middleware injected (they carry a source tag) and system messages are
//! not replayed; a `diff`'s old text is the file as it is now, not as it was.

use std::collections::HashMap;
use std::path::Path;

use agent_client_protocol::v1::schema::{
    ContentBlock, ContentChunk, MessageId, SessionUpdate, ToolCallStatus,
};
use trellis_middleware::runtime::message::Message;

use crate::acp::updates;

/// The updates replaying `messages` for a session rooted at `cwd`.
pub fn replay(messages: &[Message], cwd: &Path) -> Vec<SessionUpdate> {
    let results: HashMap<&str, bool> = messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(t) => Some((t.call_id.as_str(), t.is_error)),
            _ => None,
        })
        .collect();
    let mut out = Vec::new();
    for (index, message) in messages.iter().enumerate() {
        if message.source().is_some() {
            continue;
        }
        let chunk = |text: String| {
            ContentChunk::new(ContentBlock::from(text)).message_id(MessageId::new(format!("m{index}")))
        };
        match message {
            Message::Human(_) => {
                let text = message.text();
                if !text.is_empty() {
                    out.push(SessionUpdate::UserMessageChunk(chunk(text)));
                }
            }
            Message::Ai(ai) => {
                let text = message.text();
                if !text.is_empty() {
                    out.push(SessionUpdate::AgentMessageChunk(chunk(text)));
                }
                for call in ai.calls() {
                    let status = match results.get(call.id.as_str()) {
                        Some(false) => ToolCallStatus::Completed,
                        _ => ToolCallStatus::Failed,
                    };
                    let mut announced = updates::announce(cwd, &call.id, &call.name, &call.args);
                    announced.status = status;
                    out.push(SessionUpdate::ToolCall(announced));
                }
            }
            _ => {}
        }
    }
    out
}
