//! [`PreviousIndex`]: what an earlier scan learned, by path, for a rescan to reuse.
//!
//! A rescan asks, for every `SKILL.md` it lists, whether the earlier catalog holds that path at
//! the version listed now; if so the entry (and the issues found in it) is reused instead of the
//! file being read. The index either borrows the earlier catalog (a live catalog other threads
//! still hold: reused entries are cloned) or owns it (a catalog decoded from a persisted cache
//! that nothing else holds: reused entries are moved out, so the library is never in memory twice).
//!
//! Duplicate-name issues are not carried over: they depend on the whole new catalog and are found
//! again when it is merged.

use std::borrow::Cow;
use std::collections::HashMap;

use crate::backend::{Version, VirtualPath};

use crate::skills::catalog::{SkillCatalog, SkippedFile};
use crate::skills::discovery::{Candidate, Outcome};
use crate::skills::parse::skill::{IssueCode, SkillIssue, SkillMetadata};

/// An earlier catalog's entries by path, borrowed (`'a`) or owned (`'static`).
pub(in crate::skills) struct PreviousIndex<'a> {
    loaded: HashMap<Cow<'a, VirtualPath>, Cow<'a, SkillMetadata>>,
    skipped: HashMap<Cow<'a, VirtualPath>, Cow<'a, SkippedFile>>,
    issues: HashMap<Cow<'a, VirtualPath>, Vec<Cow<'a, SkillIssue>>>,
}

impl<'a> PreviousIndex<'a> {
    /// Borrow `catalog`: what is reused is cloned.
    pub(in crate::skills) fn borrowed(catalog: &'a SkillCatalog) -> Self {
        let mut issues: HashMap<Cow<'a, VirtualPath>, Vec<Cow<'a, SkillIssue>>> = HashMap::new();
        for issue in catalog
            .issues()
            .iter()
            .filter(|i| i.code != IssueCode::DuplicateName)
        {
            issues
                .entry(Cow::Borrowed(&issue.path))
                .or_default()
                .push(Cow::Borrowed(issue));
        }
        Self {
            loaded: catalog
                .skills()
                .iter()
                .chain(catalog.shadowed())
                .map(|s| (Cow::Borrowed(&s.path), Cow::Borrowed(s)))
                .collect(),
            skipped: catalog
                .skipped()
                .iter()
                .map(|s| (Cow::Borrowed(&s.path), Cow::Borrowed(s)))
                .collect(),
            issues,
        }
    }

    /// Take `catalog`: what is reused moves into the new catalog.
    pub(in crate::skills) fn owned(catalog: SkillCatalog) -> PreviousIndex<'static> {
        let (skills, found, shadowed, skipped) = catalog.into_parts();
        let mut issues: HashMap<Cow<'static, VirtualPath>, Vec<Cow<'static, SkillIssue>>> = HashMap::new();
        for issue in found.into_iter().filter(|i| i.code != IssueCode::DuplicateName) {
            issues
                .entry(Cow::Owned(issue.path.clone()))
                .or_default()
                .push(Cow::Owned(issue));
        }
        PreviousIndex {
            loaded: skills
                .into_iter()
                .chain(shadowed)
                .map(|s| (Cow::Owned(s.path.clone()), Cow::Owned(s)))
                .collect(),
            skipped: skipped
                .into_iter()
                .map(|s| (Cow::Owned(s.path.clone()), Cow::Owned(s)))
                .collect(),
            issues,
        }
    }

    /// The `SKILL.md` paths the earlier catalog holds below `dir` (loaded, shadowed or skipped).
    pub(in crate::skills) fn paths_below<'s>(&'s self, dir: &VirtualPath) -> Vec<&'s VirtualPath> {
        self.loaded
            .keys()
            .chain(self.skipped.keys())
            .map(AsRef::as_ref)
            .filter(|p: &&VirtualPath| p.starts_with(dir))
            .collect()
    }

    /// The earlier outcome of `candidate`, taken out of the index, when the earlier catalog holds
    /// its path at the version listed now; `None` (read the file) otherwise, or when nothing was
    /// listed for it.
    pub(in crate::skills) fn reuse(&mut self, candidate: &Candidate) -> Option<Outcome> {
        let version = candidate.listed.as_ref()?;
        let at = &candidate.path;
        if let Some(skill) = take_at(&mut self.loaded, at, version, |s| s.version.as_ref()) {
            let skill = SkillMetadata {
                source: candidate.source,
                ..skill
            };
            return Some(Outcome::Loaded(skill, self.take_issues(at)));
        }
        let skipped = take_at(&mut self.skipped, at, version, |s| s.version.as_ref())?;
        let skipped = SkippedFile {
            source: candidate.source,
            ..skipped
        };
        Some(Outcome::Skipped(skipped, self.take_issues(at)))
    }

    fn take_issues(&mut self, path: &VirtualPath) -> Vec<SkillIssue> {
        self.issues
            .remove(path)
            .map(|found| found.into_iter().map(Cow::into_owned).collect())
            .unwrap_or_default()
    }
}

/// The entry at `path` taken out of `map` (moved if owned, cloned if borrowed), when it was
/// recorded at `version`; otherwise it stays.
fn take_at<'a, T: Clone>(
    map: &mut HashMap<Cow<'a, VirtualPath>, Cow<'a, T>>,
    path: &VirtualPath,
    version: &Version,
    version_of: impl Fn(&T) -> Option<&Version>,
) -> Option<T> {
    if version_of(map.get(path)?) != Some(version) {
        return None;
    }
    map.remove(path).map(Cow::into_owned)
}
