//! What a run's events look like to an ACP client: [`Updates`] turns [`RunEvent`]s into
//! `session/update`s as they happen.
//!
//! * Text deltas become `agent_message_chunk`s and reasoning deltas `agent_thought_chunk`s, one
//!   `messageId` per model call attempt (a retried attempt starts a new message).
//! * A tool call is announced (`tool_call`, status `pending`) when its model call finishes and its
//!   arguments are whole, with its [`kind`], a short title, `rawInput`, `locations` and, for
//!   `write_file` / `edit_file`, a `diff`; `tool_call_update` then says `in_progress` when it starts
//!   and `completed` / `failed` when it finishes.
//! * A `write_todos` call that finished becomes a `plan` (the whole list, priority `medium`: the
//!   todo list has no priorities).
//!
//! Subagent events ([`RunEvent::Subagent`]) become the `task` call's progress
//! ([`crate::acp::progress`]). The state here belongs to one turn of one session (a run and the runs
//! that resume it after approvals).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use agent_client_protocol::v1::schema::{
    ContentBlock, ContentChunk, Diff, MessageId, Plan, PlanEntry, PlanEntryPriority, PlanEntryStatus,
    SessionUpdate, ToolCall, ToolCallContent, ToolCallLocation, ToolCallStatus, ToolCallUpdate,
    ToolCallUpdateFields, ToolKind,
};
use serde_json::Value;
use trellis_middleware::runtime::events::RunEvent;
use trellis_middleware::runtime::stream::ModelDelta;

use crate::acp::progress::Progress;

/// The virtual directory the session's `cwd` is mounted at (as `--workdir` mounts it).
pub const WORKSPACE: &str = "/workspace";
/// The largest file read for the "before" side of a `write_file` diff.
const MAX_DIFF_FILE: u64 = 1 << 20;
/// The largest arguments kept for a tool call being streamed (bytes of JSON).
const MAX_ARGS: usize = 4 << 20;

/// The ACP tool kind of a Trellis tool.
pub fn kind(tool: &str) -> ToolKind {
    match tool {
        "read_file" => ToolKind::Read,
        "write_file" | "edit_file" => ToolKind::Edit,
        "delete" => ToolKind::Delete,
        "ls" | "glob" | "grep" => ToolKind::Search,
        "execute" => ToolKind::Execute,
        "task" | "write_todos" => ToolKind::Think,
        "fetch" | "web_fetch" => ToolKind::Fetch,
        _ => ToolKind::Other,
    }
}

/// The host path of a virtual path under [`WORKSPACE`], or `None` when it is elsewhere (the
/// thread's own files, skills, memory): ACP paths are absolute paths on the editor's machine.
pub fn host_path(cwd: &Path, virtual_path: &str) -> Option<PathBuf> {
    let rest = virtual_path.strip_prefix(WORKSPACE)?;
    if !(rest.is_empty() || rest.starts_with('/')) || rest.split('/').any(|s| s == "..") {
        return None;
    }
    Some(cwd.join(rest.trim_start_matches('/')))
}

fn arg<'a>(args: &'a Value, key: &str) -> Option<&'a str> {
    args.get(key).and_then(Value::as_str)
}

/// A short title: the tool and what it works on.
pub fn title(tool: &str, args: &Value) -> String {
    let what = arg(args, "command")
        .or_else(|| arg(args, "file_path"))
        .or_else(|| arg(args, "path"))
        .or_else(|| arg(args, "pattern"))
        .or_else(|| arg(args, "description"));
    let title = match what {
        Some(w) => format!("{tool} {w}"),
        None => tool.to_owned(),
    };
    title.chars().take(200).collect()
}

/// The `tool_call` announcing a call: kind, title, raw input, locations and an edit's diff.
pub fn announce(cwd: &Path, id: &str, tool: &str, args: &Value) -> ToolCall {
    let fields = fields(cwd, tool, args).status(ToolCallStatus::Pending);
    let mut call = ToolCall::new(id.to_owned(), title(tool, args));
    call.update(fields);
    call
}

/// The same, as the `toolCall` of a permission request.
pub fn fields(cwd: &Path, tool: &str, args: &Value) -> ToolCallUpdateFields {
    let host = arg(args, "file_path").and_then(|p| host_path(cwd, p));
    let mut fields = ToolCallUpdateFields::new()
        .kind(kind(tool))
        .title(title(tool, args))
        .raw_input(args.clone());
    if let Some(path) = &host {
        fields = fields.locations(vec![ToolCallLocation::new(path.clone())]);
        if let Some(diff) = diff(path, tool, args) {
            fields = fields.content(vec![ToolCallContent::Diff(diff)]);
        }
    }
    fields
}

/// The diff of a `write_file` (the file as it is now, when small enough to read, against the new
/// content) or an `edit_file` (the replaced text against its replacement).
fn diff(path: &Path, tool: &str, args: &Value) -> Option<Diff> {
    match tool {
        "write_file" => {
            let new = arg(args, "content")?;
            let old = std::fs::metadata(path)
                .ok()
                .filter(|m| m.is_file() && m.len() <= MAX_DIFF_FILE)
                .and_then(|_| std::fs::read_to_string(path).ok());
            Some(Diff::new(path.to_path_buf(), new).old_text(old))
        }
        "edit_file" => Some(
            Diff::new(path.to_path_buf(), arg(args, "new_string")?)
                .old_text(arg(args, "old_string")?.to_owned()),
        ),
        _ => None,
    }
}

/// A tool call as its model call streams it.
#[derive(Debug, Default)]
struct Streaming {
    id: String,
    name: String,
    json: String,
}

/// The events of one turn, turned into updates (see the module docs).
#[derive(Debug)]
pub struct Updates {
    cwd: PathBuf,
    /// Model call attempts so far, for message ids.
    attempt: u32,
    /// Run id prefix of the message ids.
    turn: String,
    /// The tool calls of the model call being streamed, by block index.
    streaming: HashMap<usize, Streaming>,
    /// Arguments of the calls announced, by call id (for the plan).
    args: HashMap<String, Value>,
    /// The subagents' steps, shown under their `task` calls.
    progress: Progress,
}

impl Updates {
    /// The updates of a turn of the session rooted at `cwd`; `turn` makes message ids unique.
    pub fn new(cwd: PathBuf, turn: String) -> Self {
        Self {
            progress: Progress::new(cwd.clone()),
            cwd,
            attempt: 0,
            turn,
            streaming: HashMap::new(),
            args: HashMap::new(),
        }
    }

    fn message_id(&self) -> MessageId {
        MessageId::new(format!("{}-{}", self.turn, self.attempt))
    }

    /// The updates `event` makes (often none).
    pub fn of(&mut self, event: &RunEvent) -> Vec<SessionUpdate> {
        match event {
            RunEvent::ModelStreamStarted { .. } => {
                self.attempt += 1;
                self.streaming.clear();
                Vec::new()
            }
            RunEvent::ModelDelta { delta, .. } => self.delta(delta),
            RunEvent::Subagent {
                call_id,
                task_id,
                subagent_type,
                inner,
            } => self.progress.of(call_id, task_id, subagent_type, inner),
            RunEvent::ModelFinished { .. } => {
                let mut calls: Vec<(usize, Streaming)> = self.streaming.drain().collect();
                calls.sort_by_key(|(index, _)| *index);
                calls
                    .into_iter()
                    .filter(|(_, call)| !call.id.is_empty())
                    .map(|(_, call)| {
                        let args = serde_json::from_str(&call.json).unwrap_or(Value::Null);
                        let update =
                            SessionUpdate::ToolCall(announce(&self.cwd, &call.id, &call.name, &args));
                        self.args.insert(call.id, args);
                        update
                    })
                    .collect()
            }
            RunEvent::ToolStarted { call_id, .. } => vec![status(call_id, ToolCallStatus::InProgress)],
            RunEvent::ToolFinished {
                call_id,
                name,
                is_error,
                ..
            } => {
                let done = if *is_error {
                    ToolCallStatus::Failed
                } else {
                    ToolCallStatus::Completed
                };
                let mut out = vec![status(call_id, done)];
                if name == "write_todos"
                    && !is_error
                    && let Some(plan) = self.args.get(call_id).and_then(plan)
                {
                    out.push(SessionUpdate::Plan(plan));
                }
                out
            }
            _ => Vec::new(),
        }
    }

    fn delta(&mut self, delta: &ModelDelta) -> Vec<SessionUpdate> {
        let chunk =
            |text: &str| ContentChunk::new(ContentBlock::from(text.to_owned())).message_id(self.message_id());
        match delta {
            ModelDelta::Text { text, .. } if !text.is_empty() => {
                vec![SessionUpdate::AgentMessageChunk(chunk(text))]
            }
            ModelDelta::Reasoning { text, .. } if !text.is_empty() => {
                vec![SessionUpdate::AgentThoughtChunk(chunk(text))]
            }
            ModelDelta::ToolCall { index, id, name } => {
                let call = self.streaming.entry(*index).or_default();
                if !id.is_empty() {
                    call.id.clone_from(id);
                }
                if !name.is_empty() {
                    call.name.clone_from(name);
                }
                Vec::new()
            }
            ModelDelta::ToolArguments { index, json } => {
                let call = self.streaming.entry(*index).or_default();
                if call.json.len() + json.len() <= MAX_ARGS {
                    call.json.push_str(json);
                }
                Vec::new()
            }
            _ => Vec::new(),
        }
    }
}

/// A `tool_call_update` setting the status.
pub fn status(call_id: &str, status: ToolCallStatus) -> SessionUpdate {
    SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
        call_id.to_owned(),
        ToolCallUpdateFields::new().status(status),
    ))
}

/// The plan of a `write_todos` call's arguments.
fn plan(args: &Value) -> Option<Plan> {
    let todos = args.get("todos")?.as_array()?;
    let entries = todos
        .iter()
        .filter_map(|todo| {
            let content = arg(todo, "content")?;
            let status = match arg(todo, "status")? {
                "in_progress" => PlanEntryStatus::InProgress,
                "completed" => PlanEntryStatus::Completed,
                _ => PlanEntryStatus::Pending,
            };
            Some(PlanEntry::new(
                content.to_owned(),
                PlanEntryPriority::Medium,
                status,
            ))
        })
        .collect();
    Some(Plan::new(entries))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn maps_workspace_paths_to_the_editor_cwd_only() {
        let cwd = Path::new("/home/me/project");
        assert_eq!(host_path(cwd, "/workspace/src/a.rs"), Some(cwd.join("src/a.rs")));
        assert_eq!(host_path(cwd, "/workspace"), Some(cwd.to_path_buf()));
        assert_eq!(host_path(cwd, "/workspaces/x"), None);
        assert_eq!(host_path(cwd, "/workspace/../etc/passwd"), None);
        assert_eq!(host_path(cwd, "/skills/x/SKILL.md"), None);
    }

    #[test]
    fn an_edit_carries_its_diff() {
        let args = serde_json::json!({"file_path": "/workspace/a.txt", "old_string": "a", "new_string": "b"});
        let call = announce(Path::new("/p"), "c1", "edit_file", &args);
        let json = serde_json::to_value(&call).unwrap();
        assert_eq!(json["kind"], "edit");
        assert_eq!(json["content"][0]["type"], "diff");
        assert_eq!(json["content"][0]["path"], "/p/a.txt");
        assert_eq!(json["content"][0]["oldText"], "a");
        assert_eq!(json["content"][0]["newText"], "b");
    }
}
