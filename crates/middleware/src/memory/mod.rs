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

mod comments;
mod render;

use std::sync::Arc;

use crate::backend::{Backend, BackendError, VirtualPath};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

pub use comments::strip_html_comments;
pub use render::{MemoryFile, RenderReport, render};

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
}

/// Memory files always in context; see the module docs.
#[derive(Debug, Clone)]
pub struct MemoryMiddleware {
    backend: Arc<dyn Backend>,
    sources: Vec<VirtualPath>,
    budget_chars: usize,
    show_section: bool,
    ttl: CacheTtl,
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
        })
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
        Ok(self.state_for(files))
    }

    fn state_for(&self, files: Vec<MemoryFile>) -> MemoryState {
        let (section, report) = render(&files, self.budget_chars);
        if report.over_budget() {
            tracing::warn!(
                total_chars = report.total_chars,
                shown_chars = report.shown_chars,
                budget = self.budget_chars,
                "memory is over its size budget; part of it is not shown to the model"
            );
        }
        MemoryState { files, section }
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
        Ok(self.state_for(files))
    }
}

fn to_memory_file(path: &VirtualPath, bytes: &[u8]) -> Result<Option<MemoryFile>, MemoryError> {
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

    async fn before_agent(&self, state: &mut State, _cx: &RunContext) -> Result<(), AgentError> {
        if state.get(&MEMORY)?.is_some() {
            return Ok(());
        }
        let loaded = self
            .load()
            .await
            .map_err(|e| AgentError::middleware("memory", e))?;
        state.set(&MEMORY, loaded);
        Ok(())
    }

    async fn wrap_model_call(
        &self,
        mut request: ModelRequest,
        state: &mut State,
        cx: &RunContext,
        next: Next<'_>,
    ) -> Result<ModelResponse, AgentError> {
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
        let edited = matches!(call.name.as_str(), "edit_file" | "write_file")
            .then(|| call.file_path())
            .flatten()
            .filter(|p| self.sources.contains(p));
        let mut output = next.run(call, cx).await?;
        let Some(path) = edited else {
            return Ok(output);
        };
        if output.is_error {
            return Ok(output);
        }
        let current = cx.slot(&MEMORY)?.cloned().unwrap_or_default();
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
