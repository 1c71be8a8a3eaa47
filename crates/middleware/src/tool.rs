//! Tools the agent loop can run: the object-safe [`AgentTool`] trait and what it returns.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use futures::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::context::RunContext;
use crate::message::{ContentBlock, ToolMessage};
use crate::model::ToolSpec;
use crate::state::{Slot, SlotValue, State, StateUpdates};

/// What a tool call sees besides its arguments.
#[derive(Debug, Clone, Copy)]
pub struct ToolContext<'a> {
    run: &'a RunContext,
    state: &'a State,
    call_id: &'a str,
}

impl<'a> ToolContext<'a> {
    /// A context for one call.
    pub fn new(run: &'a RunContext, state: &'a State, call_id: &'a str) -> Self {
        Self { run, state, call_id }
    }

    /// The run this call belongs to.
    pub fn run(&self) -> &'a RunContext {
        self.run
    }

    /// The thread's state as it was when the model asked for the calls. Read-only: tool calls run
    /// concurrently; write through [`ToolOutput::with_update`].
    pub fn state(&self) -> &'a State {
        self.state
    }

    /// The id of this call.
    pub fn call_id(&self) -> &'a str {
        self.call_id
    }
}

/// A tool's answer.
#[derive(Debug, Clone, Default)]
pub struct ToolOutput {
    /// What the model reads: text, or text and images.
    pub content: Vec<ContentBlock>,
    /// True when the call failed and `content` says why.
    pub is_error: bool,
    /// Slot writes, applied after all calls of the step finish, in call order.
    pub updates: StateUpdates,
}

impl ToolOutput {
    /// A text answer.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            content: vec![ContentBlock::text(text)],
            ..Self::default()
        }
    }

    /// An error answer the model can act on. The text is prefixed with `Error: ` (unless it already
    /// starts with it), so the failure is visible even on providers without an error flag; the same
    /// convention as `trellis-fs-tools`.
    pub fn error(text: impl Into<String>) -> Self {
        let text = text.into();
        let text = if text.starts_with("Error: ") {
            text
        } else {
            format!("Error: {text}")
        };
        Self {
            is_error: true,
            ..Self::text(text)
        }
    }

    /// Also write `value` to `slot`.
    pub fn with_update<T: SlotValue>(mut self, slot: &Slot<T>, value: T) -> Self {
        self.updates.set(slot, value);
        self
    }

    /// The tool message answering call `call_id` of tool `name` (the slot updates are not part of it).
    pub fn into_message(
        self,
        call_id: impl Into<String>,
        name: impl Into<String>,
    ) -> (ToolMessage, StateUpdates) {
        let msg = ToolMessage {
            call_id: call_id.into(),
            name: name.into(),
            content: self.content,
            is_error: self.is_error,
            meta: Default::default(),
        };
        (msg, self.updates)
    }
}

/// A tool call that failed in a way the model should hear about. Never a reason to stop the run.
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

/// Deserialize a tool's arguments, with an error message the model can fix its call from.
pub fn parse_args<T: DeserializeOwned>(args: Value) -> Result<T, ToolError> {
    let args = match args {
        // Providers pass arguments that were not JSON as a string; some models send JSON in a string.
        Value::String(raw) => serde_json::from_str(&raw)
            .map_err(|e| ToolError::InvalidArguments(format!("arguments must be a JSON object ({e})")))?,
        other => other,
    };
    serde_json::from_value(args).map_err(|e| ToolError::InvalidArguments(e.to_string()))
}

/// The JSON schema of a tool's arguments type: subschemas inlined (providers handle `$ref` unevenly),
/// without the `$schema` and `title` keys at the top.
pub fn tool_schema<T: schemars::JsonSchema>() -> Value {
    let mut schema = schemars::generate::SchemaSettings::draft2020_12()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value();
    if let Some(obj) = schema.as_object_mut() {
        obj.remove("$schema");
        obj.remove("title");
    }
    schema
}

/// A tool the agent loop can run.
///
/// Object-safe (`Arc<dyn AgentTool>`). `call` returns `Err` for failures the model should see; the loop
/// turns them (and panics) into error results, so a tool can never crash a run. Calls of one step run
/// concurrently on the run's task; a tool with heavy CPU work should move it to
/// `tokio::task::spawn_blocking`.
#[async_trait]
pub trait AgentTool: Send + Sync + fmt::Debug {
    /// Unique name.
    fn name(&self) -> &str;

    /// What the tool does and when to use it, for the model.
    fn description(&self) -> &str;

    /// JSON schema of the arguments object.
    fn parameters(&self) -> Value;

    /// The spec sent to the model.
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().to_owned(),
            description: self.description().to_owned(),
            parameters: self.parameters(),
        }
    }

    /// Run the tool.
    async fn call(&self, args: Value, cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError>;
}

type Handler = dyn Fn(Value) -> BoxFuture<'static, Result<ToolOutput, ToolError>> + Send + Sync;

/// A tool from a closure that needs only its arguments.
///
/// ```
/// use trellis_middleware::{FnTool, ToolOutput};
/// let echo = FnTool::new("echo", "Repeat the text.", serde_json::json!({"type": "object"}), |args| async move {
///     Ok(ToolOutput::text(args["text"].as_str().unwrap_or_default()))
/// });
/// # let _ = echo;
/// ```
pub struct FnTool {
    name: String,
    description: String,
    parameters: Value,
    handler: Arc<Handler>,
}

impl fmt::Debug for FnTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnTool").field("name", &self.name).finish()
    }
}

impl FnTool {
    /// A tool named `name` that runs `f` on its arguments.
    pub fn new<F, Fut>(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: Value,
        f: F,
    ) -> Self
    where
        F: Fn(Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<ToolOutput, ToolError>> + Send + 'static,
    {
        Self {
            name: name.into(),
            description: description.into(),
            parameters,
            handler: Arc::new(move |args| Box::pin(f(args))),
        }
    }
}

#[async_trait]
impl AgentTool for FnTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Value {
        self.parameters.clone()
    }

    async fn call(&self, args: Value, _cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        (self.handler)(args).await
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct Args {
        path: String,
    }

    #[test]
    fn tool_schema_is_inline() {
        #[derive(schemars::JsonSchema)]
        #[allow(dead_code)]
        struct Inner {
            x: u8,
        }
        #[derive(schemars::JsonSchema)]
        #[allow(dead_code)]
        struct Outer {
            items: Vec<Inner>,
        }
        let schema = tool_schema::<Outer>();
        assert!(schema.get("$schema").is_none());
        assert!(schema.get("$defs").is_none(), "{schema}");
        assert_eq!(
            schema["properties"]["items"]["items"]["properties"]["x"]["type"],
            "integer"
        );
    }

    #[test]
    fn parse_args_accepts_objects_and_json_strings() {
        assert_eq!(
            parse_args::<Args>(json!({"path": "/a"})).unwrap(),
            Args { path: "/a".into() }
        );
        assert_eq!(
            parse_args::<Args>(json!("{\"path\": \"/b\"}")).unwrap(),
            Args { path: "/b".into() }
        );
        let err = parse_args::<Args>(json!({"file": "/a"})).unwrap_err();
        assert!(err.to_string().contains("missing field `path`"), "{err}");
        assert!(matches!(
            parse_args::<Args>(json!("{oops")),
            Err(ToolError::InvalidArguments(_))
        ));
    }
}
