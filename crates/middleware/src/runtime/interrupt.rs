//! Interrupts: a run that stops before tool calls run, so a person can approve, edit, reject or
//! answer each of them, and continues when the decisions arrive — in the same process or another.
//!
//! The pieces:
//!
//! - a [`ToolGate`] (the agent's, see [`AgentBuilder::interrupt_on`](crate::AgentBuilder::interrupt_on),
//!   or inherited from the agent that started this one) [`review`](ToolGate::review)s every call of
//!   a step before any of them runs;
//! - when it asks about any call, the run saves a checkpoint holding the step's pending calls and
//!   returns a [`RunOutput`](crate::RunOutput) whose `interrupt` lists one [`ApprovalRequest`] per
//!   call it asked about; no call of that step has run;
//! - the caller answers with [`Decisions`] in [`RunInput::resume`](crate::RunInput::resume); the
//!   run checks them all (every request answered, each with a decision its tool allows) before it
//!   changes anything, runs the step, and goes on;
//! - a tool that runs another agent (the `task` tool) carries that agent's interrupt up with
//!   [`NestedInterrupts`]: the parent's step stops too, with the child's requests (their ids
//!   prefixed by the parent's call id, the child in [`ApprovalRequest::agents`]); resuming the
//!   parent resumes that same child thread with its share of the decisions. Calls of that step
//!   that had finished keep their results and are not run again.
//!
//! Every piece of interrupt state belongs to the thread: it lives in the thread's checkpoint (a
//! private slot), so another thread can neither see nor answer it.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::runtime::context::ThreadId;
use crate::runtime::message::ToolCall;

/// What a person can decide about a tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecisionKind {
    /// Run the call as the model wrote it.
    Approve,
    /// Run the call with other arguments.
    Edit,
    /// Do not run it; the model is told why.
    Reject,
    /// Do not run it; the person's answer is the call's result.
    Respond,
}

impl DecisionKind {
    /// Every kind, in a stable order.
    pub const ALL: [DecisionKind; 4] = [Self::Approve, Self::Edit, Self::Reject, Self::Respond];

    /// The kind's name in JSON and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Approve => "approve",
            Self::Edit => "edit",
            Self::Reject => "reject",
            Self::Respond => "respond",
        }
    }
}

impl fmt::Display for DecisionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A person's decision about one call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Decision {
    /// Run the call as written.
    Approve,
    /// Run the call with these arguments instead (a JSON object). The thread's copy of the call
    /// is changed too, so the model sees what actually ran.
    Edit {
        /// The new arguments.
        args: Value,
    },
    /// Do not run the call. The model gets an error result saying the call was rejected, with
    /// `message` when there is one.
    Reject {
        /// Why, for the model.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// Do not run the call; `message` is its result (e.g. the answer to a question the tool would
    /// have asked somebody else).
    Respond {
        /// The result the model gets.
        message: String,
    },
}

impl Decision {
    /// A rejection with a reason for the model.
    pub fn reject(message: impl Into<String>) -> Self {
        Self::Reject {
            message: Some(message.into()),
        }
    }

    /// An answer instead of running the call.
    pub fn respond(message: impl Into<String>) -> Self {
        Self::Respond {
            message: message.into(),
        }
    }

    /// Run with these arguments.
    pub fn edit(args: Value) -> Self {
        Self::Edit { args }
    }

    /// Which kind of decision this is.
    pub fn kind(&self) -> DecisionKind {
        match self {
            Self::Approve => DecisionKind::Approve,
            Self::Edit { .. } => DecisionKind::Edit,
            Self::Reject { .. } => DecisionKind::Reject,
            Self::Respond { .. } => DecisionKind::Respond,
        }
    }
}

/// One run (an agent between the top-level one and a call), outermost first in
/// [`ApprovalRequest::agents`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentFrame {
    /// The call of the agent above that started this one (a `task` call).
    pub call_id: String,
    /// This agent's thread (the task id).
    pub thread_id: String,
    /// This agent's name (the subagent type).
    pub agent: String,
}

/// A call waiting for a decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRequest {
    /// The key its decision goes under in [`Decisions`]: the call's id, prefixed with
    /// `CALL_ID/` for each agent in [`agents`](Self::agents) (the ids of the calls that started them).
    pub id: String,
    /// The tool's name.
    pub tool: String,
    /// The call's id in its own thread.
    pub call_id: String,
    /// The arguments the model wrote.
    pub args: Value,
    /// What the gate says about the call, for the person deciding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The decisions this call accepts.
    pub allowed: Vec<DecisionKind>,
    /// The subagents the call is made in, outermost first; empty for the top-level agent's calls.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agents: Vec<AgentFrame>,
}

/// Why a run stopped before finishing: calls waiting for decisions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interrupt {
    /// The top-level thread (resume this one).
    pub thread_id: String,
    /// The step (model calls made earlier in the run) whose calls wait.
    pub step: u32,
    /// The calls waiting, in call order (a subagent's calls in the place of the call that started it).
    pub requests: Vec<ApprovalRequest>,
}

/// Decisions by [`ApprovalRequest::id`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Decisions(BTreeMap<String, Decision>);

impl Decisions {
    /// No decisions.
    pub fn new() -> Self {
        Self::default()
    }

    /// The same decision for every request of `interrupt`.
    pub fn all(interrupt: &Interrupt, decision: &Decision) -> Self {
        Self(
            interrupt
                .requests
                .iter()
                .map(|r| (r.id.clone(), decision.clone()))
                .collect(),
        )
    }

    /// Add (or replace) the decision for request `id`.
    pub fn decide(mut self, id: impl Into<String>, decision: Decision) -> Self {
        self.insert(id, decision);
        self
    }

    /// Add (or replace) the decision for request `id`.
    pub fn insert(&mut self, id: impl Into<String>, decision: Decision) {
        self.0.insert(id.into(), decision);
    }

    /// The decision for request `id`.
    pub fn get(&self, id: &str) -> Option<&Decision> {
        self.0.get(id)
    }

    /// The decided ids, sorted.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    /// True when nothing was decided.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The decisions under `CALL_ID/`, with that prefix removed: the share of a nested agent.
    pub(crate) fn nested(&self, call_id: &str) -> Decisions {
        let prefix = format!("{call_id}/");
        Self(
            self.0
                .iter()
                .filter_map(|(id, d)| Some((id.strip_prefix(&prefix)?.to_owned(), d.clone())))
                .collect(),
        )
    }
}

/// Whether a call may run without asking, and if not, what to ask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Review {
    /// Shown to the person deciding (why the call needs approval).
    pub description: Option<String>,
    /// The decisions the call accepts (never empty).
    pub allowed: Vec<DecisionKind>,
}

impl Review {
    /// Ask, accepting every decision.
    pub fn ask() -> Self {
        Self {
            description: None,
            allowed: DecisionKind::ALL.to_vec(),
        }
    }
}

/// Decides which calls wait for a person. Called for every call of a step before any runs.
pub trait ToolGate: Send + Sync + fmt::Debug {
    /// `None`: the call runs without asking.
    fn review(&self, call: &ToolCall) -> Option<Review>;
}

/// The gate of the agent that started this run, for a nested agent that declares none (a run
/// extension the loop sets; callers do not).
#[derive(Debug, Clone)]
pub struct InheritedGate(pub Arc<dyn ToolGate>);

/// The channel between a step and the tools in it that run other agents.
///
/// A tool whose nested run came back interrupted [`raise`](Self::raise)s that interrupt instead of
/// returning a result (its output is then ignored); when the step is resumed, the same tool finds
/// the nested thread and its decisions with [`take_resume`](Self::take_resume) and resumes it
/// instead of starting over. The loop puts a fresh one in the run's extensions for every step.
#[derive(Debug, Clone, Default)]
pub struct NestedInterrupts {
    inner: Arc<Mutex<NestedState>>,
}

#[derive(Debug, Default)]
struct NestedState {
    raised: HashMap<String, (AgentFrame, Interrupt)>,
    resumes: HashMap<String, (ThreadId, Decisions)>,
}

impl NestedInterrupts {
    /// The nested run that call `call_id` left waiting, with its decisions, when this step is a
    /// resumed one. Taken once.
    pub fn take_resume(&self, call_id: &str) -> Option<(ThreadId, Decisions)> {
        self.lock().resumes.remove(call_id)
    }

    /// Call `call_id`'s nested run (`frame`) stopped with `interrupt`: stop this step too.
    pub fn raise(&self, call_id: &str, frame: AgentFrame, interrupt: Interrupt) {
        self.lock().raised.insert(call_id.to_owned(), (frame, interrupt));
    }

    pub(crate) fn resume(&self, call_id: String, thread: ThreadId, decisions: Decisions) {
        self.lock().resumes.insert(call_id, (thread, decisions));
    }

    pub(crate) fn is_raised(&self, call_id: &str) -> bool {
        self.lock().raised.contains_key(call_id)
    }

    pub(crate) fn take_raised(&self, call_id: &str) -> Option<(AgentFrame, Interrupt)> {
        self.lock().raised.remove(call_id)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, NestedState> {
        // A panic while holding this lock leaves plain maps behind: still usable.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Why decisions were refused. Nothing was changed or run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecisionError {
    /// The thread has no calls waiting.
    #[error("thread {thread_id} has no calls waiting for a decision")]
    NothingPending {
        /// The thread.
        thread_id: String,
    },
    /// The thread has calls waiting, and the input brought new messages instead of decisions.
    #[error("thread {thread_id} is waiting for decisions on {ids:?}; resume it with decisions first")]
    AwaitingDecisions {
        /// The thread.
        thread_id: String,
        /// The requests waiting.
        ids: Vec<String>,
    },
    /// Some requests got no decision.
    #[error("no decision for {ids:?}")]
    Missing {
        /// The requests without one.
        ids: Vec<String>,
    },
    /// Decisions for requests that are not waiting.
    #[error("no call waits under {ids:?}")]
    Unknown {
        /// The ids that match no request.
        ids: Vec<String>,
    },
    /// A decision the call does not accept.
    #[error("{id}: the {tool} call accepts {allowed}, not {decision}")]
    NotAllowed {
        /// The request.
        id: String,
        /// Its tool.
        tool: String,
        /// The decision given.
        decision: DecisionKind,
        /// What it accepts.
        allowed: String,
    },
    /// The thread's record of its waiting step is inconsistent (written by something else).
    #[error("thread {thread_id} cannot be resumed: {detail}")]
    Corrupt {
        /// The thread.
        thread_id: String,
        /// What is wrong.
        detail: String,
    },
    /// Edited arguments that are not a JSON object.
    #[error("{id}: edited arguments must be a JSON object")]
    InvalidEdit {
        /// The request.
        id: String,
    },
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn decisions_read_and_write_as_tagged_json() {
        let decisions: Decisions = serde_json::from_value(json!({
            "a": {"decision": "approve"},
            "b": {"decision": "edit", "args": {"x": 1}},
            "c": {"decision": "reject"},
            "t/d": {"decision": "respond", "message": "42"},
        }))
        .unwrap();
        assert_eq!(decisions.get("a"), Some(&Decision::Approve));
        assert_eq!(decisions.get("b"), Some(&Decision::edit(json!({"x": 1}))));
        assert_eq!(decisions.get("c"), Some(&Decision::Reject { message: None }));
        let nested = decisions.nested("t");
        assert_eq!(nested.ids().collect::<Vec<_>>(), ["d"]);
        assert_eq!(
            serde_json::to_value(Decision::reject("no")).unwrap(),
            json!({"decision": "reject", "message": "no"})
        );
        assert!(serde_json::from_value::<Decision>(json!({"decision": "maybe"})).is_err());
    }

    #[test]
    fn a_raised_interrupt_and_a_resume_are_each_taken_once() {
        let nested = NestedInterrupts::default();
        let thread = ThreadId::new("task-1").unwrap();
        nested.resume("c1".into(), thread.clone(), Decisions::new());
        assert_eq!(nested.take_resume("c1").map(|(t, _)| t), Some(thread));
        assert!(nested.take_resume("c1").is_none());
        let frame = AgentFrame {
            call_id: "c1".into(),
            thread_id: "task-1".into(),
            agent: "worker".into(),
        };
        let interrupt = Interrupt {
            thread_id: "task-1".into(),
            step: 0,
            requests: Vec::new(),
        };
        nested.raise("c1", frame.clone(), interrupt);
        assert_eq!(nested.take_raised("c1").map(|(f, _)| f), Some(frame));
        assert!(nested.take_raised("c1").is_none());
    }
}
