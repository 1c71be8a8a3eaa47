//! [`FilesystemMiddleware`]: the file tools, a short system section on using them, and eviction of
//! large results from every other tool.

use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;

use crate::backend::Backend;
use crate::runtime::context::RunContext;
use crate::runtime::error::AgentError;
use crate::runtime::message::{SystemBlock, ToolCall};
use crate::runtime::middleware::{Middleware, Next, ToolNext};
use crate::runtime::model::{ModelRequest, ModelResponse};
use crate::runtime::state::State;
use crate::tools::{
    ExecuteTool, FileAccess, Limits, Permissions, Tool, ToolContext, ToolOutput, evict_if_large, file_tools,
};

/// The system section this middleware adds by default.
pub const FILESYSTEM_SECTION: &str = "\
## Files

You can read and change files through these tools. Paths are absolute and start with `/`.

- `ls` lists a directory; `glob` finds files by name pattern; `grep` finds lines containing literal text.
- `read_file` shows numbered lines of a file; page through long files with `offset` and `limit`.
- `edit_file` replaces an exact piece of text; read the file first and copy the text exactly.
- `write_file` creates a file; it replaces an existing one only when you pass `overwrite: true`.
- `delete` removes one file.

Prefer `edit_file` to rewriting a whole file. When a tool result is too long to show, it is saved \
under /large_tool_results/ and you get its path and a preview: read the parts you need.";

/// The line [`FILESYSTEM_SECTION`] gains when `execute` is offered.
pub const EXECUTE_LINE: &str = "\n\n`execute` runs a shell command in a sandbox over these same files, at the same paths; \
files it writes are saved. Use it to run a skill's scripts (by their full path) and for work the file \
tools cannot do.";

/// Offers `ls`, `read_file`, `write_file`, `edit_file`, `delete`, `glob` and `grep` over one backend
/// (and `execute`, when the backend can run commands or [`with_execute`](Self::with_execute) gives
/// one), adds [`FILESYSTEM_SECTION`] (or a replacement) to every request as one system block, and saves
/// results of *other* tools that exceed [`Limits::evict_over_chars`] to `/large_tool_results/`,
/// replacing them with a preview (the file tools page and cap their own output).
#[derive(Debug, Clone)]
pub struct FilesystemMiddleware {
    files: FileAccess,
    tools: Vec<Arc<dyn Tool>>,
    own_tools: HashSet<String>,
    section: Option<SystemBlock>,
}

impl FilesystemMiddleware {
    /// File tools over `backend` with default limits and no permission rules.
    pub fn new(backend: Arc<dyn Backend>) -> Self {
        Self::with_files(FileAccess::new(backend))
    }

    /// File tools over a fully configured [`FileAccess`] (backend, permissions, limits).
    pub fn with_files(files: FileAccess) -> Self {
        let tools = file_tools(files.clone());
        let own_tools = tools.iter().map(|t| t.name().to_owned()).collect();
        let mut me = Self {
            files,
            tools,
            own_tools,
            section: None,
        };
        me.section = Some(me.default_section());
        me
    }

    /// Offer this `execute` (configured with its sandbox, skill sources and command policy) in
    /// place of the default one; when it is not offered ([`ExecuteTool::is_offered`]), there is no
    /// `execute` at all. Keeps a replaced section; the default one mentions `execute` when offered.
    pub fn with_execute(mut self, execute: ExecuteTool) -> Self {
        let default_section =
            self.section.as_ref().map(|s| s.text.clone()) == Some(self.default_section().text);
        self.tools.retain(|t| t.name() != "execute");
        self.own_tools.remove("execute");
        if execute.is_offered() {
            self.tools.push(Arc::new(execute));
            self.own_tools.insert("execute".to_owned());
        }
        if default_section {
            self.section = Some(self.default_section());
        }
        self
    }

    fn default_section(&self) -> SystemBlock {
        let mut text = FILESYSTEM_SECTION.to_owned();
        if self.tools.iter().any(|t| t.name() == "execute") {
            text.push_str(EXECUTE_LINE);
        }
        SystemBlock::new(text).with_source("filesystem")
    }

    /// Apply permission rules to every file tool.
    pub fn with_permissions(self, permissions: Permissions) -> Self {
        let files = self.files.clone().with_permissions(permissions);
        Self::with_files(files).with_section_from(self.section)
    }

    /// Change the limits (output budget, eviction threshold, …).
    pub fn with_limits(self, limits: Limits) -> Self {
        let files = self.files.clone().with_limits(limits);
        Self::with_files(files).with_section_from(self.section)
    }

    /// Replace the system section; `None` adds none.
    pub fn with_section(mut self, text: Option<String>) -> Self {
        self.section = text.map(|t| SystemBlock::new(t).with_source("filesystem"));
        self
    }

    fn with_section_from(mut self, section: Option<SystemBlock>) -> Self {
        self.section = section;
        self
    }

    /// The backend the tools work on.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.files.backend
    }
}

#[async_trait]
impl Middleware for FilesystemMiddleware {
    fn name(&self) -> &str {
        "filesystem"
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.tools.clone()
    }

    async fn wrap_model_call(
        &self,
        mut request: ModelRequest,
        state: &mut State,
        cx: &RunContext,
        next: Next<'_>,
    ) -> Result<ModelResponse, AgentError> {
        if let Some(section) = &self.section {
            request.push_system(section.clone());
        }
        next.run(request, state, cx).await
    }

    async fn wrap_tool_call(
        &self,
        call: ToolCall,
        cx: &ToolContext<'_>,
        next: ToolNext<'_>,
    ) -> Result<ToolOutput, AgentError> {
        let name = call.name.clone();
        if self.own_tools.contains(&name) {
            return next.run(call, cx).await;
        }
        // Opened before the tool runs: a run whose spaces cannot be opened (a user id that is not
        // a safe path segment) is refused before anything happens, not after.
        let files = match self.files.for_call(cx) {
            Ok(files) => files,
            Err(refused) => return Ok(refused),
        };
        let output = next.run(call, cx).await?;
        Ok(evict_if_large(&name, output, &files, cx.call_id()).await)
    }
}
