//! The seven file tools, each over a [`FileAccess`].

use std::sync::Arc;

use crate::files::FileAccess;
use crate::tool::{Tool, ToolOutput};

/// Declares a file tool: the struct (its description, argument schema and [`FileAccess`]), `new`,
/// `with_description`, `files`, and the [`Tool`] impl with the given
/// [`SideEffects`](crate::SideEffects) class. Every file tool pages or caps its own
/// output, and its `call` runs the type's own `run(args, files) -> Result<ToolOutput, ToolOutput>`
/// over [`FileAccess::for_call`], where the error side is an answer for the model too. Expects a
/// `DESCRIPTION` constant in scope.
macro_rules! file_tool {
    ($(#[$meta:meta])* $ty:ident, $name:literal, $args:ty, $effects:ident) => {
        $(#[$meta])*
        #[derive(Debug, Clone)]
        pub struct $ty {
            description: String,
            schema: serde_json::Value,
            files: crate::files::FileAccess,
        }

        impl $ty {
            /// The tool over `files`, with its default description.
            pub fn new(files: crate::files::FileAccess) -> Self {
                Self {
                    description: DESCRIPTION.to_owned(),
                    schema: crate::tool::parameters_schema::<$args>(),
                    files,
                }
            }

            /// Replace the model-facing description.
            pub fn with_description(mut self, description: impl Into<String>) -> Self {
                self.description = description.into();
                self
            }

            /// What the tool works on.
            pub fn files(&self) -> &crate::files::FileAccess {
                &self.files
            }
        }

        #[async_trait::async_trait]
        impl crate::tool::Tool for $ty {
            fn name(&self) -> &str {
                $name
            }

            fn description(&self) -> &str {
                &self.description
            }

            fn parameters(&self) -> &serde_json::Value {
                &self.schema
            }

            fn bounds_own_output(&self) -> bool {
                true
            }

            fn side_effects(&self) -> crate::tool::SideEffects {
                crate::tool::SideEffects::$effects
            }

            async fn call(
                &self,
                args: serde_json::Value,
                cx: &crate::tool::ToolContext<'_>,
            ) -> Result<crate::tool::ToolOutput, crate::tool::ToolError> {
                let files = match self.files.for_call(cx) {
                    Ok(files) => files,
                    Err(refused) => return Ok(refused),
                };
                Ok(match self.run(args, &files).await {
                    Ok(out) | Err(out) => out,
                })
            }
        }
    };
}

mod delete;
mod edit;
mod glob;
mod grep;
mod ls;
mod read;
mod write;

pub use delete::DeleteTool;
pub use edit::EditFileTool;
pub use glob::GlobTool;
pub use grep::{GrepTool, OutputMode};
pub use ls::LsTool;
pub use read::{DEFAULT_READ_LIMIT, ReadFileTool};
pub use write::WriteFileTool;

/// Characters kept free for a trailing notice within the output budget.
pub(crate) const NOTICE_RESERVE: usize = 600;

/// The seven file tools over `files`, with their default descriptions, in the order `ls`,
/// `read_file`, `write_file`, `edit_file`, `delete`, `glob`, `grep`; then `execute`
/// ([`ExecuteTool`](crate::ExecuteTool)) when `files.backend` can run commands.
pub fn file_tools(files: FileAccess) -> Vec<Arc<dyn Tool>> {
    let execute = crate::ExecuteTool::new(files.clone());
    let mut tools: Vec<Arc<dyn Tool>> = vec![
        Arc::new(LsTool::new(files.clone())),
        Arc::new(ReadFileTool::new(files.clone())),
        Arc::new(WriteFileTool::new(files.clone())),
        Arc::new(EditFileTool::new(files.clone())),
        Arc::new(DeleteTool::new(files.clone())),
        Arc::new(GlobTool::new(files.clone())),
        Arc::new(GrepTool::new(files)),
    ];
    if execute.is_offered() {
        tools.push(Arc::new(execute));
    }
    tools
}

/// Default for optional directory arguments.
pub(crate) fn root() -> String {
    "/".to_owned()
}

pub(crate) fn timed_out(tool: &str, files: &FileAccess) -> ToolOutput {
    ToolOutput::error(format!(
        "{tool} timed out after {} s; try a more specific pattern or a narrower path.",
        files.limits.search_timeout.as_secs_f64()
    ))
}
