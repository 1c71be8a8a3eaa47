//! What a tool call returns: [`ToolOutput`] on success (an error answer included), [`ToolError`]
//! for a failure the tool reports with `?`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::slots::{Slot, SlotValue, StateUpdates};

/// Where an image comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ImageSource {
    /// Inline bytes, base64-encoded.
    Base64 {
        /// MIME type, e.g. `image/png`.
        media_type: String,
        /// Standard base64 (with padding).
        data: String,
    },
    /// A URL the provider fetches.
    Url {
        /// The URL.
        url: String,
    },
}

/// One piece of what a tool answers: text or an image. The runtime turns these into the content
/// blocks of the tool message, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToolContent {
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
}

impl ToolContent {
    /// A text piece.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text { text: text.into() }
    }

    /// The text of a text piece.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Self::Text { text } => Some(text),
            Self::Image { .. } => None,
        }
    }
}

/// A tool's answer.
#[derive(Debug, Clone, Default)]
pub struct ToolOutput {
    /// What the model reads: text, or text and images, in order.
    pub content: Vec<ToolContent>,
    /// True when the call failed; the text then says why and, where it can, what to do instead.
    pub is_error: bool,
    /// Optional machine-readable result, for callers and UIs (never shown to the model). Boxed:
    /// with serde_json's `preserve_order` (which a dependency of the agent crate turns on for the
    /// whole build) a `Value` is large, and `ToolOutput` is the error type of every tool helper.
    pub structured: Option<Box<Value>>,
    /// Slot writes, applied by the agent loop after all calls of the step finish, in call order.
    pub updates: StateUpdates,
}

impl ToolOutput {
    /// A successful text result.
    pub fn text(content: impl Into<String>) -> Self {
        Self {
            content: vec![ToolContent::text(content)],
            ..Self::default()
        }
    }

    /// The text pieces, concatenated.
    pub fn text_content(&self) -> String {
        let mut texts = self.content.iter().filter_map(ToolContent::as_text);
        match (texts.next(), texts.next()) {
            (None, _) => String::new(),
            (Some(only), None) => only.to_owned(),
            (Some(first), Some(second)) => {
                let mut joined = format!("{first}{second}");
                texts.for_each(|t| joined.push_str(t));
                joined
            }
        }
    }

    /// A failed call. The text is prefixed with `Error: ` (unless it already starts with it), so the
    /// failure is visible to the model even on providers without an error flag.
    pub fn error(message: impl Into<String>) -> Self {
        let message = message.into();
        let content = if message.starts_with("Error: ") {
            message
        } else {
            format!("Error: {message}")
        };
        Self {
            content: vec![ToolContent::text(content)],
            is_error: true,
            ..Self::default()
        }
    }

    /// Attach structured content.
    pub fn with_structured(mut self, value: Value) -> Self {
        self.structured = Some(Box::new(value));
        self
    }

    /// Also write `value` to `slot` (applied after the step's calls finish).
    pub fn with_update<T: SlotValue>(mut self, slot: &Slot<T>, value: T) -> Self {
        self.updates.set(slot, value);
        self
    }
}

impl From<ToolError> for ToolOutput {
    /// The error answer the model sees for `error`.
    fn from(error: ToolError) -> Self {
        Self::error(error.to_string())
    }
}

/// A tool call that failed in a way the model should hear about. Never a reason to stop the run:
/// the loop answers the call with [`ToolOutput::from`] the error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ToolError {
    /// The arguments do not match the tool's schema.
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    /// The tool ran and failed.
    #[error("{0}")]
    Failed(String),
}

impl ToolError {
    /// A [`ToolError::Failed`].
    pub fn failed(message: impl Into<String>) -> Self {
        Self::Failed(message.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_prefix_is_added_once() {
        assert_eq!(ToolOutput::error("boom").text_content(), "Error: boom");
        assert_eq!(ToolOutput::error("Error: boom").text_content(), "Error: boom");
        assert!(ToolOutput::error("x").is_error);
        assert!(!ToolOutput::text("x").is_error);
        let out = ToolOutput::text("x").with_structured(serde_json::json!({"n": 1}));
        assert_eq!(out.structured.as_deref(), Some(&serde_json::json!({"n": 1})));
        let out = ToolOutput::from(ToolError::failed("no such user"));
        assert!(out.is_error);
        assert_eq!(out.text_content(), "Error: no such user");
    }
}
