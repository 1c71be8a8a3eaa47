//! Turning command-line sources (a local directory or an object-store URL) into one backend the agent
//! works in, with skills and memory mounted at stable virtual paths.
//!
//! | given | mounted at | the agent reads |
//! |---|---|---|
//! | `--skills ./team/skills` | `/skills/team` | `/skills/team/<skill>/SKILL.md` |
//! | `--skills s3://bucket/org/skills` | `/skills/org` | `/skills/org/<skill>/SKILL.md` |
//! | `--memory ./proj/AGENTS.md` | `/memory/proj` (the file's directory) | `/memory/proj/AGENTS.md` |
//! | `--workdir ./out` | `/workspace` (the user's workspace) | `/workspace/…`, shared by the user's threads |
//! | `--user ada` (no `--workdir`) | `/workspace` = `<state-dir>/users/ada` | ada's memory `/workspace/agents/{AGENTS,USER,MEMORY}.md` and personal skills `/workspace/agents/skills/<slug>/SKILL.md` |
//! | (the thread) | `/` | everything else: the thread's own files, kept in `--state-dir` beside its checkpoints |
//!
//! Mount names come from the last path segment that is not `skills` (so a source's label reads like
//! its team or project); clashes get `-2`, `-3`, …. The skill and memory mounts are shared by every
//! thread ([`Mounts::layout`]); everything else a thread writes is its own and comes back when the
//! thread resumes.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use trellis_middleware::backend::ScopeId;
use trellis_middleware::backend::VirtualPath;
use trellis_middleware::backend::{
    Backend, CompositeBackend, FilesystemBackend, ObjectStoreBackend, StateBackend, StoreOptions,
};
use trellis_middleware::skills::SkillSource;
use trellis_middleware::tools::{Access, FileLayout, PermissionRule, Permissions};

use crate::cli::state_dir::StateDir;

/// The agent's backend and where its skills and memory are.
#[derive(Debug, Clone)]
pub struct Mounts {
    /// The composite backend the tools, skills and memory share.
    pub backend: Arc<dyn Backend>,
    /// Skill sources, in the order given.
    pub skills: Vec<SkillSource>,
    /// Memory files (virtual paths), in the order given.
    pub memory: Vec<String>,
    /// What was mounted where, for display.
    pub mounts: Vec<(String, String)>,
    /// The user's workspace (`--workdir`), mounted at `/workspace` for runs that have it.
    pub user_files: Option<Arc<dyn Backend>>,
    /// The user chosen with `--user`: their memory and personal skills come from `user_files`.
    pub user: Option<String>,
}

/// The user memory files `--user` loads, relative to the user's workspace (Yuxi's layout).
pub const USER_MEMORY: [&str; 3] = ["agents/AGENTS.md", "agents/USER.md", "agents/MEMORY.md"];

impl Mounts {
    /// The file layout for runs on this workspace: each thread's own files at `/`, the skill and
    /// memory mounts shared, the user's workspace at `/workspace` when there is one.
    pub fn layout(&self) -> FileLayout {
        FileLayout::per_thread(
            self.mounts
                .iter()
                .filter_map(|(at, _)| VirtualPath::parse(at).ok()),
        )
    }

    /// Run as `user` (`--user`): the id must be one safe path segment (else the typed
    /// `InvalidScopeId` naming it); their workspace is the `--workdir` already given, else
    /// `users/<user>` in the state dir (created if missing). Their memory ([`USER_MEMORY`]) and personal
    /// skills ([`DEFAULT_PERSONAL_SKILLS_DIR`](trellis_middleware::skills::DEFAULT_PERSONAL_SKILLS_DIR)) are read from it.
    pub fn for_user(mut self, user: &str, state_dir: &StateDir) -> Result<Self> {
        let id = ScopeId::user(user)?;
        if self.user_files.is_none() {
            let dir = state_dir.user_dir(&id)?;
            self.user_files = Some(Arc::new(FilesystemBackend::new(&dir)?));
        }
        self.user = Some(id.as_str().to_owned());
        Ok(self)
    }

    /// File-tool rules for a run on this workspace: the mounted skill sources are read-only unless
    /// `writable_skills`, so a prompt-injected agent cannot rewrite the instructions later runs (and
    /// other users) load. Memory stays writable: editing it is how the agent learns.
    pub fn permissions(&self, writable_skills: bool) -> Result<Permissions> {
        let mut rules = Permissions::allow_all();
        if !writable_skills && !self.skills.is_empty() {
            rules.push(PermissionRule::deny("/skills/**", &[Access::Write])?);
        }
        Ok(rules)
    }
}

/// A backend for a directory or URL.
pub fn backend_for(source: &str) -> Result<Arc<dyn Backend>> {
    if source.contains("://") {
        let backend = ObjectStoreBackend::from_url(source, &StoreOptions::from_env())
            .with_context(|| format!("cannot open {source}"))?;
        Ok(Arc::new(backend))
    } else {
        let backend =
            FilesystemBackend::new(source).with_context(|| format!("cannot open directory {source}"))?;
        Ok(Arc::new(backend))
    }
}

/// A mount name from the last meaningful segment of a source.
fn mount_name(source: &str, taken: &mut BTreeSet<String>) -> String {
    let trimmed = source.trim_end_matches('/');
    let segments: Vec<&str> = trimmed
        .rsplit(['/', '\\'])
        .filter(|s| !s.is_empty() && *s != "." && !s.contains(':'))
        .collect();
    let base = segments
        .iter()
        .find(|s| !s.eq_ignore_ascii_case("skills"))
        .map(|s| sanitize(s))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "source".to_owned());
    let mut name = base.clone();
    let mut n = 2;
    while !taken.insert(name.clone()) {
        name = format!("{base}-{n}");
        n += 1;
    }
    name
}

fn sanitize(segment: &str) -> String {
    segment
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect::<String>()
        .trim_matches('-')
        .to_owned()
}

/// Split a memory source into (directory, file name).
fn split_file(source: &str) -> Result<(String, String)> {
    let trimmed = source.trim_end_matches('/');
    let Some((dir, file)) = trimmed.rsplit_once('/') else {
        return Ok((".".to_owned(), trimmed.to_owned()));
    };
    if file.is_empty() {
        bail!("memory source {source} names no file");
    }
    let dir = if dir.is_empty() { "/" } else { dir };
    Ok((dir.to_owned(), file.to_owned()))
}

impl Mounts {
    /// Mount the given sources (and `workdir` at `/workspace`).
    pub fn from_sources(skills: &[String], memory: &[String], workdir: Option<&Path>) -> Result<Self> {
        assemble(skills, memory, workdir)
    }
}

/// Mount the given sources.
fn assemble(skills: &[String], memory: &[String], workdir: Option<&Path>) -> Result<Mounts> {
    let user_files: Option<Arc<dyn Backend>> = match workdir {
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
            Some(Arc::new(FilesystemBackend::new(dir)?))
        }
        None => None,
    };
    // Serves paths outside the mounts only when a run has no thread files (never in `trellis run`).
    let mut composite = CompositeBackend::new(Arc::new(StateBackend::new()));
    let mut mounts = Vec::new();
    let mut taken = BTreeSet::new();
    let mut skill_mounts = Vec::new();
    for source in skills {
        let name = mount_name(source, &mut taken);
        let at = format!("/skills/{name}");
        composite = composite.mount(&at, backend_for(source)?)?;
        mounts.push((at.clone(), source.clone()));
        skill_mounts.push(at);
    }
    let mut memory_paths = Vec::new();
    let mut taken = BTreeSet::new();
    for source in memory {
        let (dir, file) = split_file(source)?;
        let name = mount_name(&dir, &mut taken);
        let at = format!("/memory/{name}");
        let dir_source = if dir.contains("://") && !dir.ends_with('/') {
            format!("{dir}/")
        } else {
            dir.clone()
        };
        composite = composite.mount(&at, backend_for(dir_source.trim_end_matches('/'))?)?;
        mounts.push((at.clone(), dir));
        memory_paths.push(format!("{at}/{file}"));
    }
    let backend: Arc<dyn Backend> = Arc::new(composite);
    let skills = skill_mounts
        .iter()
        .map(|at| SkillSource::new(backend.clone(), at).map_err(anyhow::Error::from))
        .collect::<Result<Vec<_>>>()?;
    Ok(Mounts {
        backend,
        skills,
        memory: memory_paths,
        mounts,
        user_files,
        user: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_names_read_like_their_source() {
        let mut taken = BTreeSet::new();
        assert_eq!(
            mount_name("examples/sales-assistant/skills", &mut taken),
            "sales-assistant"
        );
        assert_eq!(mount_name("s3://bucket/org/skills/", &mut taken), "org");
        assert_eq!(
            mount_name("./other/sales-assistant/skills", &mut taken),
            "sales-assistant-2"
        );
        assert_eq!(mount_name("skills", &mut taken), "source");
        assert_eq!(
            split_file("a/b/AGENTS.md").ok(),
            Some(("a/b".to_owned(), "AGENTS.md".to_owned()))
        );
        assert_eq!(
            split_file("AGENTS.md").ok(),
            Some((".".to_owned(), "AGENTS.md".to_owned()))
        );
    }
}
