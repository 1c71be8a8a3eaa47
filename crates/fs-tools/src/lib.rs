//! # trellis-fs-tools
//!
//! The tools layer of Trellis: the one [`Tool`] trait every tool implements, and the file tools a
//! Trellis agent works with — `ls`, `read_file`, `write_file`, `edit_file`, `delete`, `glob` and
//! `grep` — over any [`backend::Backend`], with path permissions and large-result eviction.
//!
//! * [`Tool`]: a name, a description, a JSON schema of the arguments and an async call that takes
//!   the model's JSON arguments and a [`ToolContext`] and returns a [`ToolOutput`] (or a
//!   [`ToolError`]). A tool never panics: bad arguments, refused paths and storage errors are
//!   answers (`is_error: true`) that say what went wrong and what to do instead.
//! * [`ToolContext`]: the run-specific part of a call — the thread, the user ([`UserIdentity`]),
//!   the run's [`Extensions`], progress events, a read-only view of the thread's state [`Slots`],
//!   and the call's id. The runtime implements [`ToolRun`]; [`DetachedRun`] is for calling tools by
//!   hand.
//! * [`Slot`], [`Slots`], [`StateUpdates`]: typed state slots; a tool writes them by returning
//!   updates with its output.
//! * [`FileAccess`]: the backend, the [`Permissions`] and the [`Limits`] a file tool is built
//!   over. [`Permissions`] are ordered allow/deny rules on path globs for reads and writes; the
//!   first rule that applies decides, the default is allow. A read or write of a named path is
//!   checked before the backend is touched; `ls`, `glob` and `grep` leave out what the model may not
//!   read. A run's [`HiddenPaths`] extension makes subtrees absent for every file tool.
//! * [`evict_large_output`] / [`EvictLargeOutput`]: results longer than
//!   [`Limits::evict_over_chars`] are saved to `/large_tool_results/<id>` and replaced by their first
//!   and last lines plus that path. Tools that page or cap their own output (all seven here) are
//!   exempt ([`Tool::bounds_own_output`]).
//! * [`ExecuteTool`] (`execute`): a shell command in a [`backend::Sandbox`] over the same files,
//!   offered when there is a sandbox; [`CommandPolicy`] restricts which commands may run. The
//!   sandboxes that ship — bubblewrap and the unsandboxed shell — are in [`sandbox`].
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
//! use trellis_fs_tools::backend::StateBackend;
//! use trellis_fs_tools::{file_tools, Access, FileAccess, PermissionRule, Permissions, ToolContext};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let rules = Permissions::new(vec![PermissionRule::deny("/secrets/**", &[Access::Read, Access::Write])?]);
//! let files = FileAccess::new(Arc::new(StateBackend::new())).with_permissions(rules);
//! let tools = file_tools(files);
//! let tool = |name: &str| tools.iter().find(|t| t.name() == name).cloned().unwrap();
//! let cx = ToolContext::detached("call_1");
//!
//! let out = tool("write_file").call(json!({"file_path": "/notes.md", "content": "hello\nworld\n"}), &cx).await?;
//! assert_eq!(out.text_content(), "Created /notes.md (2 lines, 12 bytes).");
//!
//! let out = tool("read_file").call(json!({"file_path": "/notes.md"}), &cx).await?;
//! assert_eq!(out.text_content(), "[lines 1-2 of 2]\n1\thello\n2\tworld");
//!
//! let out = tool("read_file").call(json!({"file_path": "/secrets/key"}), &cx).await?;
//! assert!(out.is_error);
//! assert_eq!(out.text_content(), "Error: permission denied: read access to /secrets/key is not allowed.");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

#![warn(missing_docs)]

/// The storage layer this crate is built on, re-exported for the layers above.
pub use trellis_backend as backend;

mod exec;
mod files;
mod tool;

pub use exec::{CommandPolicy, CommandRule, DEFAULT_EXEC_TIMEOUT, ExecuteTool, IDEMPOTENCY_KEY_VAR, sandbox};

pub use files::{
    Access, DEFAULT_READ_LIMIT, DeleteTool, EditFileTool, Effect, EvictLargeOutput, FileAccess, FileLayout,
    GlobTool, GrepTool, HiddenPaths, INHERITED_DIRS, LARGE_RESULTS_DIR, Limits, LsTool, OutputMode,
    ParentFiles, PermissionError, PermissionRule, Permissions, ReadFileTool, RunSpaces, ThreadFiles,
    UserFiles, UserSpaces, WORKSPACE_DIR, WriteFileTool, evict_if_large, evict_large_output, file_tools,
};
pub use tool::canonical;
pub use tool::{
    DetachedRun, Extensions, FnTool, ImageSource, SideEffects, Slot, SlotValue, Slots, StateError,
    StateUpdates, StateView, Tool, ToolContent, ToolContext, ToolError, ToolOutput, ToolRun, ToolSpec,
    UserIdentity, describe_fields, idempotency_key, parameters_schema, parse_args,
};

/// This crate's README, compiled: its examples are doctests, so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
