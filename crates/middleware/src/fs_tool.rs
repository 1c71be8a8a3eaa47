//! [`FsTool`]: the file tools of `trellis-fs-tools` in the agent loop.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;
use trellis_fs_tools::{Tool, ToolContext as FsContext, UserIdentity};

use crate::hidden_paths::HiddenPaths;
use crate::tool::{AgentTool, ToolContext, ToolError, ToolOutput};

/// Runs a [`trellis_fs_tools::Tool`] as an [`AgentTool`].
///
/// Each call gets the configured file-tool context (backend, permissions, limits) with the call's id,
/// the run's thread id (unless the context names one) and the run's [`UserIdentity`] extension
/// (unless the context names a user). When the run carries [`HiddenPaths`], the backend is wrapped
/// so the hidden subtrees are absent for the tool (see [`HiddenPaths::wrap`]). The tool's text and
/// error flag become the result.
#[derive(Debug, Clone)]
pub struct FsTool {
    tool: Arc<dyn Tool>,
    context: FsContext,
}

impl FsTool {
    /// Wrap one file tool.
    pub fn new(tool: Arc<dyn Tool>, context: FsContext) -> Self {
        Self { tool, context }
    }

    /// All seven file tools (`ls`, `read_file`, `write_file`, `edit_file`, `delete`, `glob`, `grep`)
    /// over `context`.
    pub fn all(context: FsContext) -> Vec<Arc<dyn AgentTool>> {
        trellis_fs_tools::file_tools()
            .into_iter()
            .map(|tool| Arc::new(Self::new(tool, context.clone())) as Arc<dyn AgentTool>)
            .collect()
    }

    /// The wrapped tool.
    pub fn inner(&self) -> &Arc<dyn Tool> {
        &self.tool
    }
}

#[async_trait]
impl AgentTool for FsTool {
    fn name(&self) -> &str {
        self.tool.name()
    }

    fn description(&self) -> &str {
        self.tool.description()
    }

    fn parameters(&self) -> Value {
        self.tool.parameters().clone()
    }

    async fn call(&self, args: Value, cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let mut context = self.context.for_call(cx.call_id());
        if context.thread_id.is_none() {
            context = context.with_thread_id(cx.run().thread_id().as_str());
        }
        if context.user.is_none()
            && let Some(user) = cx.run().extension::<UserIdentity>()
        {
            context = context.with_user(user.clone());
        }
        if let Some(hidden) = cx.run().extension::<HiddenPaths>() {
            context.backend = hidden.wrap(context.backend.clone());
        }
        let out = self.tool.call(args, &context).await;
        Ok(ToolOutput {
            is_error: out.is_error,
            ..ToolOutput::text(out.content)
        })
    }
}
