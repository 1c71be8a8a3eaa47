//! Run events: what a run did, as it happens, for UIs, logs and tests.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::runtime::interrupt::{ApprovalRequest, DecisionKind};
use crate::runtime::model::{StopReason, Usage};
use crate::runtime::state::State;
use crate::runtime::stream::ModelDelta;
use crate::tools::SideEffects;

/// The state a checkpoint saved, handed to listeners in this process with
/// [`RunEvent::CheckpointSaved`]: a listener reading the thread's latest checkpoint instead may
/// find a later step's, since the run goes on while the event is handled. Cheap to clone (the
/// state is shared), never serialized (a deserialized event has none), and any two compare equal:
/// it is a view of the checkpoint the event names, not part of what the event says.
#[derive(Clone, Default)]
pub struct SavedState(Option<Arc<State>>);

impl SavedState {
    /// `state`, as saved.
    pub fn new(state: State) -> Self {
        Self(Some(Arc::new(state)))
    }

    /// The state, unless the event was deserialized.
    pub fn get(&self) -> Option<&State> {
        self.0.as_deref()
    }
}

impl fmt::Debug for SavedState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "SavedState(..)"
        } else {
            "SavedState(none)"
        })
    }
}

impl PartialEq for SavedState {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// One thing that happened during a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
#[non_exhaustive]
pub enum RunEvent {
    /// A run began (after its checkpoint, if any, was loaded).
    RunStarted {
        /// The thread.
        thread_id: String,
        /// This run.
        run_id: String,
        /// True when the thread already had a checkpoint.
        resumed: bool,
    },
    /// A model call is about to be made (after `before_model`, before the `wrap_model_call` chain).
    ModelStarted {
        /// Model calls made earlier in this run.
        step: u32,
        /// The agent's model id.
        model: String,
        /// Messages in the state.
        messages: usize,
        /// Tools offered.
        tools: usize,
    },
    /// One attempt of a model call starts streaming (a retried call starts again: discard what
    /// the previous attempt's deltas showed).
    ModelStreamStarted {
        /// Model calls made earlier in this run.
        step: u32,
    },
    /// A piece of the reply being written (see [`ModelDelta`]); only the finished reply is
    /// committed to the thread.
    ModelDelta {
        /// Model calls made earlier in this run.
        step: u32,
        /// The piece.
        delta: ModelDelta,
    },
    /// A model call returned.
    ModelFinished {
        /// Model calls made earlier in this run.
        step: u32,
        /// The model that answered, as reported (or the agent's model id).
        model: String,
        /// Token usage of the call.
        usage: Usage,
        /// Why the model stopped.
        stop_reason: StopReason,
        /// How many tools it called.
        tool_calls: usize,
        /// Wall time of the whole `wrap_model_call` chain, retries included.
        elapsed: Duration,
    },
    /// A model call failed for good (after any retries).
    ModelFailed {
        /// Model calls made earlier in this run.
        step: u32,
        /// The error.
        error: String,
    },
    /// A tool call started.
    ToolStarted {
        /// The model call that asked for it.
        step: u32,
        /// The call's id.
        call_id: String,
        /// The tool's name, as called.
        name: String,
    },
    /// A tool call finished (also when it failed or panicked).
    ToolFinished {
        /// The model call that asked for it.
        step: u32,
        /// The call's id.
        call_id: String,
        /// The tool's name, as called.
        name: String,
        /// True when the result is an error.
        is_error: bool,
        /// What the tool declares running it may change ([`SideEffects`]): a consumer that
        /// mirrors the thread's files need not read them again after a `read_only` call.
        #[serde(default)]
        side_effects: SideEffects,
        /// Wall time, `wrap_tool_call` chain included.
        elapsed: Duration,
    },
    /// Something a middleware reports (a retry, a grading, a summarization, …).
    Middleware {
        /// The middleware's name.
        middleware: String,
        /// What happened, e.g. `retry`, `grading_finished`.
        kind: String,
        /// Details.
        data: Value,
    },
    /// The step's calls wait for decisions: the run stops here (after a checkpoint holding them)
    /// and returns them in [`RunOutput::interrupt`](crate::RunOutput::interrupt).
    Interrupted {
        /// The step whose calls wait.
        step: u32,
        /// What waits, in call order.
        requests: Vec<ApprovalRequest>,
    },
    /// A decision was applied to a waiting call (when the run resumed).
    Decided {
        /// The step the call belongs to (in the resumed run's count).
        step: u32,
        /// The request's id.
        id: String,
        /// The call's tool.
        tool: String,
        /// What was decided.
        decision: DecisionKind,
    },
    /// An event of a subagent run started by call `call_id` of this run. A subagent's own
    /// subagents nest further, so the chain of `Subagent` wrappers is the path of agents that
    /// produced the inner event.
    Subagent {
        /// The call that started the subagent (a `task` call).
        call_id: String,
        /// The subagent's thread (the task id).
        task_id: String,
        /// The subagent type.
        subagent_type: String,
        /// What happened there.
        inner: Box<RunEvent>,
    },
    /// The thread's state was checkpointed: a new checkpoint was stored (a save that changed
    /// nothing, and so stored none, sends no event).
    CheckpointSaved {
        /// Model calls made so far in this run.
        step: u32,
        /// The checkpoint's version.
        version: String,
        /// The state it saved, for listeners in this process (not serialized).
        #[serde(skip)]
        state: SavedState,
    },
    /// The run finished.
    RunFinished {
        /// Model calls made in this run.
        model_calls: u32,
        /// Token usage of this run.
        usage: Usage,
    },
    /// The run stopped with an error.
    RunFailed {
        /// The error.
        error: String,
    },
}

impl RunEvent {
    /// The innermost event and the subagents it came through, outermost first as
    /// `(call_id, task_id, subagent_type)`; an event of this run has an empty path.
    pub fn innermost(&self) -> (&RunEvent, Vec<(&str, &str, &str)>) {
        let mut path = Vec::new();
        let mut event = self;
        while let RunEvent::Subagent {
            call_id,
            task_id,
            subagent_type,
            inner,
        } = event
        {
            path.push((call_id.as_str(), task_id.as_str(), subagent_type.as_str()));
            event = inner;
        }
        (event, path)
    }
}

type Callback = dyn Fn(RunEvent) + Send + Sync;

/// Where a run's events go. Cheap to clone; the default sends nothing (and builds no events).
#[derive(Clone, Default)]
pub struct EventSink {
    callback: Option<Arc<Callback>>,
}

impl fmt::Debug for EventSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventSink")
            .field("enabled", &self.is_enabled())
            .finish()
    }
}

impl EventSink {
    /// A sink that drops everything.
    pub fn none() -> Self {
        Self::default()
    }

    /// Call `f` with every event, on the task that produced it. `f` must be quick and must not block.
    pub fn from_fn(f: impl Fn(RunEvent) + Send + Sync + 'static) -> Self {
        Self {
            callback: Some(Arc::new(f)),
        }
    }

    /// A sink feeding an unbounded channel, and its receiving end (a stream of events). Events sent
    /// after the receiver is dropped are discarded.
    pub fn channel() -> (Self, mpsc::UnboundedReceiver<RunEvent>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            Self::from_fn(move |event| {
                let _ = tx.send(event);
            }),
            rx,
        )
    }

    /// True when events go somewhere.
    pub fn is_enabled(&self) -> bool {
        self.callback.is_some()
    }

    /// Send an event.
    pub fn emit(&self, event: RunEvent) {
        if let Some(cb) = &self.callback {
            cb(event);
        }
    }

    /// Build and send an event only when the sink is enabled.
    pub fn emit_with(&self, event: impl FnOnce() -> RunEvent) {
        if let Some(cb) = &self.callback {
            cb(event());
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn channel_sink_delivers_in_order_and_disabled_sink_builds_nothing() {
        let (sink, mut rx) = EventSink::channel();
        sink.emit(RunEvent::RunFailed { error: "a".into() });
        sink.emit_with(|| RunEvent::RunFailed { error: "b".into() });
        assert_eq!(
            rx.recv().await.unwrap(),
            RunEvent::RunFailed { error: "a".into() }
        );
        assert_eq!(
            rx.recv().await.unwrap(),
            RunEvent::RunFailed { error: "b".into() }
        );

        let none = EventSink::none();
        assert!(!none.is_enabled());
        none.emit_with(|| unreachable!("a disabled sink must not build events"));
    }

    #[test]
    fn events_serialize_with_a_tag() {
        let json = serde_json::to_value(RunEvent::RunFinished {
            model_calls: 2,
            usage: Usage::default(),
        })
        .unwrap();
        assert_eq!(json["event"], "run_finished");
        assert_eq!(json["model_calls"], 2);
    }
}
