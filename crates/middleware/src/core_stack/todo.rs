//! [`TodoListMiddleware`]: a `write_todos` tool and a todo list in state that UIs can read.

use std::borrow::Cow;
use std::sync::Arc;

use async_trait::async_trait;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::runtime::context::RunContext;
use crate::runtime::error::AgentError;
use crate::runtime::message::SystemBlock;
use crate::runtime::middleware::{Middleware, Next};
use crate::runtime::model::{ModelRequest, ModelResponse};
use crate::runtime::state::{Slot, State};
use crate::runtime::tools::ToolContextExt;
use crate::tools::{Tool, ToolContext, ToolError, ToolOutput, parameters_schema, parse_args};

/// Progress of one todo.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TodoStatus {
    /// Not started.
    Pending,
    /// Being worked on now.
    InProgress,
    /// Done.
    Completed,
}

// A plain string enum in the schema (derived schemas of documented variants become `oneOf`s).
impl JsonSchema for TodoStatus {
    fn schema_name() -> Cow<'static, str> {
        "TodoStatus".into()
    }

    fn json_schema(_generator: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "enum": ["pending", "in_progress", "completed"],
            "description": "pending (not started), in_progress (being worked on now) or completed (done)."
        })
    }
}

/// One item of the agent's todo list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Todo {
    /// What to do, in a short sentence.
    pub content: String,
    /// Its progress.
    pub status: TodoStatus,
}

/// The public slot holding the todo list (what UIs show).
pub static TODOS: Slot<Vec<Todo>> = Slot::public("todos");

const TOOL_NAME: &str = "write_todos";

const DESCRIPTION: &str = "Replace your todo list with the complete list given. Use it for work with several \
steps: write the plan before starting, mark one item in_progress while you work on it, and mark it completed \
as soon as it is done. Send the whole list every time, not only the changes. Skip it for simple one-step tasks.";

const SYSTEM_SECTION: &str = "## Todo list\n\nYou have a `write_todos` tool for tracking multi-step work. \
When a task needs three or more distinct steps, write a todo list first, keep exactly one item in_progress \
while you work, and update the list as soon as an item is finished or the plan changes. The user can see the \
list, so keep items short and concrete. For quick tasks, skip the list and just do the work.";

// Arguments of `write_todos`.
#[derive(Debug, Deserialize, JsonSchema)]
struct WriteTodosArgs {
    /// The complete, updated todo list.
    todos: Vec<Todo>,
}

/// The `write_todos` tool: replaces the [`TODOS`] slot.
#[derive(Debug, Clone)]
pub struct WriteTodosTool {
    parameters: Value,
}

impl Default for WriteTodosTool {
    fn default() -> Self {
        Self {
            parameters: parameters_schema::<WriteTodosArgs>(),
        }
    }
}

fn render(todos: &[Todo]) -> String {
    if todos.is_empty() {
        return "The todo list is now empty.".to_owned();
    }
    let mut out = String::from("Todo list updated:");
    for (i, todo) in todos.iter().enumerate() {
        let status = match todo.status {
            TodoStatus::Pending => "pending",
            TodoStatus::InProgress => "in_progress",
            TodoStatus::Completed => "completed",
        };
        out.push_str(&format!("\n{}. [{status}] {}", i + 1, todo.content));
    }
    out
}

#[async_trait]
impl Tool for WriteTodosTool {
    fn name(&self) -> &str {
        TOOL_NAME
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    fn parameters(&self) -> &Value {
        &self.parameters
    }

    /// It only sets the thread's list: the same list twice is the same list.
    fn side_effects(&self) -> crate::tools::SideEffects {
        crate::tools::SideEffects::Idempotent
    }

    async fn call(&self, args: Value, cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        // Two lists in one turn would race; refuse all of them so the model sends one.
        let same_turn = cx.state().map_or(0, |state| {
            state
                .messages
                .iter()
                .rev()
                .find_map(|m| m.as_ai())
                .map_or(0, |ai| ai.calls().filter(|c| c.name == TOOL_NAME).count())
        });
        if same_turn > 1 {
            return Err(ToolError::failed(
                "write_todos was called more than once in one turn, so none of the lists was saved. \
                 Call it once with the complete list.",
            ));
        }
        let args: WriteTodosArgs = parse_args(args)?;
        let text = render(&args.todos);
        Ok(ToolOutput::text(text).with_update(&TODOS, args.todos))
    }
}

/// Offers `write_todos` and a short system section on planning with it. The list lives in the public
/// [`TODOS`] slot, so it is returned with every run's state and checkpointed with the thread.
#[derive(Debug, Clone, Default)]
pub struct TodoListMiddleware {
    tool: Arc<WriteTodosTool>,
}

impl TodoListMiddleware {
    /// The middleware.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl Middleware for TodoListMiddleware {
    fn name(&self) -> &str {
        "todo_list"
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        vec![self.tool.clone()]
    }

    async fn wrap_model_call(
        &self,
        mut request: ModelRequest,
        state: &mut State,
        cx: &RunContext,
        next: Next<'_>,
    ) -> Result<ModelResponse, AgentError> {
        request.push_system(SystemBlock::new(SYSTEM_SECTION).with_source(self.name()));
        next.run(request, state, cx).await
    }
}
