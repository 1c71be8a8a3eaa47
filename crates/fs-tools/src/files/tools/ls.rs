//! `ls`: the direct children of a directory.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use trellis_backend::BackendError;

use crate::files::FileAccess;
use crate::files::format::{backend_error, cap_lines, parse_path};
use crate::files::permissions::Access;
use crate::files::tools::{NOTICE_RESERVE, root};
use crate::tool::parse_args_described as parse_args;
use crate::tool::{Tool, ToolOutput};

const DESCRIPTION: &str = "List the files and directories directly inside a directory: one absolute \
path per line, sorted, directories ending with `/`. Lists the root `/` when no path is given. To find \
files at any depth use glob; to search their contents use grep.";

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct LsArgs {
    /// Absolute path of the directory, e.g. `/src`.
    #[serde(default = "root")]
    path: String,
}

file_tool! {
    /// `ls`: lists one directory level, hiding entries the rules do not let the model read.
    LsTool, "ls", LsArgs, ReadOnly
}

impl LsTool {
    async fn run(&self, args: Value, files: &FileAccess) -> Result<ToolOutput, ToolOutput> {
        let args: LsArgs = parse_args(self.name(), &self.schema, args)?;
        let dir = parse_path("path", &args.path)?;
        files.check(Access::Read, &dir)?;
        let entries = files.backend.ls(&dir).await.map_err(|e| {
            ToolOutput::error(match e {
                BackendError::NotFound { .. } => format!("directory not found: {dir}."),
                BackendError::NotADirectory { .. } => {
                    format!("{dir} is a file, not a directory; use read_file to read it.")
                }
                other => backend_error(&other),
            })
        })?;
        let mut lines: Vec<String> = entries
            .iter()
            .filter(|e| files.visible(&e.path))
            .map(|e| {
                if e.is_dir() {
                    format!("{}/", e.path)
                } else {
                    e.path.to_string()
                }
            })
            .collect();
        if lines.is_empty() {
            return Ok(ToolOutput::text(format!("{dir} is empty.")));
        }
        lines.sort();
        let budget = files.limits.output_budget().saturating_sub(NOTICE_RESERVE);
        let (mut text, shown) = cap_lines(&lines, files.limits.max_list_entries, budget);
        if shown < lines.len() {
            text.push_str(&format!(
                "\n\n[showing {shown} of {} entries; use glob with a pattern to find specific files]",
                lines.len()
            ));
        }
        Ok(ToolOutput::text(text))
    }
}
