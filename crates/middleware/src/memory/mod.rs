//! [`MemoryMiddleware`]: the agent's memory files (AGENTS.md and the like), always in context,
//! editable by the agent, and placed where they do not break prompt caching.
//!
//! * **Loading.** Before the first model call of a thread, every source is fetched with one
//!   [`Backend::read_many`]. A missing file is skipped (it may be created later); any other failure
//!   stops the run with an error naming the source and the cause, because memory that silently
//!   vanishes changes the agent's behaviour. The loaded text is kept in the thread's (private) state,
//!   so later runs of the thread do not read the files again.
//! * **Rendering.** HTML comments are removed (except inside code, see [`strip_html_comments`]); a
//!   file empty after that is skipped; the rest is rendered once, in the declared order, into a
//!   section ([`render`]) that is byte-identical on every call until memory changes. Over the size
//!   budget, the text is cut at a line end and both the model and the log are told.
//! * **Caching.** The section is appended after every other system block. For models that declare
//!   prompt caching (the model actually used for the call, which a middleware may have swapped), the
//!   last system block gets its own cache breakpoint — even when the section text is turned off — so
//!   a memory edit never changes a byte before the stable prefix's breakpoint. Register this
//!   middleware *after* [`PromptCachingMiddleware`](crate::PromptCachingMiddleware), so the stable
//!   prefix is marked first; the loop drops breakpoints past the model's limit, latest first.
//! * **Edits.** After a successful `edit_file` or `write_file` of one of the sources (through tools
//!   working on the same backend), the file is read again and the next model call shows the new text.
//! * **The user's own memory.** [`MemoryMiddleware::with_user_sources`] adds files relative to the
//!   run's user's workspace (`agents/AGENTS.md`, `agents/USER.md`, `agents/MEMORY.md`), rendered in
//!   the same section after the agent's own files, read on every run and cached per user; see
//!   *The user's layer* below and `docs/memory.md`.
//!
//! # The user's layer
//!
//! Every run reads the run's user's sources in one batched read (missing ones skipped; a missing one
//! with a first-use template is created from it, create-only, never overwriting). What was read is
//! kept per user in a bounded cache (least recently used out, [`DEFAULT_USER_CACHE_CAPACITY`] users
//! by default) with a revision; each model call compares the thread's revision with its user's, so
//! an edit of a user's file by one of their threads reaches their other threads on the next call,
//! and never a thread of another user. Edits go through the file tools, whose writes are
//! version-checked. A run whose user id is not one safe path segment fails with
//! [`MemoryError::User`] before anything is read.

mod comments;
mod render;
mod user;

use std::sync::Arc;

use crate::backend::{Backend, BackendError, VirtualPath};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

pub use crate::users::DEFAULT_USER_CACHE_CAPACITY;
pub use comments::strip_html_comments;
pub use render::{MemoryFile, RenderReport, UserNote, render, render_for_user};

use crate::users::{UserHomeError, UserHomes};
use user::{UserEntry, UserMemory};

use crate::runtime::context::RunContext;
use crate::runtime::error::AgentError;
use crate::runtime::message::{CacheTtl, SystemBlock, ToolCall};
use crate::runtime::middleware::{Middleware, Next, ToolNext};
use crate::runtime::model::{ModelRequest, ModelResponse};
use crate::runtime::state::{Slot, State};
use crate::tools::{ToolContext, ToolOutput};

/// Default most characters of memory shown (about 10,000 tokens).
pub const DEFAULT_MEMORY_BUDGET_CHARS: usize = 40_000;

/// The thread's loaded memory (private: never returned to callers or parent agents).
pub static MEMORY: Slot<MemoryState> = Slot::private("_memory");

/// What [`MemoryMiddleware`] keeps in a thread's state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryState {
    /// Loaded files in the declared order (missing and empty ones left out).
    pub files: Vec<MemoryFile>,
    /// The rendered section.
    pub section: String,
    /// The run's user's files (see [`MemoryMiddleware::with_user_sources`]), after `files`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub user_files: Vec<MemoryFile>,
    /// The user whose files `user_files` are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The revision of the user's cached memory the section shows (this process only).
    #[serde(skip)]
    pub user_revision: u64,
}

/// Why memory could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// A source exists but could not be read.
    #[error("could not load memory source {path}: {source}")]
    Load {
        /// The source.
        path: String,
        /// The storage error.
        #[source]
        source: BackendError,
    },
    /// A source is not UTF-8 text.
    #[error("memory source {path} is not UTF-8 text")]
    NotText {
        /// The source.
        path: String,
    },
    /// A source path is not a valid path.
    #[error("memory source {path:?} is not a valid path: {reason}")]
    BadSource {
        /// The source as given.
        path: String,
        /// Why.
        reason: String,
    },
    /// The run's user workspace could not be placed (a user id that is not one safe path segment).
    #[error(transparent)]
    User(#[from] UserHomeError),
}

/// The user's part of a [`MemoryState`].
#[derive(Debug, Default)]
struct UserLayer {
    files: Vec<MemoryFile>,
    key: Option<String>,
    revision: u64,
}

/// Memory files always in context; see the module docs.
#[derive(Debug, Clone)]
pub struct MemoryMiddleware {
    backend: Arc<dyn Backend>,
    sources: Vec<VirtualPath>,
    budget_chars: usize,
    show_section: bool,
    ttl: CacheTtl,
    user: Option<Arc<UserMemory>>,
}

impl MemoryMiddleware {
    /// Memory from `sources` (in order) on `backend`.
    pub fn new<S: AsRef<str>>(
        backend: Arc<dyn Backend>,
        sources: impl IntoIterator<Item = S>,
    ) -> Result<Self, MemoryError> {
        let sources = sources
            .into_iter()
            .map(|s| {
                VirtualPath::parse(s.as_ref()).map_err(|e| MemoryError::BadSource {
                    path: s.as_ref().to_owned(),
                    reason: e.to_string(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            backend,
            sources,
            budget_chars: DEFAULT_MEMORY_BUDGET_CHARS,
            show_section: true,
            ttl: CacheTtl::FiveMinutes,
            user: None,
        })
    }

    /// Add memory files of the run's user: paths relative to the user's workspace
    /// (`agents/MEMORY.md`), shown and edited below its mount (`/workspace/agents/MEMORY.md`),
    /// rendered after the agent's own files. A run without a user workspace has no user layer. The
    /// workspace is found by [`UserHomes`] (only a `UserFiles` run extension unless
    /// [`with_user_homes`](Self::with_user_homes) says more). Configure before cloning: clones
    /// share the per-user cache.
    pub fn with_user_sources<S: AsRef<str>>(
        mut self,
        sources: impl IntoIterator<Item = S>,
    ) -> Result<Self, MemoryError> {
        let sources = sources
            .into_iter()
            .map(|s| user::parse_relative(s.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        let homes = UserHomes::new();
        self.user = Some(Arc::new(UserMemory::new(
            homes,
            sources,
            DEFAULT_USER_CACHE_CAPACITY,
        )));
        Ok(self)
    }

    /// Where the run's user's workspace is (call after [`with_user_sources`](Self::with_user_sources)).
    pub fn with_user_homes(self, homes: UserHomes) -> Self {
        self.map_user(|u| u.with_homes(homes))
    }

    /// Most users whose memory is kept in the cache (default [`DEFAULT_USER_CACHE_CAPACITY`]).
    pub fn with_user_cache_capacity(self, users: usize) -> Self {
        self.map_user(|u| u.with_capacity(users))
    }

    /// A first-use template for the user source `path`: when a run finds the file missing, it is
    /// created with `text` (create-only: an existing file, or one created meanwhile, is never
    /// overwritten). `path` must be one of the user sources.
    pub fn with_user_template(mut self, path: &str, text: impl Into<String>) -> Result<Self, MemoryError> {
        let path = user::parse_relative(path)?;
        let Some(user) = self.user.take() else {
            return Err(MemoryError::BadSource {
                path: path.to_string(),
                reason: "a template needs user memory sources (with_user_sources)".to_owned(),
            });
        };
        let mut user = Arc::try_unwrap(user).unwrap_or_else(|shared| shared.fresh_copy());
        user.add_template(path, text.into())?;
        self.user = Some(Arc::new(user));
        Ok(self)
    }

    fn map_user(mut self, f: impl FnOnce(UserMemory) -> UserMemory) -> Self {
        if let Some(user) = self.user.take() {
            let user = Arc::try_unwrap(user).unwrap_or_else(|shared| shared.fresh_copy());
            self.user = Some(Arc::new(f(user)));
        }
        self
    }

    /// The user sources as the model sees them (below the workspace mount), in order.
    pub fn user_sources(&self) -> Vec<VirtualPath> {
        self.user
            .as_ref()
            .map(|u| u.shown_sources().collect())
            .unwrap_or_default()
    }

    /// Most characters of memory text shown.
    pub fn with_budget_chars(mut self, chars: usize) -> Self {
        self.budget_chars = chars;
        self
    }

    /// Add no memory text (the cache breakpoint is still placed).
    pub fn without_section(mut self) -> Self {
        self.show_section = false;
        self
    }

    /// Lifetime of the memory block's cache breakpoint.
    pub fn with_cache_ttl(mut self, ttl: CacheTtl) -> Self {
        self.ttl = ttl;
        self
    }

    /// The sources, in order.
    pub fn sources(&self) -> &[VirtualPath] {
        &self.sources
    }

    /// Read every source (one batched read) and render them.
    pub async fn load(&self) -> Result<MemoryState, MemoryError> {
        let reads = self.backend.read_many(&self.sources, None).await;
        let mut files = Vec::new();
        for (path, read) in self.sources.iter().zip(reads) {
            match read {
                Ok(out) => {
                    if let Some(file) = to_memory_file(path, &out.bytes)? {
                        files.push(file);
                    }
                }
                Err(BackendError::NotFound { .. }) => {}
                Err(source) => {
                    return Err(MemoryError::Load {
                        path: path.to_string(),
                        source,
                    });
                }
            }
        }
        Ok(self.state_for(files, UserLayer::default()))
    }

    /// `files` of the agent, then `user`'s files, rendered.
    fn state_for(&self, files: Vec<MemoryFile>, user: UserLayer) -> MemoryState {
        let all: Vec<MemoryFile> = files.iter().chain(&user.files).cloned().collect();
        let shown: Vec<String> = self.user_sources().iter().map(ToString::to_string).collect();
        let note = user.key.is_some().then_some(UserNote { sources: &shown });
        let (section, report) = render_for_user(&all, note, self.budget_chars);
        if report.over_budget() {
            tracing::warn!(
                total_chars = report.total_chars,
                shown_chars = report.shown_chars,
                budget = self.budget_chars,
                "memory is over its size budget; part of it is not shown to the model"
            );
        }
        MemoryState {
            files,
            section,
            user_files: user.files,
            user: user.key,
            user_revision: user.revision,
        }
    }

    /// `current` with the user's layer set to `entry` (re-rendered only when it changed).
    fn with_user_entry(&self, current: &MemoryState, key: &str, entry: &UserEntry) -> Option<MemoryState> {
        if current.user.as_deref() == Some(key) && current.user_revision == entry.revision {
            return None;
        }
        let layer = UserLayer {
            files: entry.files.clone(),
            key: Some(key.to_owned()),
            revision: entry.revision,
        };
        Some(self.state_for(current.files.clone(), layer))
    }

    /// The run's user's layer, read now (every run), applied to `memory`.
    async fn load_user(&self, memory: MemoryState, cx: &RunContext) -> Result<MemoryState, MemoryError> {
        let Some(user) = &self.user else {
            return Ok(memory);
        };
        match user.home(cx.extensions())? {
            Some(home) => {
                let entry = user.load(&home).await?;
                Ok(self.with_user_entry(&memory, &home.key, &entry).unwrap_or(memory))
            }
            None if memory.user.is_some() || !memory.user_files.is_empty() => {
                Ok(self.state_for(memory.files, UserLayer::default()))
            }
            None => Ok(memory),
        }
    }

    /// Re-read one source after an edit and return the new state.
    async fn refreshed(&self, current: &MemoryState, path: &VirtualPath) -> Result<MemoryState, MemoryError> {
        let fresh = match self.backend.read(path, None).await {
            Ok(out) => to_memory_file(path, &out.bytes)?,
            Err(BackendError::NotFound { .. }) => None,
            Err(source) => {
                return Err(MemoryError::Load {
                    path: path.to_string(),
                    source,
                });
            }
        };
        let mut files: Vec<MemoryFile> = Vec::with_capacity(self.sources.len());
        for source in &self.sources {
            if source == path {
                files.extend(fresh.clone());
            } else if let Some(f) = current.files.iter().find(|f| f.path == source.as_str()) {
                files.push(f.clone());
            }
        }
        // The user's layer is unchanged by an edit of the agent's own memory.
        let user = UserLayer {
            files: current.user_files.clone(),
            key: current.user.clone(),
            revision: current.user_revision,
        };
        Ok(self.state_for(files, user))
    }

    /// After an edit of the user source `source`: re-read it, update the user's cache, and the state.
    async fn refreshed_user(
        &self,
        current: &MemoryState,
        source: &VirtualPath,
        cx: &ToolContext<'_>,
    ) -> Result<Option<MemoryState>, MemoryError> {
        let Some(user) = &self.user else {
            return Ok(None);
        };
        let Some(home) = user.home(cx.extensions())? else {
            return Ok(None);
        };
        let entry = user.refresh(&home, source).await?;
        Ok(Some(
            self.with_user_entry(current, &home.key, &entry)
                .unwrap_or_else(|| current.clone()),
        ))
    }
}

pub(crate) fn to_memory_file(path: &VirtualPath, bytes: &[u8]) -> Result<Option<MemoryFile>, MemoryError> {
    let text = std::str::from_utf8(bytes).map_err(|_| MemoryError::NotText {
        path: path.to_string(),
    })?;
    let text = strip_html_comments(text.strip_prefix('\u{feff}').unwrap_or(text));
    if text.is_empty() {
        return Ok(None);
    }
    Ok(Some(MemoryFile {
        path: path.to_string(),
        text,
    }))
}

#[async_trait]
impl Middleware for MemoryMiddleware {
    fn name(&self) -> &str {
        "memory"
    }

    async fn before_agent(&self, state: &mut State, cx: &RunContext) -> Result<(), AgentError> {
        let current = state.get(&MEMORY)?.cloned();
        if current.is_some() && self.user.is_none() {
            return Ok(());
        }
        let fail = |e| AgentError::middleware("memory", e);
        let memory = match current.clone() {
            Some(m) => m,
            None => self.load().await.map_err(fail)?,
        };
        let memory = self.load_user(memory, cx).await.map_err(fail)?;
        if current.as_ref() != Some(&memory) {
            state.set(&MEMORY, memory);
        }
        Ok(())
    }

    async fn wrap_model_call(
        &self,
        mut request: ModelRequest,
        state: &mut State,
        cx: &RunContext,
        next: Next<'_>,
    ) -> Result<ModelResponse, AgentError> {
        // Another thread of this user edited their memory: show it now.
        if let Some(user) = &self.user
            && let Some(key) = user.key_of(cx.extensions())
            && let Some(entry) = user.cached(key)
            && let Some(memory) = state.get(&MEMORY)?
            && let Some(fresh) = self.with_user_entry(memory, key, &entry)
        {
            state.set(&MEMORY, fresh);
        }
        if self.show_section
            && let Some(memory) = state.get(&MEMORY)?
        {
            request.push_system(SystemBlock::new(memory.section.clone()).with_source("memory"));
        }
        if next.model().capabilities().prompt_caching
            && let Some(last) = request.system.last_mut()
            && last.cache_breakpoint.is_none()
        {
            last.cache_breakpoint = Some(self.ttl);
        }
        next.run(request, state, cx).await
    }

    async fn wrap_tool_call(
        &self,
        call: ToolCall,
        cx: &ToolContext<'_>,
        next: ToolNext<'_>,
    ) -> Result<ToolOutput, AgentError> {
        let target = matches!(call.name.as_str(), "edit_file" | "write_file")
            .then(|| call.file_path())
            .flatten();
        let edited = target.clone().filter(|p| self.sources.contains(p));
        let edited_user = target
            .as_ref()
            .and_then(|p| self.user.as_ref().and_then(|u| u.source_at(p)).cloned());
        let mut output = next.run(call, cx).await?;
        if output.is_error {
            return Ok(output);
        }
        let current = cx.slot(&MEMORY)?.cloned().unwrap_or_default();
        if let (Some(source), Some(shown)) = (edited_user, target) {
            match self.refreshed_user(&current, &source, cx).await {
                Ok(Some(fresh)) => {
                    cx.emit(
                        "memory",
                        "refreshed",
                        || serde_json::json!({ "path": shown.as_str() }),
                    );
                    output.updates.set(&MEMORY, fresh);
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "user memory file edited but could not be re-read; keeping the old text")
                }
            }
            return Ok(output);
        }
        let Some(path) = edited else {
            return Ok(output);
        };
        match self.refreshed(&current, &path).await {
            Ok(fresh) => {
                cx.emit(
                    "memory",
                    "refreshed",
                    || serde_json::json!({ "path": path.as_str() }),
                );
                output.updates.set(&MEMORY, fresh);
            }
            Err(e) => {
                tracing::warn!(error = %e, "memory file edited but could not be re-read; keeping the old text")
            }
        }
        Ok(output)
    }
}
