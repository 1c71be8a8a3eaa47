//! Whose files a file tool sees: [`FileLayout`], and the run extensions that carry a run's file
//! spaces, [`ThreadFiles`] and [`UserFiles`].
//!
//! | scope | who reads and writes it | where it is stored | when it goes |
//! |---|---|---|---|
//! | thread (`/` under [`FileLayout::PerThread`]) | the runs of one thread | beside the thread's checkpoints (the checkpointer's thread files) | when the thread is deleted |
//! | user (`/workspace`, when the run has a [`UserFiles`]) | every thread of that user | wherever the caller keeps the user's files | never by Trellis |
//! | shared prefixes (skills, memory) | every thread and user of the agent, subject to the permission rules | the [`FileAccess`](super::FileAccess) backend | never by Trellis |
//!
//! The runtime puts the thread's space into the run's extensions when a run starts; a file tool
//! builds the view for one call from them ([`FileAccess::for_call`](super::FileAccess::for_call)).
//! No path can reach another thread's or user's space: each is a [`ScopedBackend`] over its own
//! prefix, and the view routes by path only to this run's spaces.

use std::sync::Arc;

use trellis_backend::{Backend, BackendError, CompositeBackend, ScopedBackend, VirtualPath};

/// The file space of the run's thread. A run extension, set by the runtime from its checkpointer.
#[derive(Debug, Clone)]
pub struct ThreadFiles(pub Arc<dyn Backend>);

/// The run's user's workspace, shared by that user's threads. A run extension, set by the caller
/// (or by the agent from its user workspaces) only when the run has a user.
#[derive(Debug, Clone)]
pub struct UserFiles(pub Arc<dyn Backend>);

/// Where the paths a file tool sees are stored.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub enum FileLayout {
    /// Every path is in the [`FileAccess`](super::FileAccess) backend, whatever the thread: a
    /// project directory that every thread of the agent works on.
    #[default]
    Shared,
    /// `/` is the run's thread space ([`ThreadFiles`]); `workspace` is the user's workspace
    /// ([`UserFiles`]), mounted only when the run has one; each of `shared` (directories such as
    /// `/skills/team`) is served by the [`FileAccess`](super::FileAccess) backend. A call with no
    /// [`ThreadFiles`] extension (a tool called by hand, a checkpointer that keeps no files) sees
    /// the backend alone, as with [`FileLayout::Shared`].
    PerThread {
        /// Directories served by the access's backend in every thread.
        shared: Arc<[VirtualPath]>,
        /// Where the user's workspace is mounted.
        workspace: VirtualPath,
    },
}

/// Where [`FileLayout::per_thread`] mounts the user's workspace.
pub const WORKSPACE_DIR: &str = "/workspace";

impl FileLayout {
    /// A per-thread layout with these shared directories and the workspace at [`WORKSPACE_DIR`].
    pub fn per_thread(shared: impl IntoIterator<Item = VirtualPath>) -> Self {
        let workspace = VirtualPath::root()
            .join_relative(WORKSPACE_DIR.trim_start_matches('/'))
            .unwrap_or_else(|_| VirtualPath::root());
        Self::PerThread {
            shared: shared.into_iter().filter(|p| !p.is_root()).collect(),
            workspace,
        }
    }

    /// The backend one call sees, given the run's spaces: `base` itself under
    /// [`FileLayout::Shared`] or without a thread space. Fails only when a shared directory cannot
    /// be mounted (the root, which [`FileLayout::per_thread`] leaves out).
    pub fn view(
        &self,
        base: &Arc<dyn Backend>,
        thread: Option<&ThreadFiles>,
        user: Option<&UserFiles>,
    ) -> Result<Arc<dyn Backend>, BackendError> {
        let (Self::PerThread { shared, workspace }, Some(thread)) = (self, thread) else {
            return Ok(base.clone());
        };
        let mut view = CompositeBackend::new(thread.0.clone());
        for dir in shared.iter() {
            let scoped: Arc<dyn Backend> = Arc::new(ScopedBackend::new(base.clone(), dir.clone()));
            view = view.mount(dir.as_str(), scoped)?;
        }
        if let Some(user) = user {
            view = view.mount(workspace.as_str(), user.0.clone())?;
        }
        Ok(Arc::new(view))
    }
}
