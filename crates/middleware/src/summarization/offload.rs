//! Stage 1: a lighter view of the conversation for one request. Stored messages are never changed.
//!
//! * Long string arguments of old calls to the file-writing tools (`write_file`, `edit_file` by
//!   default) are shortened: the file holds the text, the conversation does not need it twice.
//! * Tool results whose estimate is over the limit are replaced by a notice naming the tool, the
//!   size, the path where the full text was written, and a preview. The full text is written once
//!   per tool call id (recorded in the thread's state), so later requests reuse the file.

use std::collections::BTreeMap;

use crate::backend::{Backend, VirtualPath, WriteMode};
use bytes::Bytes;
use futures::StreamExt;
use serde_json::Value;

use crate::runtime::message::{ContentBlock, Message, ToolMessage};
use crate::runtime::message_list::Messages;

use super::estimate::TokenEstimator;

/// Characters kept at the start of a shortened argument.
pub const ARG_HEAD_CHARS: usize = 100;
/// Offload files written at once.
const WRITE_CONCURRENCY: usize = 4;

/// Which messages stage 1 may change.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    /// First message shown (the ones before are summarized and not sent).
    pub(crate) start: usize,
    /// Arguments of calls in AI messages before this index are shortened.
    pub(crate) old_before: usize,
    /// Tool results at or after this index are left whole: the model has not seen them yet.
    pub(crate) protect_from: usize,
}

/// The settings stage 1 needs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits<'a> {
    pub(crate) result_tokens: u64,
    pub(crate) arg_max_chars: usize,
    pub(crate) trim_tools: &'a [String],
}

/// What one pass of stage 1 did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Report {
    /// Tool results replaced by a notice in this request.
    pub(crate) offloaded: usize,
    /// Offload files written by this pass (the others were written by earlier requests).
    pub(crate) written: usize,
    /// Offload files that could not be written (those results stay whole).
    pub(crate) failed: usize,
    /// Arguments shortened.
    pub(crate) args_trimmed: usize,
}

/// The text of a tool result: its text blocks, one per line.
pub(crate) fn result_text(message: &ToolMessage) -> String {
    let texts: Vec<&str> = message.content.iter().filter_map(ContentBlock::as_text).collect();
    texts.join("\n")
}

/// Where the full text of the result answering `call_id` is written, under `dir`.
pub(crate) fn result_path(dir: &VirtualPath, call_id: &str) -> Option<VirtualPath> {
    dir.join(&format!("{}.txt", file_stem(call_id))).ok()
}

/// A file name for a tool call id: ASCII letters, digits, `-` and `_` kept, anything else `_`, at most
/// 96 characters; when that changed the id, a hash of the id is appended so distinct ids never share
/// a file.
fn file_stem(call_id: &str) -> String {
    let mut stem: String = call_id
        .chars()
        .take(96)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if stem != call_id || stem.is_empty() {
        stem.push_str(&format!("-{:016x}", fnv1a(call_id.as_bytes())));
    }
    stem
}

/// FNV-1a, 64 bits: stable across builds and platforms.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// The first `max_bytes` of `text` at most, cut at a line end when one falls in the second half of
/// the budget, else at a character boundary.
pub(crate) fn preview(text: &str, max_bytes: usize) -> &str {
    let text = text.trim_end();
    if text.len() <= max_bytes {
        return text;
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let head = &text[..end];
    match head.rfind('\n') {
        Some(nl) if nl >= max_bytes / 2 => &head[..nl],
        _ => head,
    }
}

/// The notice that replaces an offloaded result.
pub(crate) fn notice(tool: &str, text: &str, tokens: u64, path: &str, preview_bytes: usize) -> String {
    let chars = text.chars().count();
    let shown = preview(text, preview_bytes);
    let rest = chars - shown.chars().count();
    let mut out = format!(
        "[Tool result stored outside the conversation]\n\
         Tool: {tool}\n\
         Size: {chars} characters, about {tokens} tokens\n\
         Full text: {path}\n\
         Read that file with read_file (page with offset and limit) when you need more than the preview."
    );
    if !shown.is_empty() {
        out.push_str("\n\nPreview:\n");
        out.push_str(shown);
    }
    if rest > 0 {
        out.push_str(&format!("\n[... {rest} more characters in the file]"));
    }
    out
}

/// Shorten long string arguments of `args`; returns how many were shortened.
fn trim_args(args: &mut Value, max_chars: usize) -> usize {
    let shorten = |s: &mut String| {
        let chars = s.chars().count();
        if chars <= max_chars {
            return false;
        }
        let head: String = s.chars().take(ARG_HEAD_CHARS).collect();
        *s = format!(
            "{head}... [{} more characters not shown here; the file has the full text]",
            chars - ARG_HEAD_CHARS
        );
        true
    };
    match args {
        Value::String(s) => usize::from(shorten(s)),
        Value::Object(map) => map
            .values_mut()
            .filter_map(|v| match v {
                Value::String(s) => Some(s),
                _ => None,
            })
            .map(|s| usize::from(shorten(s)))
            .sum(),
        _ => 0,
    }
}

fn needs_trim(args: &Value, max_chars: usize) -> bool {
    let long = |s: &str| s.len() > max_chars && s.chars().count() > max_chars;
    match args {
        Value::String(s) => long(s),
        Value::Object(map) => map.values().any(|v| v.as_str().is_some_and(long)),
        _ => false,
    }
}

/// Run stage 1 over `messages` (a request copy): write offload files not yet written (recording
/// them in `records`, call id → path) and replace results and arguments in the copy.
pub(crate) async fn apply(
    messages: &mut Messages,
    plan: Plan,
    limits: Limits<'_>,
    estimator: &dyn TokenEstimator,
    backend: &dyn Backend,
    dir: &VirtualPath,
    records: &mut BTreeMap<String, String>,
) -> Report {
    let mut report = Report::default();

    // Arguments of old calls to file-writing tools.
    for i in plan.start..plan.old_before.min(messages.len()) {
        let needed = messages[i].as_ai().is_some_and(|ai| {
            ai.calls()
                .any(|c| limits.trim_tools.contains(&c.name) && needs_trim(&c.args, limits.arg_max_chars))
        });
        if !needed {
            continue;
        }
        if let Some(Message::Ai(ai)) = messages.get_mut(i) {
            for call in ai.calls_mut() {
                if limits.trim_tools.contains(&call.name) {
                    report.args_trimmed += trim_args(&mut call.args, limits.arg_max_chars);
                }
            }
        }
    }

    // Tool results over the limit.
    let mut over: Vec<(usize, String, u64)> = Vec::new();
    for i in plan.start..plan.protect_from.min(messages.len()) {
        let Some(tool) = messages[i].as_tool() else {
            continue;
        };
        if tool.call_id.is_empty() {
            continue;
        }
        let text = result_text(tool);
        let tokens = estimator.text(&text);
        if tokens > limits.result_tokens {
            over.push((i, text, tokens));
        }
    }
    let writes: Vec<(String, VirtualPath, Bytes)> = over
        .iter()
        .filter_map(|(i, text, _)| {
            let id = messages[*i].as_tool()?.call_id.clone();
            if records.contains_key(&id) {
                return None;
            }
            let path = result_path(dir, &id)?;
            Some((id, path, Bytes::from(text.clone())))
        })
        .collect();
    let results: Vec<(String, VirtualPath, bool)> = futures::stream::iter(writes)
        .map(|(id, path, bytes)| async move {
            let ok = match backend.write(&path, bytes, WriteMode::Overwrite).await {
                Ok(_) => true,
                Err(e) => {
                    tracing::warn!(path = %path, error = %e, "could not save a tool result for summarization");
                    false
                }
            };
            (id, path, ok)
        })
        .buffer_unordered(WRITE_CONCURRENCY)
        .collect()
        .await;
    for (id, path, ok) in results {
        if ok {
            records.insert(id, path.to_string());
            report.written += 1;
        } else {
            report.failed += 1;
        }
    }
    let preview_bytes = usize::try_from(limits.result_tokens.saturating_mul(4)).unwrap_or(usize::MAX);
    for (i, text, tokens) in over {
        let Some(Message::Tool(tool)) = messages.get_mut(i) else {
            continue;
        };
        let Some(path) = records.get(&tool.call_id) else {
            continue;
        };
        let replaced = notice(&tool.name, &text, tokens, path, preview_bytes);
        tool.content.retain(|b| b.as_text().is_none());
        tool.content.insert(0, ContentBlock::text(replaced));
        report.offloaded += 1;
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn file_stems_are_safe_and_distinct() {
        assert_eq!(file_stem("call_01-AB"), "call_01-AB");
        let a = file_stem("a.b");
        let b = file_stem("a_b");
        assert!(a.starts_with("a_b-") && a != b, "{a} {b}");
        assert!(file_stem("").starts_with('-'));
        assert!(file_stem(&"x".repeat(300)).len() < 120);
    }

    #[test]
    fn previews_cut_at_line_ends_or_char_boundaries() {
        assert_eq!(preview("short\n", 100), "short");
        assert_eq!(preview("aaaa\nbbbb\ncccc", 12), "aaaa\nbbbb");
        assert_eq!(preview("ééééé", 3), "é");
        assert_eq!(preview("abc", 0), "");
    }

    #[test]
    fn long_string_arguments_are_shortened() {
        let mut args = json!({"file_path": "/a", "content": "x".repeat(3000), "n": 1});
        assert!(needs_trim(&args, 2000));
        assert_eq!(trim_args(&mut args, 2000), 1);
        let content = args["content"].as_str().unwrap_or_default();
        assert!(content.starts_with(&"x".repeat(ARG_HEAD_CHARS)));
        assert!(content.contains("2900 more characters"));
        assert_eq!(args["file_path"], "/a");
        assert!(!needs_trim(&args, 2000));
    }
}
