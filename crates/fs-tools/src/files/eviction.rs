//! Large-result eviction: a tool result too long for the conversation is saved to the backend and
//! replaced by a preview and the path where the whole text can be read.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use bytes::Bytes;
use serde_json::Value;
use trellis_backend::{VirtualPath, WriteMode};

use super::access::FileAccess;
use super::format::{backend_error, count, split_lines, truncate_chars};
use crate::tool::{Tool, ToolContent, ToolContext, ToolError, ToolOutput};

/// Directory evicted results are written to.
pub const LARGE_RESULTS_DIR: &str = "/large_tool_results";

/// Lines shown from each end of an evicted result.
const PREVIEW_LINES: usize = 5;
/// Characters shown of each previewed line.
const PREVIEW_LINE_CHARS: usize = 1_000;
/// Longest id taken from a tool-call id.
const MAX_ID_CHARS: usize = 128;

/// Evict `output` of `tool` when it is too large.
///
/// Nothing happens when the tool [bounds its own output](Tool::bounds_own_output), when eviction is
/// disabled ([`Limits::evict_over_chars`] is `None`) or when the text is within the limit. Otherwise
/// the whole text is written (overwriting) to `/large_tool_results/<id>` in `files`' backend,
/// where `<id>` is `call_id` with every character other than ASCII letters, digits, `-` and `_`
/// replaced by `_` (or a generated id when there is none), and the content becomes a notice with the
/// path, the first and last lines (numbered as `read_file` numbers them) and how many lines were
/// left out. Only the text pieces count and are replaced; images, `is_error`, structured content and
/// slot updates are kept. If the write fails, the preview is
/// returned with a note that the full text could not be saved. A failed call's notice starts with
/// `Error: ` like every error text.
///
/// The write is the harness's, not the model's: permission rules do not apply to it.
///
/// [`Limits::evict_over_chars`]: crate::Limits::evict_over_chars
pub async fn evict_large_output(
    tool: &dyn Tool,
    output: ToolOutput,
    files: &FileAccess,
    call_id: &str,
) -> ToolOutput {
    if tool.bounds_own_output() {
        return output;
    }
    evict_if_large(tool.name(), output, files, call_id).await
}

/// Evict `output` when it is over [`Limits::evict_over_chars`], whatever tool produced it: the
/// mechanism behind [`evict_large_output`], for callers (such as a middleware wrapping tools that are
/// not file tools) that have no [`Tool`] at hand. `tool_name` is only used in logs.
///
/// [`Limits::evict_over_chars`]: crate::Limits::evict_over_chars
pub async fn evict_if_large(
    tool_name: &str,
    output: ToolOutput,
    files: &FileAccess,
    call_id: &str,
) -> ToolOutput {
    let Some(limit) = files.limits.evict_over_chars else {
        return output;
    };
    let text = output.text_content();
    if text.len() <= limit {
        return output;
    }
    let chars = text.chars().count();
    if chars <= limit {
        return output;
    }
    let preview = preview(&text);
    let path = result_path(call_id);
    let saved = files
        .backend
        .write(&path, Bytes::from(text), WriteMode::Overwrite)
        .await;
    let notice = match saved {
        Ok(_) => format!(
            "[This result has {chars} characters, too many to show here, so it was saved to {path}. \
             Page through it with read_file (offset and limit) or search it with grep.]\n{preview}"
        ),
        Err(e) => {
            tracing::warn!(tool = tool_name, error = %e, "could not save a large tool result");
            format!(
                "[This result has {chars} characters, too many to show here, and saving it failed: {} \
                 Only this preview is available.]\n{preview}",
                backend_error(&e)
            )
        }
    };
    let notice = if output.is_error {
        format!("Error: {notice}")
    } else {
        notice
    };
    // Images stay; the text is replaced by the notice and preview.
    let mut output = output;
    output.content.retain(|piece| piece.as_text().is_none());
    output.content.insert(0, ToolContent::text(notice));
    output
}

/// A tool wrapped so that its large results are evicted to `files` (see [`evict_large_output`]).
#[derive(Debug, Clone)]
pub struct EvictLargeOutput {
    inner: Arc<dyn Tool>,
    files: FileAccess,
}

impl EvictLargeOutput {
    /// Wrap `inner`; evicted results go to `files`' backend, under its limits.
    pub fn new(inner: Arc<dyn Tool>, files: FileAccess) -> Self {
        Self { inner, files }
    }

    /// The wrapped tool.
    pub fn inner(&self) -> &Arc<dyn Tool> {
        &self.inner
    }
}

#[async_trait]
impl Tool for EvictLargeOutput {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn description(&self) -> &str {
        self.inner.description()
    }

    fn parameters(&self) -> &Value {
        self.inner.parameters()
    }

    /// Always true: whatever the inner tool returns is bounded by eviction.
    fn bounds_own_output(&self) -> bool {
        true
    }

    /// The inner tool's: eviction only writes the thread's own result file, the same each time.
    fn side_effects(&self) -> crate::tool::SideEffects {
        self.inner.side_effects()
    }

    async fn call(&self, args: Value, cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let output = self.inner.call(args, cx).await.unwrap_or_else(ToolOutput::from);
        let files = match self.files.for_call(cx) {
            Ok(files) => files,
            Err(refused) => return Ok(refused),
        };
        Ok(evict_large_output(self.inner.as_ref(), output, &files, cx.call_id()).await)
    }
}

fn result_path(call_id: &str) -> VirtualPath {
    let from_call: String = call_id
        .chars()
        .take(MAX_ID_CHARS)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let id = if from_call.is_empty() {
        generated_id()
    } else {
        from_call
    };
    VirtualPath::root()
        .join_relative(&format!("{LARGE_RESULTS_DIR}/{id}"))
        .unwrap_or_else(|_| VirtualPath::root())
}

fn generated_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("result-{nanos:x}-{}", COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// The first and last [`PREVIEW_LINES`] lines, numbered like `read_file` rows.
fn preview(text: &str) -> String {
    let lines = split_lines(text);
    let row = |i: usize| {
        let (shown, cut) = truncate_chars(lines[i], PREVIEW_LINE_CHARS);
        if cut {
            let more = lines[i].chars().count() - PREVIEW_LINE_CHARS;
            format!("{}\t{shown} … [{more} more characters]", i + 1)
        } else {
            format!("{}\t{shown}", i + 1)
        }
    };
    if lines.len() <= 2 * PREVIEW_LINES {
        return (0..lines.len()).map(row).collect::<Vec<_>>().join("\n");
    }
    let omitted = lines.len() - 2 * PREVIEW_LINES;
    let mut rows: Vec<String> = (0..PREVIEW_LINES).map(row).collect();
    rows.push(format!(
        "… [{} left out; read_file with offset {PREVIEW_LINES} continues from here] …",
        count(omitted, "line", "lines")
    ));
    rows.extend((lines.len() - PREVIEW_LINES..lines.len()).map(row));
    rows.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preview_shape() {
        let text: String = (1..=30).map(|i| format!("line {i}\n")).collect();
        let p = preview(&text);
        assert!(p.starts_with("1\tline 1\n2\tline 2"), "{p}");
        assert!(p.contains("… [20 lines left out; read_file with offset 5 continues from here] …"));
        assert!(p.ends_with("30\tline 30"), "{p}");
        let long = "x".repeat(1_500);
        assert_eq!(
            preview(&long),
            format!("1\t{} … [500 more characters]", "x".repeat(1_000))
        );
        assert_eq!(preview("a\nb"), "1\ta\n2\tb");
    }
}
