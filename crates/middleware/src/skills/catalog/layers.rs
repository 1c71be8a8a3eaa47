//! [`LayeredCatalog`]: the organisation's catalog with one user's personal skills over it, without
//! copying the organisation's.
//!
//! The organisation's catalog (the agent's sources) is one `Arc` shared by every user; a user's
//! personal skills are a small catalog of their own. The layered view answers lookups from both:
//! the personal layer is the highest-priority source, so a personal skill with an organisation
//! skill's name **shadows it for that user only** (the organisation's skill is not listed, found,
//! searched or activated for them), and a notice saying so is one of the catalog's warnings. Other
//! users, and the organisation's catalog itself, are unaffected.

use std::sync::Arc;

use crate::backend::VirtualPath;
use crate::skills::catalog::SkillCatalog;
use crate::skills::discovery::source::SourceInfo;
use crate::skills::parse::skill::SkillMetadata;

/// Which layer a skill comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer {
    /// The agent's (organisation's) sources.
    Org,
    /// The run's user's personal skills.
    Personal,
}

/// The organisation's catalog and, optionally, one user's personal catalog over it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LayeredCatalog {
    org: Arc<SkillCatalog>,
    personal: Option<Arc<SkillCatalog>>,
    /// Organisation skill names a personal skill replaces.
    shadowed: Vec<String>,
    /// The organisation's warnings, the personal source's, then one notice per shadowed name.
    warnings: Vec<String>,
}

impl LayeredCatalog {
    /// `org` alone.
    pub fn org_only(org: Arc<SkillCatalog>) -> Self {
        Self::new(org, None)
    }

    /// `personal` over `org`.
    pub fn new(org: Arc<SkillCatalog>, personal: Option<Arc<SkillCatalog>>) -> Self {
        let mut warnings = org.warnings().to_vec();
        let mut shadowed = Vec::new();
        if let Some(personal) = &personal {
            warnings.extend(personal.warnings().iter().cloned());
            for skill in personal.skills() {
                if let Some(theirs) = org.get(&skill.name) {
                    let source = org
                        .sources()
                        .get(theirs.source)
                        .map_or("the agent's skills", |s| s.label.as_str());
                    warnings.push(format!(
                        "personal skill \"{}\" ({}) replaces the skill of the same name from {source} ({}) for this user",
                        skill.name, skill.path, theirs.path
                    ));
                    shadowed.push(skill.name.clone());
                }
            }
        }
        Self {
            org,
            personal,
            shadowed,
            warnings,
        }
    }

    /// The organisation's catalog (shared).
    pub fn org(&self) -> &Arc<SkillCatalog> {
        &self.org
    }

    /// The personal catalog, when the user has one.
    pub fn personal(&self) -> Option<&Arc<SkillCatalog>> {
        self.personal.as_ref()
    }

    /// Organisation skill names a personal skill replaces for this user.
    pub fn shadowed(&self) -> &[String] {
        &self.shadowed
    }

    fn is_shadowed(&self, name: &str) -> bool {
        self.shadowed.iter().any(|s| s == name)
    }

    fn personal_skills(&self) -> &[SkillMetadata] {
        self.personal.as_ref().map_or(&[], |p| p.skills())
    }

    /// The sources, lowest priority first: the organisation's, then the personal one.
    pub fn sources(&self) -> Vec<&SourceInfo> {
        let personal = self.personal.as_ref().map_or(&[][..], |p| p.sources());
        self.org.sources().iter().chain(personal).collect()
    }

    /// Warnings shown to the model: the sources' and the shadowing notices.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Every skill the user sees with its source's index in [`sources`](Self::sources), in
    /// catalog order: the organisation's (minus shadowed ones), then the personal ones.
    pub fn skills(&self) -> impl Iterator<Item = (usize, &SkillMetadata)> + '_ {
        let offset = self.org.sources().len();
        self.org
            .skills()
            .iter()
            .filter(|s| !self.is_shadowed(&s.name))
            .map(|s| (s.source, s))
            .chain(self.personal_skills().iter().map(move |s| (offset + s.source, s)))
    }

    /// Number of skills the user sees.
    pub fn len(&self) -> usize {
        self.org.len() - self.shadowed.len() + self.personal_skills().len()
    }

    /// True when the user sees no skill.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The skill called `name` as this user sees it, and its layer.
    pub fn get(&self, name: &str) -> Option<(Layer, &SkillMetadata)> {
        if let Some(skill) = self.personal_skills().iter().find(|s| s.name == name) {
            return Some((Layer::Personal, skill));
        }
        self.org.get(name).map(|s| (Layer::Org, s))
    }

    /// The skill whose `SKILL.md` is at `path`, as this user sees it, and its layer.
    pub fn by_path(&self, path: &VirtualPath) -> Option<(Layer, &SkillMetadata)> {
        if let Some(skill) = self.personal_skills().iter().find(|s| &s.path == path) {
            return Some((Layer::Personal, skill));
        }
        self.org
            .by_path(path)
            .filter(|s| !self.is_shadowed(&s.name))
            .map(|s| (Layer::Org, s))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn skill(name: &str, dir: &str, source: usize) -> SkillMetadata {
        SkillMetadata {
            name: name.to_owned(),
            description: format!("does {name}"),
            path: VirtualPath::parse(&format!("{dir}/{name}/SKILL.md")).unwrap(),
            license: None,
            compatibility: None,
            metadata: Default::default(),
            allowed_tools: Vec::new(),
            include_tools: Vec::new(),
            source,
            version: None,
        }
    }

    fn info(path: &str, label: &str) -> SourceInfo {
        SourceInfo {
            path: VirtualPath::parse(path).unwrap(),
            label: label.to_owned(),
        }
    }

    #[test]
    fn a_personal_skill_shadows_the_org_skill_of_its_name_only_in_its_layer() {
        let org = Arc::new(SkillCatalog::new(
            vec![info("/skills/org", "Org")],
            vec![
                skill("report", "/skills/org", 0),
                skill("search", "/skills/org", 0),
            ],
            vec![],
        ));
        let mine = Arc::new(SkillCatalog::new(
            vec![info("/workspace/agents/skills", "Personal")],
            vec![
                skill("report", "/workspace/agents/skills", 0),
                skill("diary", "/workspace/agents/skills", 0),
            ],
            vec![],
        ));
        let layered = LayeredCatalog::new(org.clone(), Some(mine));
        let names: Vec<(usize, &str)> = layered.skills().map(|(i, s)| (i, s.name.as_str())).collect();
        assert_eq!(names, [(0, "search"), (1, "diary"), (1, "report")]);
        assert_eq!(layered.len(), 3);
        let (layer, report) = layered.get("report").unwrap();
        assert_eq!(layer, Layer::Personal);
        assert_eq!(report.path.as_str(), "/workspace/agents/skills/report/SKILL.md");
        assert!(
            layered
                .by_path(&VirtualPath::parse("/skills/org/report/SKILL.md").unwrap())
                .is_none(),
            "the shadowed org skill cannot be activated by this user"
        );
        assert_eq!(layered.shadowed(), ["report"]);
        assert_eq!(layered.warnings().len(), 1);
        assert!(layered.warnings()[0].contains("replaces the skill of the same name from Org"));
        assert_eq!(org.len(), 2, "the org catalog is untouched");
        let alone = LayeredCatalog::org_only(org);
        assert_eq!(alone.get("report").unwrap().0, Layer::Org);
        assert!(alone.warnings().is_empty());
    }
}
