//! The [`Tool`] trait and what a call returns, [`ToolOutput`].

use std::fmt::Debug;

use async_trait::async_trait;
use serde::Serialize;

use crate::context::ToolContext;

/// A tool the model can call.
///
/// Object-safe (`Arc<dyn Tool>`). The contract every implementation keeps:
///
/// * [`call`](Tool::call) never panics and never returns a transport error: every failure (bad
///   arguments, a refused path, a missing file, a storage outage) is a [`ToolOutput`] with
///   `is_error` set and text the model can act on;
/// * permissions in the [`ToolContext`] are checked before the backend is touched;
/// * [`parameters`](Tool::parameters) is a JSON schema (an object schema) of the arguments `call`
///   accepts, suitable for a provider's tool specification.
#[async_trait]
pub trait Tool: Send + Sync + Debug {
    /// The name the model calls the tool by (`read_file`).
    fn name(&self) -> &str;

    /// What the tool does and how to call it, written for the model.
    fn description(&self) -> &str;

    /// JSON schema of the arguments object.
    fn parameters(&self) -> &serde_json::Value;

    /// True when the tool keeps its own output within [`Limits::output_chars`] (by paging or
    /// capping with a notice), so large-result eviction must leave its results alone. The default is
    /// `false`: results of such tools are evicted when too large (see [`crate::evict_large_output`]).
    ///
    /// [`Limits::output_chars`]: crate::Limits::output_chars
    fn bounds_own_output(&self) -> bool {
        false
    }

    /// Run the tool on the model's arguments (a JSON value, normally an object).
    async fn call(&self, args: serde_json::Value, ctx: &ToolContext) -> ToolOutput;
}

/// What a tool call returns to the model.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct ToolOutput {
    /// Text for the model.
    pub content: String,
    /// True when the call failed; the text then says why and, where it can, what to do instead.
    pub is_error: bool,
    /// Optional machine-readable result, for callers and UIs (not shown to the model by this crate).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub structured: Option<serde_json::Value>,
}

impl ToolOutput {
    /// A successful result.
    pub fn text(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            is_error: false,
            structured: None,
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
            content,
            is_error: true,
            structured: None,
        }
    }

    /// Attach structured content.
    pub fn with_structured(mut self, value: serde_json::Value) -> Self {
        self.structured = Some(value);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_prefix_is_added_once() {
        assert_eq!(ToolOutput::error("boom").content, "Error: boom");
        assert_eq!(ToolOutput::error("Error: boom").content, "Error: boom");
        assert!(ToolOutput::error("x").is_error);
        assert!(!ToolOutput::text("x").is_error);
        let out = ToolOutput::text("x").with_structured(serde_json::json!({"n": 1}));
        assert_eq!(out.structured, Some(serde_json::json!({"n": 1})));
    }
}
