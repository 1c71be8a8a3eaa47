//! [`FnTool`]: a tool from a closure.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use futures::future::BoxFuture;
use serde_json::Value;

use super::Tool;
use super::context::ToolContext;
use super::effects::SideEffects;
use super::output::{ToolError, ToolOutput};

type Handler = dyn Fn(Value) -> BoxFuture<'static, Result<ToolOutput, ToolError>> + Send + Sync;

/// A tool from a closure that needs only its arguments.
///
/// ```
/// use trellis_fs_tools::{FnTool, Tool, ToolContext, ToolOutput};
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let echo = FnTool::new("echo", "Repeat the text.", serde_json::json!({"type": "object"}), |args| async move {
///     Ok(ToolOutput::text(args["text"].as_str().unwrap_or_default()))
/// });
/// let out = echo.call(serde_json::json!({"text": "hi"}), &ToolContext::detached("c1")).await.unwrap();
/// assert_eq!(out.text_content(), "hi");
/// # });
/// ```
pub struct FnTool {
    name: String,
    description: String,
    parameters: Value,
    side_effects: SideEffects,
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
            side_effects: SideEffects::External,
            handler: Arc::new(move |args| Box::pin(f(args))),
        }
    }

    /// Declare what a call does besides returning its result (default
    /// [`SideEffects::External`]).
    pub fn with_side_effects(mut self, side_effects: SideEffects) -> Self {
        self.side_effects = side_effects;
        self
    }
}

#[async_trait]
impl Tool for FnTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> &Value {
        &self.parameters
    }

    fn side_effects(&self) -> SideEffects {
        self.side_effects
    }

    async fn call(&self, args: Value, _cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        (self.handler)(args).await
    }
}
