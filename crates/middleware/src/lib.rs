//! # trellis-middleware
//!
//! The runtime every Trellis consumer is written against:
//!
//! * the conversation vocabulary ([`Message`], [`SystemBlock`] with cache breakpoints, [`ToolCall`],
//!   [`ModelRequest`], [`ModelResponse`], [`Usage`]);
//! * the [`ChatModel`] trait with declared [`ModelCapabilities`], and [`ScriptedModel`] for tests;
//! * the [`Middleware`] protocol — `before_agent`, `before_model`, `wrap_model_call`, `after_model`,
//!   `wrap_tool_call`, `after_agent` — with typed [`State`] slots (private ones never leave the thread);
//! * the agent loop ([`Agent`]): concurrent tool calls with results in call order, a step limit,
//!   unknown/failing/panicking tools answered as errors, clean cancellation, run events;
//! * threads and checkpoints ([`Checkpointer`], [`InMemoryCheckpointer`], [`BackendCheckpointer`] with
//!   version-checked writes over any storage backend, object stores included);
//! * tools: the one [`Tool`] trait of `trellis-fs-tools` (re-exported as [`tools`]), run by the loop
//!   with a [`ToolContext`] whose run is a [`RunContext`] ([`ToolContextExt::run`]);
//! * core middlewares: [`PatchToolCallsMiddleware`], [`ModelRetryMiddleware`],
//!   [`TokenUsageMiddleware`], [`PromptCachingMiddleware`], [`TodoListMiddleware`].
//!
//! ```
//! use std::sync::Arc;
//! use serde_json::json;
//! use trellis_middleware::*;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! // A model that calls a tool, answers, and answers again on the next run.
//! let model = Arc::new(
//!     ScriptedModel::new()
//!         .then_tool_calls([ToolCall::new("c1", "add", json!({"a": 2, "b": 3}))])
//!         .then_text("2 + 3 = 5")
//!         .then_text("You're welcome."),
//! );
//! let add = FnTool::new("add", "Add two numbers.", json!({"type": "object"}), |args| async move {
//!     let sum = args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0);
//!     Ok(ToolOutput::text(sum.to_string()))
//! });
//! let agent = Agent::builder(model.clone())
//!     .system_prompt("You are a calculator.")
//!     .tool(add)
//!     .middleware(PatchToolCallsMiddleware::new())
//!     .middleware(ModelRetryMiddleware::default())
//!     .middleware(TokenUsageMiddleware::new())
//!     .middleware(PromptCachingMiddleware::new())
//!     .build()?;
//!
//! let out = agent.run(RunInput::human("What is 2 + 3?")).await?;
//! assert_eq!(out.final_text().as_deref(), Some("2 + 3 = 5"));
//! // The second request carried the tool's result.
//! let second = &model.requests()[1];
//! assert_eq!(second.messages.last().map(Message::text).as_deref(), Some("5"));
//!
//! // Continue the thread: it was checkpointed (in memory by default).
//! let out = agent.run(RunInput::human("Thanks!").thread(out.thread_id)).await?;
//! assert_eq!(out.state.messages.len(), 6);
//! assert_eq!(out.state.get(&TOKEN_USAGE)?.map(|u| u.model_calls), Some(3));
//! # Ok::<(), AgentError>(())
//! # }).unwrap();
//! ```
//!
//! Middleware order matters: the first registered is the outermost. The core stack, in the
//! recommended order: [`TodoListMiddleware`], [`PatchToolCallsMiddleware`], [`ModelRetryMiddleware`],
//! [`TokenUsageMiddleware`], then the middlewares that add stable system text, then
//! [`PromptCachingMiddleware`], then those whose text changes (memory).

#![warn(missing_docs)]

/// The tools layer this crate is built on (the one `Tool` trait, the file tools), re-exported for
/// the layers above.
pub use trellis_fs_tools as tools;
/// The storage layer, re-exported for the layers above.
pub use trellis_fs_tools::backend;

pub mod approvals;
pub mod attachments;
mod core_stack;
pub mod memory;
pub mod rubric;
mod runtime;
pub mod skills;
pub mod subagents;
pub mod summarization;
pub mod user_cache;
pub mod user_home;

pub use attachments::{ATTACHMENTS, Attachment, AttachmentStore, AttachmentsMiddleware, Upload};
pub use core_stack::{
    EXECUTE_LINE, FILESYSTEM_SECTION, FilesystemMiddleware, ModelRetryMiddleware, PatchToolCallsMiddleware,
    PromptCachingMiddleware, RetryConfig, TODOS, TOKEN_USAGE, Todo, TodoListMiddleware, TodoStatus,
    TokenUsage, TokenUsageMiddleware, WriteTodosTool,
};
pub use memory::{MEMORY, MemoryMiddleware};
pub use rubric::{
    CriterionEval, GraderVerdict, RUBRIC, RUBRIC_RESULT, Rubric, RubricEvaluation, RubricMiddleware,
    RubricResult, Verdict,
};
pub use runtime::agent::Agent;
pub use runtime::agent_builder::{AgentBuilder, DEFAULT_MAX_STEPS};
pub use runtime::checkpoint::{
    BackendCheckpointer, CHECKPOINT_FORMAT, Checkpoint, CheckpointError, CheckpointInfo, CheckpointVersion,
    Checkpointer, ForkOrigin, GarbageReport, InMemoryCheckpointer, StoredCheckpoint, TEXT_BY_CONTENT_BYTES,
    serialize_by_content, serialize_str_by_content,
};
pub use runtime::context::{Extensions, InvalidThreadId, RunContext, ThreadId};
pub use runtime::error::{AgentError, BoxError};
pub use runtime::events::{EventSink, RunEvent};
pub use runtime::interrupt;
pub use runtime::interrupt::{
    AgentFrame, ApprovalRequest, Decision, DecisionError, DecisionKind, Decisions, Interrupt,
    NestedInterrupts, Review, ToolGate,
};
pub use runtime::message::{
    AiMessage, CacheTtl, ContentBlock, HumanMessage, ImageSource, Message, MessageMeta, SystemBlock,
    SystemMessage, ToolCall, ToolMessage,
};
pub use runtime::message_list::Messages;
pub use runtime::middleware::{AfterAgent, Middleware, Next, ToolNext};
pub use runtime::model::{
    ChatModel, HttpDetails, ModelCapabilities, ModelError, ModelRequest, ModelResponse, ReasoningEffort,
    ResponseFormat, StopReason, ToolChoice, ToolSpec, Usage,
};
pub use runtime::run::{RunInput, RunOutput};
pub use runtime::scripted_model::ScriptedModel;
pub use runtime::state::{PublicState, Slot, SlotValue, Slots, State, StateError, StateUpdates};
pub use runtime::stream::{DeltaSink, ModelDelta, deltas_of, stream_by_invoking};
pub use runtime::telemetry;
pub use runtime::tools::ToolContextExt;
pub use runtime::truncation::{DEFAULT_TRUNCATED_CALL_RETRIES, TRUNCATION_SOURCE};
pub use skills::{BoundTools, SkillSource, SkillsMiddleware, ToolResolver};
pub use subagents::{SubAgent, SubAgentMiddleware};
pub use summarization::{SummarizationConfig, SummarizationMiddleware, Threshold};
pub use tools::{
    DetachedRun, FnTool, HiddenPaths, Tool, ToolContext, ToolError, ToolOutput, ToolRun, UserIdentity,
    parameters_schema, parameters_schema as tool_schema, parse_args,
};
pub use user_home::{UserHome, UserHomeError, UserHomes};

/// `docs/writing-a-tool.md`, compiled: its example is this crate's doctest.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/writing-a-tool.md")]
pub struct WritingATool;

/// This crate's README, compiled: its examples are doctests, so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
