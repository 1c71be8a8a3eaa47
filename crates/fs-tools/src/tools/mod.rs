//! The seven file tools.

use std::sync::Arc;

use crate::context::ToolContext;
use crate::tool::{Tool, ToolOutput};

/// Declares a file tool: the struct (its description and argument schema), `new`,
/// `with_description`, `Default`, and the [`Tool`] impl. Every file tool pages or caps its own
/// output, and its `call` runs the type's own `run(args, ctx) -> Result<ToolOutput, ToolOutput>`,
/// where the error side is an answer for the model too. Expects a `DESCRIPTION` constant in scope.
macro_rules! file_tool {
    ($(#[$meta:meta])* $ty:ident, $name:literal, $args:ty) => {
        $(#[$meta])*
        #[derive(Debug, Clone)]
        pub struct $ty {
            description: String,
            schema: serde_json::Value,
        }

        impl $ty {
            /// The tool with its default description.
            pub fn new() -> Self {
                Self {
                    description: DESCRIPTION.to_owned(),
                    schema: crate::args::parameters_schema::<$args>(),
                }
            }

            /// Replace the model-facing description.
            pub fn with_description(mut self, description: impl Into<String>) -> Self {
                self.description = description.into();
                self
            }
        }

        impl Default for $ty {
            fn default() -> Self {
                Self::new()
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

            async fn call(
                &self,
                args: serde_json::Value,
                ctx: &crate::context::ToolContext,
            ) -> crate::tool::ToolOutput {
                match self.run(args, ctx).await {
                    Ok(out) | Err(out) => out,
                }
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

/// The seven file tools with their default descriptions, in the order `ls`, `read_file`,
/// `write_file`, `edit_file`, `delete`, `glob`, `grep`.
pub fn file_tools() -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(LsTool::new()),
        Arc::new(ReadFileTool::new()),
        Arc::new(WriteFileTool::new()),
        Arc::new(EditFileTool::new()),
        Arc::new(DeleteTool::new()),
        Arc::new(GlobTool::new()),
        Arc::new(GrepTool::new()),
    ]
}

/// Default for optional directory arguments.
pub(crate) fn root() -> String {
    "/".to_owned()
}

pub(crate) fn timed_out(tool: &str, ctx: &ToolContext) -> ToolOutput {
    ToolOutput::error(format!(
        "{tool} timed out after {} s; try a more specific pattern or a narrower path.",
        ctx.limits.search_timeout.as_secs_f64()
    ))
}
