//! The file tools and what they work on: [`FileAccess`] (backend, [`Permissions`], [`Limits`]),
//! [`HiddenPaths`], and large-result eviction.

mod access;
mod eviction;
pub(crate) mod format;
mod hidden;
mod permissions;
mod spaces;
pub(crate) mod tools;

pub use access::{FileAccess, Limits};
pub use eviction::{EvictLargeOutput, LARGE_RESULTS_DIR, evict_if_large, evict_large_output};
pub use hidden::HiddenPaths;
pub use permissions::{Access, Effect, PermissionError, PermissionRule, Permissions};
pub use spaces::{
    FileLayout, INHERITED_DIRS, ParentFiles, RunSpaces, ThreadFiles, UserFiles, UserSpaces, WORKSPACE_DIR,
};
pub use tools::{
    DEFAULT_READ_LIMIT, DeleteTool, EditFileTool, GlobTool, GrepTool, LsTool, OutputMode, ReadFileTool,
    WriteFileTool, file_tools,
};
