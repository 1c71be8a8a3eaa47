//! A thread's checkpoints over the API: their ids ([`checkpoint_id`], [`checkpoint_seq`]), one as a
//! `ThreadState` ([`thread_state`]), and the handlers `GET /threads/{id}/state`,
//! `GET /threads/{id}/state/{checkpoint_id}`, `POST /threads/{id}/state/checkpoint` and
//! `POST` / `GET /threads/{id}/history`.
//!
//! How Trellis checkpoints map onto LangGraph's:
//! * A Trellis thread is one line of checkpoints numbered `seq` 0, 1, 2, … (the
//!   [`Checkpointer`](trellis_middleware::Checkpointer) keeps every one; a fork is a new thread).
//!   So a checkpoint is named by its thread and number: its id is a UUID (version 8) holding the
//!   number and a hash of both ([`checkpoint_id`]), the same on every read, and an id of another
//!   thread or one not minted here is simply unknown (404). The parent of checkpoint `n` is
//!   `n - 1`; the first has none. Ids are not time-ordered as LangGraph's are (clients treat them as
//!   opaque).
//! * `metadata` is `{"source": "loop" | "update", "step": seq, "parents": {}}`; a checkpoint written
//!   by `POST /threads/{id}/state` is `"source": "update"` and carries `"writes": {AS_NODE: [keys]}`
//!   (the mark is kept in the state's private `_server_update` slot, so it is saved with the
//!   checkpoint itself and copied with the thread).
//! * Only the latest checkpoint can wait for approvals: `next`, `tasks` and `interrupts` are empty
//!   for every older one. `files` is the thread's current files, which are not versioned with
//!   checkpoints: only the latest checkpoint's `values` carry them.

use axum::Json;
use axum::extract::{Extension, Path, RawQuery, State};
use chrono::DateTime;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use trellis_middleware::State as AgentState;
use uuid::Uuid;

use crate::server::error::{ApiError, ApiResult};
use crate::server::extract::{JsonBody, User, parse_uuid};
use crate::server::threads::{ThreadRecord, task_id, time};
use crate::server::{Shared, files, stream};

/// The private slot marking a checkpoint written by an update: `{"seq", "as_node", "keys"}`.
pub const UPDATE_SLOT: &str = "_server_update";
/// The private slot where the runtime keeps a step waiting for approvals.
const PENDING_SLOT: &str = "_pending_tool_step";
/// Most entries one history request returns (each is a whole state).
pub const MAX_HISTORY: usize = 100;

/// The id of checkpoint `seq` of `thread`: a version-8 UUID whose first eight bytes are a hash of
/// the thread and the number and whose last seven are the number.
pub fn checkpoint_id(thread: &Uuid, seq: u64) -> Uuid {
    let hash = Uuid::new_v5(thread, format!("checkpoint:{seq}").as_bytes());
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&hash.as_bytes()[..8]);
    bytes[9..].copy_from_slice(&seq.to_be_bytes()[1..]);
    uuid::Builder::from_custom_bytes(bytes).into_uuid()
}

/// The number of the checkpoint of `thread` whose id is `id`; `None` when `id` is not one
/// [`checkpoint_id`] gives for `thread`.
pub fn checkpoint_seq(thread: &Uuid, id: &Uuid) -> Option<u64> {
    let mut seq = [0u8; 8];
    seq[1..].copy_from_slice(&id.as_bytes()[9..]);
    let seq = u64::from_be_bytes(seq);
    (checkpoint_id(thread, seq) == *id).then_some(seq)
}

/// `{"thread_id", "checkpoint_ns": "", "checkpoint_id", "checkpoint_map": {}}` of checkpoint `seq`.
pub fn checkpoint_config(thread: &Uuid, seq: u64) -> Value {
    json!({"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": checkpoint_id(thread, seq), "checkpoint_map": {}})
}

/// One checkpoint, read whole (private slots included).
#[derive(Debug)]
pub struct Loaded {
    /// Its number.
    pub seq: u64,
    /// When it was saved (ms since the epoch).
    pub saved_at_ms: u64,
    /// The state.
    pub state: AgentState,
    /// It is the thread's latest.
    pub head: bool,
}

fn read_error(e: impl std::fmt::Display) -> ApiError {
    ApiError::internal("reading a thread's checkpoints", e)
}

/// The latest checkpoint of `record`'s thread; `None` before its first.
pub async fn head(server: &Shared, record: &ThreadRecord) -> ApiResult<Option<Loaded>> {
    let stored = server
        .checkpointer
        .peek(&record.runtime_id())
        .await
        .map_err(read_error)?;
    Ok(stored.map(|s| Loaded {
        seq: s.checkpoint.seq,
        saved_at_ms: s.checkpoint.saved_at_ms,
        state: s.checkpoint.state,
        head: true,
    }))
}

/// Checkpoint `seq` of `record`'s thread, 404 when it has none of that number.
pub async fn at(server: &Shared, record: &ThreadRecord, seq: u64) -> ApiResult<Loaded> {
    let missing = || ApiError::not_found(format!("checkpoint {}", checkpoint_id(&record.thread_id, seq)));
    let head = head(server, record).await?.ok_or_else(missing)?;
    if head.seq == seq {
        return Ok(head);
    }
    before_head(server, record, seq, head.seq).await
}

/// Checkpoint `seq` of `record`'s thread whose latest is `head`, 404 when it has none of that
/// number.
async fn before_head(server: &Shared, record: &ThreadRecord, seq: u64, head: u64) -> ApiResult<Loaded> {
    let missing = || ApiError::not_found(format!("checkpoint {}", checkpoint_id(&record.thread_id, seq)));
    if seq >= head {
        return Err(missing());
    }
    let checkpoint = server
        .checkpointer
        .load_at(&record.runtime_id(), seq)
        .await
        .map_err(read_error)?
        .ok_or_else(missing)?;
    Ok(Loaded {
        seq,
        saved_at_ms: checkpoint.saved_at_ms,
        state: checkpoint.state,
        head: false,
    })
}

/// The `metadata` of checkpoint `seq` whose state is `state` (see the module docs).
pub fn metadata_of(seq: u64, state: &AgentState) -> Value {
    let update = state.get_json(UPDATE_SLOT).ok().flatten();
    match update {
        Some(mark) if mark.get("seq").and_then(Value::as_u64) == Some(seq) => {
            let node = mark
                .get("as_node")
                .and_then(Value::as_str)
                .unwrap_or("__update__");
            let keys = mark.get("keys").cloned().unwrap_or_else(|| json!([]));
            json!({"source": "update", "step": seq, "parents": {}, "writes": {node: keys}})
        }
        _ => json!({"source": "loop", "step": seq, "parents": {}}),
    }
}

/// True when the thread waits for approvals at this state.
pub fn waits_for_approvals(state: &AgentState) -> bool {
    state.contains(PENDING_SLOT)
}

/// `loaded` (a checkpoint of `record`'s thread whose parent is `parent`) as a `ThreadState`. The
/// latest carries the thread's files and what it waits for.
pub async fn thread_state(
    server: &Shared,
    record: &ThreadRecord,
    loaded: &Loaded,
    parent: Option<u64>,
) -> ApiResult<Value> {
    let id = &record.thread_id;
    let public = loaded.state.public_view().map_err(read_error)?;
    let mut values = stream::values_of(id, &public);
    let interrupts = match (&record.interrupts, loaded.head) {
        (Some(list), true) => Some(list.clone()),
        _ => None,
    };
    if loaded.head {
        values["files"] = files::state_files(server, record).await?;
    }
    let checkpoint = checkpoint_config(id, loaded.seq);
    let parent_checkpoint = parent.map(|p| {
        let mut c = checkpoint_config(id, p);
        if let Value::Object(map) = &mut c {
            map.remove("checkpoint_map");
        }
        c
    });
    let ms = i64::try_from(loaded.saved_at_ms).unwrap_or(i64::MAX);
    Ok(json!({
        "values": values,
        "next": if interrupts.is_some() { json!(["tools"]) } else { json!([]) },
        "tasks": interrupts.as_ref().map_or_else(|| json!([]), |list| json!([{
            "id": task_id(id), "name": "tools", "path": ["__pregel_pull", "tools"],
            "error": null, "interrupts": list, "checkpoint": null, "state": null, "result": null,
        }])),
        "metadata": metadata_of(loaded.seq, &loaded.state),
        "created_at": DateTime::from_timestamp_millis(ms).map(|t| time(&t)),
        "checkpoint": checkpoint,
        "parent_checkpoint": parent_checkpoint,
        "interrupts": interrupts.unwrap_or_else(|| json!([])),
        "checkpoint_id": checkpoint["checkpoint_id"],
        "parent_checkpoint_id": parent_checkpoint.as_ref().map(|p| p["checkpoint_id"].clone()),
    }))
}

/// The state of a thread with no checkpoint yet: empty values, no checkpoint.
fn empty_state() -> Value {
    json!({
        "values": {}, "next": [], "tasks": [], "metadata": {}, "created_at": null,
        "checkpoint": null, "parent_checkpoint": null, "interrupts": [],
        "checkpoint_id": null, "parent_checkpoint_id": null,
    })
}

/// The seq named by a checkpoint id of `thread` (404 when it names none of its checkpoints).
fn seq_of(thread: &Uuid, id: &str) -> ApiResult<u64> {
    let uuid = parse_uuid("checkpoint_id", id)?;
    checkpoint_seq(thread, &uuid).ok_or_else(|| ApiError::not_found(format!("checkpoint {uuid}")))
}

/// The parent of checkpoint `seq` (see the module docs).
fn parent_of(seq: u64) -> Option<u64> {
    seq.checked_sub(1)
}

/// `GET /threads/{thread_id}/state` (`?subgraphs=` accepted; subagents have no state of their
/// own here): the latest checkpoint.
pub async fn state(
    State(server): State<Shared>,
    Extension(user): Extension<User>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let record = server.threads.get(&user, &parse_uuid("thread_id", &id)?)?;
    match head(&server, &record).await? {
        Some(loaded) => Ok(Json(
            thread_state(&server, &record, &loaded, parent_of(loaded.seq)).await?,
        )),
        None => Ok(Json(empty_state())),
    }
}

/// `GET /threads/{thread_id}/state/{checkpoint_id}`: that checkpoint.
pub async fn state_at(
    State(server): State<Shared>,
    Extension(user): Extension<User>,
    Path((id, checkpoint)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    let record = server.threads.get(&user, &parse_uuid("thread_id", &id)?)?;
    let seq = seq_of(&record.thread_id, &checkpoint)?;
    let loaded = at(&server, &record, seq).await?;
    Ok(Json(
        thread_state(&server, &record, &loaded, parent_of(seq)).await?,
    ))
}

/// A checkpoint as clients name it: `{"checkpoint_id", "checkpoint_ns"?, "checkpoint_map"?,
/// "thread_id"?}`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckpointRef {
    /// The id (`None`: the latest).
    #[serde(default)]
    pub checkpoint_id: Option<String>,
    /// Must be empty: subgraph namespaces have no checkpoints of their own here.
    #[serde(default)]
    pub checkpoint_ns: Option<String>,
    /// Accepted, not used.
    #[serde(default)]
    #[allow(dead_code)]
    pub checkpoint_map: Option<Value>,
    /// Accepted; must be the thread's own when given.
    #[serde(default)]
    pub thread_id: Option<String>,
}

impl CheckpointRef {
    /// The checkpoint's number on `thread` (`None`: the latest); 404 for an id of none of its
    /// checkpoints, 422 for a namespace or a different thread.
    pub fn seq(&self, thread: &Uuid) -> ApiResult<Option<u64>> {
        if self.checkpoint_ns.as_deref().is_some_and(|ns| !ns.is_empty()) {
            return Err(ApiError::unprocessable(
                "checkpoint_ns must be empty: subagents have no checkpoints of their own",
            ));
        }
        if let Some(other) = &self.thread_id
            && parse_uuid("checkpoint.thread_id", other)? != *thread
        {
            return Err(ApiError::unprocessable(
                "checkpoint.thread_id names another thread",
            ));
        }
        self.checkpoint_id
            .as_deref()
            .map(|id| seq_of(thread, id))
            .transpose()
    }
}

/// `POST /threads/{thread_id}/state/checkpoint` body.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StateAtBody {
    checkpoint: CheckpointRef,
    /// Accepted; subagents have no state of their own here.
    #[serde(default)]
    #[allow(dead_code)]
    subgraphs: Option<bool>,
    /// Accepted; every field is returned.
    #[serde(default)]
    #[allow(dead_code)]
    select: Option<Value>,
}

/// `POST /threads/{thread_id}/state/checkpoint`: the state at `checkpoint` (the latest when it
/// names no id).
pub async fn state_at_body(
    State(server): State<Shared>,
    Extension(user): Extension<User>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<StateAtBody>,
) -> ApiResult<Json<Value>> {
    let record = server.threads.get(&user, &parse_uuid("thread_id", &id)?)?;
    let loaded = match body.checkpoint.seq(&record.thread_id)? {
        Some(seq) => at(&server, &record, seq).await?,
        None => match head(&server, &record).await? {
            Some(loaded) => loaded,
            None => return Ok(Json(empty_state())),
        },
    };
    Ok(Json(
        thread_state(&server, &record, &loaded, parent_of(loaded.seq)).await?,
    ))
}

/// `POST /threads/{thread_id}/history` body.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HistoryBody {
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    before: Option<Before>,
    #[serde(default)]
    metadata: Option<Map<String, Value>>,
    #[serde(default)]
    checkpoint: Option<CheckpointRef>,
    /// Accepted; every field is returned.
    #[serde(default)]
    #[allow(dead_code)]
    select: Option<Value>,
}

/// `before` in a history request: a checkpoint id or a checkpoint (the Python client sends either).
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
enum Before {
    Id(String),
    Checkpoint(CheckpointRef),
}

/// `POST /threads/{thread_id}/history`: the thread's checkpoints as `ThreadState`s, newest first:
/// at most `limit` (default 10, at most [`MAX_HISTORY`]), only those older than `before`, only
/// the one `checkpoint` names when it names one, only those whose metadata has every key of
/// `metadata` with that value. A thread with no checkpoint has an empty history.
pub async fn history(
    State(server): State<Shared>,
    Extension(user): Extension<User>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<HistoryBody>,
) -> ApiResult<Json<Value>> {
    history_of(&server, &user, &id, body).await
}

/// `GET /threads/{thread_id}/history?limit=N&before=CHECKPOINT_ID`: the same as the POST form
/// with those two fields (any other parameter is a 422).
pub async fn history_get(
    State(server): State<Shared>,
    Extension(user): Extension<User>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> ApiResult<Json<Value>> {
    let mut body = HistoryBody::default();
    for (key, value) in url::form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        match key.as_ref() {
            "limit" => {
                let limit = value
                    .parse()
                    .map_err(|_| ApiError::unprocessable(format!("limit must be a number, not {value:?}")))?;
                body.limit = Some(limit);
            }
            "before" => body.before = Some(Before::Id(value.into_owned())),
            other => {
                return Err(ApiError::unprocessable(format!(
                    "unknown query parameter {other:?}: use limit and before"
                )));
            }
        }
    }
    history_of(&server, &user, &id, body).await
}

async fn history_of(server: &Shared, user: &User, id: &str, body: HistoryBody) -> ApiResult<Json<Value>> {
    let server = server.clone();
    let record = server.threads.get(user, &parse_uuid("thread_id", id)?)?;
    let thread = record.thread_id;
    let limit = body.limit.unwrap_or(10).min(MAX_HISTORY);
    let before = match &body.before {
        None => None,
        Some(Before::Id(id)) => Some(seq_of(&thread, id)?),
        Some(Before::Checkpoint(c)) => c.seq(&thread)?,
    };
    let only = body
        .checkpoint
        .as_ref()
        .map(|c| c.seq(&thread))
        .transpose()?
        .flatten();
    let filter = body.metadata.unwrap_or_default();
    let infos = server
        .checkpointer
        .history(&record.runtime_id())
        .await
        .map_err(read_error)?;
    let seqs: Vec<u64> = infos.iter().map(|i| i.seq).collect();
    let mut latest = match seqs.last() {
        Some(_) => head(&server, &record).await?,
        None => None,
    };
    let head_seq = latest.as_ref().map_or(0, |l| l.seq);
    let mut out = Vec::new();
    for (i, seq) in seqs.iter().copied().enumerate().rev() {
        if out.len() >= limit {
            break;
        }
        if before.is_some_and(|b| seq >= b) || only.is_some_and(|o| seq != o) {
            continue;
        }
        let loaded = match latest.take_if(|l| l.seq == seq) {
            Some(head) => head,
            None => before_head(&server, &record, seq, head_seq).await?,
        };
        let metadata = metadata_of(seq, &loaded.state);
        if !filter.iter().all(|(k, v)| metadata.get(k) == Some(v)) {
            continue;
        }
        let parent = i.checked_sub(1).map(|p| seqs[p]);
        out.push(thread_state(&server, &record, &loaded, parent).await?);
    }
    Ok(Json(Value::Array(out)))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_ids_name_one_checkpoint_of_one_thread() {
        let t = Uuid::new_v4();
        for seq in [0, 1, 31, 1 << 40] {
            let id = checkpoint_id(&t, seq);
            assert_eq!(checkpoint_seq(&t, &id), Some(seq));
            assert_eq!(id, checkpoint_id(&t, seq), "the same on every read");
            assert_eq!(checkpoint_seq(&Uuid::new_v4(), &id), None, "another thread's");
        }
        assert_ne!(checkpoint_id(&t, 1), checkpoint_id(&t, 2));
        assert_eq!(checkpoint_seq(&t, &Uuid::new_v4()), None, "an id not minted here");
        assert_eq!(checkpoint_seq(&t, &Uuid::nil()), None);
    }
}
