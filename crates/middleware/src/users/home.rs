//! [`UserHomes`]: where the run's user keeps files of their own, for the consumers that add a
//! per-user layer (user memory, personal skills).
//!
//! A run's user workspace is found exactly as the file tools find it
//! ([`FileLayout::view`](crate::tools::FileLayout::view)): a [`UserFiles`] run extension wins;
//! otherwise, for a run with a [`UserIdentity`], the [`UserSpaces`] given here place it at
//! `<root>/<user id>`. The id becomes a path segment only through [`ScopeId::user`], so an id that is
//! not one safe segment is refused with [`UserHomeError::InvalidUserId`] and nothing is read or
//! written. Paths in the user's workspace are relative (`agents/MEMORY.md`); the model sees them
//! below the workspace mount (`/workspace/agents/MEMORY.md`), which is what it reads and edits.

use std::sync::Arc;

use crate::backend::{Backend, InvalidScopeId, ScopeId, VirtualPath};
use crate::tools::{Extensions, FileLayout, UserFiles, UserIdentity, UserSpaces, WORKSPACE_DIR};

/// How a consumer finds the run's user's workspace.
#[derive(Debug, Clone)]
pub struct UserHomes {
    users: Option<UserSpaces>,
    mount: VirtualPath,
}

/// The run's user's workspace, resolved for one run.
#[derive(Debug, Clone)]
pub struct UserHome {
    /// The cache key of this user: the user id; for a run that carries a [`UserFiles`] workspace
    /// but no [`UserIdentity`], a key of that workspace itself (never a valid user id), so two
    /// anonymous workspaces never share an entry.
    pub key: String,
    /// The workspace (its `/` is the workspace's root).
    pub backend: Arc<dyn Backend>,
    /// Where the model sees the workspace (`/workspace`).
    pub mount: VirtualPath,
}

/// Why a run's user workspace could not be found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UserHomeError {
    /// The run's user id is not one safe path segment.
    #[error("cannot place the user's workspace: {0}")]
    InvalidUserId(#[from] InvalidScopeId),
}

impl Default for UserHomes {
    fn default() -> Self {
        Self::new()
    }
}

impl UserHomes {
    /// Only a [`UserFiles`] run extension gives a run a workspace; mounted at [`WORKSPACE_DIR`].
    pub fn new() -> Self {
        Self {
            users: None,
            mount: VirtualPath::parse(WORKSPACE_DIR).unwrap_or_else(|_| VirtualPath::root()),
        }
    }

    /// Runs with a [`UserIdentity`] (and no [`UserFiles`]) get their workspace from `users`.
    pub fn with_user_spaces(mut self, users: UserSpaces) -> Self {
        self.users = Some(users);
        self
    }

    /// The homes a file layout gives its runs: its [`UserSpaces`] and workspace mount under
    /// [`FileLayout::PerThread`]; [`UserFiles`] only under [`FileLayout::Shared`].
    pub fn from_layout(layout: &FileLayout) -> Self {
        match layout {
            FileLayout::PerThread { workspace, users, .. } => Self {
                users: users.clone(),
                mount: workspace.clone(),
            },
            _ => Self::new(),
        }
    }

    /// Where the model sees the workspace.
    pub fn mount(&self) -> &VirtualPath {
        &self.mount
    }

    /// The run's user id when it keys a workspace, without resolving a backend (cheap, for every
    /// model call): the same as [`UserHome::key`] of [`UserHomes::resolve`]; `None` when the run has
    /// no workspace, or an anonymous one (a [`UserFiles`] without a [`UserIdentity`]).
    pub fn key_of<'a>(&self, extensions: &'a Extensions) -> Option<&'a str> {
        let id = extensions.get::<UserIdentity>().map(|u| u.user_id.as_str());
        match (extensions.get::<UserFiles>(), &self.users, id) {
            (Some(_), _, Some(id)) | (None, Some(_), Some(id)) => Some(id),
            _ => None,
        }
    }

    /// The run's user workspace; `Ok(None)` when the run has none (no [`UserFiles`], and no
    /// [`UserIdentity`] or no [`UserSpaces`]).
    pub fn resolve(&self, extensions: &Extensions) -> Result<Option<UserHome>, UserHomeError> {
        let id = extensions.get::<UserIdentity>().map(|u| u.user_id.as_str());
        let (key, backend) = match (extensions.get::<UserFiles>(), &self.users, id) {
            (Some(files), _, Some(id)) => (id.to_owned(), files.0.clone()),
            // NUL is in no user id: this key is the workspace's own.
            (Some(files), _, None) => (
                format!("\0workspace@{:p}", Arc::as_ptr(&files.0)),
                files.0.clone(),
            ),
            (None, Some(users), Some(id)) => {
                let scope = ScopeId::user(id)?;
                let backend = users.for_user(scope.as_str()).map_err(|_| InvalidScopeId {
                    kind: scope.kind(),
                    id: id.to_owned(),
                })?;
                (id.to_owned(), backend)
            }
            _ => return Ok(None),
        };
        Ok(Some(UserHome {
            key,
            backend,
            mount: self.mount.clone(),
        }))
    }
}

impl UserHome {
    /// Where the model sees `relative` (a path inside the workspace): below the mount.
    pub fn shown_path(&self, relative: &VirtualPath) -> VirtualPath {
        shown_path(&self.mount, relative)
    }
}

/// `relative` (a path inside a workspace) as seen below `mount`.
pub fn shown_path(mount: &VirtualPath, relative: &VirtualPath) -> VirtualPath {
    relative
        .rebase(&VirtualPath::root(), mount)
        .unwrap_or_else(|| mount.clone())
}
