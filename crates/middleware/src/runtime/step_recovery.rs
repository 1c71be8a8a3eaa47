//! Finishing a tool step that a crash (or a cancel) cut short.
//!
//! Such a step's reply is the thread's last message, its calls have no results, and no decisions
//! are awaited. The next run of the thread finds it before anything else:
//!
//! * a run that brings no new messages (`trellis resume`, a served run without input) finishes
//!   the step: a call the journal has a result for is not run again (its result and slot writes
//!   are kept); a call that never started runs; a call that started and left no result runs again
//!   when its tool is read-only or idempotent, and an external one does not: the model gets a
//!   result saying its outcome is unknown ([`outcome_unknown`]) — or, when the run's approvals
//!   would ask about the call, a person decides, told what happened;
//! * a run that brings new messages has moved on: it keeps the results the journal has and
//!   runs nothing; the rest are answered as cancelled, as
//!   [`PatchToolCallsMiddleware`](crate::PatchToolCallsMiddleware) does.
//!
//! Without a journal ([`Checkpointer::keeps_call_journal`](crate::Checkpointer::keeps_call_journal)
//! false) every call without a result counts as started.

use std::collections::HashMap;
use std::sync::Arc;

use crate::runtime::agent::Agent;
use crate::runtime::checkpoint::{CallOutcome, SlotWrite};
use crate::runtime::context::{RunContext, ThreadId};
use crate::runtime::error::AgentError;
use crate::runtime::interrupt::{ApprovalRequest, ToolGate};
use crate::runtime::message::{ToolCall, ToolMessage};
use crate::runtime::state::State;
use crate::runtime::tool_set::ToolSet;
use crate::runtime::tool_step::{
    Action, Journal, PendingCall, PendingStep, StepOutcome, is_waiting, side_effects, stop,
};

/// The source tag of the results this module writes.
pub(crate) const SOURCE: &str = "crash_recovery";

/// The calls of a step cut short: the thread's last message is a reply calling tools, without
/// results, and it waits for no decisions.
pub(crate) fn cut_step(state: &State) -> Option<Vec<ToolCall>> {
    if is_waiting(state) {
        return None;
    }
    let calls: Vec<ToolCall> = state.messages.last()?.as_ai()?.calls().cloned().collect();
    (!calls.is_empty()).then_some(calls)
}

/// The result the model gets for an external call that started and left no recorded result.
pub(crate) fn outcome_unknown(call: &ToolCall) -> ToolMessage {
    let mut message = ToolMessage::error(
        &call.id,
        &call.name,
        format!(
            "The call to {name} (id {id}) started, but the run stopped (the process was killed or crashed) \
             before its result was recorded, so whether it took effect is unknown. It was not run again, \
             because {name} may change things outside the agent. Check what it would have changed before \
             calling it again.",
            name = call.name,
            id = call.id,
        ),
    );
    message.meta.source = Some(SOURCE.to_owned());
    message
}

/// What a person deciding about a call that started and left no result is told.
fn with_crash_note(description: Option<String>) -> Option<String> {
    let note = "Its earlier attempt started, but the run stopped before its result was recorded: \
                whether it took effect is unknown.";
    Some(match description {
        Some(d) => format!("{d}\n\n{note}"),
        None => note.to_owned(),
    })
}

impl Agent {
    /// A step waiting for decisions whose earlier resumption a crash cut short (the decisions
    /// were given, some calls ran, the step's results were never saved), brought up to date with
    /// the journal: a call waiting for a decision that finished then is done (its result kept, its
    /// slot writes returned to apply), and an external one that started and left no result asks
    /// again, saying so (so an approval runs it). Other calls are unchanged; without a journal
    /// nothing changes. Tools not in `tools` count as external.
    pub(crate) async fn refresh_pending(
        &self,
        mut pending: PendingStep,
        tools: &ToolSet,
        state: &State,
        thread_id: &ThreadId,
    ) -> Result<(PendingStep, Vec<SlotWrite>), AgentError> {
        let Some(journal) = Journal::of(self, state, thread_id) else {
            return Ok((pending, Vec::new()));
        };
        // The calls as the reply holds them (an edit decision changed its arguments there).
        let reply: Vec<ToolCall> = match state.messages.last().and_then(|m| m.as_ai()) {
            Some(ai) => ai.calls().cloned().collect(),
            None => Vec::new(),
        };
        let asking: Vec<ToolCall> = pending
            .calls
            .iter()
            .filter_map(|c| match c {
                PendingCall::Asking { request, .. } => {
                    reply.iter().find(|r| r.id == request.call_id).cloned()
                }
                _ => None,
            })
            .collect();
        if asking.is_empty() {
            return Ok((pending, Vec::new()));
        }
        let mut recorded = journal.recorded(&asking).await?;
        let mut writes = Vec::new();
        for entry in &mut pending.calls {
            let PendingCall::Asking { request, after_crash } = entry else {
                continue;
            };
            match recorded.remove(&request.call_id) {
                Some(CallOutcome::Finished { message, updates }) => {
                    writes.extend(updates);
                    *entry = PendingCall::Done { message };
                }
                Some(CallOutcome::Started)
                    if !*after_crash && !side_effects(tools, &request.tool).may_repeat() =>
                {
                    request.description = with_crash_note(request.description.take());
                    *after_crash = true;
                }
                _ => {}
            }
        }
        Ok((pending, writes))
    }

    /// Finish the step cut short whose calls are `calls` (see the module docs).
    pub(crate) async fn finish_cut_step(
        &self,
        calls: Vec<ToolCall>,
        tools: &ToolSet,
        gate: Option<&Arc<dyn ToolGate>>,
        state: &mut State,
        cx: &RunContext,
    ) -> Result<StepOutcome, AgentError> {
        let journal = Journal::of(self, state, &cx.thread_id);
        let mut recorded = match &journal {
            Some(journal) => journal.recorded(&calls).await?,
            None => Default::default(),
        };
        let mut actions = Vec::with_capacity(calls.len());
        let mut asking: HashMap<String, ApprovalRequest> = HashMap::new();
        for call in &calls {
            let started = match recorded.remove(&call.id) {
                Some(CallOutcome::Finished { message, updates }) => {
                    actions.push(Action::Replay(message, updates));
                    continue;
                }
                Some(CallOutcome::Started) => true,
                // Without a journal nothing says the call did not start.
                None => journal.is_none(),
            };
            let effects = side_effects(tools, &call.name);
            tracing::info!(call_id = %call.id, tool = %call.name, started, effects = effects.as_str(), "a call of a step cut short");
            if !started || effects.may_repeat() {
                actions.push(Action::Run(call.clone()));
            } else if let Some(review) = gate.and_then(|g| g.review(call)) {
                actions.push(Action::Result(outcome_unknown(call)));
                let request = ApprovalRequest {
                    id: call.id.clone(),
                    tool: call.name.clone(),
                    call_id: call.id.clone(),
                    args: call.args.clone(),
                    description: with_crash_note(review.description),
                    allowed: review.allowed,
                    agents: Vec::new(),
                };
                asking.insert(call.id.clone(), request);
            } else {
                actions.push(Action::Result(outcome_unknown(call)));
            }
        }
        if asking.is_empty() {
            return self.execute(actions, tools, state, cx).await;
        }
        // A person decides about the external calls: nothing runs until then.
        let mut pending = Vec::with_capacity(actions.len());
        for (call, action) in calls.iter().zip(actions) {
            pending.push(match action {
                Action::Replay(message, updates) => {
                    SlotWrite::apply(updates, state);
                    PendingCall::Done { message }
                }
                Action::Result(message) => match asking.remove(&call.id) {
                    Some(request) => PendingCall::Asking {
                        request,
                        after_crash: true,
                    },
                    None => PendingCall::Done { message },
                },
                Action::Run(_) | Action::Resume(..) => PendingCall::Cleared {
                    call_id: call.id.clone(),
                },
            });
        }
        let step = PendingStep {
            step: cx.step,
            calls: pending,
        };
        Ok(stop(step, state, cx))
    }
}

impl Agent {
    /// A run with new messages on a thread whose step (`calls`) was cut short: keep the results
    /// the journal has, and their slot writes, in call order right after the reply; nothing runs
    /// (a call without a recorded result gets the cancellation
    /// [`PatchToolCallsMiddleware`](crate::PatchToolCallsMiddleware) would give it). Without a
    /// journal this does nothing and the middleware answers every call. Returns the calls whose
    /// records to forget once this is saved.
    pub(crate) async fn keep_recorded(
        &self,
        calls: &[ToolCall],
        state: &mut State,
        cx: &RunContext,
    ) -> Result<Vec<String>, AgentError> {
        let Some(journal) = Journal::of(self, state, &cx.thread_id) else {
            return Ok(Vec::new());
        };
        let mut recorded = journal.recorded(calls).await?;
        for call in calls {
            // In call order: the recorded result, else a cancellation.
            let result = match recorded.remove(&call.id) {
                Some(CallOutcome::Finished { message, updates }) => {
                    SlotWrite::apply(updates, state);
                    crate::runtime::message::Message::Tool(message)
                }
                _ => crate::core_stack::patch_tool_calls::cancellation(&call.id, &call.name),
            };
            state.messages.push(result);
        }
        Ok(calls.iter().map(|c| c.id.clone()).collect())
    }
}

impl Agent {
    /// True when a saved thread's last step was cut short (a crash or a cancel between the
    /// model's reply and its tool results) and waits for no decisions: a run with no new
    /// messages finishes that step first, re-running only what the tool-call journal and the
    /// tools' [`SideEffects`](crate::tools::SideEffects) allow (see `step_recovery.rs`).
    pub async fn has_cut_step(&self, thread_id: &ThreadId) -> Result<bool, AgentError> {
        let Some(checkpointer) = &self.inner.checkpointer else {
            return Ok(false);
        };
        Ok(match checkpointer.peek(thread_id).await? {
            Some(stored) => cut_step(&stored.checkpoint.state).is_some(),
            None => false,
        })
    }

    /// Before a run's `before_agent` hooks: finish (no new messages) or settle (`moved_on`) the
    /// thread's step a crash cut short, if it has one. Returns how a finished step ended and the
    /// calls whose records to forget once the next checkpoint is saved.
    pub(crate) async fn take_up_cut_step(
        &self,
        moved_on: bool,
        gate: Option<&Arc<dyn ToolGate>>,
        state: &mut State,
        cx: &mut RunContext,
    ) -> Result<(Option<StepOutcome>, Vec<String>), AgentError> {
        let Some(calls) = cut_step(state) else {
            return Ok((None, Vec::new()));
        };
        if moved_on {
            return Ok((None, self.keep_recorded(&calls, state, cx).await?));
        }
        cx.step = 0;
        let tools = self.step_tools(state, cx).await?;
        let outcome = self.finish_cut_step(calls, &tools, gate, state, cx).await?;
        Ok((Some(outcome), Vec::new()))
    }

    /// Forget the journal's records of `calls` once the checkpoint holding their results is
    /// saved. A failure only leaves records no later step reads (they name a reply that is no
    /// longer the last message), so it is logged.
    pub(crate) async fn forget_calls(&self, cx: &RunContext, calls: &[String]) {
        let Some(checkpointer) = &self.inner.checkpointer else {
            return;
        };
        if calls.is_empty() {
            return;
        }
        if let Err(error) = checkpointer.forget_calls(&cx.thread_id, calls).await {
            tracing::warn!(%error, "the tool-call journal of a finished step could not be removed");
        }
    }
}
