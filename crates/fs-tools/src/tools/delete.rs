//! `delete`: remove one file.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use trellis_backend::BackendError;

use crate::args::{parameters_schema, parse_args};
use crate::context::ToolContext;
use crate::format::{backend_error, parse_path};
use crate::permissions::Access;
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

/// `delete`: removes a single file (never a directory).
#[derive(Debug, Clone)]
pub struct DeleteTool {
    description: String,
    schema: Value,
}

impl DeleteTool {
    /// The tool with its default description.
    pub fn new() -> Self {
        Self {
            description: DESCRIPTION.to_owned(),
            schema: parameters_schema::<DeleteArgs>(),
        }
    }

    /// Replace the model-facing description.
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }
}

impl Default for DeleteTool {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Tool for DeleteTool {
    fn name(&self) -> &str {
        "delete"
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> &Value {
        &self.schema
    }

    /// Its reply is one short sentence.
    fn bounds_own_output(&self) -> bool {
        true
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> ToolOutput {
        match self.run(args, ctx).await {
            Ok(out) | Err(out) => out,
        }
    }
}

impl DeleteTool {
    async fn run(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolOutput> {
        let args: DeleteArgs = parse_args(self.name(), &self.schema, args)?;
        let path = parse_path("file_path", &args.file_path)?;
        ctx.check(Access::Write, &path)?;
        ctx.backend.delete(&path).await.map_err(|e| {
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
