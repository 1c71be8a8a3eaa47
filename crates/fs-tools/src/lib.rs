//! # trellis-fs-tools
//!
//! The file tools a Trellis agent works with — `ls`, `read_file`, `write_file`, `edit_file`,
//! `delete`, `glob` and `grep` — over any [`trellis_backend::Backend`], with path permissions and
//! large-result eviction.
//!
//! * [`Tool`]: a name, a description, a JSON schema of the arguments and an async call that takes
//!   the model's JSON arguments and a [`ToolContext`] and returns a [`ToolOutput`]. A tool never
//!   panics and never fails at the transport level: bad arguments, refused paths and storage errors
//!   are answers (`is_error: true`) that say what went wrong and what to do instead.
//! * [`ToolContext`]: the backend, the [`Permissions`], the [`Limits`], the thread and the user
//!   ([`UserIdentity`]), and the id of the tool call.
//! * [`Permissions`]: ordered allow/deny rules on path globs for reads and writes; the first rule
//!   that applies decides, the default is allow. Checked before the backend is touched; `ls`, `glob`
//!   and `grep` leave out what the model may not read.
//! * [`evict_large_output`] / [`EvictLargeOutput`]: results longer than
//!   [`Limits::evict_over_chars`] are saved to `/large_tool_results/<id>` and replaced by their first
//!   and last lines plus that path. Tools that page or cap their own output (all seven here) are
//!   exempt ([`Tool::bounds_own_output`]).
//!
//! ## What the model sees
//!
//! * `ls` and `glob`: one absolute path per line, sorted; `ls` marks directories with a trailing `/`.
//! * `read_file`: a header, then one row per line — the line number, a tab, the line (shown here
//!   with `→` for the tab):
//!   ```text
//!   [lines 1-2 of 250; next offset: 2]
//!   1→# Title
//!   2→Some text
//!   ```
//!   A line longer than [`Limits::line_chunk_chars`] is split into rows numbered `12`, `12.1`,
//!   `12.2`…. The reply stays within [`Limits::output_chars`], cutting between lines and saying so.
//! * `grep`: matching files, matching lines (`  12: text` under each file) or counts per file.
//! * Errors start with `Error: `.
//!
//! ## Example
//!
//! ```
//! use std::sync::Arc;
//! use serde_json::json;
//! use trellis_backend::StateBackend;
//! use trellis_fs_tools::{file_tools, Access, PermissionRule, Permissions, ToolContext};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let rules = Permissions::new(vec![PermissionRule::deny("/secrets/**", &[Access::Read, Access::Write])?]);
//! let ctx = ToolContext::new(Arc::new(StateBackend::new())).with_permissions(rules);
//! let tools = file_tools();
//! let tool = |name: &str| tools.iter().find(|t| t.name() == name).cloned().unwrap();
//!
//! let out = tool("write_file").call(json!({"file_path": "/notes.md", "content": "hello\nworld\n"}), &ctx).await;
//! assert_eq!(out.content, "Created /notes.md (2 lines, 12 bytes).");
//!
//! let out = tool("read_file").call(json!({"file_path": "/notes.md"}), &ctx).await;
//! assert_eq!(out.content, "[lines 1-2 of 2]\n1\thello\n2\tworld");
//!
//! let out = tool("read_file").call(json!({"file_path": "/secrets/key"}), &ctx).await;
//! assert!(out.is_error);
//! assert_eq!(out.content, "Error: permission denied: read access to /secrets/key is not allowed.");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

#![warn(missing_docs)]

mod args;
mod context;
mod eviction;
mod format;
mod permissions;
mod tool;
mod tools;

pub use args::{describe_fields, parameters_schema, parse_args};
pub use context::{Limits, ToolContext, UserIdentity};
pub use eviction::{EvictLargeOutput, LARGE_RESULTS_DIR, evict_if_large, evict_large_output};
pub use permissions::{Access, Effect, PermissionError, PermissionRule, Permissions};
pub use tool::{Tool, ToolOutput};
pub use tools::{
    DEFAULT_READ_LIMIT, DeleteTool, EditFileTool, GlobTool, GrepTool, LsTool, OutputMode, ReadFileTool,
    WriteFileTool, file_tools,
};
