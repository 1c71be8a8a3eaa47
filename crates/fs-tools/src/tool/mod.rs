//! The one tool API: the [`Tool`] trait every tool implements, what a call sees
//! ([`ToolContext`]), what it returns ([`ToolOutput`], [`ToolError`]) and what the model is told
//! about it ([`ToolSpec`]).
//!
//! File tools, `search_skills`, `task`, MCP tools and tools a user writes all implement [`Tool`];
//! the agent loop in `trellis-middleware` runs them, and the same values can be called by hand with
//! a [`DetachedRun`]'s context.

use std::fmt::Debug;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

mod args;
pub mod canonical;
mod context;
mod effects;
mod extensions;
mod fn_tool;
mod output;
pub(crate) mod slots;

pub use args::{describe_fields, parameters_schema, parse_args};
pub(crate) use args::{lenient, parse_args_described};
pub use context::{DetachedRun, StateView, ToolContext, ToolRun, UserIdentity};
pub use effects::{SideEffects, idempotency_key};
pub use extensions::Extensions;
pub use fn_tool::FnTool;
pub use output::{ImageSource, ToolContent, ToolError, ToolOutput};
pub use slots::{Slot, SlotValue, Slots, StateError, StateUpdates};

/// A tool the model can call.
///
/// Object-safe (`Arc<dyn Tool>`). The contract every implementation keeps:
///
/// * [`call`](Tool::call) never panics. A failure the model should hear about (bad arguments, a
///   refused path, a missing file, a storage outage) is either `Err(ToolError)` or an
///   `Ok(ToolOutput)` with `is_error` set; both reach the model as an error result whose text says
///   what went wrong and, where it can, what to do instead. The agent loop also turns a panic into
///   such a result, so a tool can never crash a run — but a panic is still a bug.
/// * [`parameters`](Tool::parameters) is a JSON schema (an object schema) of the arguments `call`
///   accepts, suitable for a provider's tool specification ([`parameters_schema`] derives one).
/// * Calls of one step run concurrently on the run's task: a tool with heavy CPU work moves it to
///   `tokio::task::spawn_blocking`, and writes thread state only through
///   [`ToolOutput::with_update`], never by mutating shared values.
#[async_trait]
pub trait Tool: Send + Sync + Debug {
    /// The name the model calls the tool by (`read_file`); unique within an agent.
    fn name(&self) -> &str;

    /// What the tool does and when to use it, written for the model.
    fn description(&self) -> &str;

    /// JSON schema of the arguments object.
    fn parameters(&self) -> &Value;

    /// True when the tool keeps its own output within a budget (by paging or capping with a
    /// notice), so large-result eviction must leave its results alone. The default is `false`:
    /// results of such tools are evicted when too large (see [`crate::evict_large_output`]).
    fn bounds_own_output(&self) -> bool {
        false
    }

    /// What a call does besides returning its result: what a run resumed after a crash may do
    /// with a call that started but left no recorded result (see [`SideEffects`]). The default,
    /// [`SideEffects::External`], is the safe one: such a call is never run again blindly.
    fn side_effects(&self) -> SideEffects {
        SideEffects::External
    }

    /// The spec sent to the model.
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().to_owned(),
            description: self.description().to_owned(),
            parameters: canonical::canonical(self.parameters().clone()),
        }
    }

    /// Run the tool on the model's arguments (a JSON value, normally an object).
    async fn call(&self, args: Value, cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError>;
}

/// What the model is told about one tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Unique name within a request.
    pub name: String,
    /// What the tool does and when to use it, for the model.
    pub description: String,
    /// JSON schema of the arguments object (written with sorted keys: [`canonical`]).
    #[serde(serialize_with = "canonical::serialize_sorted")]
    pub parameters: Value,
}
