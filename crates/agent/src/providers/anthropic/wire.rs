//! The Anthropic Messages API wire format (`POST /v1/messages`), as far as Trellis uses it.
//!
//! Request types borrow from the [`ModelRequest`](trellis_middleware::ModelRequest) they are built from;
//! response types own their data and tolerate fields and block types they do not know.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use trellis_middleware::runtime::message::CacheTtl;

/// The request body.
#[derive(Debug, Serialize)]
pub(crate) struct Request<'a> {
    pub model: &'a str,
    pub max_tokens: u32,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub system: Vec<Block<'a>>,
    pub messages: Vec<Message<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<Tool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub stop_sequences: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking: Option<Thinking>,
}

/// `{"type": "enabled", "budget_tokens": n}`: extended thinking.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Thinking {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub budget_tokens: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Role {
    User,
    Assistant,
}

/// One conversation turn.
#[derive(Debug, Serialize)]
pub(crate) struct Message<'a> {
    pub role: Role,
    pub content: Vec<Block<'a>>,
}

/// `{"type": "ephemeral"}`, with `"ttl": "1h"` for the extended lifetime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct CacheControl {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    ttl: Option<&'static str>,
}

impl CacheControl {
    pub(crate) fn new(ttl: CacheTtl) -> Self {
        Self {
            kind: "ephemeral",
            ttl: match ttl {
                CacheTtl::FiveMinutes => None,
                CacheTtl::OneHour => Some("1h"),
            },
        }
    }
}

/// A request content block (also used for the `system` array, which holds text blocks only).
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Block<'a> {
    Text {
        text: Cow<'a, str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    Image {
        source: ImageSource<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: Cow<'a, Value>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    ToolResult {
        tool_use_id: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        content: Option<ToolResultContent<'a>>,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    Thinking {
        thinking: &'a str,
        signature: &'a str,
    },
    RedactedThinking {
        data: &'a str,
    },
}

impl<'a> Block<'a> {
    pub(crate) fn text(text: impl Into<Cow<'a, str>>) -> Self {
        Self::Text {
            text: text.into(),
            cache_control: None,
        }
    }

    /// The block's `cache_control` slot; `None` for thinking blocks, which cannot carry one.
    pub(crate) fn cache_control_mut(&mut self) -> Option<&mut Option<CacheControl>> {
        match self {
            Self::Text { cache_control, .. }
            | Self::Image { cache_control, .. }
            | Self::ToolUse { cache_control, .. }
            | Self::ToolResult { cache_control, .. } => Some(cache_control),
            Self::Thinking { .. } | Self::RedactedThinking { .. } => None,
        }
    }

    pub(crate) fn is_tool_result(&self) -> bool {
        matches!(self, Self::ToolResult { .. })
    }
}

/// A tool result's content: a string, or text and image blocks.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub(crate) enum ToolResultContent<'a> {
    Text(Cow<'a, str>),
    Blocks(Vec<Block<'a>>),
}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum ImageSource<'a> {
    Base64 { media_type: &'a str, data: &'a str },
    Url { url: &'a str },
}

/// A tool definition.
#[derive(Debug, Serialize)]
pub(crate) struct Tool<'a> {
    pub name: &'a str,
    pub description: &'a str,
    pub input_schema: &'a Value,
}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum ToolChoice<'a> {
    Auto,
    Any,
    None,
    Tool { name: &'a str },
}

/// The response body of a successful call.
#[derive(Debug, Deserialize)]
pub(crate) struct Response {
    #[serde(default)]
    pub model: Option<String>,
    pub content: Vec<ResponseBlock>,
    #[serde(default)]
    pub stop_reason: Option<String>,
    #[serde(default)]
    pub usage: Option<ResponseUsage>,
}

/// A response content block; block types Trellis does not model (server tools, citations-only
/// blocks, …) are `Unknown` and skipped.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum ResponseBlock {
    Text {
        text: String,
    },
    Thinking {
        thinking: String,
        #[serde(default)]
        signature: Option<String>,
    },
    RedactedThinking {
        data: String,
    },
    ToolUse {
        id: String,
        name: String,
        #[serde(default)]
        input: Value,
    },
    #[serde(other)]
    Unknown,
}

/// Token counts; the cache fields may be absent or `null`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ResponseUsage {
    #[serde(default)]
    pub input_tokens: Option<u64>,
    #[serde(default)]
    pub output_tokens: Option<u64>,
    #[serde(default)]
    pub cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    pub cache_read_input_tokens: Option<u64>,
}

/// `{"type": "error", "error": {"type": "...", "message": "..."}}`.
#[derive(Debug, Deserialize)]
pub(crate) struct ErrorEnvelope {
    pub error: ErrorBody,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ErrorBody {
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
}
