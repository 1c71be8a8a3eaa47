//! A run's events as the stream parts of the Agent Server API ([`Translator`]), and the state
//! values the parts and the thread endpoints carry ([`values_of`]).
//!
//! | mode (`stream_mode`) | event | when |
//! |---|---|---|
//! | `values` | `values` | after every checkpoint of the run: the whole state; last, the final state (with `__interrupt__` when the run stopped for approvals) |
//! | `updates` | `updates` | after every checkpoint that added model or tool messages: `{"model" or "tools": {"messages": [the new ones], "todos"?}}`; `{"__interrupt__": […]}` when the run stopped for approvals |
//! | `messages-tuple` | `messages` | every piece of the model's reply as it streams (`AIMessageChunk` deltas: text, `tool_call_chunks`), each tool result once whole, as `[message, metadata]` |
//! | `tasks`, `checkpoints`, `debug`, `custom` | the same | how the run proceeds: [`crate::server::introspection`] |
//!
//! A subagent's events are translated the same way, for a run that asked for `stream_subgraphs`,
//! by [`crate::server::subgraphs`]; otherwise its work arrives as the `task` tool's result. A model call that is retried starts
//! a new reply under the same message id; the chunks already sent for the failed attempt are not
//! withdrawn.

use std::sync::Arc;

use serde_json::{Value, json};
use trellis_middleware::Message;
use trellis_middleware::runtime::interrupt::{ApprovalRequest, Interrupt};
use trellis_middleware::runtime::state::PublicState;
use trellis_middleware::runtime::stream::ModelDelta;
use trellis_middleware::tools::SideEffects;
use uuid::Uuid;

use crate::server::Shared;
use crate::server::error::{ApiError, ApiResult};
use crate::server::messages::{message_id, to_dict};
use crate::server::threads::thread_id;

mod chunk;
mod values;

/// The stream modes built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// `values`.
    Values,
    /// `updates`.
    Updates,
    /// `messages-tuple` (event name `messages`).
    Messages,
    /// `tasks` ([`crate::server::introspection`]).
    Tasks,
    /// `checkpoints`.
    Checkpoints,
    /// `debug`.
    Debug,
    /// `custom`: what middlewares report.
    Custom,
}

impl Mode {
    /// A requested mode; a 422 for one not built.
    pub fn parse(name: &str) -> ApiResult<Self> {
        match name {
            "values" => Ok(Self::Values),
            "updates" => Ok(Self::Updates),
            "messages-tuple" => Ok(Self::Messages),
            "tasks" => Ok(Self::Tasks),
            "checkpoints" => Ok(Self::Checkpoints),
            "debug" => Ok(Self::Debug),
            "custom" => Ok(Self::Custom),
            other => Err(ApiError::unprocessable(format!(
                "stream mode {other:?} is not supported: use values, updates, messages-tuple, tasks, checkpoints, debug or custom"
            ))),
        }
    }

    /// The SSE event name of its parts.
    pub fn event(self) -> &'static str {
        match self {
            Self::Values => "values",
            Self::Updates => "updates",
            Self::Messages => "messages",
            Self::Tasks => "tasks",
            Self::Checkpoints => "checkpoints",
            Self::Debug => "debug",
            Self::Custom => "custom",
        }
    }
}

/// One part of a run's stream: its mode (`None`: sent whatever the modes, like `error`), event name
/// and one-line JSON data.
#[derive(Debug, Clone, PartialEq)]
pub struct Part {
    /// The mode it belongs to.
    pub mode: Option<Mode>,
    /// The SSE event name.
    pub event: &'static str,
    /// Compact JSON (no raw newlines).
    pub data: String,
    /// The subagent it comes from (`stream_subgraphs`): `tools:<task id>`, nested ones joined with
    /// `|`; `None` for the run's own agent.
    pub namespace: Option<Arc<str>>,
}

impl Part {
    /// A part of `mode` carrying `data`.
    pub(crate) fn new(mode: Mode, data: &Value) -> Self {
        Self::raw(mode, data.to_string())
    }

    /// A part of `mode` carrying `data`, already compact JSON.
    fn raw(mode: Mode, data: String) -> Self {
        Self {
            mode: Some(mode),
            event: mode.event(),
            data,
            namespace: None,
        }
    }

    /// The `error` part: `{"error": KIND, "message": …}`.
    pub fn error(kind: &str, message: &str) -> Self {
        Self {
            mode: None,
            event: "error",
            data: json!({"error": kind, "message": message}).to_string(),
            namespace: None,
        }
    }

    /// The SSE event name: the mode's, then the namespace (`updates|tools:3f1c…`).
    pub fn event_name(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{}|{ns}", self.event),
            None => self.event.to_owned(),
        }
    }
}

/// The `values` of a thread's state: `messages` as LangChain dicts and `todos` when set.
pub fn values_of(thread: &Uuid, state: &PublicState) -> Value {
    let messages: Vec<Value> = state
        .messages
        .iter()
        .enumerate()
        .map(|(i, m)| to_dict(thread, i, m))
        .collect();
    let mut values = json!({ "messages": messages });
    if let Some(todos) = state.slots.get("todos") {
        values["todos"] = todos.clone();
    }
    values
}

/// The latest state of thread `id` and where it was saved (`seq`, `saved_at_ms`); `None` before
/// its first checkpoint.
pub async fn latest(server: &Shared, id: &Uuid) -> ApiResult<Option<(PublicState, Saved)>> {
    let read = |e: &dyn std::fmt::Display| ApiError::internal("reading a thread", e);
    let Some(stored) = server
        .checkpointer
        .peek(&thread_id(id))
        .await
        .map_err(|e| read(&e))?
    else {
        return Ok(None);
    };
    let state = stored.checkpoint.state.public_view().map_err(|e| read(&e))?;
    let saved = Saved {
        seq: stored.checkpoint.seq,
        saved_at_ms: stored.checkpoint.saved_at_ms,
    };
    Ok(Some((state, saved)))
}

/// Which checkpoint a state was read from.
#[derive(Debug, Clone, Copy)]
pub struct Saved {
    /// Checkpoints of the thread before it.
    pub seq: u64,
    /// When it was saved (ms since the epoch).
    pub saved_at_ms: u64,
}

/// The latest values of thread `id`, `null` before its first checkpoint.
pub async fn thread_values(server: &Shared, id: &Uuid) -> ApiResult<Value> {
    Ok(latest(server, id)
        .await?
        .map_or(Value::Null, |(state, _)| values_of(id, &state)))
}

/// What a person deciding on `request` is shown: the gate's own words, else the tool and its
/// arguments. Always text, because the clients render it as such (LangChain's middleware always
/// sets one; deep-agents-ui shows it above the arguments).
fn describe(request: &ApprovalRequest) -> String {
    request.description.clone().unwrap_or_else(|| {
        format!(
            "`{}` waits for your approval.\n\nArguments: {}",
            request.tool, request.args
        )
    })
}

/// The Agent Server form of an approval stop: one interrupt whose value is the human-in-the-loop
/// payload (`action_requests`, `review_configs`), one entry per call waiting (a subagent's calls
/// included); resumed with `command.resume` ([`crate::server::resume`]).
pub fn interrupt_json(thread: &Uuid, interrupt: &Interrupt) -> Value {
    let actions: Vec<Value> = interrupt
        .requests
        .iter()
        .map(|r| json!({"name": r.tool, "args": r.args, "description": describe(r)}))
        .collect();
    let reviews: Vec<Value> = interrupt
        .requests
        .iter()
        .map(|r| {
            let allowed: Vec<&str> = r.allowed.iter().map(|d| d.as_str()).collect();
            json!({"action_name": r.tool, "allowed_decisions": allowed})
        })
        .collect();
    let id = interrupt_id(thread, interrupt);
    json!([{"value": {"action_requests": actions, "review_configs": reviews}, "id": id}])
}

/// The id of `interrupt` of `thread` on the wire: 32 hex digits derived from the thread, the step
/// that stopped and the requests waiting, so the same stop always has the same id and a later stop
/// (a subagent stopping again within the same step included) another.
pub fn interrupt_id(thread: &Uuid, interrupt: &Interrupt) -> String {
    let ids: Vec<&str> = interrupt.requests.iter().map(|r| r.id.as_str()).collect();
    let name = format!("interrupt:{}:{}", interrupt.step, ids.join("\n"));
    Uuid::new_v5(thread, name.as_bytes()).simple().to_string()
}

/// Turns one run's events into [`Part`]s. Knows how many messages the thread had at the last
/// checkpoint it read, to tell what each checkpoint added. (A checkpoint is read when its event is
/// handled, by then possibly a later one: its parts then carry what both added.)
#[derive(Debug)]
pub struct Translator {
    thread: Uuid,
    metadata: Value,
    /// `metadata` serialized, for the `messages` parts.
    tuple: chunk::TupleMetadata,
    seen: usize,
    todos: Option<Value>,
    last_values: Option<String>,
    /// A part other than `values` was made since the last `values` part.
    after_values: bool,
    reply_id: String,
    step: u32,
    /// The thread's files as `values.files`, as last read ([`Translator::files`]), and the same
    /// serialized.
    files: Option<(Value, String)>,
    /// The thread's messages as dicts, for the `values` parts.
    dicts: values::MessageDicts,
    /// Whether a tool that may change files ran since they were read (they are read again only
    /// then).
    files_stale: bool,
}

impl Translator {
    /// A translator for a run of `thread` whose state will hold `messages` messages once the
    /// run's input is added; `metadata` goes with every `messages` part (`run_id`, `thread_id`,
    /// `graph_id`, `assistant_id`).
    pub fn new(thread: Uuid, messages: usize, metadata: Value) -> Self {
        Self {
            thread,
            tuple: chunk::TupleMetadata::new(&metadata),
            metadata,
            seen: messages,
            todos: None,
            last_values: None,
            after_values: false,
            reply_id: message_id(&thread, messages, None),
            step: 0,
            files: None,
            dicts: values::MessageDicts::default(),
            files_stale: true,
        }
    }

    /// The thread's files as last read (`values.files`), for the `values` parts from now on.
    pub fn files(&mut self, files: Value) {
        let json = files.to_string();
        self.files = Some((files, json));
        self.files_stale = false;
    }

    /// A tool declaring `side_effects` ran: unless it is read-only, the thread's files may have
    /// changed.
    pub fn tool_ran(&mut self, side_effects: SideEffects) {
        if side_effects != SideEffects::ReadOnly {
            self.files_stale = true;
        }
    }

    /// Whether the files must be read (again) before the next `values`: never read yet, or a tool
    /// that may change them ran since. A run changes its thread's files only through tools, so a
    /// step that ran none, or only read-only ones (`ls`, `read_file`, `grep`: most steps), reuses
    /// the last listing instead of listing and reading the files again (a file uploaded through
    /// the API meanwhile shows from the next read). A tool that declares itself read-only and
    /// writes anyway breaks its declaration; its writes show from the next read too.
    pub fn files_stale(&self) -> bool {
        self.files_stale
    }

    /// The thread's values from `state`, with its files when they were read.
    pub fn values_with_files(&self, state: &PublicState) -> Value {
        let mut values = values_of(&self.thread, state);
        if let Some((files, _)) = &self.files {
            values["files"] = files.clone();
        }
        values
    }

    /// The metadata every `messages` part of this translator carries from now on gets `key`.
    pub fn metadata(&mut self, key: &str, value: Value) {
        self.metadata[key] = value;
        self.tuple = chunk::TupleMetadata::new(&self.metadata);
    }

    /// A `messages` part of `item` (a message dict or chunk, as JSON) from `node`.
    fn message_part(&self, item: &str, node: &str) -> Part {
        Part::raw(Mode::Messages, self.tuple.pair(item, node, self.step + 1))
    }

    /// A model call (of step `step`) starts with `messages` messages in the state: its reply will
    /// be message `messages` of the thread, and its chunks carry that message's id.
    pub fn reply_started(&mut self, step: u32, messages: usize) {
        self.step = step;
        self.reply_id = message_id(&self.thread, messages, None);
    }

    /// A piece of the reply, as a `messages` part.
    pub fn delta(&mut self, delta: &ModelDelta) -> Option<Part> {
        let chunk = chunk::chunk_json(&self.reply_id, delta)?;
        self.after_values = true;
        Some(self.message_part(&chunk, "model"))
    }

    /// A checkpoint was saved with `state`: the tool results it added (`messages`), what it added
    /// (`updates`: one per node in order, the model's reply under `model`, tool results under
    /// `tools`, which also carries changed `todos`) and the whole state (`values`).
    pub fn checkpoint(&mut self, state: &PublicState) -> Vec<Part> {
        let mut parts = Vec::new();
        let start = self.seen.min(state.messages.len());
        // Made first: it brings each message's dict up to date, serialized once for these parts
        // and the `values` one alike.
        let files = self.files.as_ref().map(|(_, json)| json.as_str());
        let values = self.dicts.values_data(&self.thread, state, files);
        let todos = state.slots.get("todos").cloned();
        // Sent with the last group when they changed.
        let changed_todos = todos
            .as_ref()
            .filter(|t| Some(*t) != self.todos.as_ref())
            .map(Value::to_string);
        let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
        for (i, message) in state.messages.iter().enumerate().skip(start) {
            let dict = self.dicts.json(i);
            let node = match message {
                Message::Ai(_) => "model",
                Message::Tool(_) => {
                    parts.push(self.message_part(dict, "tools"));
                    "tools"
                }
                _ => continue,
            };
            match groups.last_mut() {
                Some((last, list)) if *last == node => list.push(dict),
                _ => groups.push((node, vec![dict])),
            }
        }
        let last = groups.len().saturating_sub(1);
        for (i, (node, added)) in groups.into_iter().enumerate() {
            let todos = changed_todos.as_deref().filter(|_| i == last);
            parts.push(Part::raw(Mode::Updates, update_json(node, &added, todos)));
        }
        self.seen = state.messages.len();
        self.todos = todos;
        parts.extend(self.values(values));
        parts
    }

    /// A `values` part, unless it would repeat the last one with nothing in between. (A
    /// checkpoint read late can be a later one than its event's, whose values then come before
    /// that step's streamed chunks; the run's last `values` part is then repeated after them, so
    /// the stream still ends with the whole state.)
    fn values(&mut self, data: String) -> Option<Part> {
        if self.last_values.as_deref() == Some(data.as_str()) && !self.after_values {
            return None;
        }
        self.last_values = Some(data.clone());
        self.after_values = false;
        Some(Part::raw(Mode::Values, data))
    }

    /// The run ended with `state` (stopped for approvals when `interrupt` is set): the parts of
    /// its last checkpoint if not sent yet, then the interrupt. Returns the parts and the run's
    /// result (the body of `/wait` and `/join`).
    pub fn finish(&mut self, state: &PublicState, interrupt: Option<&Interrupt>) -> (Vec<Part>, Value) {
        let mut parts = self.checkpoint(state);
        let mut values = self.values_with_files(state);
        if let Some(interrupt) = interrupt {
            let interrupts = interrupt_json(&self.thread, interrupt);
            parts.push(Part::new(Mode::Updates, &json!({"__interrupt__": interrupts})));
            values["__interrupt__"] = interrupts;
            parts.extend(self.values(values.to_string()));
        }
        (parts, values)
    }
}

/// An `updates` part's data: `{node: {"messages": [the dicts, already JSON], "todos"?}}`, as
/// serializing that object gives it.
fn update_json(node: &str, dicts: &[&str], todos: Option<&str>) -> String {
    let node = serde_json::to_string(node).unwrap_or_else(|_| "null".to_owned());
    let len = dicts.iter().map(|d| d.len() + 1).sum::<usize>() + todos.map_or(0, str::len);
    let mut out = String::with_capacity(len + node.len() + 32);
    out.push('{');
    out.push_str(&node);
    out.push_str(":{");
    values::push_messages_and_todos(&mut out, dicts.iter().copied(), todos);
    out.push_str("}}");
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::BTreeMap;

    use trellis_middleware::runtime::message::{AiMessage, HumanMessage, ToolMessage};
    use trellis_middleware::runtime::message_list::Messages;

    use super::*;

    /// A checkpoint's `messages` and `updates` parts carry what the dicts built as `Value`s gave.
    #[test]
    fn a_checkpoints_parts_are_the_dicts_as_values_gave_them() {
        let thread = Uuid::new_v4();
        let metadata = json!({"run_id": "r", "thread_id": thread.to_string()});
        let mut translator = Translator::new(thread, 1, metadata.clone());
        translator.reply_started(0, 1);
        let mut state = PublicState {
            messages: Messages::new(),
            slots: BTreeMap::new(),
        };
        state.messages.push(HumanMessage::text("hello"));
        state.messages.push(AiMessage::text("calling \"two\" tools"));
        state.messages.push(ToolMessage::text("c1", "ls", "a.txt\nb.txt"));
        state.messages.push(ToolMessage::text("c2", "read_file", "✓"));
        let todos = json!([{"content": "x", "status": "pending"}]);
        state.slots.insert("todos".into(), todos.clone());

        let parts = translator.checkpoint(&state);
        let dict = |i: usize| to_dict(&thread, i, &state.messages.shared()[i]);
        let mut tuple = metadata.clone();
        tuple["langgraph_node"] = json!("tools");
        tuple["langgraph_step"] = json!(1);
        let expected = [
            (Mode::Messages, json!([dict(2), tuple])),
            (Mode::Messages, json!([dict(3), tuple])),
            (Mode::Updates, json!({"model": {"messages": [dict(1)]}})),
            (
                Mode::Updates,
                json!({"tools": {"messages": [dict(2), dict(3)], "todos": todos}}),
            ),
        ];
        assert_eq!(parts.len(), expected.len() + 1, "and the values part");
        for (part, (mode, data)) in parts.iter().zip(&expected) {
            assert_eq!(part.mode, Some(*mode));
            assert_eq!(serde_json::from_str::<Value>(&part.data).unwrap(), *data);
            if cfg!(feature = "acp") {
                assert_eq!(part.data, data.to_string(), "key for key");
            }
        }
        assert_eq!(parts[4].mode, Some(Mode::Values));

        // Nothing new: no `messages` or `updates` part, and unchanged todos are not sent again.
        state.messages.push(AiMessage::text("done"));
        let parts = translator.checkpoint(&state);
        let answer = to_dict(&thread, 4, &state.messages.shared()[4]);
        assert_eq!(
            parts[0].data,
            json!({"model": {"messages": [answer]}}).to_string()
        );
    }
}
