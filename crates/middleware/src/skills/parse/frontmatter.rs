//! Finding and parsing the YAML frontmatter at the top of a `SKILL.md`.
//!
//! Two steps, both total functions over arbitrary bytes (they never panic):
//!
//! 1. [`split`] finds the fence: the file (after an optional UTF-8 byte-order mark) must start with a
//!    line that is exactly `---` (trailing spaces and a `\r` allowed), and the frontmatter ends at the
//!    next line that is exactly `---`. A `---` inside a value (`a---b`) or a body horizontal rule after
//!    the closing fence is harmless. It works on a *prefix* of the file: "not closed yet" is its own
//!    answer, so discovery can read only the top of each file and read on only when needed.
//! 2. [`parse`] reads the YAML between the fences into a [`Frontmatter`]: an ordered list of
//!    top-level keys and [`YamlValue`]s in which **every scalar keeps the text that was written**
//!    (`yes` stays `yes`, `1.10` stays `1.10`, `0o7` stays `0o7`); only plain `~`/`null`/empty
//!    scalars are [`YamlValue::Null`]. Simple frontmatter takes a fast path (`fastyaml.rs`); anything
//!    else goes to the full, text-keeping YAML parser (`yaml_text.rs`, with `serde_yaml`).
//!
//! Bounds, checked before or during parsing so hostile input cannot hang or exhaust memory:
//! frontmatter over [`MAX_FRONTMATTER_BYTES`] is refused unread; flow collections (`[`/`{`) nested
//! deeper than [`MAX_FLOW_DEPTH`] are refused before the YAML parser sees them (the parser is
//! quadratic in flow depth); block nesting is capped by `serde_yaml` (128 levels); alias expansion
//! is capped at [`MAX_NODES`] values and [`MAX_TEXT_BYTES`] bytes of materialized text (an alias
//! "bomb" fails fast instead of expanding).

use std::fmt;

pub use crate::skills::parse::yaml_text::{MAX_FLOW_DEPTH, MAX_NODES, MAX_TEXT_BYTES, YamlValue};

/// Largest frontmatter accepted, in bytes, fences included.
pub const MAX_FRONTMATTER_BYTES: usize = 64 * 1024;

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Where the frontmatter of a (possibly partial) file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// Both fences found: the YAML is `bytes[yaml]`, the body starts at `body_start`.
    Closed {
        /// Byte range of the YAML text between the fences.
        yaml: (usize, usize),
        /// Byte offset of the first byte after the closing fence line.
        body_start: usize,
    },
    /// The opening fence is there but the closing one is not within the bytes given.
    Unclosed,
    /// The file does not start with a `---` line (after an optional BOM).
    Missing,
}

/// Why a frontmatter could not be read. The `Display` text is written for people (logs, CLI).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrontmatterError {
    /// No opening `---` line.
    Missing,
    /// An opening fence but no closing one.
    Unclosed,
    /// The closing fence is further than [`MAX_FRONTMATTER_BYTES`] into the file.
    TooLarge,
    /// The frontmatter bytes are not UTF-8.
    NotUtf8,
    /// Flow collections nested deeper than [`MAX_FLOW_DEPTH`].
    TooDeep,
    /// The YAML does not parse (or exceeds the value / text / nesting / alias bounds).
    InvalidYaml(String),
    /// The YAML parsed but is not a mapping (a list, a scalar, or empty).
    NotAMapping(&'static str),
}

impl fmt::Display for FrontmatterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Missing => f.write_str("no YAML frontmatter: the file must start with a `---` line"),
            Self::Unclosed => f.write_str("the frontmatter is not closed with a `---` line"),
            Self::TooLarge => write!(
                f,
                "the frontmatter is not closed within its first {} KiB",
                MAX_FRONTMATTER_BYTES / 1024
            ),
            Self::NotUtf8 => f.write_str("the frontmatter is not valid UTF-8"),
            Self::TooDeep => write!(f, "the frontmatter nests more than {MAX_FLOW_DEPTH} levels deep"),
            Self::InvalidYaml(msg) => write!(f, "invalid YAML in frontmatter: {msg}"),
            Self::NotAMapping(what) => write!(f, "the frontmatter must be a YAML mapping, found {what}"),
        }
    }
}

impl std::error::Error for FrontmatterError {}
/// A parsed frontmatter: top-level keys (as text) and values, in written order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Frontmatter {
    /// Keys and values in the order written; a key written twice appears twice.
    pub entries: Vec<(String, YamlValue)>,
}

impl Frontmatter {
    /// The value of the last occurrence of `key` (YAML loaders let the last one win).
    pub fn get(&self, key: &str) -> Option<&YamlValue> {
        self.entries.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Keys written more than once, each named once, in first-seen order.
    pub fn duplicate_keys(&self) -> Vec<&str> {
        let mut dups: Vec<&str> = Vec::new();
        for (i, (key, _)) in self.entries.iter().enumerate() {
            if self.entries[..i].iter().any(|(k, _)| k == key) && !dups.contains(&key.as_str()) {
                dups.push(key);
            }
        }
        dups
    }
}

/// Strip a leading UTF-8 byte-order mark.
pub fn strip_bom(bytes: &[u8]) -> &[u8] {
    bytes.strip_prefix(BOM).unwrap_or(bytes)
}

fn is_fence(line: &[u8]) -> bool {
    let mut end = line.len();
    while end > 0 && matches!(line[end - 1], b' ' | b'\t' | b'\r') {
        end -= 1;
    }
    &line[..end] == b"---"
}

/// Locate the frontmatter in `bytes`: the whole file when `complete`, otherwise a prefix of it (then a
/// last line without its newline is not trusted to be a fence: the file may go on). Offsets are
/// relative to `bytes` itself, BOM included. Scans at most [`MAX_FRONTMATTER_BYTES`]: a closing fence
/// beyond that is reported as [`Split::Unclosed`].
pub fn split(bytes: &[u8], complete: bool) -> Split {
    if !complete && bytes.len() < BOM.len() && BOM.starts_with(bytes) {
        // The start of a byte-order mark: the fence may follow.
        return Split::Unclosed;
    }
    let offset = if bytes.starts_with(BOM) { BOM.len() } else { 0 };
    let text = &bytes[offset..];
    let limit = text.len().min(MAX_FRONTMATTER_BYTES);
    let Some(first_nl) = memchr_nl(&text[..limit], 0) else {
        // No complete first line yet: either the fence is still arriving or there is none.
        let could_be_fence = if complete {
            is_fence(text)
        } else {
            b"---".starts_with(trim_end_ws(text)) || is_fence(text)
        };
        return if could_be_fence {
            Split::Unclosed
        } else {
            Split::Missing
        };
    };
    if !is_fence(&text[..first_nl]) {
        return Split::Missing;
    }
    let yaml_start = first_nl + 1;
    let mut line_start = yaml_start;
    while line_start <= limit {
        let line_end = memchr_nl(&text[..limit], line_start);
        let line = &text[line_start..line_end.unwrap_or(limit)];
        let at_eof = complete && line_end.is_none() && limit == text.len();
        if is_fence(line) && (line_end.is_some() || at_eof) {
            // The YAML ends before the newline that precedes the closing fence.
            let yaml_end = line_start.saturating_sub(1).max(yaml_start);
            let body_start = line_end.map_or(text.len(), |e| e + 1);
            return Split::Closed {
                yaml: (offset + yaml_start, offset + yaml_end),
                body_start: offset + body_start,
            };
        }
        match line_end {
            Some(end) => line_start = end + 1,
            None => break,
        }
    }
    Split::Unclosed
}

fn trim_end_ws(bytes: &[u8]) -> &[u8] {
    let mut end = bytes.len();
    while end > 0 && matches!(bytes[end - 1], b' ' | b'\t' | b'\r') {
        end -= 1;
    }
    &bytes[..end]
}

fn memchr_nl(bytes: &[u8], from: usize) -> Option<usize> {
    bytes
        .get(from..)?
        .iter()
        .position(|&b| b == b'\n')
        .map(|i| i + from)
}

/// Split and parse the frontmatter of a complete file (or of a prefix known to hold the closing
/// fence). Returns the frontmatter and the byte offset where the body starts.
pub fn parse_file(bytes: &[u8]) -> Result<(Frontmatter, usize), FrontmatterError> {
    match split(bytes, true) {
        Split::Missing => Err(FrontmatterError::Missing),
        Split::Unclosed if strip_bom(bytes).len() >= MAX_FRONTMATTER_BYTES => Err(FrontmatterError::TooLarge),
        Split::Unclosed => Err(FrontmatterError::Unclosed),
        Split::Closed { yaml, body_start } => {
            let fm = parse(bytes.get(yaml.0..yaml.1).unwrap_or_default())?;
            Ok((fm, body_start))
        }
    }
}

/// The body of a skill file: everything after the closing fence (the whole text when there is no
/// frontmatter), with surrounding whitespace trimmed. `None` when the bytes are not UTF-8.
pub fn body(bytes: &[u8]) -> Option<&str> {
    let text = strip_bom(bytes);
    let start = match split(bytes, true) {
        Split::Closed { body_start, .. } => body_start.saturating_sub(bytes.len() - text.len()),
        _ => 0,
    };
    std::str::from_utf8(text.get(start..)?).ok().map(str::trim)
}

/// Parse the YAML text between the fences. Checks every bound in the module docs and never panics.
pub fn parse(yaml: &[u8]) -> Result<Frontmatter, FrontmatterError> {
    if yaml.len() > MAX_FRONTMATTER_BYTES {
        return Err(FrontmatterError::TooLarge);
    }
    let text = std::str::from_utf8(yaml).map_err(|_| FrontmatterError::NotUtf8)?;
    if let Some(entries) = crate::skills::parse::fastyaml::parse_simple(text)
        && !entries.is_empty()
    {
        return Ok(Frontmatter { entries });
    }
    parse_full(text)
}

/// [`parse`] without the fast path (the property tests compare the two).
pub(crate) fn parse_full(text: &str) -> Result<Frontmatter, FrontmatterError> {
    match crate::skills::parse::yaml_text::parse(text)? {
        YamlValue::Map(entries) => Ok(Frontmatter {
            entries: entries
                .into_iter()
                .map(|(k, v)| {
                    let key = match k {
                        YamlValue::Text(s) => s,
                        other => other.to_flow_text(),
                    };
                    (key, v)
                })
                .collect(),
        }),
        YamlValue::Null => Err(FrontmatterError::NotAMapping("nothing (it is empty)")),
        YamlValue::Text(_) => Err(FrontmatterError::NotAMapping("a scalar")),
        YamlValue::Seq(_) => Err(FrontmatterError::NotAMapping("a list")),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn text(v: &str) -> YamlValue {
        YamlValue::Text(v.to_owned())
    }

    #[test]
    fn split_finds_fences_with_bom_and_crlf() {
        let file = b"\xEF\xBB\xBF---\r\nname: a\r\n---\r\nbody\r\n";
        let Split::Closed { yaml, body_start } = split(file, true) else {
            panic!("not closed");
        };
        assert_eq!(&file[yaml.0..yaml.1], b"name: a\r");
        assert_eq!(&file[body_start..], b"body\r\n");
        assert_eq!(split(b"---\nname: a\n", true), Split::Unclosed);
        assert_eq!(split(b"--", false), Split::Unclosed);
        assert_eq!(split(b"--", true), Split::Missing);
        assert_eq!(split(b"# title\n---\n", true), Split::Missing);
        assert_eq!(split(b"\n---\nname: a\n---\n", true), Split::Missing);
        assert!(matches!(split(b"---\nname: a\n---", true), Split::Closed { .. }));
        // In a prefix, a last `---` without its newline may be the start of `----`.
        assert_eq!(split(b"---\nname: a\n---", false), Split::Unclosed);
        assert!(matches!(
            split(b"---\n---\n", true),
            Split::Closed { yaml: (4, 4), .. }
        ));
    }

    #[test]
    fn scalars_keep_their_text() {
        let fm =
            parse(b"a: yes\nb: 1.10\nc: 0o7\nd: ~\ne:\nf: 'null'\ng: [1, true, x]\nh: {1: 2.50}").unwrap();
        assert_eq!(fm.get("a"), Some(&text("yes")));
        assert_eq!(fm.get("b"), Some(&text("1.10")));
        assert_eq!(fm.get("c"), Some(&text("0o7")));
        assert_eq!(fm.get("d"), Some(&YamlValue::Null));
        assert_eq!(fm.get("e"), Some(&YamlValue::Null));
        assert_eq!(fm.get("f"), Some(&text("null")));
        assert_eq!(
            fm.get("g"),
            Some(&YamlValue::Seq(vec![text("1"), text("true"), text("x")]))
        );
        assert_eq!(
            fm.get("h"),
            Some(&YamlValue::Map(vec![(text("1"), text("2.50"))]))
        );
    }

    #[test]
    fn non_mappings_and_bad_yaml_are_errors() {
        assert!(matches!(
            parse(b"- a\n- b"),
            Err(FrontmatterError::NotAMapping(_))
        ));
        assert!(matches!(parse(b""), Err(FrontmatterError::NotAMapping(_))));
        assert!(matches!(
            parse(b"just text"),
            Err(FrontmatterError::NotAMapping(_))
        ));
        assert!(matches!(parse(b"a: [b"), Err(FrontmatterError::InvalidYaml(_))));
        assert!(matches!(parse(b"a: \xff"), Err(FrontmatterError::NotUtf8)));
    }
}
