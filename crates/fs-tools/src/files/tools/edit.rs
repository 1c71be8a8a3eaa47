//! `edit_file`: exact string replacement with a version-checked write.

use bytes::Bytes;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use trellis_backend::{BackendError, BackendExt, ConflictKind, Version, VirtualPath, WriteMode};

use crate::files::FileAccess;
use crate::files::format::{backend_error, count, has_nul, parse_path, quote, split_lines};
use crate::files::permissions::Access;
use crate::tool::{Tool, ToolOutput};
use crate::tool::{lenient, parse_args_described as parse_args};

const DESCRIPTION: &str = "Replace exact text in a file. `old_string` must match the file exactly — \
whitespace and indentation included, without read_file's line numbers — and must occur exactly once, \
unless `replace_all` is true. Read the file first so you copy the current text. If the file changes \
at the same moment, the edit is re-applied to the new content when that is still unambiguous; \
otherwise it is reported as a conflict and nothing is written.";

/// Line numbers listed in a message, at most.
const MAX_LISTED_LINES: usize = 10;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct EditArgs {
    /// Absolute path of the file, e.g. `/src/main.rs`.
    #[serde(alias = "path")]
    file_path: String,
    /// The exact text to replace.
    old_string: String,
    /// The text to put in its place.
    new_string: String,
    /// Replace every occurrence instead of requiring exactly one.
    #[serde(default, deserialize_with = "lenient::bool")]
    replace_all: bool,
}

file_tool! {
    /// `edit_file`: replaces exact text; see the module docs for the concurrency contract.
    ///
    /// The file is read with its version and written back only if that version is still current
    /// ([`WriteMode::IfVersion`]). When another writer got there first, the file is read once more and
    /// the edit re-applied if `old_string` still matches unambiguously; a second conflict, or a match
    /// that is no longer unambiguous, is reported and nothing is written. So no write is ever lost, and a
    /// reported success means the edit is in the file. (A backend without version tags gets a plain
    /// overwrite.)
    EditFileTool, "edit_file", EditArgs, External
}

/// A successful plan: the new content, and the 1-based lines where replacements start.
struct Planned {
    content: String,
    lines: Vec<usize>,
}

/// Why an edit cannot be applied to some content.
enum Problem {
    NotFound,
    Ambiguous { lines: Vec<usize> },
}

impl EditFileTool {
    async fn run(&self, args: Value, files: &FileAccess) -> Result<ToolOutput, ToolOutput> {
        let args: EditArgs = parse_args(self.name(), &self.schema, args)?;
        let path = parse_path("file_path", &args.file_path)?;
        files.check(Access::Write, &path)?;
        files.check(Access::Read, &path)?;
        if args.old_string.is_empty() {
            return Err(ToolOutput::error(
                "old_string is empty. To create a file, use write_file; to insert text, put some \
                 neighbouring text in old_string and repeat it, with the addition, in new_string.",
            ));
        }
        if args.old_string == args.new_string {
            return Err(ToolOutput::error(
                "old_string and new_string are identical, so there is nothing to change.",
            ));
        }
        let (content, version) = read_text(files, &path)
            .await
            .map_err(|e| read_error(e, &path, files))?;
        let planned = plan(&content, &args.old_string, &args.new_string, args.replace_all)
            .map_err(|p| problem_message(&p, &path, &content, &args.old_string, false))?;
        match write(files, &path, planned.content, version).await {
            Ok(()) => return Ok(success(&path, &planned.lines, false)),
            Err(BackendError::Conflict {
                kind: ConflictKind::VersionMismatch,
                ..
            }) => {}
            Err(e) => return Err(ToolOutput::error(backend_error(&e))),
        }
        // Someone else wrote in between: re-apply once to the fresh content.
        let (content, version) = match read_text(files, &path).await {
            Ok(fresh) => fresh,
            Err(ReadError::Backend(BackendError::NotFound { .. })) => {
                return Err(ToolOutput::error(format!(
                    "conflict: {path} was deleted by someone else while this edit was being made; nothing \
                     was written."
                )));
            }
            Err(e) => return Err(read_error(e, &path, files)),
        };
        let planned = plan(&content, &args.old_string, &args.new_string, args.replace_all)
            .map_err(|p| problem_message(&p, &path, &content, &args.old_string, true))?;
        match write(files, &path, planned.content, version).await {
            Ok(()) => Ok(success(&path, &planned.lines, true)),
            Err(BackendError::Conflict { .. }) => Err(ToolOutput::error(format!(
                "conflict: {path} is being changed by someone else right now, and this edit was not \
                 applied. Read the file again and retry."
            ))),
            Err(e) => Err(ToolOutput::error(backend_error(&e))),
        }
    }
}

/// Why a file could not be read as text.
enum ReadError {
    Backend(BackendError),
    Binary,
}

/// Read a file as text, with its version.
async fn read_text(files: &FileAccess, path: &VirtualPath) -> Result<(String, Option<Version>), ReadError> {
    let read = files
        .backend
        .read_limited(path, files.limits.max_file_bytes)
        .await
        .map_err(ReadError::Backend)?;
    if has_nul(&read.bytes) {
        return Err(ReadError::Binary);
    }
    let text = String::from_utf8(read.bytes.to_vec()).map_err(|_| ReadError::Binary)?;
    Ok((text, read.version))
}

fn read_error(err: ReadError, path: &VirtualPath, files: &FileAccess) -> ToolOutput {
    ToolOutput::error(match err {
        ReadError::Binary => format!("{path} is a binary file; edit_file changes text files only."),
        ReadError::Backend(BackendError::NotFound { .. }) => {
            format!("file not found: {path}. To create it, use write_file.")
        }
        ReadError::Backend(BackendError::IsADirectory { .. }) => {
            format!("{path} is a directory; edit_file changes files.")
        }
        ReadError::Backend(BackendError::TooLarge { size, .. }) => format!(
            "{path} is too large to edit ({size} bytes; edit_file handles files up to {} bytes).",
            files.limits.max_file_bytes
        ),
        ReadError::Backend(other) => backend_error(&other),
    })
}

async fn write(
    files: &FileAccess,
    path: &VirtualPath,
    content: String,
    version: Option<Version>,
) -> Result<(), BackendError> {
    let mode = version.map_or(WriteMode::Overwrite, WriteMode::IfVersion);
    files
        .backend
        .write(path, Bytes::from(content), mode)
        .await
        .map(|_| ())
}

/// Apply the replacement to `content`, or say why it cannot be applied. When `old` has no match but
/// the file uses CRLF line endings and `old` uses bare `\n`, the CRLF form of both strings is used.
fn plan(content: &str, old: &str, new: &str, replace_all: bool) -> Result<Planned, Problem> {
    let mut starts: Vec<usize> = content.match_indices(old).map(|(i, _)| i).collect();
    let (old, new) =
        if starts.is_empty() && content.contains("\r\n") && old.contains('\n') && !old.contains('\r') {
            let crlf_old = old.replace('\n', "\r\n");
            starts = content.match_indices(crlf_old.as_str()).map(|(i, _)| i).collect();
            let crlf_new = if new.contains('\r') {
                new.to_owned()
            } else {
                new.replace('\n', "\r\n")
            };
            (crlf_old, crlf_new)
        } else {
            (old.to_owned(), new.to_owned())
        };
    let lines = line_numbers(content, &starts);
    match starts.len() {
        0 => Err(Problem::NotFound),
        1 => Ok(Planned {
            content: content.replacen(&old, &new, 1),
            lines,
        }),
        _ if replace_all => Ok(Planned {
            content: content.replace(&old, &new),
            lines,
        }),
        _ => Err(Problem::Ambiguous { lines }),
    }
}

/// 1-based line numbers of byte offsets (sorted ascending) in `content`.
fn line_numbers(content: &str, starts: &[usize]) -> Vec<usize> {
    let mut out = Vec::with_capacity(starts.len());
    let (mut line, mut pos) = (1usize, 0usize);
    for &start in starts {
        line += content.as_bytes()[pos..start]
            .iter()
            .filter(|b| **b == b'\n')
            .count();
        pos = start;
        out.push(line);
    }
    out
}

/// `3, 17 and 40` (at most [`MAX_LISTED_LINES`], then `and N more`).
fn list_lines(lines: &[usize]) -> String {
    let mut shown: Vec<String> = lines
        .iter()
        .take(MAX_LISTED_LINES)
        .map(usize::to_string)
        .collect();
    let more = lines.len().saturating_sub(MAX_LISTED_LINES);
    if more > 0 {
        return format!("{} and {more} more", shown.join(", "));
    }
    match shown.pop() {
        Some(last) if !shown.is_empty() => format!("{} and {last}", shown.join(", ")),
        Some(last) => last,
        None => String::new(),
    }
}

fn success(path: &VirtualPath, lines: &[usize], reapplied: bool) -> ToolOutput {
    let mut unique = lines.to_vec();
    unique.dedup();
    let at = if unique.len() == 1 { "line" } else { "lines" };
    let mut text = format!(
        "Replaced {} in {path} (at {at} {}).",
        count(lines.len(), "occurrence", "occurrences"),
        list_lines(&unique)
    );
    if reapplied {
        text.push_str(
            " The file had been changed by someone else meanwhile; the edit was applied to the new content.",
        );
    }
    ToolOutput::text(text)
}

fn problem_message(
    problem: &Problem,
    path: &VirtualPath,
    content: &str,
    old: &str,
    after_conflict: bool,
) -> ToolOutput {
    let body = match problem {
        Problem::Ambiguous { lines } => format!(
            "old_string occurs {} times in {path} (at lines {}). Include more of the surrounding text so it \
             matches exactly once, or pass replace_all: true to replace every occurrence.",
            lines.len(),
            list_lines(lines)
        ),
        Problem::NotFound => not_found(path, content, old),
    };
    if after_conflict {
        ToolOutput::error(format!(
            "conflict: {path} was changed by someone else while this edit was being made, and the edit no \
             longer applies cleanly, so nothing was written. Now: {body}"
        ))
    } else {
        ToolOutput::error(body)
    }
}

fn not_found(path: &VirtualPath, content: &str, old: &str) -> String {
    let mut text = format!("old_string was not found in {path}.");
    // The file's last line has no line break, but old_string ends with one.
    if let Some(stripped) = old.strip_suffix('\n').map(|s| s.strip_suffix('\r').unwrap_or(s))
        && !stripped.is_empty()
        && !content.ends_with('\n')
        && content.ends_with(stripped)
    {
        text.push_str(&format!(
            " It ends with a line break, but {path} does not end with one: remove the final line break \
             from old_string (and from new_string, if it ends with one too)."
        ));
        return text;
    }
    if looks_numbered(old) {
        text.push_str(
            " Its lines seem to start with read_file's line numbers (a number and a tab); those are not part \
             of the file, so leave them out.",
        );
        return text;
    }
    let first = old.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
    if first.chars().count() >= 3 {
        let found: Vec<usize> = split_lines(content)
            .iter()
            .enumerate()
            .filter(|(_, l)| l.contains(first))
            .map(|(i, _)| i + 1)
            .collect();
        if !found.is_empty() {
            let where_ = format!(
                "at line{} {}",
                if found.len() == 1 { "" } else { "s" },
                list_lines(&found)
            );
            if old.trim().lines().count() <= 1 {
                text.push_str(&format!(
                    " Text matching {} apart from surrounding whitespace is {where_}: copy it exactly, \
                     spaces and indentation included.",
                    quote(first, 80)
                ));
            } else {
                text.push_str(&format!(
                    " Its first line, {}, is {where_}, but what follows differs: read that part of the file \
                     again and copy it exactly.",
                    quote(first, 80)
                ));
            }
            return text;
        }
    }
    text.push_str(" Read the file again and copy the text exactly, whitespace included.");
    text
}

/// True when every non-empty line of `s` starts like a read_file row: optional spaces, a line number
/// (maybe `12.1`), a tab.
fn looks_numbered(s: &str) -> bool {
    let mut any = false;
    for line in s.lines().filter(|l| !l.trim().is_empty()) {
        let rest = line.trim_start_matches(' ');
        let digits = rest.len()
            - rest
                .trim_start_matches(|c: char| c.is_ascii_digit() || c == '.')
                .len();
        if digits == 0 || !rest[digits..].starts_with('\t') || !rest.starts_with(|c: char| c.is_ascii_digit())
        {
            return false;
        }
        any = true;
    }
    any
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans() {
        let p = plan("a b a", "a", "x", false);
        assert!(matches!(p, Err(Problem::Ambiguous { ref lines }) if lines == &[1, 1]));
        let p = plan("a b a", "a", "x", true).ok().map(|p| p.content);
        assert_eq!(p.as_deref(), Some("x b x"));
        assert!(matches!(plan("abc", "z", "y", true), Err(Problem::NotFound)));
        let p = plan("one\r\ntwo\r\nthree\r\n", "one\ntwo", "1\n2", false)
            .ok()
            .map(|p| p.content);
        assert_eq!(p.as_deref(), Some("1\r\n2\r\nthree\r\n"));
        assert_eq!(line_numbers("a\nb\nc\nb", &[2, 6]), vec![2, 4]);
        assert_eq!(list_lines(&[3, 17, 40]), "3, 17 and 40");
        assert_eq!(
            list_lines(&(1..=12).collect::<Vec<_>>()),
            "1, 2, 3, 4, 5, 6, 7, 8, 9, 10 and 2 more"
        );
    }

    #[test]
    fn numbered_detection() {
        assert!(looks_numbered("  12\tfoo\n  13\tbar"));
        assert!(looks_numbered("7.1\tx"));
        assert!(!looks_numbered("foo\n  13\tbar"));
        assert!(!looks_numbered("2024 was a year"));
    }
}
