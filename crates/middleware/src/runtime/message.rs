//! The conversation vocabulary: system blocks, messages and their content blocks.
//!
//! Everything here is plain data, `serde`-serializable (checkpoints store it), and independent of any
//! provider's wire format: providers in `trellis-agent` translate to and from it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::runtime::model::ToolSpec;
pub use crate::tools::ImageSource;

/// How long a provider should keep a cached prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheTtl {
    /// The provider's default, short lifetime (five minutes on Anthropic).
    FiveMinutes,
    /// An extended lifetime (one hour on Anthropic), where the provider offers one.
    OneHour,
}

/// One block of the system prompt.
///
/// The system prompt is a list of blocks so that stable text (instructions, the skills catalog) can be
/// cached separately from text that changes (memory). A block with a `cache_breakpoint` asks the
/// provider to cache everything up to and including it; providers without prompt caching ignore it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SystemBlock {
    /// The text, sent as written.
    pub text: String,
    /// Cache everything up to the end of this block.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_breakpoint: Option<CacheTtl>,
    /// Who added the block (a middleware name), for other middleware and for debugging.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

impl SystemBlock {
    /// A block of text without a breakpoint or source.
    pub fn new(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            cache_breakpoint: None,
            source: None,
        }
    }

    /// Tag the block with the middleware (or other component) that added it.
    pub fn with_source(mut self, source: impl Into<String>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// Ask the provider to cache up to the end of this block.
    pub fn with_cache_breakpoint(mut self, ttl: CacheTtl) -> Self {
        self.cache_breakpoint = Some(ttl);
        self
    }
}

/// A tool call made by the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's id for the call; the tool result answers it.
    pub id: String,
    /// The tool's name, as the model wrote it (it may name a tool that does not exist).
    pub name: String,
    /// The arguments. A provider that received arguments that are not JSON passes them as a string,
    /// which the tool then rejects as invalid arguments. Written with sorted keys, in whatever order
    /// the model wrote them ([`crate::tools::canonical`]).
    #[serde(serialize_with = "crate::tools::canonical::serialize_sorted")]
    pub args: Value,
}

impl ToolCall {
    /// The file a file-tool call names (its `file_path` argument, or `path`), if it is a valid path.
    pub fn file_path(&self) -> Option<crate::backend::VirtualPath> {
        let arg = self
            .args
            .get("file_path")
            .or_else(|| self.args.get("path"))?
            .as_str()?;
        crate::backend::VirtualPath::parse(arg).ok()
    }

    /// A tool call.
    pub fn new(id: impl Into<String>, name: impl Into<String>, args: Value) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            args,
        }
    }
}

/// One piece of a message's content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// An image.
    Image {
        /// Where the image is.
        source: ImageSource,
    },
    /// A tool call (AI messages only), kept in place among the other blocks because providers care
    /// about the order of text, reasoning and tool use.
    ToolUse(ToolCall),
    /// The model's reasoning (AI messages only).
    Reasoning {
        /// The reasoning text (empty when the provider only returned an opaque signature).
        text: String,
        /// An opaque signature the provider needs to accept the block back.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
}

impl ContentBlock {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text { text: text.into() }
    }

    /// The text of a text block.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Self::Text { text } => Some(text),
            _ => None,
        }
    }
}

/// Metadata on a message that providers do not send.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MessageMeta {
    /// Set on messages a middleware injected (its name, e.g. `rubric`, `patch_tool_calls`), so other
    /// middleware and UIs can tell them from real user input. `None` for real input and model output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// A name for UIs to show instead of the role (e.g. "Grader").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// Cache everything up to the end of this message. Set on request copies by the prompt-caching
    /// middleware, not on stored messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_breakpoint: Option<CacheTtl>,
    /// Free-form data for the component that injected the message.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Value>,
}

impl MessageMeta {
    /// True when nothing is set.
    pub fn is_empty(&self) -> bool {
        self.source.is_none()
            && self.display_name.is_none()
            && self.cache_breakpoint.is_none()
            && self.extra.is_empty()
    }
}

/// A system message in the middle of a conversation: instructions or tool definitions disclosed at a
/// point after the cached prefix. Only for models that declare
/// [`tools_mid_conversation`](crate::runtime::model::ModelCapabilities::tools_mid_conversation); the top-level system
/// prompt is [`ModelRequest::system`](crate::ModelRequest::system).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SystemMessage {
    /// Text content.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub content: Vec<ContentBlock>,
    /// Tool definitions made available from this point on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolSpec>,
    /// Metadata.
    #[serde(default, skip_serializing_if = "MessageMeta::is_empty")]
    pub meta: MessageMeta,
}

/// A message from the user (or injected by a middleware on the user's side).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HumanMessage {
    /// Content blocks (text, images).
    pub content: Vec<ContentBlock>,
    /// Metadata.
    #[serde(default, skip_serializing_if = "MessageMeta::is_empty")]
    pub meta: MessageMeta,
}

/// A message from the model.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AiMessage {
    /// Content blocks in the order the model produced them: text, reasoning, tool use.
    pub content: Vec<ContentBlock>,
    /// Metadata.
    #[serde(default, skip_serializing_if = "MessageMeta::is_empty")]
    pub meta: MessageMeta,
}

/// The result of one tool call.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolMessage {
    /// The id of the call this answers.
    pub call_id: String,
    /// The tool's name (as called).
    pub name: String,
    /// The result: text, or text and images.
    pub content: Vec<ContentBlock>,
    /// True when the call failed; the content says why.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
    /// Metadata.
    #[serde(default, skip_serializing_if = "MessageMeta::is_empty")]
    pub meta: MessageMeta,
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// A system message in the middle of the conversation (see [`SystemMessage`]).
    System(SystemMessage),
    /// User input.
    Human(HumanMessage),
    /// Model output.
    Ai(AiMessage),
    /// A tool result.
    Tool(ToolMessage),
}

/// Concatenate the text blocks of `content`, separated by nothing.
fn joined_text(content: &[ContentBlock]) -> String {
    let mut out = String::new();
    for block in content {
        if let ContentBlock::Text { text } = block {
            out.push_str(text);
        }
    }
    out
}

impl HumanMessage {
    /// A text message.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            content: vec![ContentBlock::text(text)],
            meta: MessageMeta::default(),
        }
    }
}

impl AiMessage {
    /// A text-only reply.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            content: vec![ContentBlock::text(text)],
            meta: MessageMeta::default(),
        }
    }

    /// A reply that calls tools (and says nothing).
    pub fn tool_calls(calls: impl IntoIterator<Item = ToolCall>) -> Self {
        Self {
            content: calls.into_iter().map(ContentBlock::ToolUse).collect(),
            meta: MessageMeta::default(),
        }
    }

    /// The tool calls, in order.
    pub fn calls(&self) -> impl Iterator<Item = &ToolCall> {
        self.content.iter().filter_map(|b| match b {
            ContentBlock::ToolUse(call) => Some(call),
            _ => None,
        })
    }

    /// The tool calls, mutably (e.g. to shorten old arguments in a request copy).
    pub fn calls_mut(&mut self) -> impl Iterator<Item = &mut ToolCall> {
        self.content.iter_mut().filter_map(|b| match b {
            ContentBlock::ToolUse(call) => Some(call),
            _ => None,
        })
    }

    /// True when the message calls at least one tool.
    pub fn has_tool_calls(&self) -> bool {
        self.calls().next().is_some()
    }

    /// The text blocks, concatenated.
    pub fn text_content(&self) -> String {
        joined_text(&self.content)
    }
}

impl ToolMessage {
    /// A successful text result.
    pub fn text(call_id: impl Into<String>, name: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            call_id: call_id.into(),
            name: name.into(),
            content: vec![ContentBlock::text(text)],
            is_error: false,
            meta: MessageMeta::default(),
        }
    }

    /// A failed call, with the reason as text.
    pub fn error(call_id: impl Into<String>, name: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            is_error: true,
            ..Self::text(call_id, name, text)
        }
    }
}

impl Message {
    /// A text message from the user.
    pub fn human(text: impl Into<String>) -> Self {
        Self::Human(HumanMessage::text(text))
    }

    /// A text reply from the model.
    pub fn ai(text: impl Into<String>) -> Self {
        Self::Ai(AiMessage::text(text))
    }

    /// A human-side message injected by a middleware: tagged with `source`, shown as `display_name`.
    pub fn injected(
        text: impl Into<String>,
        source: impl Into<String>,
        display_name: Option<String>,
    ) -> Self {
        let mut msg = HumanMessage::text(text);
        msg.meta.source = Some(source.into());
        msg.meta.display_name = display_name;
        Self::Human(msg)
    }

    /// The message's metadata.
    pub fn meta(&self) -> &MessageMeta {
        match self {
            Self::System(m) => &m.meta,
            Self::Human(m) => &m.meta,
            Self::Ai(m) => &m.meta,
            Self::Tool(m) => &m.meta,
        }
    }

    /// The message's metadata, mutably.
    pub fn meta_mut(&mut self) -> &mut MessageMeta {
        match self {
            Self::System(m) => &mut m.meta,
            Self::Human(m) => &mut m.meta,
            Self::Ai(m) => &mut m.meta,
            Self::Tool(m) => &mut m.meta,
        }
    }

    /// The content blocks.
    pub fn content(&self) -> &[ContentBlock] {
        match self {
            Self::System(m) => &m.content,
            Self::Human(m) => &m.content,
            Self::Ai(m) => &m.content,
            Self::Tool(m) => &m.content,
        }
    }

    /// The text blocks, concatenated.
    pub fn text(&self) -> String {
        joined_text(self.content())
    }

    /// The injecting middleware's tag, if any.
    pub fn source(&self) -> Option<&str> {
        self.meta().source.as_deref()
    }

    /// The AI message, if this is one.
    pub fn as_ai(&self) -> Option<&AiMessage> {
        match self {
            Self::Ai(m) => Some(m),
            _ => None,
        }
    }

    /// The tool result, if this is one.
    pub fn as_tool(&self) -> Option<&ToolMessage> {
        match self {
            Self::Tool(m) => Some(m),
            _ => None,
        }
    }

    /// The human message, if this is one.
    pub fn as_human(&self) -> Option<&HumanMessage> {
        match self {
            Self::Human(m) => Some(m),
            _ => None,
        }
    }
}

impl From<HumanMessage> for Message {
    fn from(m: HumanMessage) -> Self {
        Self::Human(m)
    }
}

impl From<AiMessage> for Message {
    fn from(m: AiMessage) -> Self {
        Self::Ai(m)
    }
}

impl From<ToolMessage> for Message {
    fn from(m: ToolMessage) -> Self {
        Self::Tool(m)
    }
}

impl From<SystemMessage> for Message {
    fn from(m: SystemMessage) -> Self {
        Self::System(m)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn messages_round_trip_through_json() {
        let mut ai = AiMessage::tool_calls([ToolCall::new("c1", "ls", json!({"path": "/"}))]);
        ai.content.insert(
            0,
            ContentBlock::Reasoning {
                text: "look first".into(),
                signature: Some("sig".into()),
            },
        );
        let msgs = vec![
            Message::human("hi"),
            Message::Ai(ai),
            Message::Tool(ToolMessage::error("c1", "ls", "boom")),
            Message::injected("go on", "rubric", Some("Grader".into())),
            Message::Human(HumanMessage {
                content: vec![ContentBlock::Image {
                    source: ImageSource::Url {
                        url: "https://x/y.png".into(),
                    },
                }],
                meta: MessageMeta::default(),
            }),
        ];
        let json = serde_json::to_value(&msgs).unwrap();
        assert_eq!(
            json[0],
            json!({"role": "human", "content": [{"type": "text", "text": "hi"}]})
        );
        assert_eq!(json[1]["content"][1]["type"], "tool_use");
        assert_eq!(json[2]["is_error"], true);
        assert_eq!(json[3]["meta"]["source"], "rubric");
        let back: Vec<Message> = serde_json::from_value(json).unwrap();
        assert_eq!(back, msgs);
    }

    #[test]
    fn ai_message_exposes_calls_in_order() {
        let mut ai = AiMessage::text("thinking aloud");
        ai.content
            .push(ContentBlock::ToolUse(ToolCall::new("a", "x", json!({}))));
        ai.content.push(ContentBlock::text(" more"));
        ai.content
            .push(ContentBlock::ToolUse(ToolCall::new("b", "y", json!({}))));
        let ids: Vec<_> = ai.calls().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["a", "b"]);
        assert_eq!(ai.text_content(), "thinking aloud more");
        assert!(ai.has_tool_calls());
        assert!(!AiMessage::text("done").has_tool_calls());
    }
}
