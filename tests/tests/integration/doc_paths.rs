//! Every repository path the documentation names exists.
//!
//! Docs drift where files move: a page that sends a reader to `crates/agent/src/builder.rs` after
//! that file became `builder/mod.rs` costs them a search. This test reads `README.md`, every page
//! under `docs/` and every crate's `README.md`, and checks two kinds of reference:
//!
//! - a backticked path that starts at a top-level folder of the repository (`crates/…`, `docs/…`,
//!   `tests/…`, `xtask/…`, `examples/…`, `fuzz/…`, `.ci/…`), or, in a crate's README, at one of
//!   the crate's own folders (`src/…`, `tests/…`, `benches/…`); a trailing `:LINE` or
//!   `:FROM-TO` is dropped;
//! - the target of a relative Markdown link (`[text](../other.md#anchor)`), resolved from the
//!   page's folder, when it stays inside the repository.
//!
//! Patterns are not paths: a reference holding `*`, `{`, `<` or `…` is skipped, and so is one
//! under a folder `.gitignore` lists (`fuzz/artifacts/` and the like only exist after a run).

#![allow(clippy::expect_used)]

use std::path::{Path, PathBuf};

/// Top-level folders whose paths the docs may name.
const REPO_ROOTS: &[&str] = &[
    "crates/",
    "docs/",
    "tests/",
    "xtask/",
    "examples/",
    "fuzz/",
    ".ci/",
];
/// Folders a crate README names relative to its crate.
const CRATE_ROOTS: &[&str] = &["src/", "tests/", "benches/"];

fn repo_root() -> PathBuf {
    // tests/ is one level below the workspace root.
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// The pages to check: README.md, docs/**/*.md and crates/*/README.md.
fn pages(root: &Path) -> Vec<PathBuf> {
    let mut pages = vec![root.join("README.md")];
    let mut dirs = vec![root.join("docs")];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                pages.push(path);
            }
        }
    }
    if let Ok(crates) = std::fs::read_dir(root.join("crates")) {
        for krate in crates.flatten() {
            let readme = krate.path().join("README.md");
            if readme.is_file() {
                pages.push(readme);
            }
        }
    }
    pages.sort();
    pages
}

/// Folders listed in the root `.gitignore` (`target/`, `fuzz/artifacts/`, …): generated, so a
/// doc may name a path under them that a fresh clone does not have.
fn ignored_dirs(root: &Path) -> Vec<String> {
    std::fs::read_to_string(root.join(".gitignore"))
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .filter(|line| line.ends_with('/') && !line.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

/// The page's lines outside code fences (a fence's text is code, not a reference).
fn prose_lines(text: &str) -> impl Iterator<Item = &str> {
    let mut in_fence = false;
    text.lines().filter(move |line| {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            return false;
        }
        !in_fence
    })
}

/// What stands between each `open` and the next `close` on one line.
fn between<'a>(line: &'a str, open: &str, close: char) -> Vec<&'a str> {
    let mut found = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find(open) {
        let after = &rest[at + open.len()..];
        let Some(end) = after.find(close) else { break };
        found.push(&after[..end]);
        rest = &after[end + 1..];
    }
    found
}

/// The contents of every `` `…` `` span on the page.
fn backticked(text: &str) -> Vec<&str> {
    prose_lines(text)
        .flat_map(|line| between(line, "`", '`'))
        .collect()
}

/// The targets of `](target)` links on the page.
fn link_targets(text: &str) -> Vec<&str> {
    prose_lines(text)
        .flat_map(|line| between(line, "](", ')'))
        .collect()
}

/// `path` without a trailing `:LINE` / `:FROM-TO` and sentence punctuation.
fn without_line_suffix(path: &str) -> &str {
    let path = path.trim_end_matches(['.', ',', ';']);
    match path.rsplit_once(':') {
        Some((file, line)) if !line.is_empty() && line.chars().all(|c| c.is_ascii_digit() || c == '-') => {
            file
        }
        _ => path,
    }
}

/// `path` with `.` and `..` components folded away, without touching the file system.
fn lexically_normal(path: &Path) -> PathBuf {
    let mut normal = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                normal.pop();
            }
            std::path::Component::CurDir => {}
            other => normal.push(other),
        }
    }
    normal
}

fn is_pattern(path: &str) -> bool {
    path.contains(['*', '{', '<', '…', ' ', '$'])
}

/// The missing references of one page, as `page: reference` lines.
fn missing_on_page(root: &Path, page: &Path, ignored: &[String]) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(page) else {
        return vec![format!("{}: cannot be read", page.display())];
    };
    let dir = page.parent().unwrap_or(root);
    let crate_dir = (page.file_name().is_some_and(|n| n == "README.md")
        && dir.parent() == Some(&root.join("crates")))
    .then_some(dir);
    let shown = |page: &Path| page.strip_prefix(root).unwrap_or(page).display().to_string();
    let mut missing = Vec::new();

    for span in backticked(&text) {
        let path = without_line_suffix(span);
        if is_pattern(path)
            || ignored
                .iter()
                .any(|dir| path.starts_with(dir.as_str()) || dir.strip_suffix('/') == Some(path))
        {
            continue;
        }
        let path = path.strip_prefix("./").unwrap_or(path);
        let from_crate = crate_dir.filter(|_| CRATE_ROOTS.iter().any(|r| path.starts_with(r)));
        let from_repo = REPO_ROOTS.iter().any(|r| path.starts_with(r));
        let exists = match (from_crate, from_repo) {
            (Some(krate), _) if krate.join(path).exists() => true,
            (_, true) => root.join(path).exists(),
            (Some(krate), false) => krate.join(path).exists(),
            (None, false) => continue,
        };
        if !exists {
            missing.push(format!("{}: `{span}`", shown(page)));
        }
    }
    for target in link_targets(&text) {
        let target = target.split('#').next().unwrap_or_default();
        if target.is_empty() || target.contains("://") || target.starts_with("mailto:") || is_pattern(target)
        {
            continue;
        }
        let resolved = lexically_normal(&dir.join(target));
        // A link that leaves the repository (the steering repo's `shared/` beside a checkout) is not
        // a repository path: whether it resolves depends on where the clone sits.
        if resolved.starts_with(root) && !resolved.exists() {
            missing.push(format!("{}: link ({target})", shown(page)));
        }
    }
    missing
}

#[test]
fn every_path_the_docs_name_exists() {
    let root = repo_root();
    let ignored = ignored_dirs(&root);
    let pages = pages(&root);
    assert!(
        pages.len() > 20,
        "found only {} pages under {}",
        pages.len(),
        root.display()
    );
    let missing: Vec<String> = pages
        .iter()
        .flat_map(|page| missing_on_page(&root, page, &ignored))
        .collect();
    assert!(
        missing.is_empty(),
        "the docs name {} paths that do not exist:\n{}",
        missing.len(),
        missing.join("\n")
    );
}

#[test]
fn the_checker_reports_a_missing_path_and_accepts_real_ones() {
    let root = repo_root();
    // Inside the repository, so that its links count as repository paths.
    let dir = tempfile::Builder::new()
        .prefix(".doc-paths-test")
        .tempdir_in(&root)
        .expect("a temporary folder in the repository");
    let page = dir.path().join("page.md");
    std::fs::write(dir.path().join("other.md"), "# other\n").expect("write the linked page");
    std::fs::write(
        &page,
        "See `crates/agent/src/no_such_file.rs:12`, `crates/backend/src/lib.rs:1-9`,\n\
         `crates/*/README.md`, `fuzz/artifacts/x`, [a link](no-such-page.md#x) and \
         [another page](other.md#top), [outside](../../../../outside-the-repo.md).\n```rust\n// `crates/inside/a/fence.rs`\n```\n",
    )
    .expect("write the page");
    let missing = missing_on_page(&root, &page, &ignored_dirs(&root));
    assert_eq!(missing.len(), 2, "{missing:?}");
    assert!(
        missing[0].ends_with("`crates/agent/src/no_such_file.rs:12`"),
        "{missing:?}"
    );
    assert!(missing[1].ends_with("link (no-such-page.md)"), "{missing:?}");
}
