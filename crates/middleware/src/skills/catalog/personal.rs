//! [`PersonalSkills`]: a skills source in the run's user's workspace (`agents/skills/<slug>/SKILL.md`
//! by default), layered over the agent's sources.
//!
//! * **Where.** The directory is relative to the user's workspace, found by [`UserHomes`] exactly as
//!   the file tools find it; skill paths are the ones the model reads, below the workspace mount
//!   (`/workspace/agents/skills/<slug>/SKILL.md`).
//! * **One organisation catalog.** The agent's catalog is discovered and shared as before; each
//!   user adds only their personal catalog, a [`LayeredCatalog`](crate::skills::catalog::layers::LayeredCatalog)
//!   over the shared one (no copy of the organisation's library per user).
//! * **Cache.** The newest personal catalog of each user is kept in a bounded [`UserCache`]
//!   (least recently used out). A new thread of a user rescans their directory against it, so only
//!   `SKILL.md` files whose version tag changed are read, and an unchanged catalog is shared.
//! * **Same rules.** Discovery, validation, the failure tiers, visibility, bound tools, pins and
//!   activation are the organisation's; a personal skill with an organisation skill's name shadows
//!   it for that user only, with a notice among the catalog's warnings.

use std::sync::Arc;

use crate::backend::{Backend, CompositeBackend, StateBackend, VirtualPath};
use crate::runtime::context::RunContext;
use crate::runtime::error::AgentError;
use crate::skills::catalog::SkillCatalog;
use crate::skills::discovery::source::{SkillSource, SourceError};
use crate::skills::discovery::{DiscoveryOptions, DiscoveryStats, discover, rescan};
use crate::tools::Extensions;
use crate::users::{DEFAULT_USER_CACHE_CAPACITY, UserCache};
use crate::users::{UserHome, UserHomes, shown_path};

/// Where personal skills live by default, relative to the user's workspace.
pub const DEFAULT_PERSONAL_SKILLS_DIR: &str = "agents/skills";
/// The label of the personal source.
pub const PERSONAL_LABEL: &str = "Personal";

/// A personal skills source; see the module docs.
#[derive(Debug)]
pub struct PersonalSkills {
    homes: UserHomes,
    dir: VirtualPath,
    label: String,
    cache: UserCache<SkillCatalog>,
}

impl PersonalSkills {
    /// Personal skills in `dir`, relative to each user's workspace (for example
    /// [`DEFAULT_PERSONAL_SKILLS_DIR`]); workspaces found by [`UserHomes::new`] until
    /// [`with_homes`](Self::with_homes) says more.
    pub fn new(dir: &str) -> Result<Self, SourceError> {
        let parsed = VirtualPath::parse(dir).map_err(|e| SourceError::InvalidPath {
            path: dir.to_owned(),
            reason: e.to_string(),
        })?;
        Ok(Self {
            homes: UserHomes::new(),
            dir: parsed,
            label: PERSONAL_LABEL.to_owned(),
            cache: UserCache::new(DEFAULT_USER_CACHE_CAPACITY),
        })
    }

    /// Where each run's user workspace is.
    pub fn with_homes(mut self, homes: UserHomes) -> Self {
        self.homes = homes;
        self
    }

    /// Most users whose personal catalog is kept (default [`DEFAULT_USER_CACHE_CAPACITY`]).
    pub fn with_cache_capacity(mut self, users: usize) -> Self {
        self.cache = UserCache::new(users);
        self
    }

    /// The directory as the model sees it (below the workspace mount).
    pub fn shown_dir(&self) -> VirtualPath {
        shown_path(self.homes.mount(), &self.dir)
    }

    /// Users whose personal catalog is cached now.
    pub fn cached_users(&self) -> usize {
        self.cache.len()
    }

    pub(in crate::skills) fn homes(&self) -> &UserHomes {
        &self.homes
    }

    /// The user's workspace seen at the mount, so skill paths are the model's.
    pub(in crate::skills) fn backend(&self, home: &UserHome) -> Arc<dyn Backend> {
        let composite = CompositeBackend::new(Arc::new(StateBackend::new()));
        match composite.mount(home.mount.as_str(), home.backend.clone()) {
            Ok(mounted) => Arc::new(mounted),
            // Only the root cannot be a mount: the workspace is then the whole view.
            Err(_) => home.backend.clone(),
        }
    }

    fn source(&self, home: &UserHome) -> Result<SkillSource, SourceError> {
        SkillSource::labeled(
            self.backend(home),
            home.shown_path(&self.dir).as_str(),
            &self.label,
        )
    }

    /// The user's personal catalog, rescanned against the cached one (unchanged: the cached
    /// `Arc` itself), and what the scan did.
    pub(in crate::skills) async fn load(
        &self,
        home: &UserHome,
        options: &DiscoveryOptions,
    ) -> Result<(Arc<SkillCatalog>, DiscoveryStats), SourceError> {
        let sources = [self.source(home)?];
        let cached = self.cache.get(&home.key);
        let found = match &cached {
            Some(previous) => rescan(&sources, previous, options).await,
            None => discover(&sources, options).await,
        };
        let catalog = match cached {
            Some(previous) if *previous == found.catalog => previous,
            _ => {
                let fresh = Arc::new(found.catalog);
                self.cache.insert(&home.key, fresh.clone());
                fresh
            }
        };
        Ok((catalog, found.stats))
    }

    /// For one run: the user's personal catalog (see [`load`](Self::load)) and their key, `None`s
    /// when the run has no user workspace; an unsafe user id is an error naming it. Emits
    /// `skills/personal_loaded` with what the scan read.
    pub(in crate::skills) async fn load_for_run(
        &self,
        cx: &RunContext,
        options: &DiscoveryOptions,
    ) -> Result<(Option<Arc<SkillCatalog>>, Option<String>), AgentError> {
        let fail = |e: Box<dyn std::error::Error + Send + Sync>| AgentError::middleware("skills", e);
        let Some(home) = self
            .homes
            .resolve(cx.extensions())
            .map_err(|e| fail(Box::new(e)))?
        else {
            return Ok((None, None));
        };
        let (catalog, stats) = self.load(&home, options).await.map_err(|e| fail(Box::new(e)))?;
        cx.emit_middleware("skills", "personal_loaded", || {
            serde_json::json!({
                "skills": stats.loaded, "read": stats.read, "reused": stats.reused,
                "skipped": stats.skipped,
            })
        });
        Ok((Some(catalog), Some(home.key)))
    }

    /// The backend this run's user's personal skills are read from (`None` without a workspace).
    pub(in crate::skills) fn backend_for_run(&self, extensions: &Extensions) -> Option<Arc<dyn Backend>> {
        let home = self.homes.resolve(extensions).ok()??;
        Some(self.backend(&home))
    }
}
