//! The [`Middleware`] protocol and the [`Next`] / [`ToolNext`] handles of its wrapping hooks.
//!
//! Hook order for a stack `[a, b]` (`a` registered first):
//!
//! | hook | order |
//! |---|---|
//! | `before_agent`, `before_model` | `a`, then `b` |
//! | `wrap_model_call`, `wrap_tool_call` | `a` wraps `b` wraps the call: `a` sees the request first and the response last |
//! | `after_model`, `after_agent` | `b`, then `a` |
//!
//! So a middleware registered earlier is "outside" one registered later, for every hook.

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use tracing::Instrument;

use crate::runtime::context::RunContext;
use crate::runtime::error::AgentError;
use crate::runtime::events::RunEvent;
use crate::runtime::message::{Message, ToolCall};
use crate::runtime::model::{ChatModel, ModelRequest, ModelResponse};
use crate::runtime::state::State;
use crate::runtime::telemetry;
use crate::runtime::tool_set::{ToolSet, call_tool};
use crate::tools::{Tool, ToolContext, ToolOutput};

/// What happens when the model stops calling tools.
#[derive(Debug, Clone, PartialEq)]
pub enum AfterAgent {
    /// Let the run finish (unless another middleware jumps).
    Finish,
    /// Append these messages and call the model again. The first jump (in `after_agent` order) wins;
    /// later middlewares' `after_agent` hooks are not called this time.
    JumpToModel(Vec<Message>),
}

/// A middleware: hooks around the agent loop, tools, and state slots.
///
/// Every hook has a no-op default, so an implementation overrides only what it needs. Hooks get the
/// thread's [`State`] (messages and typed slots) and the [`RunContext`]. Returning `Err` stops the run;
/// tools report failures as error results instead.
///
/// Loading is done once (in `before_agent`, cached in a slot); injection is done on every call (in
/// `wrap_model_call`, from that slot), producing byte-identical text each time so prompt caches hold.
#[async_trait]
pub trait Middleware: Send + Sync + Debug {
    /// A short, unique name (`prompt_caching`, `skills`); used in events, spans, errors and as the
    /// `source` tag of what the middleware injects.
    fn name(&self) -> &str;

    /// Tools this middleware always offers. Called once, when the agent is built.
    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        Vec::new()
    }

    /// Tools offered for the next model call only (e.g. tools disclosed by an activated skill). Called
    /// before every model call, after `before_model`. Only offered tools can run: a call to anything
    /// else is answered as an unknown tool.
    async fn request_tools(&self, state: &State, cx: &RunContext) -> Result<Vec<Arc<dyn Tool>>, AgentError> {
        let _ = (state, cx);
        Ok(Vec::new())
    }

    /// Once per run, after the caller's input was appended: load things into state.
    async fn before_agent(&self, state: &mut State, cx: &RunContext) -> Result<(), AgentError> {
        let _ = (state, cx);
        Ok(())
    }

    /// Before every model call; changes to `state` are kept.
    async fn before_model(&self, state: &mut State, cx: &RunContext) -> Result<(), AgentError> {
        let _ = (state, cx);
        Ok(())
    }

    /// Around every model call. Edit the request (it is a copy: changes are not stored) and call
    /// `next.run`, possibly more than once (retries); or answer without calling it.
    async fn wrap_model_call(
        &self,
        request: ModelRequest,
        state: &mut State,
        cx: &RunContext,
        next: Next<'_>,
    ) -> Result<ModelResponse, AgentError> {
        next.run(request, state, cx).await
    }

    /// After every model call, before the reply is appended to the messages: inspect or edit it.
    async fn after_model(
        &self,
        response: &mut ModelResponse,
        state: &mut State,
        cx: &RunContext,
    ) -> Result<(), AgentError> {
        let _ = (response, state, cx);
        Ok(())
    }

    /// Around every tool call. Calls of one step run concurrently, so this sees the state read-only;
    /// return slot writes in [`ToolOutput::updates`].
    async fn wrap_tool_call(
        &self,
        call: ToolCall,
        cx: &ToolContext<'_>,
        next: ToolNext<'_>,
    ) -> Result<ToolOutput, AgentError> {
        next.run(call, cx).await
    }

    /// When the model stopped calling tools: let the run finish or send it back to the model.
    async fn after_agent(&self, state: &mut State, cx: &RunContext) -> Result<AfterAgent, AgentError> {
        let _ = (state, cx);
        Ok(AfterAgent::Finish)
    }
}

/// The rest of a `wrap_model_call` chain: the middlewares inside this one, then the model.
#[derive(Debug, Clone)]
pub struct Next<'a> {
    rest: &'a [Arc<dyn Middleware>],
    model: Arc<dyn ChatModel>,
}

impl<'a> Next<'a> {
    pub(crate) fn new(rest: &'a [Arc<dyn Middleware>], model: Arc<dyn ChatModel>) -> Self {
        Self { rest, model }
    }

    /// The model this call will reach (decide model-dependent behaviour on this, not on the agent's
    /// configured model).
    pub fn model(&self) -> &Arc<dyn ChatModel> {
        &self.model
    }

    /// The same chain, sending the call to another model.
    pub fn with_model(mut self, model: Arc<dyn ChatModel>) -> Self {
        self.model = model;
        self
    }

    /// Run the rest of the chain. At the end, a request for a model with prompt caching is trimmed to
    /// the model's breakpoint limit (earliest breakpoints kept).
    pub async fn run(
        &self,
        mut request: ModelRequest,
        state: &mut State,
        cx: &RunContext,
    ) -> Result<ModelResponse, AgentError> {
        match self.rest.split_first() {
            Some((middleware, rest)) => {
                let next = Next::new(rest, self.model.clone());
                let span = tracing::debug_span!("wrap_model_call", middleware = middleware.name());
                middleware
                    .wrap_model_call(request, state, cx, next)
                    .instrument(span)
                    .await
            }
            None => {
                let caps = self.model.capabilities();
                if caps.prompt_caching {
                    let removed = request.limit_cache_breakpoints(caps.max_cache_breakpoints as usize);
                    if removed > 0 {
                        tracing::warn!(
                            removed,
                            model = self.model.id(),
                            "dropped cache breakpoints over the model's limit"
                        );
                    }
                }
                let span = telemetry::chat_span(self.model.id(), self.model.provider(), &request);
                let events = cx.events();
                let step = cx.step();
                events.emit_with(|| RunEvent::ModelStreamStarted { step });
                let on_delta = |delta| events.emit_with(|| RunEvent::ModelDelta { step, delta });
                let result = self
                    .model
                    .stream(request, &on_delta)
                    .instrument(span.clone())
                    .await;
                telemetry::record_chat(&span, &result);
                Ok(result?)
            }
        }
    }
}

/// The rest of a `wrap_tool_call` chain: the middlewares inside this one, then the tool.
#[derive(Debug, Clone, Copy)]
pub struct ToolNext<'a> {
    rest: &'a [Arc<dyn Middleware>],
    tools: &'a ToolSet,
}

impl<'a> ToolNext<'a> {
    pub(crate) fn new(rest: &'a [Arc<dyn Middleware>], tools: &'a ToolSet) -> Self {
        Self { rest, tools }
    }

    /// True when a tool of this name can run in this step.
    pub fn has_tool(&self, name: &str) -> bool {
        self.tools.get(name).is_some()
    }

    /// Names of the tools that can run in this step, in the order offered.
    pub fn tool_names(&self) -> Vec<&'a str> {
        self.tools.names().collect()
    }

    /// Run the rest of the chain. At the end the tool runs; an unknown tool, a tool error and a tool
    /// panic all come back as `Ok` error results.
    pub async fn run(&self, call: ToolCall, cx: &ToolContext<'_>) -> Result<ToolOutput, AgentError> {
        match self.rest.split_first() {
            Some((middleware, rest)) => {
                let next = ToolNext::new(rest, self.tools);
                let span = tracing::debug_span!("wrap_tool_call", middleware = middleware.name());
                middleware.wrap_tool_call(call, cx, next).instrument(span).await
            }
            None => Ok(call_tool(self.tools, call, cx).await),
        }
    }
}
