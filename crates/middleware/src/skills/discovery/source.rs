//! Skill sources: where skills are discovered, in priority order, each with a label.

use std::fmt;
use std::sync::Arc;

use crate::backend::{Backend, VirtualPath};
use serde::{Deserialize, Serialize};

/// Longest label accepted, in characters.
pub const MAX_LABEL_CHARS: usize = 64;

/// One place skills live: a directory on a backend whose direct subdirectories are skills. Sources
/// are given in order; a later source overrides an earlier one's skill of the same name.
///
/// Built only through [`SkillSource::new`] / [`SkillSource::labeled`], which reject malformed input
/// (an unparsable path, a blank or multi-line label), so a bad configuration fails when the
/// middleware is built, not on the first run.
#[derive(Clone)]
pub struct SkillSource {
    backend: Arc<dyn Backend>,
    info: SourceInfo,
}

impl fmt::Debug for SkillSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SkillSource")
            .field("path", &self.info.path)
            .field("label", &self.info.label)
            .finish_non_exhaustive()
    }
}

/// What the catalog remembers of a source: its path and label.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceInfo {
    /// The source directory.
    pub path: VirtualPath,
    /// The label shown to the model (given, or derived from the path).
    pub label: String,
}

/// Why a source was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// The path is not a valid virtual path.
    #[error("invalid skill source path {path:?}: {reason}")]
    InvalidPath {
        /// The input.
        path: String,
        /// Why.
        reason: String,
    },
    /// The label is blank, too long or holds control characters.
    #[error("invalid skill source label {label:?}: {reason}")]
    InvalidLabel {
        /// The input.
        label: String,
        /// Why.
        reason: &'static str,
    },
}

impl SkillSource {
    /// A source at `path` on `backend`, labelled from its path ([`derive_label`]).
    pub fn new(backend: Arc<dyn Backend>, path: &str) -> Result<Self, SourceError> {
        let path = parse_path(path)?;
        let label = derive_label(&path);
        Ok(Self {
            backend,
            info: SourceInfo { path, label },
        })
    }

    /// A source with an explicit label (used verbatim, trimmed). Use it when two sources would
    /// derive the same label (`~/.claude/skills` and `/repo/.claude/skills`).
    pub fn labeled(backend: Arc<dyn Backend>, path: &str, label: &str) -> Result<Self, SourceError> {
        let path = parse_path(path)?;
        let label = check_label(label)?;
        Ok(Self {
            backend,
            info: SourceInfo { path, label },
        })
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// The source directory.
    pub fn path(&self) -> &VirtualPath {
        &self.info.path
    }

    /// The label.
    pub fn label(&self) -> &str {
        &self.info.label
    }

    /// Path and label.
    pub fn info(&self) -> &SourceInfo {
        &self.info
    }
}

fn parse_path(path: &str) -> Result<VirtualPath, SourceError> {
    VirtualPath::parse(path).map_err(|e| SourceError::InvalidPath {
        path: path.to_owned(),
        reason: e.to_string(),
    })
}

fn check_label(label: &str) -> Result<String, SourceError> {
    let trimmed = label.trim();
    let reason = if trimmed.is_empty() {
        Some("it is blank")
    } else if trimmed.chars().any(char::is_control) {
        Some("it holds a control character (a newline?)")
    } else if trimmed.chars().count() > MAX_LABEL_CHARS {
        Some("it is longer than 64 characters")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(SourceError::InvalidLabel {
            label: label.to_owned(),
            reason,
        }),
        None => Ok(trimmed.to_owned()),
    }
}

/// The label of a source path, as the reference derives it:
/// * the root → `Unnamed`;
/// * a last segment `built_in_skills` (any case) → `Built-in`;
/// * a last segment `skills` (any case) names its parent: leading dots dropped, `_` and `-` read
///   as spaces, each word capitalized (`/home/u/.claude/skills` → `Claude`, `/my_team/skills` → `My
///   Team`); a `skills` with no usable parent falls through to the next rule;
/// * otherwise the last segment with its first letter upper-cased and the rest lower-cased
///   (`/skills/user` → `User`, `/foo/my_custom` → `My_custom`).
pub fn derive_label(path: &VirtualPath) -> String {
    let mut segments = path.segments().rev();
    let Some(leaf) = segments.next() else {
        return "Unnamed".to_owned();
    };
    if leaf.eq_ignore_ascii_case("built_in_skills") {
        return "Built-in".to_owned();
    }
    if leaf.eq_ignore_ascii_case("skills")
        && let Some(parent) = segments.next()
    {
        let words: Vec<String> = parent
            .trim_start_matches('.')
            .split(['_', '-', ' '])
            .filter(|w| !w.is_empty())
            .map(capitalize)
            .collect();
        if !words.is_empty() {
            return words.join(" ");
        }
    }
    capitalize(leaf)
}

fn capitalize(word: &str) -> String {
    let mut chars = word.chars();
    match chars.next() {
        Some(first) => first
            .to_uppercase()
            .chain(chars.flat_map(char::to_lowercase))
            .collect(),
        None => String::new(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn label(p: &str) -> String {
        derive_label(&VirtualPath::parse(p).unwrap())
    }

    #[test]
    fn labels_follow_the_reference_rules() {
        assert_eq!(label("/skills/user/"), "User");
        assert_eq!(label("/skills/built_in_skills"), "Built-in");
        assert_eq!(label("/home/u/.claude/skills"), "Claude");
        assert_eq!(label("/.agents/skills"), "Agents");
        assert_eq!(label("/.deepagents/skills"), "Deepagents");
        assert_eq!(label("/my_team/skills"), "My Team");
        assert_eq!(label("/skills"), "Skills");
        assert_eq!(label("skills"), "Skills");
        assert_eq!(label("/foo/my_custom"), "My_custom");
        assert_eq!(label("/"), "Unnamed");
        assert_eq!(label("/.../skills"), "Skills");
    }
}
