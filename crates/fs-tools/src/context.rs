//! [`ToolContext`]: what a tool call runs against — the backend, the permission rules, the limits and
//! who is calling.

use std::sync::Arc;
use std::time::Duration;

use trellis_backend::{Backend, VirtualPath};

use crate::permissions::{Access, Permissions};
use crate::tool::ToolOutput;

/// Who the tools act for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserIdentity {
    /// Stable user id.
    pub user_id: String,
    /// Roles the user holds (for consumers' own policy; the permission rules do not look at them).
    pub roles: Vec<String>,
}

impl UserIdentity {
    /// A user with no roles.
    pub fn new(user_id: impl Into<String>) -> Self {
        Self {
            user_id: user_id.into(),
            roles: Vec::new(),
        }
    }

    /// Add a role.
    pub fn with_role(mut self, role: impl Into<String>) -> Self {
        self.roles.push(role.into());
        self
    }

    /// True when the user holds `role`.
    pub fn has_role(&self, role: &str) -> bool {
        self.roles.iter().any(|r| r == role)
    }
}

/// Size and time limits of the file tools. `Default` gives the documented values.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Most characters `read_file`, `ls`, `glob` and `grep` return; they cut at a line boundary and
    /// say so. Default 80,000 (about 20,000 tokens). Values below 2,000 are treated as 2,000.
    pub output_chars: usize,
    /// `read_file` shows a line longer than this many characters as numbered pieces (`12`, `12.1`,
    /// …). Default 5,000.
    pub line_chunk_chars: usize,
    /// Largest file, in bytes, that `read_file` and `edit_file` load. `read_file` pages through the
    /// first this many bytes of a larger file and says so; `edit_file` refuses it. Also the largest
    /// file `grep` searches. Default 10 MiB.
    pub max_file_bytes: u64,
    /// Most entries `ls` and `glob` list. Default 1,000.
    pub max_list_entries: usize,
    /// Most matching lines `grep` collects. Default 1,000.
    pub grep_max_matches: usize,
    /// Longest matching line `grep` shows in content mode, in characters. Default 500.
    pub grep_line_chars: usize,
    /// Time one `glob` or `grep` may take. Default 30 s.
    pub search_timeout: Duration,
    /// Results of tools that do not bound their own output are evicted to the backend when longer
    /// than this many characters; `None` disables eviction. Default `Some(80_000)`.
    pub evict_over_chars: Option<usize>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            output_chars: 80_000,
            line_chunk_chars: 5_000,
            max_file_bytes: 10 * 1024 * 1024,
            max_list_entries: 1_000,
            grep_max_matches: 1_000,
            grep_line_chars: 500,
            search_timeout: Duration::from_secs(30),
            evict_over_chars: Some(80_000),
        }
    }
}

impl Limits {
    /// The effective output budget (never below 2,000 characters).
    pub(crate) fn output_budget(&self) -> usize {
        self.output_chars.max(2_000)
    }

    /// The effective continuation piece length (at least 1).
    pub(crate) fn chunk(&self) -> usize {
        self.line_chunk_chars.max(1)
    }
}

/// Everything a tool call runs against. Cheap to clone (the backend and the rules are shared).
///
/// Build one per agent (or thread) with [`ToolContext::new`] and the `with_*` methods, and give each
/// call its tool-call id with [`ToolContext::for_call`] (used to name evicted results).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ToolContext {
    /// Where the files live.
    pub backend: Arc<dyn Backend>,
    /// Which paths the tools may read and write; checked before the backend is touched.
    pub permissions: Arc<Permissions>,
    /// Size and time limits.
    pub limits: Limits,
    /// The conversation thread the call belongs to, when there is one.
    pub thread_id: Option<String>,
    /// Who the call acts for, when known.
    pub user: Option<UserIdentity>,
    /// The model's id for this tool call, when known.
    pub call_id: Option<String>,
}

impl ToolContext {
    /// A context over `backend` with no permission rules (everything allowed) and default limits.
    pub fn new(backend: Arc<dyn Backend>) -> Self {
        Self {
            backend,
            permissions: Arc::new(Permissions::allow_all()),
            limits: Limits::default(),
            thread_id: None,
            user: None,
            call_id: None,
        }
    }

    /// Use these permission rules.
    pub fn with_permissions(mut self, permissions: Permissions) -> Self {
        self.permissions = Arc::new(permissions);
        self
    }

    /// Use these limits.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Set the thread id.
    pub fn with_thread_id(mut self, thread_id: impl Into<String>) -> Self {
        self.thread_id = Some(thread_id.into());
        self
    }

    /// Set the user.
    pub fn with_user(mut self, user: UserIdentity) -> Self {
        self.user = Some(user);
        self
    }

    /// A copy of this context for one tool call with the given id.
    pub fn for_call(&self, call_id: impl Into<String>) -> Self {
        Self {
            call_id: Some(call_id.into()),
            ..self.clone()
        }
    }

    /// `Ok` when the rules allow `access` to `path`; otherwise the error the model sees.
    pub(crate) fn check(&self, access: Access, path: &VirtualPath) -> Result<(), ToolOutput> {
        if self.permissions.allows(access, path) {
            Ok(())
        } else {
            Err(ToolOutput::error(format!(
                "permission denied: {} access to {path} is not allowed.",
                access.as_str()
            )))
        }
    }

    /// True when the model may see `path` (read access).
    pub(crate) fn visible(&self, path: &VirtualPath) -> bool {
        self.permissions.allows(Access::Read, path)
    }
}
