//! Who and where a run is: [`ThreadId`], [`RunContext`] and caller-supplied [`Extensions`].

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::backend::ScopeId;
use crate::runtime::events::{EventSink, RunEvent};
use crate::runtime::model::ChatModel;
use crate::runtime::{random, telemetry};
pub use crate::tools::Extensions;

/// A thread's id: 1 to 128 ASCII letters, digits, `-`, `_` or `.`, not starting with `.`. Safe to
/// use as a path segment or object key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ThreadId(String);

/// A string that is not a valid [`ThreadId`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid thread id {0:?}: use 1-128 ASCII letters, digits, '-', '_' or '.', not starting with '.'")]
pub struct InvalidThreadId(pub String);

impl ThreadId {
    /// Parse and validate, by the storage layer's one rule for scope ids ([`ScopeId`]), so a thread
    /// id is always exactly one segment of the paths and keys its checkpoints and files live under.
    pub fn new(id: impl Into<String>) -> Result<Self, InvalidThreadId> {
        match ScopeId::thread(id) {
            Ok(scope) => Ok(Self(scope.as_str().to_owned())),
            Err(e) => Err(InvalidThreadId(e.id)),
        }
    }

    /// A fresh random id.
    pub fn generate() -> Self {
        Self(random::unique_id("t"))
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ThreadId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for ThreadId {
    type Error = InvalidThreadId;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::new(value)
    }
}

impl From<ThreadId> for String {
    fn from(id: ThreadId) -> Self {
        id.0
    }
}

impl std::str::FromStr for ThreadId {
    type Err = InvalidThreadId;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

/// What every hook and tool knows about the run it is part of.
#[derive(Debug, Clone)]
pub struct RunContext {
    pub(crate) thread_id: ThreadId,
    pub(crate) run_id: String,
    pub(crate) agent_name: Option<String>,
    pub(crate) model: Arc<dyn ChatModel>,
    pub(crate) step: u32,
    pub(crate) events: EventSink,
    pub(crate) extensions: Extensions,
}

impl RunContext {
    /// A context for calling hooks or tools outside an agent (tests, tools run by hand).
    pub fn detached(model: Arc<dyn ChatModel>) -> Self {
        Self {
            thread_id: ThreadId::generate(),
            run_id: random::unique_id("r"),
            agent_name: None,
            model,
            step: 0,
            events: EventSink::none(),
            extensions: Extensions::new(),
        }
    }

    /// Replace the thread id.
    pub fn with_thread_id(mut self, thread_id: ThreadId) -> Self {
        self.thread_id = thread_id;
        self
    }

    /// Replace the event sink.
    pub fn with_events(mut self, events: EventSink) -> Self {
        self.events = events;
        self
    }

    /// Replace the extensions.
    pub fn with_extensions(mut self, extensions: Extensions) -> Self {
        self.extensions = extensions;
        self
    }

    /// The thread this run continues.
    pub fn thread_id(&self) -> &ThreadId {
        &self.thread_id
    }

    /// This run's id (fresh for every run).
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The agent's name, if it has one.
    pub fn agent_name(&self) -> Option<&str> {
        self.agent_name.as_deref()
    }

    /// The agent's configured model. A `wrap_model_call` hook must ask its `Next` instead: a
    /// middleware earlier in the chain may have swapped the model for this call.
    pub fn model(&self) -> &Arc<dyn ChatModel> {
        &self.model
    }

    /// Model calls made earlier in this run.
    pub fn step(&self) -> u32 {
        self.step
    }

    /// The run's event sink.
    pub fn events(&self) -> &EventSink {
        &self.events
    }

    /// Send a [`RunEvent::Middleware`] event; `data` is only built when someone listens.
    pub fn emit_middleware(&self, middleware: &str, kind: &str, data: impl FnOnce() -> Value) {
        let traced = tracing::enabled!(target: telemetry::EVENT_TARGET, tracing::Level::INFO);
        if !traced && !self.events.is_enabled() {
            return;
        }
        let data = data();
        telemetry::event(middleware, kind, || data.clone());
        self.events.emit_with(|| RunEvent::Middleware {
            middleware: middleware.to_owned(),
            kind: kind.to_owned(),
            data,
        });
    }

    /// A caller-supplied value of type `T`.
    pub fn extension<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.extensions.get::<T>()
    }

    /// All caller-supplied values.
    pub fn extensions(&self) -> &Extensions {
        &self.extensions
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn thread_ids_are_path_safe() {
        for ok in ["a", "thread-1", "A_b.c", &"x".repeat(128)] {
            assert!(ThreadId::new(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            ".hidden",
            "a/b",
            "a b",
            "ü",
            &"x".repeat(129),
            "a\\b",
        ] {
            assert!(ThreadId::new(bad).is_err(), "{bad}");
        }
        let generated = ThreadId::generate();
        assert!(ThreadId::new(generated.as_str()).is_ok());
        assert_ne!(generated, ThreadId::generate());
        assert!(serde_json::from_str::<ThreadId>("\"../x\"").is_err());
    }
}
