//! Threads: the server's record of each ([`ThreadRecord`]: owner, metadata, times, status; kept in
//! [`ThreadStore`]) and the `/threads…` handlers (copy is in
//! [`thread_copy`](crate::server::thread_copy)). A thread's messages and files are its
//! checkpoints, read from the server's [`Checkpointer`](trellis_middleware::Checkpointer).
//!
//! A record is a JSON file `/server/threads/<uuid>.json` on the store's backend, rewritten on
//! every change; all records are loaded at start and searched in memory. A thread belongs to the
//! user who created it; for every other user it does not exist (404, and absent from searches).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::{Extension, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use trellis_middleware::ThreadId;
use trellis_middleware::backend::{Backend, VirtualPath, WriteMode};
use uuid::Uuid;

use crate::server::error::{ApiError, ApiResult};
use crate::server::extract::{JsonBody, User, page, parse_uuid};
use crate::server::{Shared, files, stream};

/// Where the records live on the store.
const RECORDS: &str = "/server/threads";
/// Largest `limit` of a search.
const MAX_LIMIT: usize = 1000;

/// A thread's status when no run of it is in flight (then it is `busy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rest {
    /// Its last run finished (or it never ran).
    Idle,
    /// Its last run stopped for approvals.
    Interrupted,
    /// Its last run failed.
    Error,
}

/// What the server keeps about a thread beyond its checkpoints.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ThreadRecord {
    /// The id.
    pub thread_id: Uuid,
    /// The user who created it (`None`: created without API keys).
    pub owner: Option<String>,
    /// Created.
    pub created_at: DateTime<Utc>,
    /// Last changed (metadata, or a run ended).
    pub updated_at: DateTime<Utc>,
    /// Free-form metadata, merged by PATCH.
    pub metadata: Map<String, Value>,
    /// Its status between runs.
    pub status: Rest,
    /// What its last run stopped for (the `__interrupt__` list), when it stopped for approvals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupts: Option<Value>,
}

impl ThreadRecord {
    /// A new `idle` record of `id` owned by `owner`, created now.
    pub fn new(thread_id: Uuid, owner: Option<String>, metadata: Map<String, Value>) -> Self {
        let now = Utc::now();
        Self {
            thread_id,
            owner,
            created_at: now,
            updated_at: now,
            metadata,
            status: Rest::Idle,
            interrupts: None,
        }
    }

    /// The thread's id in the runtime's form (a UUID is always a valid [`ThreadId`]).
    pub fn runtime_id(&self) -> ThreadId {
        thread_id(&self.thread_id)
    }
}

/// `id` as the runtime's thread id.
pub fn thread_id(id: &Uuid) -> ThreadId {
    // A hyphenated UUID is 36 ASCII letters, digits and '-': always valid.
    ThreadId::new(id.to_string()).unwrap_or_else(|_| ThreadId::generate())
}

/// The records, in memory and on the backend.
#[derive(Debug)]
pub struct ThreadStore {
    store: Arc<dyn Backend>,
    records: Mutex<HashMap<Uuid, ThreadRecord>>,
}

impl ThreadStore {
    /// Load every record from `store` (none yet is fine). A record that cannot be read is skipped
    /// with a warning.
    pub async fn open(store: Arc<dyn Backend>) -> anyhow::Result<Self> {
        let dir = VirtualPath::parse(RECORDS)?;
        let entries = match store.ls(&dir).await {
            Ok(entries) => entries,
            Err(e) if e.is_not_found() => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        let mut records = HashMap::new();
        for entry in entries.iter().filter(|e| !e.is_dir()) {
            let read = store.read(&entry.path, None).await;
            match read
                .map_err(anyhow::Error::from)
                .and_then(|r| serde_json::from_slice::<ThreadRecord>(&r.bytes).map_err(anyhow::Error::from))
            {
                Ok(record) => {
                    records.insert(record.thread_id, record);
                }
                Err(e) => tracing::warn!("skipping thread record {}: {e:#}", entry.path),
            }
        }
        Ok(Self {
            store,
            records: Mutex::new(records),
        })
    }

    /// Read the record of `id` again from the store (another worker sharing it may have created,
    /// changed or deleted it since this one loaded it).
    pub async fn refresh(&self, id: &Uuid) -> ApiResult<()> {
        match self.store.read(&Self::path(id)?, None).await {
            Ok(read) => {
                let record: ThreadRecord = serde_json::from_slice(&read.bytes)
                    .map_err(|e| ApiError::internal("reading a thread record", e))?;
                self.lock().insert(*id, record);
            }
            Err(e) if e.is_not_found() => {
                self.lock().remove(id);
            }
            Err(e) => return Err(ApiError::internal("reading a thread record", e)),
        }
        Ok(())
    }

    /// Read every record again from the store (see [`refresh`](Self::refresh)).
    pub async fn reload(&self) -> ApiResult<()> {
        let fresh = Self::open(self.store.clone())
            .await
            .map_err(|e| ApiError::internal("reading thread records", format!("{e:#}")))?;
        let records = std::mem::take(&mut *fresh.lock());
        *self.lock() = records;
        Ok(())
    }

    fn path(id: &Uuid) -> ApiResult<VirtualPath> {
        VirtualPath::parse(&format!("{RECORDS}/{id}.json")).map_err(|e| ApiError::internal("record path", e))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, ThreadRecord>> {
        self.records
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The record of `id` if `user` may see it.
    pub fn get(&self, user: &User, id: &Uuid) -> ApiResult<ThreadRecord> {
        self.lock()
            .get(id)
            .filter(|r| r.owner.as_deref() == user.id())
            .cloned()
            .ok_or_else(|| ApiError::not_found(format!("thread {id}")))
    }

    /// Every record `user` may see.
    pub fn of_user(&self, user: &User) -> Vec<ThreadRecord> {
        self.lock()
            .values()
            .filter(|r| r.owner.as_deref() == user.id())
            .cloned()
            .collect()
    }

    /// Insert `record` unless its id is taken: `Err(existing)` then (whoever owns it).
    pub async fn insert(&self, record: ThreadRecord) -> ApiResult<Result<ThreadRecord, ThreadRecord>> {
        {
            let mut records = self.lock();
            if let Some(existing) = records.get(&record.thread_id) {
                return Ok(Err(existing.clone()));
            }
            records.insert(record.thread_id, record.clone());
        }
        self.persist(&record).await?;
        Ok(Ok(record))
    }

    /// Change the record of `id` with `f` and store it; `None` when it is gone.
    pub async fn update(
        &self,
        id: &Uuid,
        f: impl FnOnce(&mut ThreadRecord),
    ) -> ApiResult<Option<ThreadRecord>> {
        let record = {
            let mut records = self.lock();
            let Some(record) = records.get_mut(id) else {
                return Ok(None);
            };
            f(record);
            record.updated_at = Utc::now();
            record.clone()
        };
        self.persist(&record).await?;
        Ok(Some(record))
    }

    /// Forget `id` and delete its file.
    pub async fn remove(&self, id: &Uuid) -> ApiResult<()> {
        self.lock().remove(id);
        match self.store.delete(&Self::path(id)?).await {
            Ok(()) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(ApiError::internal("deleting a thread record", e)),
        }
    }

    async fn persist(&self, record: &ThreadRecord) -> ApiResult<()> {
        let bytes = serde_json::to_vec(record).map_err(|e| ApiError::internal("thread record", e))?;
        self.store
            .write(
                &Self::path(&record.thread_id)?,
                bytes.into(),
                WriteMode::Overwrite,
            )
            .await
            .map_err(|e| ApiError::internal("storing a thread record", e))?;
        Ok(())
    }
}

/// ISO-8601 with offset, as the reference server writes times.
pub fn time(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Micros, false)
}

/// The `Thread` JSON of `record`, with its current values and status.
pub async fn thread_json(server: &Shared, record: &ThreadRecord) -> ApiResult<Value> {
    let values = stream::thread_values(server, &record.thread_id).await?;
    let status = if server.busy(&record.thread_id).await? {
        "busy"
    } else {
        match record.status {
            Rest::Idle => "idle",
            Rest::Interrupted => "interrupted",
            Rest::Error => "error",
        }
    };
    Ok(json!({
        "thread_id": record.thread_id,
        "created_at": time(&record.created_at),
        "updated_at": time(&record.updated_at),
        "state_updated_at": time(&record.updated_at),
        "metadata": record.metadata,
        "status": status,
        "config": {},
        "values": values,
        "interrupts": record.interrupts.as_ref().map_or_else(|| json!({}), |list| json!({ task_id(&record.thread_id): list })),
        "error": null,
    }))
}

/// `POST /threads` body.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ThreadCreate {
    #[schemars(extend("format" = "uuid"))]
    thread_id: Option<String>,
    #[serde(default)]
    metadata: Option<Map<String, Value>>,
    if_exists: Option<IfExists>,
    /// Accepted, not applied (threads do not expire yet).
    #[serde(default)]
    #[allow(dead_code)]
    ttl: Option<Value>,
    /// Not supported: a 422 when given.
    #[serde(default)]
    supersteps: Option<Value>,
    /// Put into the metadata, as the reference server does.
    graph_id: Option<String>,
}

/// What creating an existing thread does.
#[derive(Debug, Clone, Copy, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
enum IfExists {
    Raise,
    DoNothing,
}

/// `POST /threads`: a new thread owned by the caller. An id already taken: 409 (`if_exists` raise,
/// the default), or the existing thread (`do_nothing`) when the caller owns it; another user's id
/// is a 409 either way.
pub async fn create(
    State(server): State<Shared>,
    Extension(user): Extension<User>,
    JsonBody(body): JsonBody<ThreadCreate>,
) -> ApiResult<Json<Value>> {
    if body.supersteps.as_ref().is_some_and(|s| !s.is_null()) {
        return Err(ApiError::unprocessable("supersteps is not supported"));
    }
    let id = match &body.thread_id {
        Some(id) => parse_uuid("thread_id", id)?,
        None => Uuid::new_v4(),
    };
    let mut metadata = body.metadata.unwrap_or_default();
    if let Some(graph) = body.graph_id {
        metadata.insert("graph_id".into(), Value::String(graph));
    }
    let record = ThreadRecord::new(id, user.0.clone(), metadata);
    let record = match server.threads.insert(record).await? {
        Ok(record) => record,
        Err(existing) => match body.if_exists {
            Some(IfExists::DoNothing) if existing.owner.as_deref() == user.id() => existing,
            _ => return Err(ApiError::conflict(format!("thread {id} already exists"))),
        },
    };
    Ok(Json(thread_json(&server, &record).await?))
}

/// `GET /threads/{thread_id}`: the thread, whose `values` (once it has a checkpoint) carry its
/// files as the state does (searches leave them out: reading every thread's files is too dear).
pub async fn get_one(
    State(server): State<Shared>,
    Extension(user): Extension<User>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let record = server.threads.get(&user, &parse_uuid("thread_id", &id)?)?;
    let mut thread = thread_json(&server, &record).await?;
    if let Some(values) = thread.get_mut("values").and_then(Value::as_object_mut) {
        values.insert("files".into(), files::state_files(&server, &record).await?);
    }
    Ok(Json(thread))
}

/// `PATCH /threads/{thread_id}` body.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ThreadPatch {
    #[serde(default)]
    metadata: Map<String, Value>,
    /// Accepted, not applied.
    #[serde(default)]
    #[allow(dead_code)]
    ttl: Option<Value>,
}

/// `PATCH /threads/{thread_id}`: merge metadata (a key set to `null` is kept as `null`, as the
/// reference server does). `Prefer: return=minimal` → 204.
pub async fn patch(
    State(server): State<Shared>,
    Extension(user): Extension<User>,
    Path(id): Path<String>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<ThreadPatch>,
) -> ApiResult<Response> {
    let id = parse_uuid("thread_id", &id)?;
    server.threads.get(&user, &id)?;
    let record = server
        .threads
        .update(&id, |r| r.metadata.extend(body.metadata))
        .await?
        .ok_or_else(|| ApiError::not_found(format!("thread {id}")))?;
    let minimal = headers
        .get("prefer")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("return=minimal"));
    if minimal {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    Ok(Json(thread_json(&server, &record).await?).into_response())
}

/// `DELETE /threads/{thread_id}`: the record, the checkpoints and the thread's files; 409 while a
/// run is in flight.
pub async fn delete(
    State(server): State<Shared>,
    Extension(user): Extension<User>,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    let id = parse_uuid("thread_id", &id)?;
    let record = server.threads.get(&user, &id)?;
    if server.busy(&id).await? {
        return Err(ApiError::conflict(
            "the thread is running a task: wait for it to finish",
        ));
    }
    server
        .checkpointer
        .delete(&record.runtime_id())
        .await
        .map_err(|e| ApiError::internal("deleting a thread", e))?;
    server.threads.remove(&id).await?;
    server.runs.forget_thread(&id);
    for graph in server.graphs.values() {
        if let Err(e) = graph.thread_deleted(&record.runtime_id()).await {
            tracing::warn!("thread {id} deleted, but a graph could not forget it: {e:#}");
        }
    }
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /threads/search` body.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ThreadSearch {
    #[serde(default)]
    metadata: Map<String, Value>,
    /// Not supported: a 422 when given.
    #[serde(default)]
    values: Option<Value>,
    #[serde(default)]
    ids: Option<Vec<String>>,
    status: Option<String>,
    limit: Option<usize>,
    #[serde(default)]
    offset: usize,
    sort_by: Option<String>,
    sort_order: Option<String>,
    /// Accepted; every field is returned.
    #[serde(default)]
    #[allow(dead_code)]
    select: Option<Value>,
    /// Not supported: a 422 when given.
    #[serde(default)]
    extract: Option<Value>,
}

/// `POST /threads/search`: the caller's threads whose metadata has every given key with the given
/// value, by `ids` and `status`, sorted (`created_at` descending by default), paged.
pub async fn search(
    State(server): State<Shared>,
    Extension(user): Extension<User>,
    JsonBody(body): JsonBody<ThreadSearch>,
) -> ApiResult<Response> {
    if body.values.as_ref().is_some_and(|v| !v.is_null())
        || body.extract.as_ref().is_some_and(|v| !v.is_null())
    {
        return Err(ApiError::unprocessable(
            "searching by values and extract are not supported",
        ));
    }
    let ids = body
        .ids
        .as_ref()
        .map(|ids| {
            ids.iter()
                .map(|i| parse_uuid("id", i))
                .collect::<ApiResult<Vec<_>>>()
        })
        .transpose()?;
    let limit = body.limit.unwrap_or(10).min(MAX_LIMIT);
    let mut found = Vec::new();
    for record in server.threads.of_user(&user) {
        if !body
            .metadata
            .iter()
            .all(|(k, v)| record.metadata.get(k) == Some(v))
        {
            continue;
        }
        if ids.as_ref().is_some_and(|ids| !ids.contains(&record.thread_id)) {
            continue;
        }
        found.push(record);
    }
    let descending = match body.sort_order.as_deref() {
        None | Some("desc") => true,
        Some("asc") => false,
        Some(other) => {
            return Err(ApiError::unprocessable(format!(
                "sort_order must be asc or desc, not {other:?}"
            )));
        }
    };
    match body.sort_by.as_deref() {
        None | Some("created_at") => found.sort_by_key(|r| (r.created_at, r.thread_id)),
        Some("updated_at" | "state_updated_at") => found.sort_by_key(|r| (r.updated_at, r.thread_id)),
        Some("thread_id") => found.sort_by_key(|r| r.thread_id),
        Some("status") => found.sort_by_key(|r| (format!("{:?}", r.status), r.thread_id)),
        Some(other) => return Err(ApiError::unprocessable(format!("cannot sort by {other:?}"))),
    }
    if descending {
        found.reverse();
    }
    let mut out = Vec::new();
    for record in &found {
        let thread = thread_json(&server, record).await?;
        if body.status.as_deref().is_none_or(|s| thread["status"] == s) {
            out.push(thread);
        }
    }
    Ok(page(out, body.offset, limit))
}

/// The id of the (one) task an interrupted thread waits in: a UUID derived from the thread.
pub fn task_id(id: &Uuid) -> String {
    Uuid::new_v5(id, b"task:tools").to_string()
}

/// A body that must be empty (or `{}`): anything else is a 400 or 422.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoBody {}
