//! [`VirtualPath`]: the one path type every backend takes.
//!
//! Untrusted strings (from a model, a CLI flag, a listing of a remote store) are parsed once, at the
//! edge. A parsed path is absolute, POSIX, `/`-separated and normalized, and it can be joined onto any
//! backend's root or prefix without ever leaving it:
//!
//! * `.` segments and empty segments (`//`) are dropped; a `..` segment is refused, never resolved;
//! * NUL, every other control character and the backslash are refused;
//! * a segment holding a percent-escape (`%2e`, `%2F`, …) is refused: URL-based stores decode such
//!   escapes and would otherwise see a different name (or a `..`) than the one that was checked;
//! * Unicode look-alikes of `.`, `/` and `\` (fullwidth, small, one-dot leaders, division slash) are
//!   refused anywhere in a segment, so no later normalization (NFKC) can turn a name into a separator or
//!   a traversal;
//! * host-looking paths (`C:\x`, `~/x`, `\\server`) are refused;
//! * a path is at most [`MAX_PATH_BYTES`] bytes and a segment at most [`MAX_SEGMENT_BYTES`].
//!
//! Relative input (`a/b`) is read as relative to the root (`/a/b`).

use std::borrow::Borrow;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Longest accepted path, in bytes.
pub const MAX_PATH_BYTES: usize = 4096;
/// Longest accepted segment (file or directory name), in bytes.
pub const MAX_SEGMENT_BYTES: usize = 255;

/// Why a string is not a valid [`VirtualPath`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// The input was empty or only whitespace.
    #[error("path is empty")]
    Empty,
    /// A `..` segment: paths are never resolved upwards.
    #[error("path traversal (`..`) is not allowed")]
    Traversal,
    /// NUL or another control character.
    #[error("path contains a control character")]
    ControlCharacter,
    /// A backslash, which some hosts treat as a separator.
    #[error("path contains a backslash")]
    Backslash,
    /// A percent-escape such as `%2e`.
    #[error("path contains a percent-escape (`%` and two hex digits)")]
    PercentEscape,
    /// A Unicode character that normalizes to `.`, `/` or `\`.
    #[error("path contains a look-alike of `.`, `/` or `\\` ({0:?})")]
    LookAlike(char),
    /// A Windows drive, UNC or home-directory path.
    #[error("host paths (drive letters, `~`) are not allowed")]
    HostPath,
    /// Longer than [`MAX_PATH_BYTES`] or a segment longer than [`MAX_SEGMENT_BYTES`].
    #[error("path or path segment is too long")]
    TooLong,
}

/// An absolute, normalized, `/`-separated path inside a backend.
///
/// The root is `/`; every other path is `/seg/seg…` with no trailing slash. Ordering is byte order of
/// the string, which sorts a directory's children together.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VirtualPath(String);

impl VirtualPath {
    /// The root, `/`.
    pub fn root() -> Self {
        Self("/".to_owned())
    }

    /// Parse untrusted input. See the module docs for what is refused.
    pub fn parse(input: &str) -> Result<Self, PathError> {
        if input.trim().is_empty() {
            return Err(PathError::Empty);
        }
        if input.len() > MAX_PATH_BYTES {
            return Err(PathError::TooLong);
        }
        let bytes = input.as_bytes();
        if input.starts_with('~') || (bytes.len() >= 2 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':')
        {
            return Err(PathError::HostPath);
        }
        let mut out = String::with_capacity(input.len() + 1);
        for segment in input.split('/') {
            if segment.is_empty() || segment == "." {
                continue;
            }
            check_segment(segment)?;
            out.push('/');
            out.push_str(segment);
        }
        if out.is_empty() {
            out.push('/');
        }
        // Relative input gains a leading `/`: the parsed path itself must fit.
        if out.len() > MAX_PATH_BYTES {
            return Err(PathError::TooLong);
        }
        Ok(Self(out))
    }

    /// The path as a string (`/` or `/a/b`).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// True for `/`.
    pub fn is_root(&self) -> bool {
        self.0 == "/"
    }

    /// The segments, outermost first; empty for the root.
    pub fn segments(&self) -> impl DoubleEndedIterator<Item = &str> + Clone {
        self.0.split('/').filter(|s| !s.is_empty())
    }

    /// Number of segments (0 for the root).
    pub fn depth(&self) -> usize {
        self.segments().count()
    }

    /// The last segment, or `None` for the root.
    pub fn file_name(&self) -> Option<&str> {
        if self.is_root() {
            None
        } else {
            self.0.rsplit('/').next()
        }
    }

    /// The parent directory, or `None` for the root.
    pub fn parent(&self) -> Option<Self> {
        if self.is_root() {
            return None;
        }
        match self.0.rfind('/') {
            Some(0) | None => Some(Self::root()),
            Some(i) => Some(Self(self.0[..i].to_owned())),
        }
    }

    /// Append one validated segment; [`PathError::TooLong`] when the result would be longer than
    /// [`MAX_PATH_BYTES`].
    pub fn join(&self, segment: &str) -> Result<Self, PathError> {
        if segment.is_empty() || segment == "." || segment.contains('/') {
            return Err(PathError::Empty);
        }
        check_segment(segment)?;
        if self.0.len() + 1 + segment.len() > MAX_PATH_BYTES {
            return Err(PathError::TooLong);
        }
        Ok(self.join_unchecked(segment))
    }

    /// Append a relative path of zero or more segments (`a/b`), each validated. Below `self` a
    /// leading `~` or `c:` is part of a name, not a host path, so every path's
    /// [`relative_to`](Self::relative_to) joins back onto its ancestor (except whitespace-only
    /// input, which is [`PathError::Empty`]).
    pub fn join_relative(&self, relative: &str) -> Result<Self, PathError> {
        if relative.trim().is_empty() {
            return Err(PathError::Empty);
        }
        let tail = Self::parse(&format!("/{relative}"))?;
        if tail.is_root() {
            return Ok(self.clone());
        }
        if self.is_root() {
            return Ok(tail);
        }
        let joined = format!("{}{}", self.0, tail.0);
        if joined.len() > MAX_PATH_BYTES {
            return Err(PathError::TooLong);
        }
        Ok(Self(joined))
    }

    fn join_unchecked(&self, segment: &str) -> Self {
        if self.is_root() {
            Self(format!("/{segment}"))
        } else {
            Self(format!("{}/{segment}", self.0))
        }
    }

    /// True when `self` is `ancestor` or lies below it, segment-wise (`/a/bc` is not below `/a/b`).
    pub fn starts_with(&self, ancestor: &VirtualPath) -> bool {
        ancestor.is_root()
            || self.0 == ancestor.0
            || (self.0.starts_with(&ancestor.0) && self.0.as_bytes().get(ancestor.0.len()) == Some(&b'/'))
    }

    /// The part of `self` below `ancestor`, without a leading `/` (`""` when equal); `None` when
    /// `self` is not below `ancestor`.
    pub fn relative_to(&self, ancestor: &VirtualPath) -> Option<&str> {
        if !self.starts_with(ancestor) {
            return None;
        }
        if ancestor.is_root() {
            return Some(self.0.trim_start_matches('/'));
        }
        Some(self.0[ancestor.0.len()..].trim_start_matches('/'))
    }

    /// Re-root `self` from `from` to `to`: `/m/a` re-rooted from `/m` to `/x` is `/x/a`.
    pub fn rebase(&self, from: &VirtualPath, to: &VirtualPath) -> Option<Self> {
        let rel = self.relative_to(from)?;
        if rel.is_empty() {
            return Some(to.clone());
        }
        if to.is_root() {
            return Some(Self(format!("/{rel}")));
        }
        Some(Self(format!("{}/{rel}", to.0)))
    }
}

fn check_segment(segment: &str) -> Result<(), PathError> {
    if segment == ".." {
        return Err(PathError::Traversal);
    }
    if segment.len() > MAX_SEGMENT_BYTES {
        return Err(PathError::TooLong);
    }
    let bytes = segment.as_bytes();
    for (i, c) in segment.char_indices() {
        if c.is_control() {
            return Err(PathError::ControlCharacter);
        }
        if c == '\\' {
            return Err(PathError::Backslash);
        }
        if c == '%'
            && bytes.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
            && bytes.get(i + 2).is_some_and(u8::is_ascii_hexdigit)
        {
            return Err(PathError::PercentEscape);
        }
        if is_look_alike(c) {
            return Err(PathError::LookAlike(c));
        }
    }
    Ok(())
}

/// Characters whose compatibility normalization is `.`, `/` or `\`, or that render as one.
fn is_look_alike(c: char) -> bool {
    matches!(
        c,
        '\u{2024}' // one dot leader
            | '\u{2025}' // two dot leader
            | '\u{FE52}' // small full stop
            | '\u{FF0E}' // fullwidth full stop
            | '\u{2215}' // division slash
            | '\u{2044}' // fraction slash
            | '\u{FF0F}' // fullwidth solidus
            | '\u{29F8}' // big solidus
            | '\u{FE68}' // small reverse solidus
            | '\u{FF3C}' // fullwidth reverse solidus
            | '\u{29F5}' // reverse solidus operator
            | '\u{FEFF}' // zero-width no-break space (invisible)
            | '\u{200B}'..='\u{200F}' // zero-width and direction marks
            | '\u{202A}'..='\u{202E}' // bidi embedding/override
            | '\u{2066}'..='\u{2069}' // bidi isolates
    )
}

impl fmt::Display for VirtualPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for VirtualPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl AsRef<str> for VirtualPath {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for VirtualPath {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for VirtualPath {
    type Err = PathError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl TryFrom<&str> for VirtualPath {
    type Error = PathError;
    fn try_from(s: &str) -> Result<Self, Self::Error> {
        Self::parse(s)
    }
}

impl Serialize for VirtualPath {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for VirtualPath {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        Self::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> VirtualPath {
        VirtualPath::parse(s).unwrap_or_else(|e| panic!("{s:?}: {e}"))
    }

    #[test]
    fn normalizes() {
        assert_eq!(p("/").as_str(), "/");
        assert_eq!(p("a/b").as_str(), "/a/b");
        assert_eq!(p("/./a//b/").as_str(), "/a/b");
        assert_eq!(p("foo..bar.txt").as_str(), "/foo..bar.txt");
        assert_eq!(p("/.hidden/x").as_str(), "/.hidden/x");
        assert_eq!(p("100%").as_str(), "/100%");
        assert_eq!(p("/ü/日本").as_str(), "/ü/日本");
    }

    #[test]
    fn refuses() {
        let cases = [
            ("", PathError::Empty),
            ("  ", PathError::Empty),
            ("/a/../b", PathError::Traversal),
            ("..", PathError::Traversal),
            ("/a\0b", PathError::ControlCharacter),
            ("/a\nb", PathError::ControlCharacter),
            ("a\\..\\b", PathError::Backslash),
            ("/%2e%2e/x", PathError::PercentEscape),
            ("/a%2Fb", PathError::PercentEscape),
            ("/\u{FF0E}\u{FF0E}/x", PathError::LookAlike('\u{FF0E}')),
            ("/a\u{2215}b", PathError::LookAlike('\u{2215}')),
            ("C:\\Windows", PathError::HostPath),
            ("c:/x", PathError::HostPath),
            ("~/secrets", PathError::HostPath),
        ];
        for (input, want) in cases {
            assert_eq!(VirtualPath::parse(input), Err(want), "{input:?}");
        }
        assert_eq!(VirtualPath::parse(&"a".repeat(300)), Err(PathError::TooLong));
    }

    #[test]
    fn relations() {
        let a = p("/a/b");
        assert!(p("/a/b/c").starts_with(&a));
        assert!(!p("/a/bc").starts_with(&a));
        assert!(a.starts_with(&VirtualPath::root()));
        assert_eq!(p("/a/b/c/d").relative_to(&a), Some("c/d"));
        assert_eq!(a.relative_to(&a), Some(""));
        assert_eq!(p("/a/b/c").rebase(&a, &p("/m")), Some(p("/m/c")));
        assert_eq!(p("/a/b/c").rebase(&a, &VirtualPath::root()), Some(p("/c")));
        assert_eq!(a.parent(), Some(p("/a")));
        assert_eq!(p("/a").parent(), Some(VirtualPath::root()));
        assert_eq!(a.file_name(), Some("b"));
        assert_eq!(p("/x").join_relative("y/z"), Ok(p("/x/y/z")));
        assert!(p("/x").join("..").is_err());
    }

    #[test]
    fn serde_round_trip() {
        let json = serde_json::to_string(&p("/a/b")).unwrap_or_default();
        assert_eq!(json, "\"/a/b\"");
        assert!(serde_json::from_str::<VirtualPath>("\"/a/../b\"").is_err());
    }
}
