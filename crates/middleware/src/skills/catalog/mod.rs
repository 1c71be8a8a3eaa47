//! [`SkillCatalog`]: the result of discovery, kept in thread state and rendered into the prompt.

pub(crate) mod layers;
pub(crate) mod personal;
pub(crate) mod shared_catalog;
pub(crate) mod views;

use std::collections::HashMap;

use crate::backend::{Version, VirtualPath};
use serde::{Deserialize, Serialize};

use crate::skills::discovery::source::SourceInfo;
use crate::skills::parse::skill::{SkillIssue, SkillMetadata};

/// Every skill found in an ordered list of sources, after overrides.
///
/// * `skills` are ordered by source (in the order the sources were given), then by name; a name
///   appears once (a later source overrides an earlier one, see [`SkillCatalog::shadowed`]);
/// * `warnings` are the source-level failures (a source that could not be listed): the only
///   diagnostics shown to the model, inside an untrusted-diagnostics block;
/// * `issues` are per-file findings (skipped files, loaded-with-warning files, spec-only notes), for
///   logs and `trellis skills validate`;
/// * `shadowed` and `skipped` remember every other `SKILL.md` that was read, with its version tag,
///   so a rescan re-reads only files that changed.
///
/// Serializable, so it can be cached in thread state. Two catalogs built from the same files are
/// equal, and render to the same bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkillCatalog {
    sources: Vec<SourceInfo>,
    skills: Vec<SkillMetadata>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    warnings: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    issues: Vec<SkillIssue>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    shadowed: Vec<SkillMetadata>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    skipped: Vec<SkippedFile>,
}

/// What [`SkillCatalog::into_parts`] moves out: skills, issues, shadowed skills, skipped files.
pub(crate) type CatalogParts = (
    Vec<SkillMetadata>,
    Vec<SkillIssue>,
    Vec<SkillMetadata>,
    Vec<SkippedFile>,
);

/// A `SKILL.md` that was read but not loaded (its issues say why).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkippedFile {
    /// The `SKILL.md` path.
    pub path: VirtualPath,
    /// The index of its source.
    pub source: usize,
    /// Its version tag when it was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<Version>,
}

impl SkillCatalog {
    /// A catalog of the given skills (each one's `source` indexes `sources`). Later sources win on
    /// name clashes, as in discovery; the result is put in catalog order.
    pub fn new(sources: Vec<SourceInfo>, skills: Vec<SkillMetadata>, warnings: Vec<String>) -> Self {
        let mut by_name: HashMap<String, SkillMetadata> = HashMap::new();
        let mut shadowed = Vec::new();
        for skill in skills {
            match by_name.get(&skill.name) {
                Some(existing) if existing.source > skill.source => shadowed.push(skill),
                _ => {
                    if let Some(old) = by_name.insert(skill.name.clone(), skill) {
                        shadowed.push(old);
                    }
                }
            }
        }
        let mut skills: Vec<SkillMetadata> = by_name.into_values().collect();
        sort_skills(&mut skills);
        sort_skills(&mut shadowed);
        Self {
            sources,
            skills,
            warnings,
            issues: Vec::new(),
            shadowed,
            skipped: Vec::new(),
        }
    }

    pub(crate) fn from_parts(
        sources: Vec<SourceInfo>,
        mut skills: Vec<SkillMetadata>,
        warnings: Vec<String>,
        issues: Vec<SkillIssue>,
        mut shadowed: Vec<SkillMetadata>,
        mut skipped: Vec<SkippedFile>,
    ) -> Self {
        sort_skills(&mut skills);
        sort_skills(&mut shadowed);
        skipped.sort_by(|a, b| a.path.cmp(&b.path));
        Self {
            sources,
            skills,
            warnings,
            issues,
            shadowed,
            skipped,
        }
    }

    /// The parts [`from_parts`](Self::from_parts) takes, moved out (skills, issues, shadowed and
    /// skipped; sources and warnings are dropped): for re-rooting a large catalog without a copy.
    pub(crate) fn into_parts(self) -> CatalogParts {
        (self.skills, self.issues, self.shadowed, self.skipped)
    }

    /// The sources, in priority order (the last one is the highest).
    pub fn sources(&self) -> &[SourceInfo] {
        &self.sources
    }

    /// The skills, by source then name.
    pub fn skills(&self) -> &[SkillMetadata] {
        &self.skills
    }

    /// Number of skills.
    pub fn len(&self) -> usize {
        self.skills.len()
    }

    /// True when there is no skill.
    pub fn is_empty(&self) -> bool {
        self.skills.is_empty()
    }

    /// The skill called `name`.
    pub fn get(&self, name: &str) -> Option<&SkillMetadata> {
        self.skills.iter().find(|s| s.name == name)
    }

    /// The skill whose `SKILL.md` is at `path`.
    pub fn by_path(&self, path: &VirtualPath) -> Option<&SkillMetadata> {
        self.skills.iter().find(|s| &s.path == path)
    }

    /// Source-level warnings (shown to the model, escaped).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Per-file issues, in path order.
    pub fn issues(&self) -> &[SkillIssue] {
        &self.issues
    }

    /// Skills that lost to a same-named skill of a later source (or a later path of the same one).
    pub fn shadowed(&self) -> &[SkillMetadata] {
        &self.shadowed
    }

    /// Files that were read but not loaded.
    pub fn skipped(&self) -> &[SkippedFile] {
        &self.skipped
    }

    /// The same catalog with only the skills `keep` accepts (sources, warnings and bookkeeping are
    /// kept). This is how per-user visibility is applied before rendering.
    pub fn filtered(&self, mut keep: impl FnMut(&SkillMetadata) -> bool) -> Self {
        Self {
            skills: self.skills.iter().filter(|s| keep(s)).cloned().collect(),
            ..self.clone()
        }
    }

    /// The skills `viewer` may see under `policy`.
    pub fn visible_to(&self, policy: &dyn SkillVisibility, viewer: &Viewer) -> Self {
        self.filtered(|s| policy.is_visible(s, viewer))
    }
}

fn sort_skills(skills: &mut [SkillMetadata]) {
    skills.sort_unstable_by(|a, b| (a.source, &a.name, &a.path).cmp(&(b.source, &b.name, &b.path)));
}

/// Who is looking at the catalog: the run's user and roles.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Viewer {
    /// The user, when the run has one.
    pub user_id: Option<String>,
    /// The user's roles.
    pub roles: Vec<String>,
}

impl Viewer {
    /// A viewer with an id and roles.
    pub fn new(user_id: impl Into<String>, roles: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            user_id: Some(user_id.into()),
            roles: roles.into_iter().map(Into::into).collect(),
        }
    }

    /// True when the viewer holds `role`.
    pub fn has_role(&self, role: &str) -> bool {
        self.roles.iter().any(|r| r == role)
    }
}

/// Decides which skills a viewer may see (in the prompt, in search) and read or activate.
/// Any `Fn(&SkillMetadata, &Viewer) -> bool` is one.
pub trait SkillVisibility: Send + Sync {
    /// True when `viewer` may see and use `skill`.
    fn is_visible(&self, skill: &SkillMetadata, viewer: &Viewer) -> bool;
}

impl<F: Fn(&SkillMetadata, &Viewer) -> bool + Send + Sync> SkillVisibility for F {
    fn is_visible(&self, skill: &SkillMetadata, viewer: &Viewer) -> bool {
        self(skill, viewer)
    }
}

/// A ready-made policy: a skill whose `metadata.<key>` lists roles (space-separated) is visible only
/// to viewers holding at least one of them; a skill without that key is visible to everyone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolesFromMetadata {
    key: String,
}

impl RolesFromMetadata {
    /// Read the roles from `metadata.<key>`.
    pub fn new(key: impl Into<String>) -> Self {
        Self { key: key.into() }
    }
}

impl SkillVisibility for RolesFromMetadata {
    fn is_visible(&self, skill: &SkillMetadata, viewer: &Viewer) -> bool {
        match skill.metadata.get(&self.key) {
            None => true,
            Some(roles) => roles.split_whitespace().any(|r| viewer.has_role(r)),
        }
    }
}
