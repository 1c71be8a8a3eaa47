//! Text helpers shared by the tools: parsing path arguments, wording backend errors, splitting lines
//! and capping listings.

use trellis_backend::{BackendError, ConflictKind, PathError, VirtualPath};

use crate::tool::ToolOutput;

/// Parse a path argument named `arg`, or the error the model sees.
pub(crate) fn parse_path(arg: &str, raw: &str) -> Result<VirtualPath, ToolOutput> {
    VirtualPath::parse(raw).map_err(|e| {
        let why = match e {
            PathError::Empty => "it is empty".to_owned(),
            other => other.to_string(),
        };
        ToolOutput::error(format!(
            "invalid {arg} {}: {why}. Paths are absolute and `/`-separated, like /notes/todo.md.",
            quote(raw, 200)
        ))
    })
}

/// `raw` in double quotes with escapes, cut to `max` characters.
pub(crate) fn quote(raw: &str, max: usize) -> String {
    let (cut, truncated) = truncate_chars(raw, max);
    if truncated {
        format!("{:?}…", cut)
    } else {
        format!("{cut:?}")
    }
}

/// The first `max` characters of `s`, and whether anything was cut.
pub(crate) fn truncate_chars(s: &str, max: usize) -> (&str, bool) {
    match s.char_indices().nth(max) {
        Some((i, _)) => (&s[..i], true),
        None => (s, false),
    }
}

/// The model-facing text of a backend error (without the `Error: ` prefix).
pub(crate) fn backend_error(err: &BackendError) -> String {
    match err {
        BackendError::NotFound { path } => format!("{path} does not exist."),
        BackendError::IsADirectory { path } => format!("{path} is a directory, not a file."),
        BackendError::NotADirectory { path } => {
            format!("{path} is a file, or a file stands where one of its parent directories should be.")
        }
        BackendError::PermissionDenied { path, .. } => format!("the storage refused access to {path}."),
        BackendError::InvalidPath { path, reason } => {
            format!("the storage refused the path {path}: {reason}.")
        }
        BackendError::Conflict {
            path,
            kind: ConflictKind::AlreadyExists,
        } => format!("{path} already exists."),
        BackendError::Conflict { path, .. } => {
            format!("{path} was changed by someone else at the same time.")
        }
        BackendError::TooLarge { path, size, limit } => {
            format!("{path} is too large ({size} bytes; the limit is {limit}).")
        }
        BackendError::Unavailable { path, source } => {
            format!("the storage is temporarily unavailable ({path}: {source}); try again shortly.")
        }
        BackendError::Timeout { path, source } => {
            format!("the storage did not answer in time ({path}: {source}); try again shortly.")
        }
        other => format!("{other}."),
    }
}

/// The lines of a text: split on `\n`, one trailing `\r` removed from each line, and no empty last
/// line for a text that ends with `\n` (so `"a\nb\n"` has two lines and `""` none). Line `i` here is
/// line `i + 1` everywhere the tools show line numbers, `grep` included.
pub(crate) fn split_lines(text: &str) -> Vec<&str> {
    if text.is_empty() {
        return Vec::new();
    }
    let body = text.strip_suffix('\n').unwrap_or(text);
    body.split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect()
}

/// `1 line`, `2 lines`.
pub(crate) fn count(n: usize, singular: &str, plural: &str) -> String {
    if n == 1 {
        format!("{n} {singular}")
    } else {
        format!("{n} {plural}")
    }
}

/// Join `lines` with newlines, keeping at most `max_entries` lines and `budget` characters (counting
/// the newlines). Returns the text and how many lines it holds.
pub(crate) fn cap_lines(lines: &[String], max_entries: usize, budget: usize) -> (String, usize) {
    let mut out = String::new();
    let mut used = 0usize;
    let mut shown = 0usize;
    for line in lines.iter().take(max_entries) {
        let cost = line.chars().count() + usize::from(shown > 0);
        if used + cost > budget {
            break;
        }
        if shown > 0 {
            out.push('\n');
        }
        out.push_str(line);
        used += cost;
        shown += 1;
    }
    (out, shown)
}

/// What a bytes value looks like when it is not text: a short description for the model.
pub(crate) fn describe_binary(bytes: &[u8]) -> &'static str {
    const SIGNATURES: &[(&[u8], &str)] = &[
        (b"\x89PNG\r\n\x1a\n", "PNG image"),
        (b"\xff\xd8\xff", "JPEG image"),
        (b"GIF87a", "GIF image"),
        (b"GIF89a", "GIF image"),
        (b"%PDF-", "PDF document"),
        (b"PK\x03\x04", "ZIP archive (or an Office document)"),
        (b"\x1f\x8b", "gzip archive"),
        (b"\x7fELF", "ELF executable"),
        (b"\0asm", "WebAssembly module"),
        (b"SQLite format 3\0", "SQLite database"),
    ];
    if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        return "WebP image";
    }
    SIGNATURES
        .iter()
        .find(|(magic, _)| bytes.starts_with(magic))
        .map_or("binary data", |(_, name)| name)
}

/// True when `bytes` should be treated as binary: a NUL byte in the first 8 KiB.
pub(crate) fn has_nul(bytes: &[u8]) -> bool {
    bytes.iter().take(8192).any(|b| *b == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines() {
        assert!(split_lines("").is_empty());
        assert_eq!(split_lines("a"), vec!["a"]);
        assert_eq!(split_lines("a\n"), vec!["a"]);
        assert_eq!(split_lines("a\r\nb\r\n"), vec!["a", "b"]);
        assert_eq!(split_lines("a\n\n"), vec!["a", ""]);
        assert_eq!(split_lines("\n"), vec![""]);
        assert_eq!(split_lines("a\rb"), vec!["a\rb"]);
    }

    #[test]
    fn caps() {
        let lines: Vec<String> = (0..10).map(|i| format!("/f{i}")).collect();
        assert_eq!(cap_lines(&lines, 3, 1000), ("/f0\n/f1\n/f2".to_owned(), 3));
        assert_eq!(cap_lines(&lines, 100, 7), ("/f0\n/f1".to_owned(), 2));
        assert_eq!(truncate_chars("héllo", 2), ("hé", true));
        assert_eq!(truncate_chars("hé", 2), ("hé", false));
        assert_eq!(quote("a\"b", 10), "\"a\\\"b\"");
    }

    #[test]
    fn binary_kinds() {
        assert_eq!(describe_binary(b"\x89PNG\r\n\x1a\nrest"), "PNG image");
        assert_eq!(describe_binary(b"RIFF\0\0\0\0WEBPVP8 "), "WebP image");
        assert_eq!(describe_binary(b"\x00\x01"), "binary data");
        assert!(has_nul(b"ab\0c"));
        assert!(!has_nul(b"abc"));
    }
}
