//! Whose files a file tool sees: [`FileLayout`], and the run extensions that carry a run's file
//! spaces, [`ThreadFiles`], [`UserFiles`] and [`ParentFiles`].
//!
//! | scope | who reads and writes it | where it is stored | when it goes |
//! |---|---|---|---|
//! | thread (`/` under [`FileLayout::PerThread`]) | the runs of one thread | beside the thread's checkpoints (the checkpointer's thread files) | when the thread is deleted |
//! | parent's `/uploads`, `/outputs`, `/attachments` | the parent thread and its subagents' threads | the parent thread's space | with the parent thread |
//! | user (`/workspace`) | every thread of that user | [`UserSpaces`] under `<root>/<user id>`, or a caller's [`UserFiles`] | never by Trellis |
//! | shared directories (skills, memory; everything under [`FileLayout::Shared`]) | every thread and user of the agent, as the permission rules allow | the [`FileAccess`](super::FileAccess) backend | never by Trellis |
//! | `/large_tool_results` under [`FileLayout::Shared`] | the runs of one thread | the thread's space | with the thread |
//!
//! The runtime puts the thread's space into the run's extensions when a run starts (and, for a
//! subagent's run, the parent's as [`ParentFiles`]); a file tool builds the view for one call from
//! them ([`FileAccess::for_call`](super::FileAccess::for_call)). No path can reach another thread's
//! or user's space: each is a [`ScopedBackend`] over its own prefix, a user id becomes a prefix only
//! through [`ScopeId`] (one safe segment, or a typed error naming it), and the view routes by path
//! only to this run's spaces.

use std::sync::Arc;

use trellis_backend::{Backend, BackendError, CompositeBackend, ScopeId, ScopedBackend, VirtualPath};

use super::eviction::LARGE_RESULTS_DIR;

/// The file space of the run's thread. A run extension, set by the runtime from its checkpointer.
#[derive(Debug, Clone)]
pub struct ThreadFiles(pub Arc<dyn Backend>);

/// The file space of the thread that started this run as a subagent task. A run extension, set by
/// the runtime when a run that already carries [`ThreadFiles`] gets a thread space of its own.
#[derive(Debug, Clone)]
pub struct ParentFiles(pub Arc<dyn Backend>);

/// The run's user's workspace, shared by that user's threads. A run extension a caller may set
/// directly (a local directory, say); otherwise [`UserSpaces`] gives each user one.
#[derive(Debug, Clone)]
pub struct UserFiles(pub Arc<dyn Backend>);

/// One workspace per user: user `ada`'s is `<root>/ada` on `backend`.
#[derive(Debug, Clone)]
pub struct UserSpaces {
    backend: Arc<dyn Backend>,
    root: VirtualPath,
}

impl UserSpaces {
    /// Workspaces under `root` of `backend`.
    pub fn new(backend: Arc<dyn Backend>, root: VirtualPath) -> Self {
        Self { backend, root }
    }

    /// User `user_id`'s workspace, or the error naming an id that is not one safe path segment.
    pub fn for_user(&self, user_id: &str) -> Result<Arc<dyn Backend>, BackendError> {
        let id = ScopeId::user(user_id).map_err(|e| BackendError::InvalidPath {
            path: user_id.to_owned(),
            reason: e.to_string(),
        })?;
        Ok(Arc::new(ScopedBackend::new(
            self.backend.clone(),
            id.under(&self.root),
        )))
    }
}

/// Where the paths a file tool sees are stored.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub enum FileLayout {
    /// Every path is in the [`FileAccess`](super::FileAccess) backend, whatever the thread: a
    /// project directory that every thread of the agent works on.
    #[default]
    Shared,
    /// `/` is the run's thread space ([`ThreadFiles`]); for a subagent's run, [`INHERITED_DIRS`]
    /// come from the parent's space ([`ParentFiles`]); `workspace` is the user's workspace (a
    /// [`UserFiles`] extension, else `users` for the run's user), mounted only when the run has
    /// one; each of `shared` (directories such as `/skills/team`) is served by the
    /// [`FileAccess`](super::FileAccess) backend. A call with no [`ThreadFiles`] extension (a tool
    /// called by hand, a checkpointer that keeps no files) sees the backend alone, as with
    /// [`FileLayout::Shared`].
    PerThread {
        /// Directories served by the access's backend in every thread.
        shared: Arc<[VirtualPath]>,
        /// Where the user's workspace is mounted.
        workspace: VirtualPath,
        /// Each user's workspace, for runs that carry a user but no [`UserFiles`].
        users: Option<UserSpaces>,
    },
}

/// Where [`FileLayout::per_thread`] mounts the user's workspace.
pub const WORKSPACE_DIR: &str = "/workspace";

/// A thread's directories that its subagents see too (Yuxi's rule: a subagent shares its parent's
/// uploads and outputs, not the rest of its scratch). `/attachments` is where the attachments
/// middleware stores a user's uploads by default.
pub const INHERITED_DIRS: [&str; 3] = ["/uploads", "/outputs", "/attachments"];

impl FileLayout {
    /// A per-thread layout with these shared directories, the workspace at [`WORKSPACE_DIR`] and
    /// no [`UserSpaces`].
    pub fn per_thread(shared: impl IntoIterator<Item = VirtualPath>) -> Self {
        Self::PerThread {
            shared: shared.into_iter().filter(|p| !p.is_root()).collect(),
            workspace: dir(WORKSPACE_DIR),
            users: None,
        }
    }

    /// Give each user of a per-thread layout a workspace from `users` (no effect on
    /// [`FileLayout::Shared`]).
    pub fn with_user_spaces(self, users: UserSpaces) -> Self {
        match self {
            Self::PerThread {
                shared, workspace, ..
            } => Self::PerThread {
                shared,
                workspace,
                users: Some(users),
            },
            shared @ Self::Shared => shared,
        }
    }

    /// The backend one call sees, given the run's spaces and user: without a thread space, `base`
    /// itself; under [`FileLayout::Shared`], `base` with the thread's own
    /// [`LARGE_RESULTS_DIR`](crate::LARGE_RESULTS_DIR) mounted over it (evicted results are named
    /// after call ids, which are unique only within a thread). Fails with an error naming the user id
    /// when [`UserSpaces`] cannot place it, and when a shared directory cannot be mounted (the
    /// root, which [`FileLayout::per_thread`] leaves out).
    pub fn view(
        &self,
        base: &Arc<dyn Backend>,
        spaces: &RunSpaces<'_>,
    ) -> Result<Arc<dyn Backend>, BackendError> {
        let Some(thread) = spaces.thread else {
            return Ok(base.clone());
        };
        let Self::PerThread {
            shared,
            workspace,
            users,
        } = self
        else {
            // Shared files, but derived files stay the thread's: an evicted result is named after
            // a call id, which is unique only within its thread.
            let results = dir(LARGE_RESULTS_DIR);
            let scoped: Arc<dyn Backend> = Arc::new(ScopedBackend::new(thread.0.clone(), results.clone()));
            return Ok(Arc::new(
                CompositeBackend::new(base.clone()).mount(results.as_str(), scoped)?,
            ));
        };
        let mut view = CompositeBackend::new(thread.0.clone());
        for dir in shared.iter() {
            let scoped: Arc<dyn Backend> = Arc::new(ScopedBackend::new(base.clone(), dir.clone()));
            view = view.mount(dir.as_str(), scoped)?;
        }
        if let Some(parent) = spaces.parent {
            for inherited in INHERITED_DIRS {
                let at = self::dir(inherited);
                let scoped: Arc<dyn Backend> = Arc::new(ScopedBackend::new(parent.0.clone(), at.clone()));
                view = view.mount(at.as_str(), scoped)?;
            }
        }
        let user = match (spaces.user_files, users, spaces.user_id) {
            (Some(files), _, _) => Some(files.0.clone()),
            (None, Some(users), Some(id)) => Some(users.for_user(id)?),
            _ => None,
        };
        if let Some(user) = user {
            view = view.mount(workspace.as_str(), user)?;
        }
        Ok(Arc::new(view))
    }
}

/// What one run brings to [`FileLayout::view`]: its spaces and its user, read from its extensions.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunSpaces<'a> {
    /// The thread's space.
    pub thread: Option<&'a ThreadFiles>,
    /// The parent thread's space, for a subagent's run.
    pub parent: Option<&'a ParentFiles>,
    /// A workspace the caller gave the run.
    pub user_files: Option<&'a UserFiles>,
    /// The run's user id.
    pub user_id: Option<&'a str>,
}

impl<'a> RunSpaces<'a> {
    /// The spaces of the run a tool call belongs to.
    pub fn of(cx: &crate::ToolContext<'a>) -> Self {
        Self::from_extensions(cx.extensions())
    }

    /// The spaces of a run, from its extensions.
    pub fn from_extensions(extensions: &'a crate::Extensions) -> Self {
        Self {
            thread: extensions.get::<ThreadFiles>(),
            parent: extensions.get::<ParentFiles>(),
            user_files: extensions.get::<UserFiles>(),
            user_id: extensions
                .get::<crate::UserIdentity>()
                .map(|u| u.user_id.as_str()),
        }
    }
}

/// A constant directory path.
fn dir(path: &str) -> VirtualPath {
    VirtualPath::parse(path).unwrap_or_else(|_| VirtualPath::root())
}
