//! `grep`: literal text search with three output modes.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use trellis_backend::glob::GlobPattern;
use trellis_backend::{BackendExt, GrepMatch, GrepQuery, PathFilter, VirtualPath};

use crate::files::FileAccess;
use crate::files::format::{backend_error, cap_lines, count, parse_path, quote, truncate_chars};
use crate::files::permissions::Access;
use crate::files::tools::{NOTICE_RESERVE, root, timed_out};
use crate::tool::parse_args_described as parse_args;
use crate::tool::{Tool, ToolOutput};

const DESCRIPTION: &str = "Search file contents for literal text (not a regular expression), \
case-sensitively, within single lines. `path` is the directory (searched recursively) or file to \
search; `glob` keeps only files matching a pattern such as `*.py`. `output_mode`: \
`files_with_matches` (default) lists the matching files; `content` shows the matching lines with \
their line numbers, grouped by file; `count` gives the number of matching lines per file.";

/// Files named in the "not searched" notice, at most.
const MAX_SKIPPED_LISTED: usize = 5;
/// Skipped files whose size is looked up to tell large files from binary ones, at most.
const MAX_SKIPPED_CHECKED: usize = 20;

/// What `grep` returns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OutputMode {
    /// The paths of the files with at least one matching line.
    #[default]
    FilesWithMatches,
    /// The matching lines with their line numbers, grouped by file.
    Content,
    /// The number of matching lines in each file.
    Count,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct GrepArgs {
    /// The exact text to find.
    pattern: String,
    /// Absolute path of the directory or file to search.
    #[serde(default = "root")]
    path: String,
    /// Only search files matching this glob, e.g. `*.rs` or `src/**/*.ts`.
    #[serde(default)]
    #[schemars(with = "String")]
    glob: Option<String>,
    /// What to return.
    #[serde(default)]
    output_mode: OutputMode,
}

file_tool! {
    /// `grep`: searches with [`Backend::grep`](trellis_backend::Backend::grep), leaving out files the
    /// rules do not let the model read before they are read (so they never count toward the match
    /// limit either).
    GrepTool, "grep", GrepArgs, ReadOnly
}

impl GrepTool {
    async fn run(&self, args: Value, files: &FileAccess) -> Result<ToolOutput, ToolOutput> {
        let args: GrepArgs = parse_args(self.name(), &self.schema, args)?;
        if args.pattern.is_empty() {
            return Err(ToolOutput::error(
                "pattern is empty; give the text to search for.",
            ));
        }
        if args.pattern.contains('\n') {
            return Err(ToolOutput::error(
                "pattern contains a line break, but grep matches within single lines; search for one line of it.",
            ));
        }
        let base = parse_path("path", &args.path)?;
        files.check(Access::Read, &base)?;
        let file_glob = args.glob.filter(|g| !g.is_empty());
        if let Some(g) = &file_glob
            && let Err(e) = GlobPattern::new(g)
        {
            return Err(ToolOutput::error(format!("invalid glob {}: {e}.", quote(g, 200))));
        }
        // Files the model may not read are left out before the backend reads them.
        let path_filter = (!files.permissions.rules().is_empty()).then(|| {
            let permissions = files.permissions.clone();
            PathFilter::new(move |path| permissions.allows(Access::Read, path))
        });
        let query = GrepQuery {
            file_glob,
            max_matches: files.limits.grep_max_matches.max(1),
            max_file_bytes: files.limits.max_file_bytes,
            path_filter,
            ..GrepQuery::new(args.pattern.clone(), base.clone())
        };
        let found = tokio::time::timeout(files.limits.search_timeout, files.backend.grep(&query))
            .await
            .map_err(|_| timed_out("grep", files))?
            .map_err(|e| ToolOutput::error(backend_error(&e)))?;
        // The backend applied the filter already; checked again so that a backend that ignores it
        // still never shows the model a denied file.
        let matches: Vec<&GrepMatch> = found.matches.iter().filter(|m| files.visible(&m.path)).collect();
        let skipped: Vec<&VirtualPath> = found.skipped.iter().filter(|p| files.visible(p)).collect();
        let mut notes = Vec::new();
        if found.truncated && found.matches.len() >= query.max_matches {
            notes.push(format!(
                "[stopped after {} matching lines, so the results are incomplete; narrow the search with path or glob]",
                query.max_matches
            ));
        } else if found.truncated {
            notes.push(
                "[too many files to search them all, so the results are incomplete; narrow the search with path \
                 or glob]"
                    .to_owned(),
            );
        }
        if let Some(note) = skipped_note(files, &skipped, query.max_file_bytes).await {
            notes.push(note);
        }
        if matches.is_empty() {
            if !files.backend.exists(&base).await.unwrap_or(true) {
                return Err(ToolOutput::error(format!("path not found: {base}.")));
            }
            let mut text = format!("No matches for {} under {base}.", quote(&args.pattern, 200));
            if looks_like_regex(&args.pattern) {
                text.push_str(
                    "\nNote: grep matches the pattern as literal text, so regex syntax such as `|`, `.*` or \
                     `\\d` only matches those very characters. Search for a plain piece of the text, or run \
                     one grep per alternative.",
                );
            }
            for note in notes {
                text.push_str("\n\n");
                text.push_str(&note);
            }
            return Ok(ToolOutput::text(text));
        }
        let lines = render(&matches, args.output_mode, files.limits.grep_line_chars.max(20));
        let budget = files.limits.output_budget().saturating_sub(NOTICE_RESERVE * 2);
        let (mut text, shown) = cap_lines(&lines, usize::MAX, budget);
        if shown < lines.len() {
            notes.insert(
                0,
                format!(
                    "[output cut at {} characters ({shown} of {} lines shown); narrow the search with path or glob]",
                    files.limits.output_budget(),
                    lines.len()
                ),
            );
        }
        for note in notes {
            text.push_str("\n\n");
            text.push_str(&note);
        }
        Ok(ToolOutput::text(text))
    }
}

/// A notice naming the files grep did not search because they are too large. Files skipped as
/// binary are not mentioned: grep searches text. Skipped files are told apart by their size, looked
/// up for at most [`MAX_SKIPPED_CHECKED`] of them; any beyond that are counted as "binary or too large".
async fn skipped_note(files: &FileAccess, skipped: &[&VirtualPath], max_bytes: u64) -> Option<String> {
    if skipped.is_empty() {
        return None;
    }
    let checked = &skipped[..skipped.len().min(MAX_SKIPPED_CHECKED)];
    let sizes = futures::future::join_all(checked.iter().map(|p| files.backend.stat(p))).await;
    let large: Vec<String> = checked
        .iter()
        .zip(sizes)
        .filter(|(_, stat)| stat.as_ref().is_ok_and(|e| e.size > max_bytes))
        .map(|(p, _)| p.to_string())
        .collect();
    let unchecked = skipped.len() - checked.len();
    if large.is_empty() && unchecked == 0 {
        return None;
    }
    let mut note = String::from("[");
    if !large.is_empty() {
        let listed: Vec<&str> = large
            .iter()
            .take(MAX_SKIPPED_LISTED)
            .map(String::as_str)
            .collect();
        let more = large.len().saturating_sub(MAX_SKIPPED_LISTED);
        note.push_str(&format!(
            "not searched because larger than {max_bytes} bytes: {}{}",
            listed.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        ));
    }
    if unchecked > 0 {
        if !large.is_empty() {
            note.push_str("; ");
        }
        note.push_str(&format!(
            "{} more not searched (binary or larger than {max_bytes} bytes)",
            count(unchecked, "file", "files")
        ));
    }
    note.push(']');
    Some(note)
}

/// The output lines for `matches` (in path, then line order).
fn render(matches: &[&GrepMatch], mode: OutputMode, line_chars: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut groups: Vec<(&str, Vec<&GrepMatch>)> = Vec::new();
    for m in matches {
        match groups.last_mut() {
            Some((path, group)) if *path == m.path.as_str() => group.push(m),
            _ => groups.push((m.path.as_str(), vec![m])),
        }
    }
    for (path, group) in groups {
        match mode {
            OutputMode::FilesWithMatches => out.push(path.to_owned()),
            OutputMode::Count => out.push(format!("{path}: {}", group.len())),
            OutputMode::Content => {
                out.push(path.to_owned());
                for m in group {
                    let (text, cut) = truncate_chars(&m.text, line_chars);
                    let rest = if cut {
                        format!(" … [{} more characters]", m.text.chars().count() - line_chars)
                    } else {
                        String::new()
                    };
                    out.push(format!("  {}: {text}{rest}", m.line));
                }
            }
        }
    }
    out
}

/// True when a pattern is probably meant as a regular expression: it has `|`, `.*`, `.+`, or a
/// backslash escape such as `\d`, `\w`, `\s`, `\b`, `\.` or `\(`.
fn looks_like_regex(pattern: &str) -> bool {
    if pattern.contains('|') || pattern.contains(".*") || pattern.contains(".+") {
        return true;
    }
    let bytes = pattern.as_bytes();
    bytes
        .windows(2)
        .any(|w| w[0] == b'\\' && b"dDwWsSbB.()[]{}*+?^$|".contains(&w[1]))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;
    use trellis_backend::testing::RecordingBackend;
    use trellis_backend::{Backend, StateBackend, WriteMode};

    use super::*;
    use crate::files::{HiddenPaths, Limits, PermissionRule, Permissions};
    use crate::tool::{DetachedRun, ToolOutput};

    fn p(s: &str) -> VirtualPath {
        VirtualPath::parse(s).unwrap()
    }

    /// `/a/secret.txt` (ten matching lines, and a file too large to search beside it) sorts before
    /// `/z/visible.txt` (one matching line); with `hidden_too`, so do `/h/hidden.txt` and
    /// `/h/large.txt`, alike. Read access to `/a/**` is denied; grep collects at most three lines
    /// and searches files up to 1,000 bytes.
    /// The backend records every path whose content or metadata it is asked for; it keeps the
    /// trait's default `glob` and `grep`, so a search's reads all pass through it.
    async fn setup(hidden_too: bool) -> (Arc<RecordingBackend>, GrepTool) {
        let backend = Arc::new(RecordingBackend::new(Arc::new(StateBackend::new())));
        let many: String = (1..=10).map(|i| format!("needle {i} hunter2\n")).collect();
        let large = format!("needle\n{}", "x".repeat(2_000));
        let mut tree = vec![
            ("/a/secret.txt", many.clone()),
            ("/a/large.txt", large.clone()),
            ("/z/visible.txt", "one needle here\n".to_owned()),
        ];
        if hidden_too {
            tree.extend([("/h/hidden.txt", many), ("/h/large.txt", large)]);
        }
        for (path, text) in tree {
            backend
                .write(&p(path), text.into(), WriteMode::CreateNew)
                .await
                .unwrap();
        }
        let files = FileAccess::new(backend.clone())
            .with_permissions(Permissions::new(vec![
                PermissionRule::deny("/a/**", &[Access::Read]).unwrap(),
            ]))
            .with_limits(Limits {
                grep_max_matches: 3,
                max_file_bytes: 1_000,
                ..Limits::default()
            });
        (backend, GrepTool::new(files))
    }

    async fn grep(tool: &GrepTool, run: &DetachedRun, mode: &str) -> ToolOutput {
        let args = json!({"pattern": "needle", "output_mode": mode});
        tool.call(args, &run.context("call_1")).await.unwrap()
    }

    /// Only the visible match is collected: the denied file is neither read nor counted toward
    /// `grep_max_matches`, so nothing says the search stopped early.
    fn assert_only_the_visible_match(out: &ToolOutput, mode: &str) {
        let text = out.text_content();
        let expected = match mode {
            "content" => "/z/visible.txt\n  1: one needle here",
            "count" => "/z/visible.txt: 1",
            _ => "/z/visible.txt",
        };
        assert!(!out.is_error, "{text}");
        assert_eq!(text, expected, "{mode}");
    }

    #[tokio::test]
    async fn grep_never_reads_or_counts_denied_files() {
        let (backend, tool) = setup(false).await;
        let run = DetachedRun::new();
        for mode in ["content", "count", "files_with_matches"] {
            let out = grep(&tool, &run, mode).await;
            assert_only_the_visible_match(&out, mode);
        }
        let touched = backend.touched();
        assert!(touched.iter().all(|t| !t.starts_with("/a/")), "{touched:?}");
        assert!(touched.contains(&"/z/visible.txt".to_owned()), "{touched:?}");
    }

    #[tokio::test]
    async fn grep_through_hidden_paths_never_reads_or_counts_hidden_or_denied_files() {
        // A hidden subtree below the base (the search walks without it), and one elsewhere (the
        // search goes straight to the inner backend's grep).
        for (hidden, hidden_too) in [("/h", true), ("/elsewhere", false)] {
            let (backend, tool) = setup(hidden_too).await;
            let run = DetachedRun::new().with_extension(HiddenPaths::new([p(hidden)]));
            for mode in ["content", "count", "files_with_matches"] {
                let out = grep(&tool, &run, mode).await;
                assert_only_the_visible_match(&out, mode);
            }
            let touched = backend.touched();
            let unseen = |t: &String| !t.starts_with("/a/") && !t.starts_with("/h/");
            assert!(touched.iter().all(unseen), "{hidden}: {touched:?}");
            assert!(
                touched.contains(&"/z/visible.txt".to_owned()),
                "{hidden}: {touched:?}"
            );
        }
    }

    #[test]
    fn regex_heuristic() {
        for p in ["foo|bar", "fn .*main", "a.+b", r"\d+", r"foo\(", r"\bword"] {
            assert!(looks_like_regex(p), "{p}");
        }
        for p in ["foo.bar", "(x)", "[a]", "what?", "^start", "end$", r"C:\path"] {
            assert!(!looks_like_regex(p), "{p}");
        }
    }
}
