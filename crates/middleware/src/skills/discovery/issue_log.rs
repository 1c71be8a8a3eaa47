//! Logging what discovery found wrong, at a scale of tens of thousands of skills.
//!
//! One WARN line per source and issue code, with the count, whether those skills were skipped or
//! loaded, and the first path as an example; each skill's own line is at INFO (`trellis -v`), and
//! every issue is in the catalog (and in `trellis skills list --json` / `skills validate --json`).
//! A registry with a warning per skill used to print one log line per skill; it now prints one per
//! source and code (a few dozen at most: there are that many codes).

use std::collections::BTreeMap;

use crate::skills::discovery::source::SkillSource;
use crate::skills::parse::skill::{Severity, SkillIssue};

/// Log `issues` (see the module docs).
pub(crate) fn log_issues(sources: &[SkillSource], issues: &[SkillIssue]) {
    // (source, code, skipped?) → (count, first path).
    let mut summary: BTreeMap<(String, String, bool), (usize, String)> = BTreeMap::new();
    for issue in issues {
        let skipped = match issue.severity() {
            Severity::Skipped => {
                tracing::info!(path = %issue.path, "skipping skill: {}", issue.message);
                true
            }
            Severity::Warning => {
                tracing::info!(path = %issue.path, "skill loaded with a warning: {}", issue.message);
                false
            }
            Severity::Spec => {
                tracing::debug!(path = %issue.path, "{}", issue.message);
                continue;
            }
        };
        let source = sources
            .iter()
            .map(SkillSource::path)
            .filter(|p| issue.path.starts_with(p))
            .max_by_key(|p| p.depth())
            .map_or_else(|| "(no source)".to_owned(), ToString::to_string);
        let code = serde_json::to_value(issue.code)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_else(|| format!("{:?}", issue.code));
        let entry = summary
            .entry((source, code, skipped))
            .or_insert_with(|| (0, issue.path.to_string()));
        entry.0 += 1;
    }
    for ((source, code, skipped), (count, first)) in summary {
        let what = if skipped {
            "skipped"
        } else {
            "loaded with a warning"
        };
        tracing::warn!(
            source = %source,
            code = %code,
            count,
            "{source}: {count} skill(s) {what} [{code}], first {first}; -v shows each, `trellis skills validate` explains them"
        );
    }
}
