//! [`StateDir`]: the directory the `trellis` commands keep their state in (`--state-dir`, by
//! default `.trellis`), and the one place that knows its layout.
//!
//! | path | what |
//! |---|---|
//! | `threads/<id>/` | a thread's checkpoints and its own files ([`StateDir::checkpointer`]) |
//! | `runs/<id>.json` | the configuration the thread's run was started with, for `trellis resume` ([`StateDir::run_config_file`]) |
//! | `users/<id>/` | a `--user`'s workspace when no `--workdir` is given ([`StateDir::user_dir`]) |
//! | `chat-history` | `trellis chat`'s input history; per `--user` in `chat-history.users/<id>` ([`StateDir::chat_history`]) |

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use trellis_middleware::backend::{Backend, FilesystemBackend, ScopeId, VirtualPath};
use trellis_middleware::{BackendCheckpointer, ThreadId};

/// Where, inside the state dir, the threads are kept (a virtual path of its file backend).
const THREADS: &str = "/threads";
/// The saved run configurations, one file a thread.
const RUNS: &str = "runs";
/// The users' workspaces.
const USERS: &str = "users";
/// `trellis chat`'s input history without `--user`.
const CHAT_HISTORY: &str = "chat-history";
/// `trellis chat`'s input histories of the `--user`s, one file each.
const CHAT_HISTORY_USERS: &str = "chat-history.users";

/// A state dir (`--state-dir`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateDir {
    root: PathBuf,
}

impl StateDir {
    /// The state dir at `root` (nothing is created until something is stored).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory, for messages.
    pub fn display(&self) -> std::path::Display<'_> {
        self.root.display()
    }

    /// Create the directory if it is missing.
    pub fn create(&self) -> Result<()> {
        create(&self.root)
    }

    /// The checkpointer of the threads kept here (`threads/`); creates the directory if missing.
    pub fn checkpointer(&self) -> Result<BackendCheckpointer> {
        self.create()?;
        let store: Arc<dyn Backend> = Arc::new(FilesystemBackend::new(&self.root)?);
        threads_on(store)
    }
}

/// The checkpointer of threads kept on `store` as a state dir keeps them (`/threads/`): `trellis
/// serve --store URL` keeps them on an object store this way.
pub fn threads_on(store: Arc<dyn Backend>) -> Result<BackendCheckpointer> {
    Ok(BackendCheckpointer::new(store, VirtualPath::parse(THREADS)?)?)
}

impl StateDir {
    /// The directory of the saved run configurations (`runs/`).
    pub fn runs_dir(&self) -> PathBuf {
        self.root.join(RUNS)
    }

    /// Where the saved run configuration of `thread` lives (`runs/<thread>.json`).
    pub fn run_config_file(&self, thread: &ThreadId) -> PathBuf {
        self.runs_dir().join(format!("{thread}.json"))
    }

    /// The workspace of `user` when no `--workdir` is given (`users/<user>`), created if missing.
    pub fn user_dir(&self, user: &ScopeId) -> Result<PathBuf> {
        let dir = self.root.join(USERS).join(user.as_str());
        create(&dir)?;
        Ok(dir)
    }

    /// The file of `trellis chat`'s input history: one per `--user` (an id already validated by
    /// the mounts, so it names one file under the directory), else one for the state dir. Both sit
    /// outside the users' workspaces, so the agent never sees them.
    pub fn chat_history(&self, user: Option<&str>) -> PathBuf {
        match user {
            Some(user) => self.root.join(CHAT_HISTORY_USERS).join(user),
            None => self.root.join(CHAT_HISTORY),
        }
    }
}

fn create(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_user_has_an_input_history_of_their_own() {
        let dir = StateDir::new("/state");
        let ann = dir.chat_history(Some("ann"));
        let bob = dir.chat_history(Some("bob"));
        assert_ne!(ann, bob);
        assert_ne!(ann, dir.chat_history(None));
        assert!(ann.starts_with("/state/chat-history.users"));
        assert!(!ann.starts_with("/state/users"), "outside the user's workspace");
    }
}
