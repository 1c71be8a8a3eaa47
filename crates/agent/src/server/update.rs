//! `POST /threads/{thread_id}/state` (`threads.update_state`): change a thread's state as its
//! graph would, saved as a new checkpoint.
//!
//! `values` may hold:
//! * `messages`: one LangChain message dict or a list, merged as LangGraph's `add_messages` does —
//!   a message whose `id` is already in the thread replaces it in place, `{"type": "remove", "id"}`
//!   removes one (`"__remove_all__"` every one), any other is appended. Human, AI (text and
//!   `tool_calls`), tool and system messages with text content.
//! * `todos`: the new list (replaces the old one; `null` clears it).
//! * `files`: `{path: FileData | null}` written to the thread's own files ([`files`]).
//!
//! Anything else is a 422. `as_node` (`model`, `tools` or `__start__`; by default the node that
//! wrote the last message) is recorded in the checkpoint's metadata (`writes`).
//!
//! Concurrency: the update is a version-checked save after the thread's latest checkpoint, so an
//! update that raced another writer is a 409 and changes nothing. `checkpoint` / `checkpoint_id`,
//! when given, must name the latest checkpoint (else 409: the head moved since the client read
//! it). While a run is in flight the update is a 409. Files are checked before the checkpoint is
//! saved and written after it (see [`files::apply`] for what a conflict among them leaves).

use axum::Json;
use axum::extract::{Extension, Path, State};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use trellis_middleware::core_stack::{TODOS, Todo};
use trellis_middleware::runtime::checkpoint::{Checkpoint, CheckpointError};
use trellis_middleware::runtime::message::{
    AiMessage, ContentBlock, HumanMessage, MessageMeta, SystemMessage, ToolMessage,
};
use trellis_middleware::{Message, State as AgentState, ToolCall};
use uuid::Uuid;

use crate::server::checkpoints::{
    CheckpointRef, UPDATE_SLOT, checkpoint_config, checkpoint_id, waits_for_approvals,
};
use crate::server::error::{ApiError, ApiResult};
use crate::server::extract::{JsonBody, User, parse_uuid};
use crate::server::messages::{message_id, text_blocks};
use crate::server::threads::ThreadRecord;
use crate::server::{Shared, files};

/// The nodes an update may be attributed to.
const NODES: [&str; 3] = ["model", "tools", "__start__"];
/// Where a message's own id is kept (as [`crate::server::messages`] keeps it).
const ID_KEY: &str = "id";
/// Longest message id kept.
const MAX_ID_LEN: usize = 128;

/// `POST /threads/{thread_id}/state` body.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StateUpdate {
    #[serde(default)]
    values: Option<Value>,
    #[serde(default)]
    as_node: Option<String>,
    #[serde(default)]
    checkpoint: Option<CheckpointRef>,
    #[serde(default)]
    checkpoint_id: Option<String>,
}

/// `POST /threads/{thread_id}/state`: see the module docs. Answers
/// `{"checkpoint": {thread_id, checkpoint_ns, checkpoint_id, checkpoint_map}}` of the new
/// checkpoint.
pub async fn update_state(
    State(server): State<Shared>,
    Extension(user): Extension<User>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<StateUpdate>,
) -> ApiResult<Json<Value>> {
    let record = server.threads.get(&user, &parse_uuid("thread_id", &id)?)?;
    let thread = record.thread_id;
    let values = check_values(body.values.as_ref(), "values")?;
    if let Some(node) = &body.as_node
        && !NODES.contains(&node.as_str())
    {
        return Err(ApiError::unprocessable(format!(
            "as_node must be one of {NODES:?}, not {node:?}"
        )));
    }
    let mut expected = body
        .checkpoint
        .as_ref()
        .map(|c| c.seq(&thread))
        .transpose()?
        .flatten();
    if let Some(id) = &body.checkpoint_id {
        let uuid = parse_uuid("checkpoint_id", id)?;
        let seq = crate::server::checkpoints::checkpoint_seq(&thread, &uuid)
            .ok_or_else(|| ApiError::not_found(format!("checkpoint {uuid}")))?;
        if expected.is_some_and(|e| e != seq) {
            return Err(ApiError::unprocessable(
                "checkpoint and checkpoint_id name different checkpoints",
            ));
        }
        expected = Some(seq);
    }
    if server.busy(&thread).await? {
        return Err(busy());
    }
    let seq = apply(&server, &record, &values, body.as_node.as_deref(), expected, None).await?;
    Ok(Json(json!({ "checkpoint": checkpoint_config(&thread, seq) })))
}

/// The keys an update's values may hold.
const KEYS: [&str; 3] = ["messages", "todos", "files"];

/// The values of an update (`what` names them in errors: `values`, `command.update`), checked
/// for their shape: an object (`null`: empty) of [`KEYS`], each message dict one the server reads,
/// `todos` a list of todos or `null`, `files` an object. 422 otherwise. What needs the thread
/// (a removed message's id, a file's version) is checked when the update is applied.
pub(crate) fn check_values(values: Option<&Value>, what: &str) -> ApiResult<Map<String, Value>> {
    let values = match values {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(map)) => map.clone(),
        Some(_) => {
            return Err(ApiError::unprocessable(format!(
                "{what} must be an object like {{\"messages\": [...]}} (a list of updates is not supported)"
            )));
        }
    };
    if let Some(key) = values.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(ApiError::unprocessable(format!(
            "{what}.{key} cannot be updated: only messages, todos and files"
        )));
    }
    if let Some(update) = values.get("messages") {
        for dict in message_list(update)? {
            let kind = dict
                .get("type")
                .or_else(|| dict.get("role"))
                .and_then(Value::as_str);
            if kind != Some("remove") {
                from_dict(dict, kind)?;
            }
        }
    }
    if let Some(todos) = values.get("todos").filter(|t| !t.is_null()) {
        todos_of(todos)?;
    }
    if let Some(files) = values.get("files")
        && !files.is_object()
    {
        return Err(ApiError::unprocessable(format!(
            "{what}.files must be an object {{path: FileData | null}}"
        )));
    }
    Ok(values)
}

fn todos_of(list: &Value) -> ApiResult<Vec<Todo>> {
    serde_json::from_value(list.clone()).map_err(|e| ApiError::unprocessable(format!("values.todos: {e}")))
}

/// Apply `values` (checked by [`check_values`]) to `record`'s thread as a new checkpoint after its
/// latest, attributed to `as_node` (default: the node that wrote the last message), only if the
/// latest is `expected` when given (else 409); `slot` is one more slot saved with it. Returns the
/// new checkpoint's `seq`. The caller has made sure no other run writes the thread meanwhile (a
/// race is still a 409 that changes nothing).
pub(crate) async fn apply(
    server: &Shared,
    record: &ThreadRecord,
    values: &Map<String, Value>,
    as_node: Option<&str>,
    expected: Option<u64>,
    slot: Option<(&str, Value)>,
) -> ApiResult<u64> {
    let thread = record.thread_id;
    let stored = server
        .checkpointer
        .peek(&record.runtime_id())
        .await
        .map_err(|e| ApiError::internal("reading a thread", e))?;
    let head = stored.as_ref().map(|s| s.checkpoint.seq);
    if let Some(want) = expected
        && head != Some(want)
    {
        return Err(ApiError::conflict(format!(
            "the thread moved on: checkpoint {} is not its latest ({})",
            checkpoint_id(&thread, want),
            head.map_or_else(
                || "it has none".to_owned(),
                |h| checkpoint_id(&thread, h).to_string()
            )
        )));
    }
    let (mut state, version) = match stored {
        Some(s) => (s.checkpoint.state, Some(s.version)),
        None => (AgentState::default(), None),
    };
    let node = as_node.map_or_else(
        || match state.messages.last() {
            Some(Message::Tool(_)) => "tools".to_owned(),
            _ => "model".to_owned(),
        },
        str::to_owned,
    );
    if let Some(update) = values.get("messages") {
        if waits_for_approvals(&state) {
            return Err(ApiError::conflict(
                "the thread waits for approvals: resume it before changing its messages",
            ));
        }
        merge_messages(&thread, &mut state, update)?;
    }
    if let Some(todos) = values.get("todos") {
        match todos {
            Value::Null => {
                state.remove(&TODOS);
            }
            list => {
                state.set(&TODOS, todos_of(list)?);
            }
        }
    }
    let writes = match values.get("files") {
        Some(update) => Some(files::plan(server, record, update).await?),
        None => None,
    };
    let seq = head.map_or(0, |h| h + 1);
    let keys: Vec<&String> = values.keys().collect();
    state.set_json(
        UPDATE_SLOT,
        true,
        json!({"seq": seq, "as_node": node, "keys": keys}),
    );
    if let Some((name, value)) = slot {
        state.set_json(name, true, value);
    }
    let checkpoint = Checkpoint::new(record.runtime_id(), seq, state);
    let saved = server.checkpointer.save(checkpoint, version.as_ref()).await;
    match saved {
        Ok(_) => {}
        Err(CheckpointError::Conflict { .. }) => {
            return Err(ApiError::conflict(
                "the thread changed while it was being updated: read it again and retry",
            ));
        }
        Err(e) => return Err(ApiError::internal("saving a thread's update", e)),
    }
    if let Some(writes) = writes {
        files::apply(server, record, writes).await?;
    }
    server.threads.update(&thread, |_| {}).await?;
    Ok(seq)
}

fn busy() -> ApiError {
    ApiError::conflict("the thread is running a task: wait for it to finish")
}

/// Merge `update` (one message dict or a list) into `state`'s messages (see the module docs).
fn merge_messages(thread: &Uuid, state: &mut AgentState, update: &Value) -> ApiResult<()> {
    for dict in message_list(update)? {
        let id = match dict.get("id") {
            None | Some(Value::Null) => None,
            Some(Value::String(id)) if !id.is_empty() && id.len() <= MAX_ID_LEN => Some(id.as_str()),
            Some(_) => {
                return Err(ApiError::unprocessable(format!(
                    "a message id must be a string of 1 to {MAX_ID_LEN} bytes"
                )));
            }
        };
        let kind = dict
            .get("type")
            .or_else(|| dict.get("role"))
            .and_then(Value::as_str);
        let at = id.and_then(|id| {
            state
                .messages
                .iter()
                .enumerate()
                .position(|(i, m)| message_id(thread, i, Some(m)) == id)
        });
        if kind == Some("remove") {
            match (id, at) {
                (Some("__remove_all__"), _) => state.messages.truncate(0),
                (_, Some(i)) => {
                    state.messages.remove(i);
                }
                _ => {
                    return Err(ApiError::unprocessable(format!(
                        "cannot remove message {id:?}: the thread has no message with that id"
                    )));
                }
            }
            continue;
        }
        let mut message = from_dict(dict, kind)?;
        if let Some(id) = id {
            message.meta_mut().extra.insert(ID_KEY.into(), json!(id));
        }
        match at.and_then(|i| state.messages.get_mut(i)) {
            Some(slot) => *slot = message,
            None => state.messages.push(message),
        }
    }
    Ok(())
}

/// The message dicts of `values.messages`: one dict or a list.
fn message_list(update: &Value) -> ApiResult<&[Value]> {
    match update {
        Value::Array(list) => Ok(list.as_slice()),
        one @ Value::Object(_) => Ok(std::slice::from_ref(one)),
        _ => Err(ApiError::unprocessable(
            "values.messages must be a message or a list of messages",
        )),
    }
}

/// The text of a dict's `content`: a string or a list of `text` blocks.
fn text_of(dict: &Value) -> ApiResult<String> {
    match dict.get("content") {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(text)) => Ok(text.clone()),
        Some(Value::Array(blocks)) => text_blocks(
            blocks
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) != Some("tool_use")),
            "messages",
        ),
        Some(_) => Err(ApiError::unprocessable(
            "message content must be a string or a list of blocks",
        )),
    }
}

fn str_field<'a>(dict: &'a Value, key: &str) -> Option<&'a str> {
    dict.get(key).and_then(Value::as_str)
}

/// A Trellis message from a LangChain (`type`) or OpenAI (`role`) message dict.
fn from_dict(dict: &Value, kind: Option<&str>) -> ApiResult<Message> {
    let text = text_of(dict)?;
    let content = if text.is_empty() {
        Vec::new()
    } else {
        vec![ContentBlock::text(text)]
    };
    let meta = MessageMeta::default();
    Ok(match kind {
        Some("human" | "user") => Message::Human(HumanMessage { content, meta }),
        Some("system") => Message::System(SystemMessage {
            content,
            tools: Vec::new(),
            meta,
        }),
        Some("ai" | "assistant" | "AIMessageChunk") => {
            let mut content = content;
            let calls = match dict.get("tool_calls") {
                None | Some(Value::Null) => &[][..],
                Some(Value::Array(calls)) => calls.as_slice(),
                Some(_) => return Err(ApiError::unprocessable("tool_calls must be a list")),
            };
            for call in calls {
                let (Some(id), Some(name)) = (str_field(call, "id"), str_field(call, "name")) else {
                    return Err(ApiError::unprocessable("a tool call needs an id and a name"));
                };
                let args = call.get("args").cloned().unwrap_or_else(|| json!({}));
                if !args.is_object() {
                    return Err(ApiError::unprocessable("a tool call's args must be an object"));
                }
                content.push(ContentBlock::ToolUse(ToolCall::new(id, name, args)));
            }
            Message::Ai(AiMessage { content, meta })
        }
        Some("tool") => {
            let Some(call_id) = str_field(dict, "tool_call_id") else {
                return Err(ApiError::unprocessable("a tool message needs a tool_call_id"));
            };
            Message::Tool(ToolMessage {
                call_id: call_id.to_owned(),
                name: str_field(dict, "name").unwrap_or_default().to_owned(),
                content,
                is_error: str_field(dict, "status") == Some("error"),
                meta,
            })
        }
        other => {
            return Err(ApiError::unprocessable(format!(
                "a message's type must be human, ai, tool, system or remove, not {other:?}"
            )));
        }
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn messages_merge_as_add_messages_does() {
        let t = Uuid::new_v4();
        let mut state = AgentState::default();
        state.messages.push(Message::human("hi"));
        state.messages.push(Message::ai("hello"));
        let ai_id = message_id(&t, 1, state.messages.get(1));
        let update = json!([
            {"type": "ai", "content": "hello there", "id": ai_id},
            {"role": "user", "content": [{"type": "text", "text": "more"}], "id": "h2"},
            {"type": "ai", "content": "", "tool_calls": [{"name": "ls", "args": {"path": "/"}, "id": "c1"}]},
            {"type": "tool", "content": "a.md", "tool_call_id": "c1", "name": "ls"},
        ]);
        merge_messages(&t, &mut state, &update).unwrap();
        let texts: Vec<String> = state.messages.iter().map(Message::text).collect();
        assert_eq!(texts, ["hi", "hello there", "more", "", "a.md"]);
        assert_eq!(
            message_id(&t, 1, state.messages.get(1)),
            ai_id,
            "replaced in place, same id"
        );
        merge_messages(&t, &mut state, &json!({"type": "remove", "id": "h2"})).unwrap();
        assert_eq!(state.messages.len(), 4);
        assert!(state.messages.iter().all(|m| m.text() != "more"));
        for bad in [
            json!({"type": "remove", "id": "nope"}),
            json!({"type": "robot", "content": "x"}),
            json!({"type": "tool", "content": "x"}),
            json!({"type": "human", "content": [{"type": "image"}]}),
            json!({"type": "ai", "tool_calls": [{"name": "ls"}]}),
            json!("hi"),
        ] {
            assert_eq!(
                merge_messages(&t, &mut state, &bad).unwrap_err().status,
                422,
                "{bad}"
            );
        }
        merge_messages(&t, &mut state, &json!({"type": "remove", "id": "__remove_all__"})).unwrap();
        assert!(state.messages.is_empty());
    }
}
