//! [`ToolContext`]: what one tool call sees besides its arguments — the run it belongs to (thread,
//! user, extensions, events), a read-only view of the thread's slots, and the call's id.
//!
//! The runtime that calls tools implements [`ToolRun`] (`trellis-middleware`'s `RunContext` does);
//! [`DetachedRun`] is a stand-alone one for calling tools by hand, in tests or scripts.

use std::any::Any;
use std::fmt;
use std::sync::LazyLock;

use serde_json::Value;

use super::extensions::Extensions;
use super::slots::{Slot, SlotValue, Slots, StateError};

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

/// The run a tool call belongs to, as the runtime that makes the call describes it.
///
/// Object-safe. `Any` is a supertrait so that a runtime can recover its own type from a
/// [`ToolContext`] ([`ToolContext::run_as`]); tools written against this crate alone never need to.
pub trait ToolRun: Any + Send + Sync + fmt::Debug {
    /// The conversation thread.
    fn thread_id(&self) -> &str;

    /// This run's id.
    fn run_id(&self) -> &str;

    /// Caller-supplied values ([`UserIdentity`] among them).
    fn extensions(&self) -> &Extensions;

    /// Report a progress event from `source` (a tool's name) of kind `kind`. `data` is only called
    /// when someone listens.
    fn emit(&self, source: &str, kind: &str, data: &mut dyn FnMut() -> Value);
}

/// The thread's state as a tool sees it: read-only, as it was when the model asked for the call.
///
/// The runtime's state type implements it (`trellis-middleware`'s `State`: messages and slots);
/// [`Slots`] alone does too. A runtime recovers its own type with [`ToolContext::state_as`].
pub trait StateView: Any + Send + Sync {
    /// The state's slots.
    fn slots(&self) -> &Slots;
}

impl StateView for Slots {
    fn slots(&self) -> &Slots {
        self
    }
}

/// What one tool call sees besides its arguments. Cheap to copy.
///
/// ```
/// use trellis_fs_tools::{DetachedRun, UserIdentity};
///
/// let run = DetachedRun::new().with_thread_id("t-1").with_user(UserIdentity::new("ada"));
/// let cx = run.context("call_1");
/// assert_eq!(cx.thread_id(), "t-1");
/// assert_eq!(cx.user().map(|u| u.user_id.as_str()), Some("ada"));
/// assert_eq!(cx.call_id(), "call_1");
/// assert_eq!(cx.idempotency_key(), "t-1:call_1");
/// ```
#[derive(Clone, Copy)]
pub struct ToolContext<'a> {
    run: &'a dyn ToolRun,
    extensions: &'a Extensions,
    state: &'a dyn StateView,
    call_id: &'a str,
}

impl fmt::Debug for ToolContext<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolContext")
            .field("thread_id", &self.thread_id())
            .field("call_id", &self.call_id)
            .finish_non_exhaustive()
    }
}

impl<'a> ToolContext<'a> {
    /// A context for call `call_id` of `run`, over the thread's `state` as it was when the model
    /// asked for the call.
    pub fn new(run: &'a dyn ToolRun, state: &'a dyn StateView, call_id: &'a str) -> Self {
        Self {
            run,
            extensions: run.extensions(),
            state,
            call_id,
        }
    }

    /// A detached context for call `call_id`: thread `detached`, no user, no slots, no listener.
    pub fn detached(call_id: &'a str) -> Self {
        static DETACHED: LazyLock<DetachedRun> = LazyLock::new(DetachedRun::new);
        DETACHED.context(call_id)
    }

    /// The same call with other extensions (for a `wrap_tool_call` hook that hides paths or adds
    /// a value for the tools below it).
    pub fn with_extensions(self, extensions: &'a Extensions) -> Self {
        Self { extensions, ..self }
    }

    /// The conversation thread.
    pub fn thread_id(&self) -> &'a str {
        self.run.thread_id()
    }

    /// This run's id.
    pub fn run_id(&self) -> &'a str {
        self.run.run_id()
    }

    /// The id of this call, as the model (or the runtime, when the model sent none) gave it.
    pub fn call_id(&self) -> &'a str {
        self.call_id
    }

    /// The call's idempotency key: `{thread}:{call id}` ([`idempotency_key`](crate::idempotency_key)),
    /// the same in every attempt of this call (a run resumed after a crash, in any process) and
    /// different for any other call. A tool whose effect reaches another system passes it along
    /// (`execute` sets `TRELLIS_IDEMPOTENCY_KEY`) so that system can do it once.
    pub fn idempotency_key(&self) -> String {
        super::effects::idempotency_key(self.thread_id(), self.call_id)
    }

    /// Who the call acts for: the run's [`UserIdentity`] extension.
    pub fn user(&self) -> Option<&'a UserIdentity> {
        self.extensions.get::<UserIdentity>()
    }

    /// A caller-supplied value of type `T`.
    pub fn extension<T: Send + Sync + 'static>(&self) -> Option<&'a T> {
        self.extensions.get::<T>()
    }

    /// All caller-supplied values.
    pub fn extensions(&self) -> &'a Extensions {
        self.extensions
    }

    /// A slot of the thread's state, as it was when the model asked for this call. Read-only: write
    /// through [`ToolOutput::with_update`](crate::ToolOutput::with_update).
    pub fn slot<T: SlotValue>(&self, slot: &Slot<T>) -> Result<Option<&'a T>, StateError> {
        self.state.slots().get(slot)
    }

    /// All slots of the thread's state.
    pub fn slots(&self) -> &'a Slots {
        self.state.slots()
    }

    /// Report a progress event from `source` (normally the tool's name). `data` is only built when
    /// someone listens.
    pub fn emit(&self, source: &str, kind: &str, data: impl FnOnce() -> Value) {
        let mut data = Some(data);
        self.run
            .emit(source, kind, &mut || data.take().map_or(Value::Null, |f| f()));
    }

    /// The runtime's own run type, when this call was made by that runtime.
    pub fn run_as<R: ToolRun>(&self) -> Option<&'a R> {
        let run: &'a dyn Any = self.run;
        run.downcast_ref::<R>()
    }

    /// The runtime's own state type, when this call was made by that runtime.
    pub fn state_as<S: StateView>(&self) -> Option<&'a S> {
        let state: &'a dyn Any = self.state;
        state.downcast_ref::<S>()
    }
}

/// A run for calling tools outside an agent: a thread id, extensions, no event listener.
#[derive(Debug, Clone)]
pub struct DetachedRun {
    thread_id: String,
    extensions: Extensions,
}

impl Default for DetachedRun {
    fn default() -> Self {
        Self::new()
    }
}

impl DetachedRun {
    /// Thread `detached`, no extensions.
    pub fn new() -> Self {
        Self {
            thread_id: "detached".to_owned(),
            extensions: Extensions::new(),
        }
    }

    /// Use this thread id.
    pub fn with_thread_id(mut self, thread_id: impl Into<String>) -> Self {
        self.thread_id = thread_id.into();
        self
    }

    /// Act for `user`.
    pub fn with_user(self, user: UserIdentity) -> Self {
        self.with_extension(user)
    }

    /// Add a caller-supplied value.
    pub fn with_extension<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.extensions.insert(value);
        self
    }

    /// A context for call `call_id` of this run, with no slots.
    pub fn context<'a>(&'a self, call_id: &'a str) -> ToolContext<'a> {
        static NO_SLOTS: Slots = Slots::new();
        ToolContext::new(self, &NO_SLOTS, call_id)
    }
}

impl ToolRun for DetachedRun {
    fn thread_id(&self) -> &str {
        &self.thread_id
    }

    fn run_id(&self) -> &str {
        "detached"
    }

    fn extensions(&self) -> &Extensions {
        &self.extensions
    }

    fn emit(&self, _source: &str, _kind: &str, _data: &mut dyn FnMut() -> Value) {}
}
