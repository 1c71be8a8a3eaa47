//! `VirtualPath` parsing and the operations on parsed paths.
//!
//! Input: UTF-8 (lossily decoded). The whole input is parsed as one path; when it holds a newline
//! (never valid in a path), the text before and after the first newline are also parsed, and the
//! second is joined onto the first.

use trellis_backend::path::{MAX_PATH_BYTES, MAX_SEGMENT_BYTES};
use trellis_backend::{PathError, VirtualPath};

/// Check the input as described in the module docs.
pub fn check(data: &[u8]) {
    let input = String::from_utf8_lossy(data);
    check_input(&input);
    if let Some((a, b)) = input.split_once('\n') {
        check_input(a);
        check_input(b);
        check_join(a, b);
    }
}

/// Parse one string: an error names a real problem of the input, a path has every property of
/// [`check_parsed`] and keeps exactly the input's segments.
pub fn check_input(input: &str) {
    match VirtualPath::parse(input) {
        Err(error) => {
            assert!(!error.to_string().is_empty());
            match error {
                PathError::Traversal => assert!(input.split('/').any(|s| s == "..")),
                PathError::Empty => assert!(input.trim().is_empty()),
                PathError::ControlCharacter => assert!(input.chars().any(char::is_control)),
                PathError::Backslash => assert!(input.contains('\\')),
                PathError::PercentEscape => assert!(has_percent_escape(input)),
                PathError::LookAlike(c) => assert!(input.contains(c)),
                _ => {}
            }
        }
        Ok(path) => {
            check_parsed(&path);
            let expected: Vec<&str> = input.split('/').filter(|s| !s.is_empty() && *s != ".").collect();
            assert_eq!(
                path.segments().collect::<Vec<_>>(),
                expected,
                "segments of {input:?}"
            );
            // A relative input means the same as its absolute form.
            let absolute = VirtualPath::parse(&format!("/{input}"));
            assert!(
                absolute.as_ref() == Ok(&path) || absolute == Err(PathError::TooLong),
                "{input:?} and its absolute form differ: {absolute:?}"
            );
        }
    }
}

/// Properties of every parsed path: absolute, normalized, within the length limits, free of
/// anything the parser refuses, re-parses to itself, and its accessors agree with each other.
pub fn check_parsed(path: &VirtualPath) {
    let s = path.as_str();
    assert!(s.starts_with('/'), "{s:?} is not absolute");
    assert!(
        s.len() <= MAX_PATH_BYTES,
        "a parsed path of {} bytes is longer than MAX_PATH_BYTES",
        s.len()
    );
    assert!(!s.contains("//"), "{s:?} has an empty segment");
    if path.is_root() {
        assert_eq!(s, "/");
        assert_eq!((path.depth(), path.file_name(), path.parent()), (0, None, None));
    } else {
        assert!(!s.ends_with('/'), "{s:?} ends with a slash");
    }
    for segment in path.segments() {
        assert!(segment != "." && segment != "..", "{s:?} has a dot segment");
        assert!(
            segment.len() <= MAX_SEGMENT_BYTES,
            "{s:?} has a segment over the limit"
        );
        assert!(!segment.contains(|c: char| c.is_control() || c == '\\'), "{s:?}");
        assert!(!has_percent_escape(segment), "{s:?} has a percent-escape");
    }
    assert_eq!(
        VirtualPath::parse(s).as_ref(),
        Ok(path),
        "{s:?} does not re-parse to itself"
    );
    assert_eq!(path.to_string(), s);
    let json = serde_json::to_string(path).unwrap_or_default();
    assert_eq!(
        serde_json::from_str::<VirtualPath>(&json).ok().as_ref(),
        Some(path),
        "{json}"
    );

    assert_eq!(path.segments().count(), path.depth());
    assert_eq!(path.file_name(), path.segments().last());
    let mut rebuilt = VirtualPath::root();
    for segment in path.segments() {
        rebuilt = match rebuilt.join(segment) {
            Ok(next) => next,
            Err(e) => panic!("{s:?}: joining its own segment {segment:?} failed: {e}"),
        };
    }
    assert_eq!(&rebuilt, path, "rebuilt segment by segment");
    if let Some(parent) = path.parent() {
        assert_eq!(parent.depth() + 1, path.depth());
        assert!(path.starts_with(&parent));
        assert!(!parent.starts_with(path));
        assert_eq!(path.relative_to(&parent), path.file_name());
    }
    let root = VirtualPath::root();
    assert!(path.starts_with(&root));
    let relative = path.relative_to(&root);
    assert_eq!(relative, Some(s.trim_start_matches('/')));
    // (A whitespace-only input is `Empty` by design, even where `/ ` would be a valid path.)
    if let Some(relative) = relative.filter(|r| !r.trim().is_empty()) {
        assert_eq!(root.join_relative(relative).as_ref(), Ok(path));
    }
}

/// `join_relative` and `join` of two inputs: the result lies below the base, re-parses, and
/// splits back into the two parts; a refusal is the tail's own error or the length limit.
pub fn check_join(base: &str, tail: &str) {
    let Ok(base_path) = VirtualPath::parse(base) else {
        return;
    };
    let root = VirtualPath::root();
    // Below a base, a tail means what its absolute form means (a leading `~` or `c:` is a name).
    let tail_path = if tail.trim().is_empty() {
        Err(PathError::Empty)
    } else {
        VirtualPath::parse(&format!("/{tail}"))
    };
    match (base_path.join_relative(tail), tail_path) {
        (Ok(joined), Ok(tail_path)) => {
            check_parsed(&joined);
            assert!(joined.starts_with(&base_path));
            assert_eq!(joined.depth(), base_path.depth() + tail_path.depth());
            assert_eq!(joined.relative_to(&base_path), tail_path.relative_to(&root));
            assert_eq!(joined.rebase(&base_path, &root), Some(tail_path));
        }
        (Ok(joined), Err(tail_error)) => {
            panic!("join_relative accepted {tail:?} ({joined:?}), which does not parse: {tail_error}")
        }
        (Err(error), Err(tail_error)) if error == tail_error => {}
        (Err(PathError::TooLong), _) => {}
        (Err(error), tail_path) => panic!("joining {tail:?} onto {base:?} failed ({error}): {tail_path:?}"),
    }
    if let Ok(joined) = base_path.join(tail) {
        check_parsed(&joined);
        assert_eq!(joined.parent().as_ref(), Some(&base_path));
        assert_eq!(joined.file_name(), Some(tail));
    }
}

fn has_percent_escape(s: &str) -> bool {
    s.as_bytes()
        .windows(3)
        .any(|w| w[0] == b'%' && w[1].is_ascii_hexdigit() && w[2].is_ascii_hexdigit())
}
