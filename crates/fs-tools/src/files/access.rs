//! [`FileAccess`]: what the file tools work on — the backend, the permission rules and the
//! [`Limits`].

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use trellis_backend::{Backend, VirtualPath};

use super::hidden::HiddenPaths;
use super::permissions::{Access, Permissions};
use super::spaces::{FileLayout, RunSpaces};
use crate::tool::{ToolContext, ToolOutput};

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

/// What the file tools work on: the backend, the permission rules and the limits. Cheap to clone
/// (the backend and the rules are shared).
///
/// Each file tool is built over one (see [`file_tools`](crate::file_tools)); at call time it applies
/// the run's [`HiddenPaths`] extension, if any, on top.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct FileAccess {
    /// Where the files live.
    pub backend: Arc<dyn Backend>,
    /// Which paths the tools may read and write. Reads and writes of a named path are checked
    /// before the backend is touched; listings and searches leave out what may not be read.
    pub permissions: Arc<Permissions>,
    /// Size and time limits.
    pub limits: Limits,
    /// Whose files the paths are: shared by every thread (the default), or the run's thread's.
    pub layout: FileLayout,
}

impl FileAccess {
    /// Access to `backend` with no permission rules (everything allowed), default limits and the
    /// [`FileLayout::Shared`] layout.
    pub fn new(backend: Arc<dyn Backend>) -> Self {
        Self {
            backend,
            permissions: Arc::new(Permissions::allow_all()),
            limits: Limits::default(),
            layout: FileLayout::Shared,
        }
    }

    /// Use this layout.
    pub fn with_layout(mut self, layout: FileLayout) -> Self {
        self.layout = layout;
        self
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

    /// What one call of a file tool works on: this access over the call's view of the files (the
    /// run's thread, parent and user spaces under [`FileLayout::PerThread`]), with the run's
    /// [`HiddenPaths`] (when `cx` carries that extension) absent. The error is the answer for the
    /// model when the run's spaces cannot be opened (a user id that is not one safe path segment).
    pub fn for_call(&self, cx: &ToolContext<'_>) -> Result<Cow<'_, FileAccess>, ToolOutput> {
        let hidden = cx.extension::<HiddenPaths>().filter(|h| !h.is_empty());
        let spaces = RunSpaces::of(cx);
        if hidden.is_none() && spaces.thread.is_none() {
            return Ok(Cow::Borrowed(self));
        }
        let backend = self
            .layout
            .view(&self.backend, &spaces)
            .map_err(|e| ToolOutput::error(format!("this run's files cannot be opened: {e}")))?;
        let backend = match hidden {
            Some(hidden) => hidden.wrap(backend),
            None => backend,
        };
        Ok(Cow::Owned(Self {
            backend,
            ..self.clone()
        }))
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
