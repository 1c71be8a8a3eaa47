//! `POST /threads/{thread_id}/copy`: a new thread, owned by the caller, that starts as the source
//! is now and shares nothing with it afterwards.

use axum::Json;
use axum::extract::{Extension, Path, State};
use serde_json::Value;
use trellis_middleware::ThreadId;
use trellis_middleware::runtime::checkpoint::Checkpoint;
use uuid::Uuid;

use crate::server::error::{ApiError, ApiResult};
use crate::server::extract::{JsonBody, User, parse_uuid};
use crate::server::messages::message_id;
use crate::server::threads::{NoBody, ThreadRecord, thread_id, thread_json};
use crate::server::{Shared, files};

/// Most checkpoints a copy carries: the newest ones (the copy's first is then the source's
/// checkpoint that many steps back, with no parent).
pub const MAX_COPY_CHECKPOINTS: usize = 1000;

/// `POST /threads/{thread_id}/copy` (no body, or `{}`): a new thread owned by the caller with the source's
/// metadata and status, its checkpoints (the same numbers, states and save times, at most
/// [`MAX_COPY_CHECKPOINTS`] of the newest) and a copy of its files as they are now. The two share
/// nothing afterwards. 409 while the source runs. A copy that fails part-way is removed (a
/// `kill -9` part-way leaves checkpoints with no thread record: no user sees them).
pub async fn copy(
    State(server): State<Shared>,
    Extension(user): Extension<User>,
    Path(id): Path<String>,
    JsonBody(_): JsonBody<NoBody>,
) -> ApiResult<Json<Value>> {
    let id = parse_uuid("thread_id", &id)?;
    let source = server.threads.get(&user, &id)?;
    if server.busy(&id).await? {
        return Err(ApiError::conflict(
            "the thread is running a task: wait for it to finish",
        ));
    }
    let new = Uuid::new_v4();
    let to = thread_id(&new);
    if let Err(e) = copy_checkpoints(&server, &id, &to).await {
        if let Err(cleanup) = server.checkpointer.delete(&to).await {
            tracing::warn!("a failed copy of thread {id} left thread {new} behind: {cleanup}");
        }
        return Err(e);
    }
    let record = ThreadRecord {
        status: source.status,
        interrupts: source.interrupts.clone(),
        ..ThreadRecord::new(new, user.0.clone(), source.metadata.clone())
    };
    let record = match server.threads.insert(record).await? {
        Ok(record) => record,
        Err(_) => return Err(ApiError::conflict(format!("thread {new} already exists"))),
    };
    Ok(Json(thread_json(&server, &record).await?))
}

/// Give thread `to` the newest checkpoints of `from` (each message keeping the id it has in
/// `from`) and a copy of its files (see [`copy`]).
async fn copy_checkpoints(server: &Shared, source: &Uuid, to: &ThreadId) -> ApiResult<()> {
    let failed = |e: &dyn std::fmt::Display| ApiError::internal("copying a thread", e);
    let from = thread_id(source);
    let history = server.checkpointer.history(&from).await.map_err(|e| failed(&e))?;
    let skip = history.len().saturating_sub(MAX_COPY_CHECKPOINTS);
    let mut version = None;
    for seq in history.iter().skip(skip).map(|i| i.seq) {
        let Some(checkpoint) = server
            .checkpointer
            .load_at(&from, seq)
            .await
            .map_err(|e| failed(&e))?
        else {
            return Err(ApiError::conflict(
                "the thread changed while it was copied: copy it again",
            ));
        };
        let mut state = checkpoint.state;
        for (i, message) in state.messages.iter_mut().enumerate() {
            let id = message_id(source, i, Some(message));
            message
                .meta_mut()
                .extra
                .entry("id".to_owned())
                .or_insert(Value::String(id));
        }
        let mut copied = Checkpoint::new(to.clone(), seq, state);
        copied.saved_at_ms = checkpoint.saved_at_ms;
        version = Some(
            server
                .checkpointer
                .save(copied, version.as_ref())
                .await
                .map_err(|e| failed(&e))?,
        );
    }
    if let (Some(src), Some(dst)) = (
        server.checkpointer.thread_files(&from),
        server.checkpointer.thread_files(to),
    ) {
        files::copy_all(src.as_ref(), dst.as_ref()).await?;
    }
    Ok(())
}
