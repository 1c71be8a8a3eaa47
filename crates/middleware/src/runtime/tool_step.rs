//! The tool step of the agent loop: the calls of one reply, reviewed by the run's [`ToolGate`],
//! run concurrently, their results appended in call order — or the step stopped and kept in the
//! thread until decisions arrive (see [`crate::runtime::interrupt`]).
//!
//! A stopped step is a [`PendingStep`] in a private slot of the thread's state, saved with the
//! reply's checkpoint; the reply is the thread's last message until the step completes. Each call
//! of it is in one of four states: cleared to run (the gate did not ask), asking (waiting for a
//! decision), nested (a `task` call whose subagent is waiting), or done (a nested step stopped
//! after this call finished: its result is kept and it never runs again).
//!
//! Slot writes of calls that finished in a step that then stopped are applied when it stops; the
//! rest when it completes. Within each group they are applied in call order.
//!
//! When the checkpointer keeps a tool-call journal, each call is recorded as it runs: an external
//! call ([`SideEffects::External`]) before it starts, every call when it finishes (but not the
//! only call of a step when it may repeat; see
//! `checkpoint/journal.rs`). A step resumed with decisions keeps the results a crashed attempt
//! recorded; a step a crash cut short is finished by `step_recovery.rs`.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::runtime::agent::Agent;
use crate::runtime::checkpoint::{CallOutcome, CallRecord, Checkpointer, SlotWrite};
use crate::runtime::context::{RunContext, ThreadId};
use crate::runtime::error::AgentError;
use crate::runtime::events::RunEvent;
use crate::runtime::interrupt::{
    AgentFrame, ApprovalRequest, Decision, DecisionError, Decisions, Interrupt, NestedInterrupts, ToolGate,
};
use crate::runtime::message::{ContentBlock, Message, ToolCall, ToolMessage};
use crate::runtime::state::{Slot, State, StateUpdates};
use crate::runtime::telemetry;
use crate::runtime::tool_set::ToolSet;
use crate::tools::SideEffects;

/// The step waiting for decisions, in the thread's private state.
pub(crate) static PENDING_STEP: Slot<PendingStep> = Slot::private("_pending_tool_step");

/// True when the thread's last reply has a step waiting for decisions.
pub(crate) fn is_waiting(state: &State) -> bool {
    state.contains(PENDING_STEP.name())
}

/// A tool step that stopped before completing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct PendingStep {
    /// The step (model calls made earlier in the run that stopped).
    pub(crate) step: u32,
    /// One entry per call of the reply, in call order.
    pub(crate) calls: Vec<PendingCall>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub(crate) enum PendingCall {
    /// The gate let it through; it runs when the step resumes.
    Cleared { call_id: String },
    /// Waiting for a decision.
    Asking {
        request: ApprovalRequest,
        /// Asked because the call's earlier attempt started and left no result (a crash): the
        /// person was told, so an approval runs it again.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        after_crash: bool,
    },
    /// A nested agent it started is waiting; `requests` are as that agent reported them.
    Nested {
        call_id: String,
        frame: AgentFrame,
        requests: Vec<ApprovalRequest>,
    },
    /// Finished; this is its result.
    Done { message: ToolMessage },
}

impl PendingCall {
    fn call_id(&self) -> &str {
        match self {
            Self::Cleared { call_id } | Self::Nested { call_id, .. } => call_id,
            Self::Asking { request, .. } => &request.call_id,
            Self::Done { message } => &message.call_id,
        }
    }
}

impl PendingStep {
    /// What the caller is told: every waiting request, nested ones with their ids qualified.
    pub(crate) fn interrupt(&self, thread_id: &ThreadId) -> Interrupt {
        let mut requests = Vec::new();
        for call in &self.calls {
            match call {
                PendingCall::Asking { request, .. } => requests.push(request.clone()),
                PendingCall::Nested {
                    call_id,
                    frame,
                    requests: inner,
                } => requests.extend(inner.iter().map(|r| {
                    let mut r = r.clone();
                    r.id = format!("{call_id}/{}", r.id);
                    r.agents.insert(0, frame.clone());
                    r
                })),
                PendingCall::Cleared { .. } | PendingCall::Done { .. } => {}
            }
        }
        Interrupt {
            thread_id: thread_id.to_string(),
            step: self.step,
            requests,
        }
    }
}

/// One call's end within [`Agent::execute`].
enum Finished {
    /// It ran (its nested agent may have stopped instead: see [`NestedInterrupts`]).
    Ran(String, ToolMessage, StateUpdates),
    /// Its result was known without running it.
    Kept(ToolMessage),
    /// Its result and slot writes were recorded by an earlier attempt of the step.
    Replayed(ToolMessage, Vec<SlotWrite>),
}

/// How a tool step ended.
#[derive(Debug)]
pub(crate) enum StepOutcome {
    /// Every call has its result in the thread. `journaled`: the calls whose records the
    /// journal may hold, to forget once the checkpoint with their results is saved.
    Completed { journaled: Vec<String> },
    /// The step waits for decisions (already in the state; the caller saves it).
    Interrupted(Interrupt),
}

/// What to do with one call of a step.
pub(crate) enum Action {
    /// Run it.
    Run(ToolCall),
    /// Run it again to resume the nested thread it left waiting.
    Resume(ToolCall, ThreadId, Decisions),
    /// Its result without running it: a rejection or a person's answer (new), or a kept result.
    Result(ToolMessage),
    /// The result (and slot writes) an earlier attempt of the step recorded in the journal.
    Replay(ToolMessage, Vec<SlotWrite>),
}

/// The thread's tool-call journal for the step under way: the checkpointer keeps one, and the
/// step's reply is the thread's last message.
#[derive(Clone, Copy)]
pub(crate) struct Journal<'a> {
    checkpointer: &'a dyn Checkpointer,
    thread_id: &'a ThreadId,
    reply: usize,
}

impl<'a> Journal<'a> {
    /// The journal of the step whose reply is `state`'s last message, when the agent's
    /// checkpointer keeps one.
    pub(crate) fn of(agent: &'a Agent, state: &State, thread_id: &'a ThreadId) -> Option<Self> {
        let checkpointer = agent.inner.checkpointer.as_deref()?;
        (checkpointer.keeps_call_journal() && !state.messages.is_empty()).then(|| Self {
            checkpointer,
            thread_id,
            reply: state.messages.len() - 1,
        })
    }

    /// What an earlier attempt of this step recorded for `calls` (these very calls: same reply,
    /// id, tool and arguments), by call id.
    pub(crate) async fn recorded(
        &self,
        calls: &[ToolCall],
    ) -> Result<std::collections::HashMap<String, CallOutcome>, AgentError> {
        let ids: Vec<String> = calls.iter().map(|c| c.id.clone()).collect();
        let records = self.checkpointer.recorded_calls(self.thread_id, &ids).await?;
        Ok(records
            .into_iter()
            .filter(|r| {
                r.reply == self.reply
                    && calls.iter().any(|c| {
                        c.id == r.call_id && CallRecord::fingerprint(&c.name, &c.args) == r.fingerprint
                    })
            })
            .map(|r| (r.call_id, r.outcome))
            .collect())
    }

    async fn record(&self, call: &(String, String), outcome: CallOutcome) -> Result<(), AgentError> {
        let record = CallRecord {
            call_id: call.0.clone(),
            reply: self.reply,
            fingerprint: call.1.clone(),
            outcome,
        };
        self.checkpointer.record_call(self.thread_id, &record).await?;
        Ok(())
    }

    /// Record that `call` finished with `message` and `updates`. A failure is logged, not
    /// returned: the result is in hand and the step's checkpoint keeps it; only a crash before
    /// that checkpoint finds the call without a record.
    async fn finished(&self, call: &(String, String), message: &ToolMessage, updates: &StateUpdates) {
        let call_id = call.0.as_str();
        let outcome = match SlotWrite::all(updates) {
            Ok(updates) => CallOutcome::Finished {
                message: message.clone(),
                updates,
            },
            Err(error) => {
                tracing::warn!(call_id, %error, "a tool's slot writes cannot be journaled");
                return;
            }
        };
        if let Err(error) = self.record(call, outcome).await {
            tracing::warn!(call_id, %error, "a tool result could not be journaled");
        }
    }
}

/// What a call of tool `name` does besides returning its result (an unknown tool only returns an
/// error, so it may repeat).
pub(crate) fn side_effects(tools: &ToolSet, name: &str) -> SideEffects {
    tools
        .get(name)
        .map_or(SideEffects::ReadOnly, |t| t.side_effects())
}

impl Agent {
    /// The tool step after a reply calling `calls`: stop when `gate` asks about any call, else run
    /// them all.
    pub(crate) async fn tool_step(
        &self,
        calls: Vec<ToolCall>,
        tools: &ToolSet,
        gate: Option<&Arc<dyn ToolGate>>,
        state: &mut State,
        cx: &RunContext,
    ) -> Result<StepOutcome, AgentError> {
        if let Some(gate) = gate {
            let reviews: Vec<_> = calls.iter().map(|c| gate.review(c)).collect();
            if reviews.iter().any(Option::is_some) {
                let calls = calls
                    .iter()
                    .zip(reviews)
                    .map(|(call, review)| match review {
                        None => PendingCall::Cleared {
                            call_id: call.id.clone(),
                        },
                        Some(review) => PendingCall::Asking {
                            request: ApprovalRequest {
                                id: call.id.clone(),
                                tool: call.name.clone(),
                                call_id: call.id.clone(),
                                args: call.args.clone(),
                                description: review.description,
                                allowed: review.allowed,
                                agents: Vec::new(),
                            },
                            after_crash: false,
                        },
                    })
                    .collect();
                let pending = PendingStep { step: cx.step, calls };
                return Ok(stop(pending, state, cx));
            }
        }
        let actions = calls.into_iter().map(Action::Run).collect();
        self.execute(actions, tools, state, cx).await
    }

    /// Use what an earlier attempt of this step recorded before it crashed: a call that finished
    /// is not run again, and an external one that started and left no result is not run again
    /// blindly (see `step_recovery.rs`) — unless a person approved it knowing that (`told`).
    async fn with_recorded(
        &self,
        mut actions: Vec<Action>,
        told: &std::collections::HashSet<String>,
        tools: &ToolSet,
        state: &State,
        cx: &RunContext,
    ) -> Result<Vec<Action>, AgentError> {
        let Some(journal) = Journal::of(self, state, &cx.thread_id) else {
            return Ok(actions);
        };
        let calls: Vec<ToolCall> = actions
            .iter()
            .filter_map(|a| match a {
                Action::Run(call) => Some(call.clone()),
                _ => None,
            })
            .collect();
        if calls.is_empty() {
            return Ok(actions);
        }
        let mut recorded = journal.recorded(&calls).await?;
        for action in &mut actions {
            let Action::Run(call) = action else { continue };
            match recorded.remove(&call.id) {
                Some(CallOutcome::Finished { message, updates }) => {
                    *action = Action::Replay(message, updates)
                }
                Some(CallOutcome::Started)
                    if !side_effects(tools, &call.name).may_repeat() && !told.contains(&call.id) =>
                {
                    *action = Action::Result(crate::runtime::step_recovery::outcome_unknown(call));
                }
                _ => {}
            }
        }
        Ok(actions)
    }

    /// Continue the step `pending` with `decisions`, which are checked first: nothing changes
    /// when any is refused.
    pub(crate) async fn resume_step(
        &self,
        pending: PendingStep,
        decisions: &Decisions,
        tools: &ToolSet,
        state: &mut State,
        cx: &RunContext,
    ) -> Result<StepOutcome, AgentError> {
        check(&pending, decisions, &cx.thread_id)?;
        let calls = reply_calls(state, &pending, &cx.thread_id)?;
        let mut actions = Vec::with_capacity(calls.len());
        let mut told = std::collections::HashSet::new();
        for (mut call, entry) in calls.into_iter().zip(pending.calls) {
            let action = match entry {
                PendingCall::Cleared { .. } => Action::Run(call),
                PendingCall::Done { message } => Action::Result(message),
                PendingCall::Nested { call_id, frame, .. } => {
                    let thread = ThreadId::new(&frame.thread_id).map_err(|e| DecisionError::Corrupt {
                        thread_id: cx.thread_id.to_string(),
                        detail: format!("a pending call names a bad thread: {e}"),
                    })?;
                    Action::Resume(call, thread, decisions.nested(&call_id))
                }
                PendingCall::Asking { request, after_crash } => {
                    if after_crash {
                        told.insert(call.id.clone());
                    }
                    // `check` made sure there is one.
                    let decision = decisions.get(&request.id).cloned().unwrap_or(Decision::Approve);
                    telemetry::event(
                        "approvals",
                        "decided",
                        || serde_json::json!({ "id": request.id, "tool": request.tool, "decision": decision.kind() }),
                    );
                    cx.events.emit_with(|| RunEvent::Decided {
                        step: cx.step,
                        id: request.id.clone(),
                        tool: request.tool.clone(),
                        decision: decision.kind(),
                    });
                    match decision {
                        Decision::Approve => Action::Run(call),
                        Decision::Edit { args } => {
                            edit_call(state, &call.id, &args);
                            call.args = args;
                            Action::Run(call)
                        }
                        Decision::Reject { message } => Action::Result(rejected(&call, message)),
                        Decision::Respond { message } => Action::Result(ToolMessage {
                            call_id: call.id.clone(),
                            name: call.name.clone(),
                            content: vec![ContentBlock::Text { text: message }],
                            is_error: false,
                            meta: Default::default(),
                        }),
                    }
                }
            };
            actions.push(action);
        }
        let actions = self.with_recorded(actions, &told, tools, state, cx).await?;
        self.execute(actions, tools, state, cx).await
    }

    /// Run what needs running, concurrently, recording each call in the journal; then complete
    /// the step or stop it again.
    pub(crate) async fn execute(
        &self,
        actions: Vec<Action>,
        tools: &ToolSet,
        state: &mut State,
        cx: &RunContext,
    ) -> Result<StepOutcome, AgentError> {
        let nested = cx.extensions.get::<NestedInterrupts>().cloned();
        // A step of one call that may repeat (read-only or idempotent) is not journaled: a crash
        // before its checkpoint re-runs that call, which its declaration allows, and there is no
        // other call of the step a record would spare. The record and its removal would be two
        // of the few files a served step creates (docs/server.md, "Speed"); with no record, there
        // is nothing to forget either.
        let lone_repeatable = matches!(
            actions.as_slice(),
            [Action::Run(call)] if side_effects(tools, &call.name).may_repeat()
        );
        let journal = Journal::of(self, state, &cx.thread_id).filter(|_| !lone_repeatable);
        let journaled: Vec<String> = match (&journal, state.messages.last().and_then(Message::as_ai)) {
            (Some(_), Some(ai)) => ai.calls().map(|c| c.id.clone()).collect(),
            _ => Vec::new(),
        };
        let shared: &State = state;
        let runs = actions.into_iter().map(|action| {
            let nested = nested.as_ref();
            let journal = journal.as_ref();
            async move {
                let call = match action {
                    Action::Result(message) => return Ok(Finished::Kept(message)),
                    Action::Replay(message, updates) => return Ok(Finished::Replayed(message, updates)),
                    Action::Run(call) => call,
                    Action::Resume(call, thread, decisions) => {
                        if let Some(nested) = nested {
                            nested.resume(call.id.clone(), thread, decisions);
                        }
                        call
                    }
                };
                let call_id = call.id.clone();
                // The call's id and fingerprint, as the journal knows it.
                let journaled = (call_id.clone(), CallRecord::fingerprint(&call.name, &call.args));
                if let Some(journal) = journal
                    && !side_effects(tools, &call.name).may_repeat()
                {
                    journal.record(&journaled, CallOutcome::Started).await?;
                }
                let (message, updates) = self.run_tool(call, tools, shared, cx).await?;
                if let Some(journal) = journal
                    && !nested.is_some_and(|n| n.is_raised(&call_id))
                {
                    journal.finished(&journaled, &message, &updates).await;
                }
                Ok::<_, AgentError>(Finished::Ran(call_id, message, updates))
            }
        });
        let results = futures::future::try_join_all(runs).await?;

        let mut calls = Vec::with_capacity(results.len());
        let mut stopped = false;
        for result in results {
            match result {
                Finished::Kept(message) => calls.push(PendingCall::Done { message }),
                Finished::Replayed(message, updates) => {
                    SlotWrite::apply(updates, state);
                    calls.push(PendingCall::Done { message });
                }
                Finished::Ran(call_id, message, updates) => {
                    match nested.as_ref().and_then(|n| n.take_raised(&call_id)) {
                        Some((frame, interrupt)) => {
                            stopped = true;
                            calls.push(PendingCall::Nested {
                                call_id,
                                frame,
                                requests: interrupt.requests,
                            });
                        }
                        None => {
                            state.apply(updates);
                            calls.push(PendingCall::Done { message });
                        }
                    }
                }
            }
        }
        if stopped {
            let pending = PendingStep { step: cx.step, calls };
            return Ok(stop(pending, state, cx));
        }
        state.remove(&PENDING_STEP);
        for call in calls {
            if let PendingCall::Done { message } = call {
                state.messages.push(Message::Tool(message));
            }
        }
        Ok(StepOutcome::Completed { journaled })
    }
}

/// Keep `pending` in the state and say what waits.
pub(crate) fn stop(pending: PendingStep, state: &mut State, cx: &RunContext) -> StepOutcome {
    let interrupt = pending.interrupt(&cx.thread_id);
    state.set(&PENDING_STEP, pending);
    telemetry::event(
        "approvals",
        "interrupted",
        || serde_json::json!({ "step": interrupt.step, "requests": interrupt.requests }),
    );
    cx.events.emit_with(|| RunEvent::Interrupted {
        step: interrupt.step,
        requests: interrupt.requests.clone(),
    });
    StepOutcome::Interrupted(interrupt)
}

/// Refuse `decisions` unless they answer every request of `pending`, and only those, each with a
/// decision its call accepts.
fn check(pending: &PendingStep, decisions: &Decisions, thread_id: &ThreadId) -> Result<(), DecisionError> {
    let requests = pending.interrupt(thread_id).requests;
    let missing: Vec<String> = requests
        .iter()
        .filter(|r| decisions.get(&r.id).is_none())
        .map(|r| r.id.clone())
        .collect();
    if !missing.is_empty() {
        return Err(DecisionError::Missing { ids: missing });
    }
    let unknown: Vec<String> = decisions
        .ids()
        .filter(|id| !requests.iter().any(|r| r.id == *id))
        .map(str::to_owned)
        .collect();
    if !unknown.is_empty() {
        return Err(DecisionError::Unknown { ids: unknown });
    }
    for request in &requests {
        let Some(decision) = decisions.get(&request.id) else {
            continue;
        };
        if !request.allowed.contains(&decision.kind()) {
            let allowed: Vec<&str> = request.allowed.iter().map(|k| k.as_str()).collect();
            return Err(DecisionError::NotAllowed {
                id: request.id.clone(),
                tool: request.tool.clone(),
                decision: decision.kind(),
                allowed: allowed.join(", "),
            });
        }
        if let Decision::Edit { args } = decision
            && !args.is_object()
        {
            return Err(DecisionError::InvalidEdit {
                id: request.id.clone(),
            });
        }
    }
    Ok(())
}

/// The calls of the reply the pending step belongs to (the thread's last message), checked
/// against the step's record.
fn reply_calls(
    state: &State,
    pending: &PendingStep,
    thread_id: &ThreadId,
) -> Result<Vec<ToolCall>, DecisionError> {
    let calls: Vec<ToolCall> = match state.messages.last().and_then(Message::as_ai) {
        Some(ai) => ai.calls().cloned().collect(),
        None => Vec::new(),
    };
    let matches = calls.len() == pending.calls.len()
        && calls
            .iter()
            .zip(&pending.calls)
            .all(|(call, entry)| call.id == entry.call_id());
    if matches {
        Ok(calls)
    } else {
        Err(DecisionError::Corrupt {
            thread_id: thread_id.to_string(),
            detail: "its pending tool step does not match its last reply".into(),
        })
    }
}

/// Change the arguments of call `call_id` in the thread's last reply.
fn edit_call(state: &mut State, call_id: &str, args: &serde_json::Value) {
    if let Some(Message::Ai(ai)) = state.messages.last_mut()
        && let Some(call) = ai.calls_mut().find(|c| c.id == call_id)
    {
        call.args = args.clone();
    }
}

/// The result the model gets for a rejected call.
fn rejected(call: &ToolCall, message: Option<String>) -> ToolMessage {
    let mut text = format!("The user rejected this {} call, so it did not run.", call.name);
    if let Some(reason) = message.map(|m| m.trim().to_owned()).filter(|m| !m.is_empty()) {
        text.push_str(" Their reason: ");
        text.push_str(&reason);
    }
    ToolMessage {
        call_id: call.id.clone(),
        name: call.name.clone(),
        content: vec![ContentBlock::Text { text }],
        is_error: true,
        meta: Default::default(),
    }
}
