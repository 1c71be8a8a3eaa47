//! The seven file tools.

use std::sync::Arc;

use crate::context::ToolContext;
use crate::tool::{Tool, ToolOutput};

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
