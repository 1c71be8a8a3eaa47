//! The stream modes that show how a run proceeds rather than what it says — `tasks`,
//! `checkpoints`, `debug` and `custom` — made from the run's events by an [`Introspection`].
//!
//! | mode | event | data |
//! |---|---|---|
//! | `tasks` | `tasks` | a task starts: `{id, name, input, triggers}`; it ends: `{id, name, error, interrupts, result}` |
//! | `checkpoints` | `checkpoints` | after each checkpoint: `{config, parent_config, metadata, values, next, tasks}` |
//! | `debug` | `debug` | each of the above as `{step, timestamp, type: "task" \| "task_result" \| "checkpoint", payload}` |
//! | `custom` | `custom` | what a middleware reports (a retry, a grading, a summarization): `{middleware, kind, data}` |
//!
//! Tasks are LangGraph's: one `model` task per model call, one `tools` task per tool call (Deep
//! Agents sends each call to the tools node on its own). A model task's `input` is `null` (the
//! reference sends the whole state each step; the state is in `values`), a tool task's the call as
//! far as it is known when it starts (`{id, name, type: "tool_call"}`; its arguments are in the
//! reply's `tool_call_chunks`). Results come with the checkpoint that saved them: the model's reply,
//! each tool's result message, as `{"messages": [message]}`.
//!
//! Unlike the other modes, these parts are made only for a run that asked for them when it was
//! created (they are what an inspector wants, not a chat), so they cost the other runs nothing; a
//! join asking for them gets them only if the run did.

use serde_json::{Value, json};
use trellis_middleware::Message;
use trellis_middleware::runtime::state::PublicState;
use uuid::Uuid;

use crate::server::checkpoints::checkpoint_config;
use crate::server::messages::to_dict;
use crate::server::stream::{Mode, Part};
use crate::server::threads::time;

/// A task not ended yet.
#[derive(Debug)]
struct OpenTask {
    id: Uuid,
    /// The tool call it runs (`None`: the model task).
    call: Option<String>,
    step: u32,
}

/// Turns one run's events into `tasks`, `checkpoints`, `debug` and `custom` parts, for the modes
/// the run asked for.
#[derive(Debug)]
pub struct Introspection {
    thread: Uuid,
    run: Uuid,
    tasks: bool,
    checkpoints: bool,
    debug: bool,
    custom: bool,
    /// The number the run's next checkpoint gets.
    next_seq: u64,
    /// Messages in the state at the last checkpoint seen.
    seen: usize,
    step: u32,
    open: Vec<OpenTask>,
}

impl Introspection {
    /// For a run `run` of `thread` streaming `modes`, whose first checkpoint will be number
    /// `next_seq`, after `messages` messages (its input included); `None` when it asked for none
    /// of these modes.
    pub fn new(thread: Uuid, run: Uuid, modes: &[Mode], next_seq: u64, messages: usize) -> Option<Self> {
        let has = |m: Mode| modes.contains(&m);
        let this = Self {
            thread,
            run,
            tasks: has(Mode::Tasks),
            checkpoints: has(Mode::Checkpoints),
            debug: has(Mode::Debug),
            custom: has(Mode::Custom),
            next_seq,
            seen: messages,
            step: 0,
            open: Vec::new(),
        };
        (this.tasks || this.checkpoints || this.debug || this.custom).then_some(this)
    }

    /// A task id: the same task of the same run always has the same id.
    fn task_id(&self, what: &str) -> Uuid {
        Uuid::new_v5(&self.run, what.as_bytes())
    }

    /// `payload` as a `tasks` part and a `debug` part of `kind`, as asked.
    fn task_parts(&self, kind: &str, payload: Value) -> Vec<Part> {
        let mut parts = Vec::new();
        if self.debug {
            parts.push(Part::new(Mode::Debug, &self.debug_payload(kind, &payload)));
        }
        if self.tasks {
            parts.push(Part::new(Mode::Tasks, &payload));
        }
        parts
    }

    fn debug_payload(&self, kind: &str, payload: &Value) -> Value {
        json!({"step": self.step, "timestamp": time(&chrono::Utc::now()), "type": kind, "payload": payload})
    }

    /// Model call `step` (counted from 0) starts: the `model` task starts.
    pub fn model_started(&mut self, step: u32) -> Vec<Part> {
        self.step = step + 1;
        let id = self.task_id(&format!("model:{step}"));
        self.open.push(OpenTask {
            id,
            call: None,
            step: self.step,
        });
        self.task_parts(
            "task",
            json!({"id": id, "name": "model", "input": null, "triggers": ["branch:to:model"]}),
        )
    }

    /// Tool call `call` of tool `tool` starts: its `tools` task starts.
    pub fn tool_started(&mut self, call: &str, tool: &str) -> Vec<Part> {
        let id = self.task_id(&format!("tools:{call}"));
        self.open.push(OpenTask {
            id,
            call: Some(call.to_owned()),
            step: self.step,
        });
        self.task_parts(
            "task",
            json!({"id": id, "name": "tools", "input": {"id": call, "name": tool, "type": "tool_call"},
                   "triggers": ["__pregel_push"]}),
        )
    }

    /// A middleware reported something: a `custom` part.
    pub fn middleware(&self, middleware: &str, kind: &str, data: &Value) -> Vec<Part> {
        if !self.custom {
            return Vec::new();
        }
        vec![Part::new(
            Mode::Custom,
            &json!({"middleware": middleware, "kind": kind, "data": data}),
        )]
    }

    /// A checkpoint was saved with `state`, whose values are `values`: the results of the tasks
    /// whose messages it holds, then the checkpoint.
    pub fn checkpoint(&mut self, state: &PublicState, values: &Value) -> Vec<Part> {
        let mut parts = Vec::new();
        let start = self.seen.min(state.messages.len());
        for (i, message) in state.messages.iter().enumerate().skip(start) {
            let call = match message {
                Message::Ai(_) => None,
                Message::Tool(tool) => Some(tool.call_id.as_str()),
                _ => continue,
            };
            let Some(at) = self.open.iter().position(|t| t.call.as_deref() == call) else {
                continue;
            };
            let task = self.open.remove(at);
            let name = if call.is_some() { "tools" } else { "model" };
            let result = json!({"id": task.id, "name": name, "error": null, "interrupts": [],
                                "result": {"messages": [to_dict(&self.thread, i, message)]}});
            let step = std::mem::replace(&mut self.step, task.step);
            parts.extend(self.task_parts("task_result", result));
            self.step = step;
        }
        self.seen = state.messages.len();
        let seq = self.next_seq;
        self.next_seq += 1;
        if self.checkpoints || self.debug {
            let configurable = |seq: u64| json!({"configurable": checkpoint_config(&self.thread, seq)});
            let payload = json!({
                "config": configurable(seq),
                "parent_config": seq.checked_sub(1).map(configurable),
                "metadata": {"source": "loop", "step": seq, "parents": {}},
                "values": values,
                "next": next_of(state),
                "tasks": [],
            });
            if self.debug {
                parts.push(Part::new(
                    Mode::Debug,
                    &self.debug_payload("checkpoint", &payload),
                ));
            }
            if self.checkpoints {
                parts.push(Part::new(Mode::Checkpoints, &payload));
            }
        }
        parts
    }
}

/// The node that runs after a checkpoint of `state`: the model after new input or tool results,
/// the tools after a reply that called some (the run stopped for approvals), none after an answer.
fn next_of(state: &PublicState) -> Value {
    match state.messages.last() {
        Some(Message::Ai(ai)) if ai.calls().next().is_some() => json!(["tools"]),
        Some(Message::Ai(_)) | None => json!([]),
        Some(_) => json!(["model"]),
    }
}
