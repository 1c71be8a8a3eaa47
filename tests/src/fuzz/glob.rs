//! Glob compilation and matching.
//!
//! Input: UTF-8 (lossily decoded) lines; the first line is the pattern, the next (at most
//! [`MAX_PATHS`]) are relative paths to match it against.
//!
//! Matching must be deterministic, ignore empty segments, and agree with a slow reference matcher
//! written from the documented semantics (for patterns without classes and braces); a literal
//! pattern matches exactly the paths with that base name; a brace group matches the union of its
//! alternatives.

use trellis_backend::glob::{GlobError, GlobPattern, MAX_PATTERN_BYTES};

/// Most paths one input is matched against.
pub const MAX_PATHS: usize = 16;

/// Check the input as described in the module docs.
pub fn check(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.split('\n');
    let pattern = lines.next().unwrap_or_default();
    let paths: Vec<&str> = lines.take(MAX_PATHS).collect();

    let compiled = GlobPattern::new(pattern);
    assert_eq!(
        compiled,
        GlobPattern::new(pattern),
        "compiling {pattern:?} is not deterministic"
    );
    let glob = match compiled {
        Ok(glob) => glob,
        Err(error) => return check_error(pattern, &error),
    };
    assert_eq!(glob.as_str(), pattern);
    if !pattern.contains('{') {
        assert!(
            !pattern.split('/').any(|s| s == ".."),
            "{pattern:?} was accepted with a `..`"
        );
    }
    assert!(
        !glob.matches("") && !glob.matches("/") && !glob.matches("//"),
        "{pattern:?} matched nothing"
    );

    let union = if pattern.is_empty() || pattern.contains(['{', '}', ',']) {
        None
    } else {
        GlobPattern::new(&format!("{{{pattern},*.rs}}")).ok()
    };
    let rs = GlobPattern::new("*.rs").ok();
    for path in paths {
        let matched = glob.matches(path);
        assert_eq!(
            matched,
            glob.matches(path),
            "{pattern:?} on {path:?} is not deterministic"
        );
        assert_eq!(
            matched,
            glob.matches(&format!("/{path}/")),
            "{pattern:?} on {path:?}: slashes matter"
        );
        if !pattern.contains(['*', '?', '[', '{', '/']) {
            let base_name = path.split('/').rfind(|s| !s.is_empty());
            assert_eq!(
                matched,
                base_name == Some(pattern),
                "literal {pattern:?} on {path:?}"
            );
        }
        if let Some(expected) = reference_matches(pattern, path) {
            assert_eq!(
                matched, expected,
                "{pattern:?} on {path:?}: the reference matcher disagrees"
            );
        }
        if let (Some(union), Some(rs)) = (&union, &rs) {
            assert_eq!(
                union.matches(path),
                matched || rs.matches(path),
                "{{{pattern},*.rs}} on {path:?} is not the union of its alternatives"
            );
        }
    }
}

fn check_error(pattern: &str, error: &GlobError) {
    assert!(!error.to_string().is_empty());
    match error {
        GlobError::BadLength => assert!(pattern.is_empty() || pattern.len() > MAX_PATTERN_BYTES),
        GlobError::TooBroad => assert!(pattern.contains('{') && pattern.contains(',')),
        GlobError::Traversal => assert!(pattern.contains('{') || pattern.split('/').any(|s| s == "..")),
    }
}

/// The documented semantics, matched the slow and obvious way. `None` for patterns with classes or
/// braces, which it does not model.
pub fn reference_matches(pattern: &str, path: &str) -> Option<bool> {
    if pattern.contains(['[', '{']) {
        return None;
    }
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let Some(base_name) = segments.last() else {
        return Some(false);
    };
    if !pattern.contains('/') {
        return Some(segment_matches(pattern, base_name));
    }
    let parts: Vec<&str> = pattern.split('/').filter(|s| !s.is_empty()).collect();
    if parts.is_empty() || (pattern.ends_with('/') && parts.last() != Some(&"**")) {
        return Some(false);
    }
    let mut memo = vec![None; (parts.len() + 1) * (segments.len() + 1)];
    Some(path_matches(&parts, &segments, 0, 0, &mut memo))
}

/// `parts[i..]` against `segments[j..]`. `**` takes zero or more segments, none starting with `.`,
/// and at least one when it is the last part.
fn path_matches(parts: &[&str], segments: &[&str], i: usize, j: usize, memo: &mut [Option<bool>]) -> bool {
    let key = i * (segments.len() + 1) + j;
    if let Some(known) = memo[key] {
        return known;
    }
    let result = match parts.get(i) {
        None => j == segments.len(),
        Some(&"**") => {
            let last = i + 1 == parts.len();
            let mut found = false;
            for k in j..=segments.len() {
                if k > j && segments[k - 1].starts_with('.') {
                    break;
                }
                if (!last || k > j) && path_matches(parts, segments, i + 1, k, memo) {
                    found = true;
                    break;
                }
            }
            found
        }
        Some(part) => {
            j < segments.len()
                && segment_matches(part, segments[j])
                && path_matches(parts, segments, i + 1, j + 1, memo)
        }
    };
    memo[key] = Some(result);
    result
}

/// One segment against a pattern of literals, `?` and `*` (dynamic programming over both strings).
/// A name starting with `.` needs a pattern starting with `.`.
fn segment_matches(pattern: &str, name: &str) -> bool {
    if name.starts_with('.') && !pattern.starts_with('.') {
        return false;
    }
    let pattern: Vec<char> = pattern.chars().collect();
    let name: Vec<char> = name.chars().collect();
    // row[n]: does the pattern so far match name[..n]?
    let mut row = vec![false; name.len() + 1];
    row[0] = true;
    for p in pattern {
        let mut next = vec![false; name.len() + 1];
        for n in 0..=name.len() {
            next[n] = match p {
                '*' => row[n] || (n > 0 && next[n - 1]),
                '?' => n > 0 && row[n - 1],
                c => n > 0 && row[n - 1] && name[n - 1] == c,
            };
        }
        row = next;
    }
    row[name.len()]
}
