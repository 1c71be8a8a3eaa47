//! The tools of one step and running one of them: [`ToolSet`], the registry by name, and
//! [`call_tool`], which answers an unknown tool, a tool error and a tool panic with an error result,
//! so none of them stops the run. The end of every `wrap_tool_call` chain ([`ToolNext`]).
//!
//! [`ToolNext`]: crate::runtime::middleware::ToolNext

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use tracing::Instrument;

use crate::runtime::error::AgentError;
use crate::runtime::message::ToolCall;
use crate::runtime::model::ToolSpec;
use crate::tools::{Tool, ToolContext, ToolOutput};

/// The tools one model call may use, by name.
#[derive(Debug, Clone, Default)]
pub(crate) struct ToolSet {
    tools: Vec<Arc<dyn Tool>>,
    specs: Vec<Arc<ToolSpec>>,
    index: HashMap<String, usize>,
}

impl ToolSet {
    /// Add a tool; a second tool with the same name is a configuration error.
    pub(crate) fn add(&mut self, tool: Arc<dyn Tool>) -> Result<(), AgentError> {
        let name = tool.name().to_owned();
        if self.index.contains_key(&name) {
            return Err(AgentError::Config(format!("two tools are named {name:?}")));
        }
        self.index.insert(name, self.tools.len());
        self.specs.push(Arc::new(tool.spec()));
        self.tools.push(tool);
        Ok(())
    }

    pub(crate) fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.index.get(name).map(|&i| &self.tools[i])
    }

    pub(crate) fn specs(&self) -> &[Arc<ToolSpec>] {
        &self.specs
    }

    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        self.specs.iter().map(|s| s.name.as_str())
    }
}

/// Run `call` on its tool in `tools`: an unknown tool, a tool error and a tool panic all come back as
/// error results.
pub(crate) async fn call_tool(tools: &ToolSet, call: ToolCall, cx: &ToolContext<'_>) -> ToolOutput {
    let Some(tool) = tools.get(&call.name) else {
        return unknown_tool(&call.name, tools);
    };
    let span = tracing::debug_span!("tool.call", tool = %call.name, call_id = %call.id);
    match AssertUnwindSafe(tool.call(call.args, cx).instrument(span))
        .catch_unwind()
        .await
    {
        Ok(Ok(output)) => output,
        Ok(Err(error)) => ToolOutput::error(error.to_string()),
        Err(panic) => ToolOutput::error(panicked(&call.name, panic.as_ref())),
    }
}

fn unknown_tool(name: &str, tools: &ToolSet) -> ToolOutput {
    let names: Vec<&str> = tools.names().collect();
    let available = if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    };
    ToolOutput::error(format!(
        "there is no tool named {name:?} in this step. Available tools: {available}."
    ))
}

/// The model-facing text for a panic in a tool (or a `wrap_tool_call` hook).
pub(crate) fn panicked(name: &str, payload: &(dyn std::any::Any + Send)) -> String {
    let detail = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".to_owned());
    tracing::error!(tool = name, panic = %detail, "tool panicked");
    format!("the tool {name:?} failed unexpectedly (it panicked: {detail}). Its work may be incomplete.")
}
