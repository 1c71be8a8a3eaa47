//! `read_file`: a window of a text file, with line numbers, a header and an output budget.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use trellis_backend::{BackendError, ByteRange};

use crate::files::format::{backend_error, count, describe_binary, has_nul, parse_path, split_lines};
use crate::files::permissions::Access;
use crate::files::{FileAccess, Limits};
use crate::tool::{Tool, ToolOutput};
use crate::tool::{lenient, parse_args_described as parse_args};

/// Lines `read_file` shows when the call gives no `limit`.
pub const DEFAULT_READ_LIMIT: u64 = 100;

/// Characters kept free for the header within the output budget.
const HEADER_RESERVE: usize = 400;

const DESCRIPTION: &str = "Read a text file. The reply starts with a header such as \
`[lines 1-100 of 250; next offset: 100]`, then one row per line: the line number, a tab, and the \
line exactly as stored (the number and tab are not part of the file). Shows 100 lines by default; \
to read further, call again with `offset` set to the header's next offset. A very long line is split \
into pieces numbered 12, 12.1, 12.2, …. Binary files are reported, not shown.";

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ReadArgs {
    /// Absolute path of the file, e.g. `/notes/todo.md`.
    #[serde(alias = "path")]
    file_path: String,
    /// How many lines to skip before the first line shown (0 starts at the top).
    #[serde(default, deserialize_with = "lenient::u64")]
    offset: u64,
    /// Most lines to show.
    #[serde(default = "default_limit", deserialize_with = "lenient::u64")]
    #[schemars(range(min = 1))]
    limit: u64,
}

fn default_limit() -> u64 {
    DEFAULT_READ_LIMIT
}

file_tool! {
    /// `read_file`: see the crate docs for the output format.
    ReadFileTool, "read_file", ReadArgs, ReadOnly
}

impl ReadFileTool {
    async fn run(&self, args: Value, files: &FileAccess) -> Result<ToolOutput, ToolOutput> {
        let args: ReadArgs = parse_args(self.name(), &self.schema, args)?;
        let path = parse_path("file_path", &args.file_path)?;
        files.check(Access::Read, &path)?;
        if args.limit == 0 {
            return Err(ToolOutput::error("limit must be at least 1."));
        }
        let max = files.limits.max_file_bytes.max(1024);
        let read = files
            .backend
            .read(&path, Some(ByteRange::prefix(max)))
            .await
            .map_err(|e| {
                ToolOutput::error(match e {
                    BackendError::NotFound { .. } => {
                        format!("file not found: {path}. Use ls or glob to see which files exist.")
                    }
                    BackendError::IsADirectory { .. } => format!("{path} is a directory; use ls to list it."),
                    other => backend_error(&other),
                })
            })?;
        let complete = read.is_complete();
        let bytes = &read.bytes[..];
        let text = match std::str::from_utf8(bytes) {
            Ok(text) if !has_nul(bytes) => text,
            // A prefix may end inside a character: keep the valid part.
            Err(e) if !complete && e.error_len().is_none() && !has_nul(bytes) => {
                std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or_default()
            }
            _ => {
                return Ok(ToolOutput::text(format!(
                    "{path} is a binary file ({}, {} bytes); read_file shows text files only.",
                    describe_binary(bytes),
                    read.size
                )));
            }
        };
        let text = if complete {
            text
        } else {
            // Keep complete lines only (unless the prefix is one unfinished line).
            text.rfind('\n').map_or(text, |i| &text[..=i])
        };
        let lines = split_lines(text);
        if lines.is_empty() {
            return Ok(ToolOutput::text(format!("[{path} is empty]")));
        }
        let total = if complete {
            Total::Known(lines.len())
        } else {
            Total::AtLeast(lines.len())
        };
        let offset = usize::try_from(args.offset).unwrap_or(usize::MAX);
        if offset >= lines.len() {
            return Err(ToolOutput::error(match total {
                Total::Known(n) => format!(
                    "offset {offset} is past the end of {path}, which has {}; offsets run from 0 to {}.",
                    count(n, "line", "lines"),
                    n - 1
                ),
                Total::AtLeast(n) => format!(
                    "offset {offset} is beyond the part of {path} that read_file can reach: the first {} \
                     (the first {max} of its {} bytes).",
                    count(n, "line", "lines"),
                    read.size
                ),
            }));
        }
        let limit = usize::try_from(args.limit).unwrap_or(usize::MAX);
        let window = render_window(&lines, offset, limit, &files.limits);
        let mut notes = Vec::new();
        // The 0-based offset of the first line not shown (a partly shown line is skipped).
        let next_offset = if window.partial.is_some() {
            window.first
        } else {
            window.last
        };
        let at_end = next_offset >= lines.len();
        if at_end && complete && window.partial.is_none() && !text.ends_with('\n') {
            notes.push("no newline at end of file".to_owned());
        }
        if at_end && !complete {
            notes.push(format!(
                "read_file cannot show more: only the first {max} bytes of this {}-byte file are readable",
                read.size
            ));
        }
        if window.cut {
            notes.push(format!(
                "stopped early to stay within the {}-character output limit",
                files.limits.output_budget()
            ));
        }
        let next = (!at_end).then_some(next_offset);
        let header = match window.partial {
            Some((shown, chars)) => format!(
                "[line {} of {total}: only its first {shown} of {chars} characters fit in one reply; \
                 read_file cannot show the rest of this line{}]",
                window.first,
                next.map(|n| format!("; next offset: {n}")).unwrap_or_default()
            ),
            None => {
                let range = if window.first == window.last {
                    format!("line {}", window.first)
                } else {
                    format!("lines {}-{}", window.first, window.last)
                };
                let mut header = format!("[{range} of {total}");
                if let Some(n) = next {
                    header.push_str(&format!("; next offset: {n}"));
                }
                for note in notes {
                    header.push_str("; ");
                    header.push_str(&note);
                }
                header.push(']');
                header
            }
        };
        Ok(ToolOutput::text(format!("{header}\n{}", window.body)))
    }
}

#[derive(Debug, Clone, Copy)]
enum Total {
    Known(usize),
    AtLeast(usize),
}

impl std::fmt::Display for Total {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Known(n) => write!(f, "{n}"),
            Self::AtLeast(n) => write!(f, "{n}+"),
        }
    }
}

/// The rendered rows of a window.
#[derive(Debug)]
struct Window {
    body: String,
    /// 1-based number of the first line shown.
    first: usize,
    /// 1-based number of the last line shown completely (`first - 1` when none was).
    last: usize,
    /// Fewer lines than requested were shown, to stay within the budget.
    cut: bool,
    /// The first line was too long for the budget: (characters shown, characters in the line).
    partial: Option<(usize, usize)>,
}

fn pieces(chars: usize, chunk: usize) -> usize {
    chars.div_ceil(chunk).max(1)
}

fn marker_len(line_no: usize, pieces: usize) -> usize {
    let digits = |n: usize| n.to_string().len();
    if pieces > 1 {
        digits(line_no) + 1 + digits(pieces - 1)
    } else {
        digits(line_no)
    }
}

/// Render lines `offset..offset + limit` (0-based) of `lines`, within the output budget; a source
/// line is shown whole (all its pieces) or not at all, except a first line too long for any reply.
fn render_window(lines: &[&str], offset: usize, limit: usize, limits: &Limits) -> Window {
    let chunk = limits.chunk();
    let budget = limits.output_budget().saturating_sub(HEADER_RESERVE);
    let end = offset.saturating_add(limit).min(lines.len());
    let sizes: Vec<usize> = lines[offset..end].iter().map(|l| l.chars().count()).collect();
    let width = sizes
        .iter()
        .enumerate()
        .map(|(i, &c)| marker_len(offset + i + 1, pieces(c, chunk)))
        .max()
        .unwrap_or(1);
    let mut used = 0usize;
    let mut shown = 0usize;
    for &chars in &sizes {
        let cost = pieces(chars, chunk) * (width + 2) + chars;
        if used + cost > budget {
            break;
        }
        used += cost;
        shown += 1;
    }
    let first = offset + 1;
    if shown == 0 {
        return render_partial(lines[offset], first, sizes[0], chunk, budget);
    }
    let width = (0..shown)
        .map(|i| marker_len(first + i, pieces(sizes[i], chunk)))
        .max()
        .unwrap_or(1);
    let mut body = String::with_capacity(used);
    for (i, line) in lines[offset..offset + shown].iter().enumerate() {
        push_pieces(&mut body, line, first + i, width, chunk, usize::MAX);
    }
    body.truncate(body.trim_end_matches('\n').len());
    Window {
        body,
        first,
        last: offset + shown,
        cut: offset + shown < end,
        partial: None,
    }
}

fn render_partial(line: &str, line_no: usize, chars: usize, chunk: usize, budget: usize) -> Window {
    let width = marker_len(line_no, pieces(chars, chunk));
    // Whole pieces that fit, at least one (cut to the budget if even that is too long).
    let per_piece = chunk + width + 2;
    let whole = (budget / per_piece).max(1);
    let max_chars = if budget / per_piece == 0 {
        budget.saturating_sub(width + 2).max(1)
    } else {
        whole * chunk
    };
    let mut body = String::new();
    let shown = push_pieces(&mut body, line, line_no, width, chunk, max_chars);
    body.truncate(body.trim_end_matches('\n').len());
    Window {
        body,
        first: line_no,
        last: line_no - 1,
        cut: true,
        partial: Some((shown, chars)),
    }
}

/// Append the rows of one line (at most `max_chars` of its characters); returns the characters shown.
fn push_pieces(
    out: &mut String,
    line: &str,
    line_no: usize,
    width: usize,
    chunk: usize,
    max_chars: usize,
) -> usize {
    let mut shown = 0usize;
    let mut rest = line;
    let mut k = 0usize;
    loop {
        let take = chunk.min(max_chars - shown);
        let split = rest.char_indices().nth(take).map_or(rest.len(), |(i, _)| i);
        let (piece, tail) = rest.split_at(split);
        let marker = if k == 0 {
            line_no.to_string()
        } else {
            format!("{line_no}.{k}")
        };
        out.push_str(&format!("{marker:>width$}\t{piece}\n"));
        shown += piece.chars().count();
        rest = tail;
        k += 1;
        if rest.is_empty() || shown >= max_chars {
            return shown;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(budget: usize, chunk: usize) -> Limits {
        Limits {
            output_chars: budget,
            line_chunk_chars: chunk,
            ..Limits::default()
        }
    }

    #[test]
    fn numbers_and_continuations() {
        let long = "x".repeat(12);
        let lines = vec!["a", long.as_str(), "", "b"];
        let w = render_window(&lines, 0, 10, &limits(100_000, 5));
        assert_eq!(w.body, "  1\ta\n  2\txxxxx\n2.1\txxxxx\n2.2\txx\n  3\t\n  4\tb");
        assert_eq!((w.first, w.last, w.cut), (1, 4, false));
        let w = render_window(&lines, 1, 1, &limits(100_000, 5));
        assert_eq!(w.body, "  2\txxxxx\n2.1\txxxxx\n2.2\txx");
        assert_eq!((w.first, w.last), (2, 2));
    }

    #[test]
    fn budget_cuts_at_a_line_boundary() {
        let line = "y".repeat(600);
        let lines: Vec<&str> = std::iter::repeat_n(line.as_str(), 10).collect();
        let w = render_window(&lines, 0, 10, &limits(2_000, 5_000));
        // 1,600 characters of body budget: two 604-character rows fit, a third does not.
        assert_eq!((w.first, w.last, w.cut), (1, 2, true));
        assert!(w.partial.is_none());
    }

    #[test]
    fn a_line_longer_than_the_budget_is_shown_in_part() {
        let line = "z".repeat(10_000);
        let lines = vec![line.as_str(), "next"];
        let w = render_window(&lines, 0, 5, &limits(2_000, 500));
        assert_eq!(w.partial, Some((1_500, 10_000)));
        assert_eq!((w.first, w.last), (1, 0));
        assert!(w.body.starts_with("   1\t") && w.body.contains("\n 1.2\t") && !w.body.contains("1.3\t"));
        assert!(w.body.chars().count() <= 1_600);
    }
}
