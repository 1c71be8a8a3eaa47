//! # trellis-middleware
//!
//! The runtime every Trellis consumer is written against, and the consumers themselves. The crate
//! root names what an agent is built with:
//!
//! * the agent loop ([`Agent`], built by [`AgentBuilder`]): concurrent tool calls with results in
//!   call order, a step limit, unknown/failing/panicking tools answered as errors, clean
//!   cancellation, run events; a run takes a [`RunInput`] and returns a [`RunOutput`];
//! * the [`Middleware`] protocol — `before_agent`, `before_model`, `wrap_model_call` ([`Next`]),
//!   `after_model`, `wrap_tool_call` ([`ToolNext`]), `after_agent` ([`AfterAgent`]) — with typed
//!   [`State`] slots ([`Slot`]; private ones never leave the thread);
//! * the [`ChatModel`] trait, [`ModelRequest`] and [`ModelResponse`], and the conversation
//!   ([`Message`], [`SystemBlock`] with cache breakpoints, [`ToolCall`]);
//! * threads ([`ThreadId`]) and checkpoints ([`Checkpointer`], [`InMemoryCheckpointer`],
//!   [`BackendCheckpointer`] with version-checked writes over any storage backend, object stores
//!   included); a run that stops says why in an [`AgentError`];
//! * tools: the one [`Tool`] trait of `trellis-fs-tools` ([`ToolContext`], [`ToolOutput`],
//!   [`ToolError`], [`FnTool`]; the rest under [`tools`]), run by the loop with a context whose run
//!   is reached through [`ToolContextExt::run`];
//! * the core middlewares ([`core_stack`]): [`FilesystemMiddleware`], [`PatchToolCallsMiddleware`],
//!   [`ModelRetryMiddleware`], [`TokenUsageMiddleware`], [`PromptCachingMiddleware`],
//!   [`TodoListMiddleware`];
//! * the consumers, each in its module with its slots and settings: [`SkillsMiddleware`]
//!   ([`skills`]), [`MemoryMiddleware`] ([`memory`]), [`RubricMiddleware`] ([`rubric`]),
//!   [`SummarizationMiddleware`] ([`summarization`]), [`SubAgentMiddleware`] ([`subagents`]),
//!   [`AttachmentsMiddleware`] ([`attachments`]), and approvals ([`approvals`]).
//!
//! The rest of the runtime's vocabulary lives under [`runtime`]: [`runtime::message`],
//! [`runtime::model`], [`runtime::checkpoint`] (records and the by-content serializers),
//! [`runtime::state`], [`runtime::events`], [`runtime::interrupt`], [`runtime::stream`],
//! [`runtime::context`], [`runtime::telemetry`], and [`runtime::scripted_model`] for tests.
//!
//! ```
//! use std::sync::Arc;
//! use serde_json::json;
//! use trellis_middleware::core_stack::TOKEN_USAGE;
//! use trellis_middleware::runtime::scripted_model::ScriptedModel;
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
//! // The order of the default stack (trellis-agent's `deep_agent`), core middlewares only.
//! let agent = Agent::builder(model.clone())
//!     .system_prompt("You are a calculator.")
//!     .tool(add)
//!     .middleware(PatchToolCallsMiddleware::new())
//!     .middleware(TokenUsageMiddleware::new())
//!     .middleware(PromptCachingMiddleware::new())
//!     .middleware(ModelRetryMiddleware::default())
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
//! Middleware order matters: the first registered is the outermost. The default stack of
//! trellis-agent (`crates/agent/src/builder/mod.rs`, docs/architecture.md) is, outermost first:
//! [`FilesystemMiddleware`], skills, subagents, [`PatchToolCallsMiddleware`], the caller's
//! middlewares, [`TokenUsageMiddleware`], [`PromptCachingMiddleware`] (the breakpoint after the
//! stable system text), attachments and memory (text that changes), summarization, and
//! [`ModelRetryMiddleware`] innermost, so a retry re-sends the same (condensed) request.

#![warn(missing_docs)]

/// The tools layer this crate is built on (the one `Tool` trait, the file tools), re-exported for
/// the layers above.
pub use trellis_fs_tools as tools;
/// The storage layer, re-exported for the layers above.
pub use trellis_fs_tools::backend;

pub mod approvals;
pub mod attachments;
pub mod core_stack;
pub mod memory;
pub mod rubric;
pub mod runtime;
pub mod skills;
pub mod subagents;
pub mod summarization;
pub mod token_estimate;
pub mod untrusted;

pub mod users;

pub use attachments::AttachmentsMiddleware;
pub use core_stack::{
    FilesystemMiddleware, ModelRetryMiddleware, PatchToolCallsMiddleware, PromptCachingMiddleware,
    TodoListMiddleware, TokenUsageMiddleware,
};
pub use memory::MemoryMiddleware;
pub use rubric::RubricMiddleware;
pub use runtime::agent::Agent;
pub use runtime::agent_builder::AgentBuilder;
pub use runtime::checkpoint::{BackendCheckpointer, Checkpointer, InMemoryCheckpointer};
pub use runtime::context::ThreadId;
pub use runtime::error::AgentError;
pub use runtime::message::{Message, SystemBlock, ToolCall};
pub use runtime::middleware::{AfterAgent, Middleware, Next, ToolNext};
pub use runtime::model::{ChatModel, ModelError, ModelRequest, ModelResponse};
pub use runtime::run::{RunInput, RunOutput};
pub use runtime::state::{Slot, State};
pub use runtime::tools::ToolContextExt;
pub use skills::SkillsMiddleware;
pub use subagents::SubAgentMiddleware;
pub use summarization::SummarizationMiddleware;
pub use tools::{FnTool, Tool, ToolContext, ToolError, ToolOutput};

mod deprecated;
#[allow(deprecated)]
pub use deprecated::*;

/// `docs/writing-a-tool.md`, compiled: its example is this crate's doctest.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/writing-a-tool.md")]
pub struct WritingATool;

/// This crate's README, compiled: its examples are doctests, so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
