//! `glob`: files whose path matches a pattern.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use trellis_backend::BackendExt;
use trellis_backend::glob::GlobPattern;

use crate::files::FileAccess;
use crate::files::format::{backend_error, cap_lines, parse_path, quote};
use crate::files::permissions::Access;
use crate::files::tools::{NOTICE_RESERVE, root, timed_out};
use crate::tool::parse_args_described as parse_args;
use crate::tool::{Tool, ToolOutput};

const DESCRIPTION: &str = "Find files by path pattern: one absolute path per line, sorted. A pattern \
without `/` matches file names at any depth (`*.md`); a pattern with `/` matches the path below \
`path` (`src/**/*.rs`, `/*.toml` for the top level only). `*` and `?` stay within one directory, `**` \
spans directories, `{a,b}` gives alternatives. Only files are listed, not directories.";

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct GlobArgs {
    /// The pattern, e.g. `*.py` or `docs/**/*.md`.
    pattern: String,
    /// Absolute path of the directory to search in.
    #[serde(default = "root")]
    path: String,
}

file_tool! {
    /// `glob`: lists matching files, hiding those the rules do not let the model read.
    GlobTool, "glob", GlobArgs, ReadOnly
}

impl GlobTool {
    async fn run(&self, args: Value, files: &FileAccess) -> Result<ToolOutput, ToolOutput> {
        let args: GlobArgs = parse_args(self.name(), &self.schema, args)?;
        let base = parse_path("path", &args.path)?;
        files.check(Access::Read, &base)?;
        if let Err(e) = GlobPattern::new(&args.pattern) {
            return Err(ToolOutput::error(format!(
                "invalid glob pattern {}: {e}.",
                quote(&args.pattern, 200)
            )));
        }
        let found = tokio::time::timeout(
            files.limits.search_timeout,
            files.backend.glob(&args.pattern, &base),
        )
        .await
        .map_err(|_| timed_out("glob", files))?
        .map_err(|e| ToolOutput::error(backend_error(&e)))?;
        let lines: Vec<String> = found
            .matches
            .iter()
            .filter(|e| files.visible(&e.path))
            .map(|e| e.path.to_string())
            .collect();
        if lines.is_empty() {
            if !files.backend.exists(&base).await.unwrap_or(true) {
                return Err(ToolOutput::error(format!("directory not found: {base}.")));
            }
            let mut text = format!("No files match {} under {base}.", quote(&args.pattern, 200));
            if found.truncated {
                text.push_str(" [the search stopped at its size limit; use a narrower path]");
            }
            return Ok(ToolOutput::text(text));
        }
        let budget = files.limits.output_budget().saturating_sub(NOTICE_RESERVE);
        let (mut text, shown) = cap_lines(&lines, files.limits.max_list_entries, budget);
        if shown < lines.len() || found.truncated {
            let total = if found.truncated {
                format!("more than {}", lines.len())
            } else {
                lines.len().to_string()
            };
            text.push_str(&format!(
                "\n\n[showing {shown} of {total} matching files; use a more specific pattern or path]"
            ));
        }
        Ok(ToolOutput::text(text))
    }
}
