//! `delete`: remove one file.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use trellis_backend::BackendError;

use crate::files::FileAccess;
use crate::files::format::{backend_error, parse_path};
use crate::files::permissions::Access;
use crate::tool::parse_args_described as parse_args;
use crate::tool::{Tool, ToolOutput};

const DESCRIPTION: &str = "Delete one file. Directories are not deleted by this tool; delete the \
files inside them one by one. There is no undo.";

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct DeleteArgs {
    /// Absolute path of the file, e.g. `/tmp/scratch.txt`.
    #[serde(alias = "path")]
    file_path: String,
}

file_tool! {
    /// `delete`: removes a single file (never a directory).
    DeleteTool, "delete", DeleteArgs, Idempotent
}

impl DeleteTool {
    async fn run(&self, args: Value, files: &FileAccess) -> Result<ToolOutput, ToolOutput> {
        let args: DeleteArgs = parse_args(self.name(), &self.schema, args)?;
        let path = parse_path("file_path", &args.file_path)?;
        files.check(Access::Write, &path)?;
        files.backend.delete(&path).await.map_err(|e| {
            ToolOutput::error(match e {
                BackendError::NotFound { .. } => format!("nothing to delete: {path} does not exist."),
                BackendError::IsADirectory { .. } => format!(
                    "{path} is a directory; delete removes files only. Delete the files inside it one by one."
                ),
                other => backend_error(&other),
            })
        })?;
        Ok(ToolOutput::text(format!("Deleted {path}.")))
    }
}
