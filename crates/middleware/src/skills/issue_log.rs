//! Logging what discovery found wrong, at a scale of tens of thousands of skills.
//!
//! One WARN line per source and kind (skipped, or loaded with a warning), with counts by issue
//! code; each skill's own line is at INFO (`trellis -v`), and every issue is in the catalog (and in
//! `trellis skills validate --json`). A registry with a warning per skill used to print one log line
//! per skill; it now prints at most two per source.

use std::collections::BTreeMap;

use super::skill::{Severity, SkillIssue};
use super::source::SkillSource;

/// Log `issues` (see the module docs).
pub(crate) fn log_issues(sources: &[SkillSource], issues: &[SkillIssue]) {
    // (source, skipped?) → code → count.
    let mut summary: BTreeMap<(String, bool), BTreeMap<String, usize>> = BTreeMap::new();
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
        *summary
            .entry((source, skipped))
            .or_default()
            .entry(code)
            .or_default() += 1;
    }
    for ((source, skipped), codes) in summary {
        let total: usize = codes.values().sum();
        let counts: Vec<String> = codes.iter().map(|(code, n)| format!("{code} {n}")).collect();
        let what = if skipped {
            "skipping skills"
        } else {
            "skills loaded with warnings"
        };
        tracing::warn!(
            source = %source,
            "{what} in {source}: {total} ({}); -v shows each, `trellis skills validate` explains them",
            counts.join(", ")
        );
    }
}
