//! `write_file`: create a file, or replace one only when asked to.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use trellis_backend::{BackendError, ConflictKind, WriteMode};

use crate::files::FileAccess;
use crate::files::format::{backend_error, count, parse_path, split_lines};
use crate::files::permissions::Access;
use crate::tool::{Tool, ToolOutput};
use crate::tool::{lenient, parse_args_described as parse_args};

const DESCRIPTION: &str = "Create a file with the given content; missing parent directories are \
created. An existing file is never replaced unless `overwrite` is true. To change part of an \
existing file, use edit_file instead.";

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct WriteArgs {
    /// Absolute path of the file, e.g. `/notes/todo.md`.
    #[serde(alias = "path")]
    file_path: String,
    /// The complete content of the file.
    content: String,
    /// Replace the file if it already exists (its old content is lost).
    #[serde(default, deserialize_with = "lenient::bool")]
    overwrite: bool,
}

file_tool! {
    /// `write_file`: creates a file (create-only), or replaces it when `overwrite` is true.
    WriteFileTool, "write_file", WriteArgs, Idempotent
}

impl WriteFileTool {
    async fn run(&self, args: Value, files: &FileAccess) -> Result<ToolOutput, ToolOutput> {
        let args: WriteArgs = parse_args(self.name(), &self.schema, args)?;
        let path = parse_path("file_path", &args.file_path)?;
        files.check(Access::Write, &path)?;
        let lines = split_lines(&args.content).len();
        let size = args.content.len();
        let mode = if args.overwrite {
            WriteMode::Overwrite
        } else {
            WriteMode::CreateNew
        };
        files
            .backend
            .write(&path, args.content.into(), mode)
            .await
            .map_err(|e| {
                ToolOutput::error(match e {
                    BackendError::Conflict {
                        kind: ConflictKind::AlreadyExists,
                        ..
                    } => format!(
                        "{path} already exists and was left unchanged. To change part of it, use edit_file; \
                     to replace all of it, call write_file again with overwrite: true."
                    ),
                    BackendError::IsADirectory { .. } => {
                        format!("{path} is a directory; choose a file path inside it.")
                    }
                    BackendError::NotADirectory { .. } => {
                        format!("cannot create {path}: one of its parent paths is a file, not a directory.")
                    }
                    other => backend_error(&other),
                })
            })?;
        let verb = if args.overwrite { "Wrote" } else { "Created" };
        Ok(ToolOutput::text(format!(
            "{verb} {path} ({}, {}).",
            count(lines, "line", "lines"),
            count(size, "byte", "bytes")
        )))
    }
}
