//! Glob patterns with the reference (Deep Agents) semantics, shared by every backend.
//!
//! * A pattern **without `/`** matches a file's *base name* at any depth: `*.py` finds `/a.py` and
//!   `/sub/nested/c.py`, and also `/.hidden/x.py` (the base name rule looks under dot-directories).
//! * A pattern **with `/`** matches the path relative to the search base; a leading `/` is dropped, so
//!   `/*.py` means "directly in the base".
//! * `*` and `?` stay inside one segment; `[abc]`, `[a-z]`, `[!a]` and `[^a]` are classes.
//! * A segment that is exactly `**` spans zero or more directories, but never a directory whose name
//!   starts with `.`; a trailing `**` needs at least one segment (`a.py/**` matches nothing).
//! * No wildcard matches a leading `.`: `*` does not match `.hidden.py`, `.*.py` does.
//! * `{a,b}` braces expand, nested too (`{a,{b,c}}`); a group without a comma (`{x}`) is literal. At
//!   most [`MAX_EXPANSIONS`] alternatives.
//! * A pattern ending in `/` names directories, and globs only ever return files: it matches nothing.
//! * Malformed classes or braces (`[a-`, `*.{py`) are literal text. A `..` segment is refused.
//!
//! Matching takes polynomial time, never exponential. Within one segment a greedy scan backtracks
//! only to the most recent `*`: about linear for ordinary patterns, O(pattern tokens × name
//! characters) at worst (`*a*a*a…b` against `aaaa…`). Across segments a memo over (pattern segment,
//! path segment) pairs decides each pair once, and a `**` tries every later path position, so a path
//! costs at most O(pattern segments × path segments²) steps plus one segment match per pair. Each
//! brace alternative (at most [`MAX_EXPANSIONS`]) is matched on its own.
//!
//! ## Why not `globset`
//!
//! This matcher is hand-written because `globset` (which the file tools' permission rules use)
//! cannot express the reference rules above: its `GlobBuilder` options are case-insensitivity,
//! literal separators, backslash escapes and empty alternates, with no way to keep `*`, `?` and
//! `**` from matching a leading `.` (so `**/*.py` would enter `.git/` and `*` would match
//! `.env`); it reads `{x}` as a one-alternative group rather than literal text; and it refuses an
//! unclosed `{` as an error where the reference takes it literally. Emulating those on top of it
//! would mean rewriting each pattern segment by segment — the parsing done here anyway. The
//! matcher is also bounded (see above), which the glob tool relies on for model-written patterns.

/// Most alternatives one pattern may expand to.
pub const MAX_EXPANSIONS: usize = 1_000;
/// Longest accepted pattern, in bytes.
pub const MAX_PATTERN_BYTES: usize = 4_096;

/// Why a pattern was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GlobError {
    /// A `..` segment.
    #[error("glob pattern may not contain a `..` segment")]
    Traversal,
    /// More than [`MAX_EXPANSIONS`] brace alternatives.
    #[error("glob pattern expands to more than {MAX_EXPANSIONS} alternatives")]
    TooBroad,
    /// Longer than [`MAX_PATTERN_BYTES`], or empty.
    #[error("glob pattern is empty or too long")]
    BadLength,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Literal(char),
    AnyChar,
    Star,
    Class { negated: bool, items: Vec<(char, char)> },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    GlobStar,
    Part(Vec<Token>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Alternative {
    BaseName(Vec<Token>),
    Anchored(Vec<Segment>),
}

/// A compiled glob pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobPattern {
    source: String,
    alternatives: Vec<Alternative>,
}

impl GlobPattern {
    /// Compile a pattern.
    pub fn new(pattern: &str) -> Result<Self, GlobError> {
        if pattern.is_empty() || pattern.len() > MAX_PATTERN_BYTES {
            return Err(GlobError::BadLength);
        }
        let mut alternatives = Vec::new();
        for alt in expand_braces(pattern)? {
            if alt.split('/').any(|s| s == "..") {
                return Err(GlobError::Traversal);
            }
            if let Some(compiled) = compile_alternative(&alt) {
                alternatives.push(compiled);
            }
        }
        Ok(Self {
            source: pattern.to_owned(),
            alternatives,
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Does a file at `relative` (its path below the search base, `/`-separated, no leading `/`) match?
    pub fn matches(&self, relative: &str) -> bool {
        let segments: Vec<&str> = relative.split('/').filter(|s| !s.is_empty()).collect();
        let Some(base_name) = segments.last() else {
            return false;
        };
        self.alternatives.iter().any(|alt| match alt {
            Alternative::BaseName(tokens) => match_segment(tokens, base_name),
            Alternative::Anchored(pattern) => match_path(pattern, &segments),
        })
    }
}

fn compile_alternative(alt: &str) -> Option<Alternative> {
    if !alt.contains('/') {
        return Some(Alternative::BaseName(tokenize(alt)));
    }
    let parts: Vec<&str> = alt.split('/').filter(|s| !s.is_empty()).collect();
    if alt.ends_with('/') && parts.last() != Some(&"**") {
        return None; // names directories only
    }
    if parts.is_empty() {
        return None;
    }
    let mut segments = Vec::with_capacity(parts.len());
    for part in parts {
        let seg = if part == "**" {
            Segment::GlobStar
        } else {
            Segment::Part(tokenize(part))
        };
        // `**/**` is the same as `**`.
        if seg == Segment::GlobStar && segments.last() == Some(&Segment::GlobStar) {
            continue;
        }
        segments.push(seg);
    }
    Some(Alternative::Anchored(segments))
}

/// Expand `{a,b}` groups (nested), leaving comma-less groups and unbalanced braces literal.
fn expand_braces(pattern: &str) -> Result<Vec<String>, GlobError> {
    let mut done = Vec::new();
    let mut work = vec![pattern.to_owned()];
    while let Some(p) = work.pop() {
        match find_group(&p) {
            None => done.push(p),
            Some((open, close, commas)) => {
                let inner = &p[open + 1..close];
                let mut start = 0;
                let mut pieces = Vec::with_capacity(commas.len() + 1);
                for c in commas {
                    pieces.push(&inner[start..c - open - 1]);
                    start = c - open;
                }
                pieces.push(&inner[start..]);
                for piece in pieces.into_iter().rev() {
                    work.push(format!("{}{}{}", &p[..open], piece, &p[close + 1..]));
                }
            }
        }
        if done.len() + work.len() > MAX_EXPANSIONS {
            return Err(GlobError::TooBroad);
        }
    }
    Ok(done)
}

/// The first balanced `{…}` group with a top-level comma: (open index, close index, comma indices).
fn find_group(p: &str) -> Option<(usize, usize, Vec<usize>)> {
    let bytes = p.as_bytes();
    let mut from = 0;
    while let Some(rel) = p[from..].find('{') {
        let open = from + rel;
        let mut depth = 0usize;
        let mut commas = Vec::new();
        let mut close = None;
        for (i, &b) in bytes.iter().enumerate().skip(open) {
            match b {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = Some(i);
                        break;
                    }
                }
                b',' if depth == 1 => commas.push(i),
                _ => {}
            }
        }
        match close {
            Some(close) if !commas.is_empty() => return Some((open, close, commas)),
            _ => from = open + 1,
        }
    }
    None
}

fn tokenize(segment: &str) -> Vec<Token> {
    let chars: Vec<char> = segment.chars().collect();
    let mut tokens = Vec::with_capacity(chars.len());
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '*' => {
                if tokens.last() != Some(&Token::Star) {
                    tokens.push(Token::Star);
                }
                i += 1;
            }
            '?' => {
                tokens.push(Token::AnyChar);
                i += 1;
            }
            '[' => match parse_class(&chars[i + 1..]) {
                Some((token, used)) => {
                    tokens.push(token);
                    i += 1 + used;
                }
                None => {
                    tokens.push(Token::Literal('['));
                    i += 1;
                }
            },
            c => {
                tokens.push(Token::Literal(c));
                i += 1;
            }
        }
    }
    tokens
}

/// Parse a class body after `[`; returns the token and how many chars it used (including `]`).
fn parse_class(chars: &[char]) -> Option<(Token, usize)> {
    let mut i = 0;
    let negated = matches!(chars.first(), Some('!') | Some('^'));
    if negated {
        i += 1;
    }
    let mut items = Vec::new();
    let body_start = i;
    while i < chars.len() {
        let c = chars[i];
        if c == ']' && i > body_start {
            return Some((Token::Class { negated, items }, i + 1));
        }
        if i + 2 < chars.len() && chars[i + 1] == '-' && chars[i + 2] != ']' {
            items.push((c, chars[i + 2]));
            i += 3;
        } else {
            items.push((c, c));
            i += 1;
        }
    }
    None
}

fn token_matches_char(token: &Token, c: char) -> bool {
    match token {
        Token::Literal(l) => *l == c,
        Token::AnyChar => true,
        Token::Star => true,
        Token::Class { negated, items } => items.iter().any(|(lo, hi)| *lo <= c && c <= *hi) != *negated,
    }
}

/// Match one segment. Wildcards never match a leading `.`.
fn match_segment(tokens: &[Token], name: &str) -> bool {
    let name: Vec<char> = name.chars().collect();
    if name.first() == Some(&'.') && tokens.first() != Some(&Token::Literal('.')) {
        return false;
    }
    // Greedy match that backtracks only to the last `*` seen (earlier stars never need to move
    // again): no exponential blow-up, O(tokens × chars) at worst.
    let (mut t, mut n) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match tokens.get(t) {
            Some(Token::Star) => {
                star = Some((t, n));
                t += 1;
            }
            Some(tok) if token_matches_char(tok, name[n]) => {
                t += 1;
                n += 1;
            }
            _ => match star {
                Some((st, sn)) => {
                    t = st + 1;
                    n = sn + 1;
                    star = Some((st, sn + 1));
                }
                None => return false,
            },
        }
    }
    tokens[t.min(tokens.len())..]
        .iter()
        .all(|tok| *tok == Token::Star)
}

fn match_path(pattern: &[Segment], path: &[&str]) -> bool {
    // memo[i][j]: does pattern[i..] match path[j..]? 0 unknown, 1 yes, 2 no.
    let width = path.len() + 1;
    let mut memo = vec![0u8; (pattern.len() + 1) * width];
    match_from(pattern, path, 0, 0, &mut memo, width)
}

fn match_from(pattern: &[Segment], path: &[&str], i: usize, j: usize, memo: &mut [u8], width: usize) -> bool {
    let key = i * width + j;
    match memo[key] {
        1 => return true,
        2 => return false,
        _ => {}
    }
    let result = match pattern.get(i) {
        None => j == path.len(),
        Some(Segment::Part(tokens)) => {
            j < path.len()
                && match_segment(tokens, path[j])
                && match_from(pattern, path, i + 1, j + 1, memo, width)
        }
        Some(Segment::GlobStar) => {
            let last = i + 1 == pattern.len();
            // `**` may consume path[j..k] when none of those segments is a dot-directory; the last
            // path segment (the file) is never consumed except by a trailing `**`.
            let mut k = j;
            let mut ok = false;
            loop {
                let consumed = k - j;
                if (!last || consumed >= 1) && match_from(pattern, path, i + 1, k, memo, width) {
                    ok = true;
                    break;
                }
                if k >= path.len() || path[k].starts_with('.') {
                    break;
                }
                k += 1;
            }
            ok
        }
    };
    memo[key] = if result { 1 } else { 2 };
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    const TREE: &[&str] = &[
        "a.py",
        "sub/b.py",
        "sub/nested/c.py",
        "readme.md",
        ".hidden.py",
        ".hidden/x.py",
        ".github/workflows/ci.yml",
    ];

    fn run(pattern: &str) -> Vec<&'static str> {
        let g = GlobPattern::new(pattern).unwrap_or_else(|e| panic!("{pattern}: {e}"));
        TREE.iter().copied().filter(|p| g.matches(p)).collect()
    }

    #[test]
    fn reference_matrix() {
        let py = vec!["a.py", "sub/b.py", "sub/nested/c.py", ".hidden/x.py"];
        assert_eq!(run("*.py"), py);
        assert_eq!(run("**/*.py"), vec!["a.py", "sub/b.py", "sub/nested/c.py"]);
        assert_eq!(run("*.md"), vec!["readme.md"]);
        assert_eq!(run("sub/*.py"), vec!["sub/b.py"]);
        assert_eq!(run("sub/**/*.py"), vec!["sub/b.py", "sub/nested/c.py"]);
        assert_eq!(run("/*.py"), vec!["a.py"]);
        assert!(run("a.py/**").is_empty());
        assert_eq!(run("*.yml"), vec![".github/workflows/ci.yml"]);
        assert!(run("**/*.yml").is_empty());
        assert_eq!(run(".github/**/*.yml"), vec![".github/workflows/ci.yml"]);
        assert_eq!(run(".hidden.py"), vec![".hidden.py"]);
        assert_eq!(run(".*.py"), vec![".hidden.py"]);
        assert_eq!(
            run("*"),
            vec![
                "a.py",
                "sub/b.py",
                "sub/nested/c.py",
                "readme.md",
                ".hidden/x.py",
                ".github/workflows/ci.yml"
            ]
        );
        let mut py_md = py.clone();
        py_md.insert(3, "readme.md");
        assert_eq!(run("*.{py,md}"), py_md);
        assert_eq!(run("*.{yml,yaml}"), vec![".github/workflows/ci.yml"]);
        assert_eq!(run("?.py"), py);
        assert_eq!(run("[ab].py"), vec!["a.py", "sub/b.py"]);
        let not_a = vec!["sub/b.py", "sub/nested/c.py", ".hidden/x.py"];
        assert_eq!(run("[!a].py"), not_a);
        assert_eq!(run("[^a].py"), not_a);
    }

    #[test]
    fn edge_patterns() {
        assert!(run("sub/").is_empty());
        assert!(run("*.py/").is_empty());
        assert_eq!(run("sub//b.py"), vec!["sub/b.py"]);
        assert_eq!(run("sub/**"), vec!["sub/b.py", "sub/nested/c.py"]);
        assert_eq!(run("{a,{b,c}}.py"), vec!["a.py", "sub/b.py", "sub/nested/c.py"]);
        assert!(run("*.{py").is_empty());
        assert!(run("[a-").is_empty());
        assert!(GlobPattern::new("{probe}.py").is_ok_and(|g| g.matches("{probe}.py")));
        let g = GlobPattern::new("{x}{a,b}.py");
        assert!(
            g.as_ref()
                .is_ok_and(|g| g.matches("{x}a.py") && g.matches("{x}b.py"))
        );
        assert_eq!(GlobPattern::new("../*.py"), Err(GlobError::Traversal));
        assert_eq!(GlobPattern::new("sub/../x"), Err(GlobError::Traversal));
        let bomb = "{a,b,c,d,e,f,g,h,i,j}".repeat(4);
        assert_eq!(GlobPattern::new(&bomb), Err(GlobError::TooBroad));
    }

    #[test]
    fn no_exponential_backtracking() {
        let g = GlobPattern::new(&format!("{}b", "*a".repeat(30))).unwrap_or_else(|e| panic!("{e}"));
        assert!(!g.matches(&"a".repeat(200)));
        let deep = format!("{}x", "**/".repeat(20));
        let g = GlobPattern::new(&deep).unwrap_or_else(|e| panic!("{e}"));
        assert!(g.matches(&format!("{}x", "d/".repeat(40))));
    }
}
