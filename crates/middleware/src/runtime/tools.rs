//! Tools in the runtime: the one [`Tool`](crate::tools::Tool) trait of `trellis-fs-tools`, run by
//! the agent loop with a [`ToolContext`] whose run is this crate's [`RunContext`].
//!
//! A tool written against `trellis-fs-tools` alone sees the thread, the user, the extensions, the
//! slots and the events through [`ToolContext`]. A tool that needs the whole run (the model, the
//! agent's name, the step) reaches it with [`ToolContextExt::run`].

use serde_json::Value;

use crate::runtime::context::RunContext;
use crate::runtime::events::RunEvent;
use crate::runtime::message::{ContentBlock, ToolMessage};
use crate::runtime::state::State;
use crate::tools::{
    Extensions, Slots, StateUpdates, StateView, ToolContent, ToolContext, ToolOutput, ToolRun,
};

impl ToolRun for RunContext {
    fn thread_id(&self) -> &str {
        self.thread_id.as_str()
    }

    fn run_id(&self) -> &str {
        &self.run_id
    }

    fn extensions(&self) -> &Extensions {
        &self.extensions
    }

    fn emit(&self, source: &str, kind: &str, data: &mut dyn FnMut() -> Value) {
        crate::runtime::telemetry::event(source, kind, &mut *data);
        self.events.emit_with(|| RunEvent::Middleware {
            middleware: source.to_owned(),
            kind: kind.to_owned(),
            data: data(),
        });
    }
}

/// What the agent runtime adds to a [`ToolContext`].
pub trait ToolContextExt<'a> {
    /// The run this call belongs to, when the agent loop (or a caller with a [`RunContext`]) made
    /// the call; `None` for a [`DetachedRun`](crate::tools::DetachedRun). The run's extensions are
    /// those it started with: a `wrap_tool_call` hook may have changed what this call sees, so read
    /// extensions through the context itself.
    fn run(&self) -> Option<&'a RunContext>;

    /// The thread's whole state (messages and slots) as it was when the model asked for the call,
    /// when the agent loop made the call; `None` for a [`DetachedRun`](crate::tools::DetachedRun).
    fn state(&self) -> Option<&'a State>;
}

impl<'a> ToolContextExt<'a> for ToolContext<'a> {
    fn run(&self) -> Option<&'a RunContext> {
        self.run_as::<RunContext>()
    }

    fn state(&self) -> Option<&'a State> {
        self.state_as::<State>()
    }
}

impl StateView for State {
    fn slots(&self) -> &Slots {
        State::slots(self)
    }
}

/// The tool message answering call `call_id` of tool `name`, and the slot writes the output carries.
pub(crate) fn into_message(
    output: ToolOutput,
    call_id: impl Into<String>,
    name: impl Into<String>,
) -> (ToolMessage, StateUpdates) {
    let content = output
        .content
        .into_iter()
        .map(|piece| match piece {
            ToolContent::Text { text } => ContentBlock::Text { text },
            ToolContent::Image { source } => ContentBlock::Image { source },
        })
        .collect();
    let message = ToolMessage {
        call_id: call_id.into(),
        name: name.into(),
        content,
        is_error: output.is_error,
        meta: Default::default(),
    };
    (message, output.updates)
}

impl RunContext {
    /// A context for tool call `call_id` of this run over `state` (for calling tools by hand; the
    /// agent loop builds its own).
    pub fn tool_context<'a>(&'a self, state: &'a State, call_id: &'a str) -> ToolContext<'a> {
        ToolContext::new(self, state, call_id)
    }
}
