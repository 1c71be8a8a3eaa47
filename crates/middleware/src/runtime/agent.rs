//! The agent loop: [`Agent`], built by [`AgentBuilder`](crate::AgentBuilder) (`agent_builder.rs`).
//!
//! One run:
//!
//! 1. load the thread's checkpoint (or start empty), append the input, set input slots;
//! 2. `before_agent` hooks; checkpoint;
//! 3. `before_model` hooks; collect the step's tools; the `wrap_model_call` chain calls the model;
//!    tool-call ids made unique in the thread (`call_ids.rs`); `after_model` hooks; the reply is
//!    appended; checkpoint;
//! 4. if the reply calls tools, run them concurrently (each through the `wrap_tool_call` chain),
//!    append the results in call order, apply their slot writes in call order, checkpoint, go to 3;
//! 5. otherwise the `after_agent` hooks may send the run back to 3 with new messages; else checkpoint
//!    and finish.
//!
//! Before 2., a step that a crash or a cancel cut short (its reply is the last message, without
//! results) is finished — or, when the run brings new messages, settled — by `step_recovery.rs`;
//! each call's result is journaled as it completes (`tool_step.rs`, `checkpoint/journal.rs`), so
//! a crash never loses a finished call's result.
//!
//! A reply cut off at the output token limit in the middle of a tool call runs none of its calls:
//! the model is told and asked again, a bounded number of times (`truncation.rs`,
//! [`AgentError::TruncatedToolCall`]).
//!
//! Steps are bounded ([`AgentError::StepLimit`]). Tool failures, unknown tools and tool panics become
//! error results for the model. [`Agent::run_until`] cancels a run when a signal future completes
//! and says so ([`AgentError::Cancelled`]); dropping the run's future cancels it the same way,
//! silently. Either way the run stops at its current await point:
//! running tools are dropped with it, and the thread keeps its last checkpoint (a reply whose tool
//! calls never got results is finished or settled by the next run, see above; what is left is
//! patched by [`PatchToolCallsMiddleware`](crate::PatchToolCallsMiddleware)).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use futures::FutureExt;
use tracing::Instrument;

use crate::runtime::agent_builder::AgentBuilder;
use crate::runtime::checkpoint::{Checkpoint, CheckpointVersion, Checkpointer, SlotWrite};
use crate::runtime::context::{RunContext, ThreadId};
use crate::runtime::error::AgentError;
use crate::runtime::events::{RunEvent, SavedState};
use crate::runtime::interrupt::{DecisionError, InheritedGate, Interrupt, NestedInterrupts, ToolGate};
use crate::runtime::message::{Message, SystemBlock, ToolCall, ToolMessage};
use crate::runtime::middleware::{AfterAgent, Middleware, Next, ToolNext};
use crate::runtime::model::{ChatModel, ModelRequest, ResponseFormat, StopReason, Usage};
use crate::runtime::run::{RunInput, RunOutput};
use crate::runtime::state::{PublicState, State, StateUpdates};
use crate::runtime::tool_set::{ToolSet, panicked};
use crate::runtime::tool_step::{PENDING_STEP, StepOutcome};
use crate::runtime::truncation;
use crate::runtime::{call_ids, random, telemetry};
use crate::tools::{ParentFiles, ThreadFiles, ToolOutput};

/// What an [`Agent`] is made of (built by [`AgentBuilder`](crate::AgentBuilder)).
#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) model: Arc<dyn ChatModel>,
    pub(crate) name: Option<String>,
    pub(crate) system: Vec<SystemBlock>,
    pub(crate) base_tools: Arc<ToolSet>,
    pub(crate) middleware: Vec<Arc<dyn Middleware>>,
    pub(crate) checkpointer: Option<Arc<dyn Checkpointer>>,
    pub(crate) max_steps: u32,
    pub(crate) response_format: Option<ResponseFormat>,
    pub(crate) max_output_tokens: Option<u32>,
    pub(crate) gate: Option<Arc<dyn ToolGate>>,
    pub(crate) truncated_call_retries: u32,
}

/// An agent: a model, a system prompt, tools and a middleware stack, running threads.
///
/// Cheap to clone (shared). Runs of different threads may go on concurrently; two concurrent runs of
/// one thread conflict at their first checkpoint (one fails with a conflict error).
#[derive(Debug, Clone)]
pub struct Agent {
    pub(crate) inner: Arc<Inner>,
}

/// What a run has done so far, for its [`RunOutput`].
struct Finish {
    first_new_message: usize,
    model_calls: u32,
    usage: Usage,
    structured_output: Option<serde_json::Value>,
    stop_reason: StopReason,
}

impl Finish {
    fn output(
        self,
        state: State,
        cx: &RunContext,
        checkpoint: Option<CheckpointVersion>,
        interrupt: Option<Interrupt>,
    ) -> Result<RunOutput, AgentError> {
        Ok(RunOutput {
            thread_id: cx.thread_id.clone(),
            run_id: cx.run_id.clone(),
            state: state.public_view()?,
            first_new_message: self.first_new_message,
            model_calls: self.model_calls,
            usage: self.usage,
            structured_output: self.structured_output,
            stop_reason: self.stop_reason,
            checkpoint,
            interrupt,
        })
    }
}

/// Tracks the run's checkpoint version so every save is version-checked.
struct Saver<'a> {
    checkpointer: Option<&'a Arc<dyn Checkpointer>>,
    version: Option<CheckpointVersion>,
    seq: u64,
}

impl Saver<'_> {
    async fn save(&mut self, state: &State, cx: &RunContext) -> Result<(), AgentError> {
        let Some(checkpointer) = self.checkpointer else {
            return Ok(());
        };
        let checkpoint = Checkpoint::new(cx.thread_id.clone(), self.seq, state.clone());
        let span = tracing::debug_span!("checkpoint.save", seq = self.seq);
        let version = checkpointer
            .save(checkpoint, self.version.as_ref())
            .instrument(span)
            .await?;
        if self.version.as_ref() == Some(&version) {
            // The store kept no new checkpoint (nothing changed since the last one): no event,
            // and the next checkpoint still gets this number.
            return Ok(());
        }
        self.seq += 1;
        cx.events.emit_with(|| RunEvent::CheckpointSaved {
            step: cx.step,
            version: version.to_string(),
            state: SavedState::new(state.clone()),
        });
        self.version = Some(version);
        Ok(())
    }
}

impl Agent {
    /// Start building an agent on `model`.
    pub fn builder(model: Arc<dyn ChatModel>) -> AgentBuilder {
        AgentBuilder::new(model)
    }

    /// The agent's model.
    pub fn model(&self) -> &Arc<dyn ChatModel> {
        &self.inner.model
    }

    /// The agent's checkpointer.
    pub fn checkpointer(&self) -> Option<&Arc<dyn Checkpointer>> {
        self.inner.checkpointer.as_ref()
    }

    /// The thread's own files, from the checkpointer ([`Checkpointer::thread_files`]): what a
    /// per-thread file layout shows the thread's runs at `/`. `None` without a checkpointer or when
    /// it keeps no files.
    pub fn thread_files(&self, thread_id: &ThreadId) -> Option<Arc<dyn crate::backend::Backend>> {
        self.inner.checkpointer.as_ref()?.thread_files(thread_id)
    }

    /// The caller-visible state of a saved thread.
    pub async fn state(&self, thread_id: &ThreadId) -> Result<Option<PublicState>, AgentError> {
        let Some(checkpointer) = &self.inner.checkpointer else {
            return Ok(None);
        };
        match checkpointer.peek(thread_id).await? {
            Some(stored) => Ok(Some(stored.checkpoint.state.public_view()?)),
            None => Ok(None),
        }
    }

    /// What a saved thread waits for, when its last run stopped for decisions (see
    /// [`RunOutput::interrupt`]); `None` when it waits for nothing or does not exist.
    pub async fn pending_interrupt(&self, thread_id: &ThreadId) -> Result<Option<Interrupt>, AgentError> {
        let Some(checkpointer) = &self.inner.checkpointer else {
            return Ok(None);
        };
        let Some(stored) = checkpointer.peek(thread_id).await? else {
            return Ok(None);
        };
        let state = &stored.checkpoint.state;
        let Some(pending) = state.get(&PENDING_STEP)?.cloned() else {
            return Ok(None);
        };
        let (pending, _) = self
            .refresh_pending(pending, &self.inner.base_tools, state, thread_id)
            .await?;
        Ok(Some(pending.interrupt(thread_id)))
    }

    /// Run the agent on a thread until the model stops calling tools and no middleware sends it back.
    pub async fn run(&self, mut input: RunInput) -> Result<RunOutput, AgentError> {
        let cx = RunContext {
            thread_id: input.thread_id.take().unwrap_or_else(ThreadId::generate),
            run_id: random::unique_id("r"),
            agent_name: self.inner.name.clone(),
            model: self.inner.model.clone(),
            step: 0,
            events: std::mem::take(&mut input.events),
            extensions: std::mem::take(&mut input.extensions),
        };
        let span = telemetry::agent_span(self.inner.name.as_deref(), cx.thread_id.as_str(), &cx.run_id);
        let mut cx = cx;
        let result = self.run_loop(input, &mut cx).instrument(span.clone()).await;
        telemetry::record_run(
            &span,
            &result,
            result.as_ref().ok().map(|o| o.model_calls),
            result.as_ref().is_ok_and(RunOutput::is_interrupted),
        );
        if let Err(error) = &result {
            cx.events.emit_with(|| RunEvent::RunFailed {
                error: error.to_string(),
            });
        }
        result
    }

    /// [`Agent::run`], cancelled when `cancel` completes first: the run's future is dropped at its
    /// current await point and the result is [`AgentError::Cancelled`] (a `RunFailed` event is sent
    /// to the run's sink). Nothing half-done is saved: the thread keeps its last checkpoint, and
    /// the next run of the thread continues from it (see the module docs). A `cancel` that never
    /// completes makes this [`Agent::run`].
    pub async fn run_until(
        &self,
        mut input: RunInput,
        cancel: impl std::future::Future<Output = ()>,
    ) -> Result<RunOutput, AgentError> {
        let thread_id = input.thread_id.get_or_insert_with(ThreadId::generate).clone();
        let events = input.events.clone();
        tokio::select! {
            // A run that finished in the same poll wins over the signal.
            biased;
            result = self.run(input) => result,
            () = cancel => {
                let error = AgentError::Cancelled { thread_id };
                events.emit_with(|| RunEvent::RunFailed { error: error.to_string() });
                Err(error)
            }
        }
    }

    async fn run_loop(&self, mut input: RunInput, cx: &mut RunContext) -> Result<RunOutput, AgentError> {
        let inner = &*self.inner;
        let (mut state, mut saver, resumed) = self.load(&cx.thread_id).await?;
        if let Some(files) = self.thread_files(&cx.thread_id) {
            // A subagent's run arrives with its parent's space: keep it as the parent's.
            if let Some(parent) = cx.extensions.get::<ThreadFiles>().cloned() {
                cx.extensions.insert(ParentFiles(parent.0));
            }
            cx.extensions.insert(ThreadFiles(files));
        }
        let gate = inner
            .gate
            .clone()
            .or_else(|| cx.extensions.get::<InheritedGate>().map(|g| g.0.clone()));
        if let Some(gate) = &gate {
            cx.extensions.insert(InheritedGate(gate.clone()));
        }
        cx.extensions.insert(NestedInterrupts::default());
        cx.events.emit_with(|| RunEvent::RunStarted {
            thread_id: cx.thread_id.to_string(),
            run_id: cx.run_id.clone(),
            resumed,
        });
        let first_new_message = state.messages.len();
        let mut done = Finish {
            first_new_message,
            model_calls: 0,
            usage: Usage::default(),
            structured_output: None,
            stop_reason: StopReason::default(),
        };
        let pending = match state.get(&PENDING_STEP)?.cloned() {
            // Brought up to date with what a crashed resumption of it journaled.
            Some(before) => {
                let (pending, writes) = self
                    .refresh_pending(before.clone(), &inner.base_tools, &state, &cx.thread_id)
                    .await?;
                if pending != before {
                    SlotWrite::apply(writes, &mut state);
                    state.set(&PENDING_STEP, pending.clone());
                }
                Some(pending)
            }
            None => None,
        };
        let resume = match (pending, input.decisions.take()) {
            (None, None) => None,
            (Some(pending), Some(decisions)) => Some((pending, decisions)),
            (None, Some(_)) => {
                return Err(DecisionError::NothingPending {
                    thread_id: cx.thread_id.to_string(),
                }
                .into());
            }
            (Some(pending), None) => {
                let interrupt = pending.interrupt(&cx.thread_id);
                if !input.messages.is_empty() {
                    return Err(DecisionError::AwaitingDecisions {
                        thread_id: cx.thread_id.to_string(),
                        ids: interrupt.requests.iter().map(|r| r.id.clone()).collect(),
                    }
                    .into());
                }
                // Asked again without decisions: say again what waits.
                cx.events.emit_with(|| RunEvent::Interrupted {
                    step: interrupt.step,
                    requests: interrupt.requests.clone(),
                });
                return done.output(state, cx, saver.version, Some(interrupt));
            }
        };
        // A step a crash (or a cancel) cut short comes first (see `step_recovery.rs`).
        let (cut_short, to_forget) = match resume {
            None => {
                self.take_up_cut_step(!input.messages.is_empty(), gate.as_ref(), &mut state, cx)
                    .await?
            }
            Some(_) => (None, Vec::new()),
        };
        state.messages.extend(input.messages.drain(..));
        input.apply_slots(&mut state);
        for m in &inner.middleware {
            let span = tracing::debug_span!("before_agent", middleware = m.name());
            m.before_agent(&mut state, cx).instrument(span).await?;
        }
        saver.save(&state, cx).await?;
        self.forget_calls(cx, &to_forget).await;
        match cut_short {
            Some(StepOutcome::Interrupted(interrupt)) => {
                return done.output(state, cx, saver.version, Some(interrupt));
            }
            Some(StepOutcome::Completed { journaled }) => self.forget_calls(cx, &journaled).await,
            None => {}
        }

        if let Some((pending, decisions)) = resume {
            cx.step = 0;
            let tools = self.step_tools(&state, cx).await?;
            let outcome = self
                .resume_step(pending, &decisions, &tools, &mut state, cx)
                .await?;
            saver.save(&state, cx).await?;
            match outcome {
                StepOutcome::Interrupted(interrupt) => {
                    return done.output(state, cx, saver.version, Some(interrupt));
                }
                StepOutcome::Completed { journaled } => self.forget_calls(cx, &journaled).await,
            }
        }

        let max_steps = input.max_steps.unwrap_or(inner.max_steps);
        let Finish {
            model_calls,
            usage,
            structured_output,
            stop_reason,
            ..
        } = &mut done;
        let mut truncated_in_a_row: u32 = 0;
        loop {
            if *model_calls >= max_steps {
                return Err(AgentError::StepLimit {
                    limit: max_steps,
                    thread_id: cx.thread_id.clone(),
                });
            }
            cx.step = *model_calls;
            for m in &inner.middleware {
                let span = tracing::debug_span!("before_model", middleware = m.name());
                m.before_model(&mut state, cx).instrument(span).await?;
            }
            let tools = self.step_tools(&state, cx).await?;
            let request = ModelRequest {
                system: inner.system.clone(),
                messages: state.messages.clone(),
                tools: tools.specs().to_vec(),
                response_format: inner.response_format.clone(),
                max_output_tokens: inner.max_output_tokens,
                ..ModelRequest::default()
            };
            cx.events.emit_with(|| RunEvent::ModelStarted {
                step: cx.step,
                model: inner.model.id().to_owned(),
                messages: state.messages.len(),
                tools: tools.specs().len(),
            });
            let started = Instant::now();
            let result = Next::new(&inner.middleware, inner.model.clone())
                .run(request, &mut state, cx)
                .await;
            let mut response = match result {
                Ok(response) => response,
                Err(error) => {
                    cx.events.emit_with(|| RunEvent::ModelFailed {
                        step: cx.step,
                        error: error.to_string(),
                    });
                    return Err(error);
                }
            };
            *model_calls += 1;
            call_ids::make_unique(&mut response.message, &state.messages);
            for m in inner.middleware.iter().rev() {
                let span = tracing::debug_span!("after_model", middleware = m.name());
                m.after_model(&mut response, &mut state, cx)
                    .instrument(span)
                    .await?;
            }
            *usage += response.usage;
            // A call cut off at the output token limit is never run (see `truncation.rs`).
            let truncated = truncation::is_truncated_call(&response)
                .then(|| truncation::strip_calls(&mut response.message));
            let calls: Vec<ToolCall> = response.message.calls().cloned().collect();
            cx.events.emit_with(|| RunEvent::ModelFinished {
                step: cx.step,
                model: response
                    .model
                    .clone()
                    .unwrap_or_else(|| inner.model.id().to_owned()),
                usage: response.usage,
                stop_reason: response.stop_reason.clone(),
                tool_calls: calls.len(),
                elapsed: started.elapsed(),
            });
            *stop_reason = response.stop_reason.clone();
            if response.structured_output.is_some() {
                *structured_output = response.structured_output.take();
            }
            state.messages.push(Message::Ai(response.message));
            saver.save(&state, cx).await?;

            if let Some(tools) = truncated {
                truncated_in_a_row += 1;
                if truncated_in_a_row > inner.truncated_call_retries {
                    return Err(AgentError::TruncatedToolCall {
                        tools,
                        attempts: truncated_in_a_row,
                        thread_id: cx.thread_id.clone(),
                    });
                }
                state.messages.push(truncation::notice(&tools));
                saver.save(&state, cx).await?;
                continue;
            }
            truncated_in_a_row = 0;

            if !calls.is_empty() {
                let outcome = self
                    .tool_step(calls, &tools, gate.as_ref(), &mut state, cx)
                    .await?;
                saver.save(&state, cx).await?;
                match outcome {
                    StepOutcome::Interrupted(interrupt) => {
                        return done.output(state, cx, saver.version, Some(interrupt));
                    }
                    StepOutcome::Completed { journaled } => self.forget_calls(cx, &journaled).await,
                }
                continue;
            }

            let jump = self.after_agent(&mut state, cx).await?;
            if let AfterAgent::JumpToModel(messages) = jump {
                state.messages.extend(messages);
                saver.save(&state, cx).await?;
                continue;
            }
            saver.save(&state, cx).await?;
            break;
        }

        cx.events.emit_with(|| RunEvent::RunFinished {
            model_calls: done.model_calls,
            usage: done.usage,
        });
        done.output(state, cx, saver.version, None)
    }

    /// The thread's state and a saver holding its version.
    async fn load(&self, thread_id: &ThreadId) -> Result<(State, Saver<'_>, bool), AgentError> {
        let checkpointer = self.inner.checkpointer.as_ref();
        let stored = match checkpointer {
            Some(c) => {
                let span = tracing::debug_span!("checkpoint.load");
                c.load(thread_id).instrument(span).await?
            }
            None => None,
        };
        Ok(match stored {
            Some(stored) => (
                stored.checkpoint.state,
                Saver {
                    checkpointer,
                    version: Some(stored.version),
                    seq: stored.checkpoint.seq + 1,
                },
                true,
            ),
            None => (
                State::default(),
                Saver {
                    checkpointer,
                    version: None,
                    seq: 0,
                },
                false,
            ),
        })
    }

    /// The agent's tools plus what middlewares contribute for this call.
    pub(crate) async fn step_tools(
        &self,
        state: &State,
        cx: &RunContext,
    ) -> Result<Arc<ToolSet>, AgentError> {
        let mut tools: Option<ToolSet> = None;
        for m in &self.inner.middleware {
            let span = tracing::debug_span!("request_tools", middleware = m.name());
            let extra = m.request_tools(state, cx).instrument(span).await?;
            if extra.is_empty() {
                continue;
            }
            let set = tools.get_or_insert_with(|| (*self.inner.base_tools).clone());
            for tool in extra {
                set.add(tool)?;
            }
        }
        Ok(match tools {
            Some(set) => Arc::new(set),
            None => self.inner.base_tools.clone(),
        })
    }

    /// Run one call through the `wrap_tool_call` chain: its result and slot writes.
    pub(crate) async fn run_tool(
        &self,
        call: ToolCall,
        tools: &ToolSet,
        state: &State,
        cx: &RunContext,
    ) -> Result<(ToolMessage, StateUpdates), AgentError> {
        let call_id = call.id.clone();
        let name = call.name.clone();
        cx.events.emit_with(|| RunEvent::ToolStarted {
            step: cx.step,
            call_id: call_id.clone(),
            name: name.clone(),
        });
        let started = Instant::now();
        let tool_cx = cx.tool_context(state, &call_id);
        let next = ToolNext::new(&self.inner.middleware, tools);
        let span = telemetry::tool_span(&call);
        // Tools are caught at the innermost link; this catches panics in wrap_tool_call hooks.
        let output = match AssertUnwindSafe(next.run(call, &tool_cx).instrument(span.clone()))
            .catch_unwind()
            .await
        {
            Ok(result) => result?,
            Err(panic) => ToolOutput::error(panicked(&name, panic.as_ref())),
        };
        telemetry::record_tool(&span, &output);
        cx.events.emit_with(|| RunEvent::ToolFinished {
            step: cx.step,
            call_id: call_id.clone(),
            name: name.clone(),
            is_error: output.is_error,
            side_effects: crate::runtime::tool_step::side_effects(tools, &name),
            elapsed: started.elapsed(),
        });
        Ok(crate::runtime::tools::into_message(output, call_id, name))
    }

    /// `after_agent` hooks, last middleware first; the first jump wins.
    async fn after_agent(&self, state: &mut State, cx: &RunContext) -> Result<AfterAgent, AgentError> {
        for m in self.inner.middleware.iter().rev() {
            let span = tracing::debug_span!("after_agent", middleware = m.name());
            if let jump @ AfterAgent::JumpToModel(_) = m.after_agent(state, cx).instrument(span).await? {
                return Ok(jump);
            }
        }
        Ok(AfterAgent::Finish)
    }
}
