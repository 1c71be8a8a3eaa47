//! A run as the handlers see it, wherever it runs: [`RunRef::Local`], a run of this process (the
//! single-server mode, its [`RunHandle`] in memory), or [`RunRef::Shared`], a run in the shared
//! queue (`trellis serve --database`), which any worker may be running: its record, status and
//! result are read from the queue and its stream from the queue's events table, so a client
//! gets the same stream on every worker.
//!
//! Event ids are the same in both: `metadata` is id 0 and the `k`th part (from 0) is id `k + 1`,
//! which for a shared run is the event's number in the queue. A follower of a shared run (a stream,
//! `/join`, `/wait`) reads the queue when woken ([`crate::server::run_wake`]: the holding worker
//! or a PostgreSQL notification says the run changed) and at least every fallback poll
//! ([`WorkerOptions::follow_poll`](crate::server::workers::WorkerOptions::follow_poll)); a
//! stream ends once the run has ended and every event was sent, and waits out a database it
//! cannot reach.

use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::server::cancel::CancelAction;
use crate::server::error::{ApiError, ApiResult};
use crate::server::queue::{self, QueueError, RunQueue, RunRecord};
use crate::server::run_handle::RunHandle;
use crate::server::run_wake::RunWaiters;
use crate::server::stream::{Mode, Part};
use crate::server::threads::time;
use crate::server::workers::SharedQueue;

/// Events read from the queue at once.
const PAGE: usize = 256;

/// A run of this process, or of the shared queue.
#[derive(Debug, Clone)]
pub(crate) enum RunRef {
    /// In this process's registry.
    Local(Arc<RunHandle>),
    /// In the shared queue.
    Shared(Box<SharedRun>),
}

/// A run in the shared queue, as read when the handler found it.
#[derive(Debug, Clone)]
pub(crate) struct SharedRun {
    /// Its record.
    pub(crate) record: RunRecord,
    /// The queue.
    pub(crate) queue: Arc<dyn RunQueue>,
    /// Wakes this process's followers when the run changes.
    pub(crate) waiters: Arc<RunWaiters>,
}

/// What the server puts into a shared run's payload, read back by the worker that claims it.
pub(crate) mod payload {
    use serde_json::Value;

    use crate::server::stream::Mode;

    /// The owner's user id (`null` without API keys).
    pub const USER: &str = "user";
    /// The graph id.
    pub const GRAPH: &str = "graph";
    /// The stream modes, as their API names.
    pub const MODES: &str = "modes";
    /// `stream_resumable`.
    pub const RESUMABLE: &str = "resumable";
    /// The run's metadata.
    pub const METADATA: &str = "metadata";
    /// The run-create body's fields (`kwargs` of the `Run`).
    pub const KWARGS: &str = "kwargs";
    /// `multitask_strategy`.
    pub const STRATEGY: &str = "strategy";
    /// When the API accepted it.
    pub const CREATED_AT: &str = "created_at";

    /// The modes of `payload` (unknown names are skipped).
    pub fn modes(payload: &Value) -> Vec<Mode> {
        payload[MODES]
            .as_array()
            .map(|list| {
                list.iter()
                    .filter_map(Value::as_str)
                    .filter_map(|m| Mode::parse(m).ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The API name of `mode`, as [`modes`] reads it back.
    pub fn mode_name(mode: Mode) -> &'static str {
        match mode {
            Mode::Values => "values",
            Mode::Updates => "updates",
            Mode::Messages => "messages-tuple",
            Mode::Tasks => "tasks",
            Mode::Checkpoints => "checkpoints",
            Mode::Debug => "debug",
            Mode::Custom => "custom",
        }
    }
}

/// A stored event as a part: its name is the SSE event name (`updates`, or `updates|tools:…` for
/// a subagent's).
fn part_of(event: &queue::StoredEvent) -> Part {
    let (base, namespace) = match event.event.split_once('|') {
        Some((base, ns)) => (base, Some(ns.into())),
        None => (event.event.as_str(), None),
    };
    let mode = [
        Mode::Values,
        Mode::Updates,
        Mode::Messages,
        Mode::Tasks,
        Mode::Checkpoints,
        Mode::Debug,
        Mode::Custom,
    ]
    .into_iter()
    .find(|m| m.event() == base);
    let name = match (mode, base) {
        (Some(mode), _) => mode.event(),
        (None, "error") => "error",
        _ => "metadata",
    };
    Part {
        mode,
        event: name,
        data: event.data.clone(),
        namespace,
    }
}

pub(crate) fn queue_error(e: QueueError) -> ApiError {
    match e {
        QueueError::NotFound(id) => ApiError::not_found(format!("run {id}")),
        QueueError::Full { active, .. } => ApiError::conflict(format!(
            "the thread has {active} runs waiting: wait for them to finish"
        )),
        QueueError::Busy { .. } => ApiError::conflict(
            "Thread is already running a task. Wait for it to finish or choose a different multitask strategy.",
        ),
        other => ApiError::internal("the run queue", other),
    }
}

impl SharedRun {
    /// The run's modes, as its creator asked.
    fn modes(&self) -> Vec<Mode> {
        payload::modes(&self.record.payload)
    }

    /// The `Run` JSON: the worker's record of a finished run (with its usage), else one built
    /// from the queue's record; `attempt` (a Trellis extension) is the claims so far.
    fn to_json(&self) -> Value {
        let r = &self.record;
        let mut run = match r.result.as_ref().map(|res| &res["run"]) {
            Some(finished) if finished.is_object() => finished.clone(),
            _ => json!({
                "run_id": r.run_id,
                "thread_id": r.thread_id,
                "assistant_id": crate::server::assistants::assistant_id(
                    r.payload[payload::GRAPH].as_str().unwrap_or_default()),
                "created_at": r.payload[payload::CREATED_AT].clone(),
                "metadata": r.payload[payload::METADATA].clone(),
                "multitask_strategy": r.payload[payload::STRATEGY].clone(),
                "kwargs": r.payload[payload::KWARGS].clone(),
            }),
        };
        run["status"] = json!(r.status.as_str());
        run["updated_at"] = json!(time(&r.updated_at));
        run["attempt"] = json!(r.attempt);
        run
    }

    /// The record now.
    async fn refresh(&self) -> ApiResult<RunRecord> {
        self.queue
            .get(self.record.run_id)
            .await
            .map_err(queue_error)?
            .ok_or_else(|| ApiError::not_found(format!("run {}", self.record.run_id)))
    }

    /// The run's result once it has ended (read again on each wake-up).
    async fn result(&self) -> Value {
        let mut watch = self.waiters.watch(self.record.run_id);
        loop {
            match self.refresh().await {
                Ok(record) if !record.status.is_active() => {
                    return match (record.result, record.error) {
                        (Some(result), _) if !result["result"].is_null() => result["result"].clone(),
                        (_, Some(error)) => json!({"__error__": error}),
                        _ => Value::Null,
                    };
                }
                Ok(_) => {}
                Err(e) => {
                    return json!({"__error__": {"error": "RunLost", "message": e.detail}});
                }
            }
            watch.wait().await;
        }
    }

    /// Every part numbered after `after`, as they come; ends once the run has ended and all its
    /// events were read.
    fn follow(self, after: u64) -> BoxStream<'static, (usize, Arc<Part>)> {
        let watch = self.waiters.watch(self.record.run_id);
        let state = (self, watch, after, false);
        futures::stream::unfold(state, |(run, mut watch, mut after, ended)| async move {
            loop {
                let events = match run.queue.events(run.record.run_id, after, PAGE).await {
                    Ok(events) => events,
                    Err(e) => {
                        // The database is away (restarting, cut off): the stream waits for it
                        // rather than ending short; the client may leave meanwhile.
                        tracing::warn!("run {}: cannot read its events: {e}", run.record.run_id);
                        watch.wait().await;
                        continue;
                    }
                };
                if !events.is_empty() {
                    let parts: Vec<(usize, Arc<Part>)> = events
                        .iter()
                        .map(|e| {
                            (
                                usize::try_from(e.seq).unwrap_or(usize::MAX) - 1,
                                Arc::new(part_of(e)),
                            )
                        })
                        .collect();
                    after = events.last().map_or(after, |e| e.seq);
                    return Some((futures::stream::iter(parts), (run, watch, after, ended)));
                }
                if ended {
                    return None;
                }
                // Read the status before the next page: events appended before the run ended are
                // all stored by then, so one more read after seeing the end misses none.
                let ended = match run.queue.get(run.record.run_id).await {
                    Ok(Some(record)) => !record.status.is_active(),
                    Ok(None) => true,
                    Err(e) => {
                        tracing::warn!("run {}: cannot read its status: {e}", run.record.run_id);
                        false
                    }
                };
                if ended {
                    return Some((futures::stream::iter(Vec::new()), (run, watch, after, true)));
                }
                watch.wait().await;
            }
        })
        .flatten()
        .boxed()
    }
}

impl RunRef {
    /// The shared run `record` of `shared`'s queue.
    pub(crate) fn shared(record: RunRecord, shared: &SharedQueue) -> Self {
        Self::Shared(Box::new(SharedRun {
            record,
            queue: shared.queue.clone(),
            waiters: shared.waiters.clone(),
        }))
    }

    /// The run's id.
    pub(crate) fn run_id(&self) -> Uuid {
        match self {
            Self::Local(run) => run.run_id,
            Self::Shared(run) => run.record.run_id,
        }
    }

    /// Its thread.
    pub(crate) fn thread_id(&self) -> Uuid {
        match self {
            Self::Local(run) => run.thread_id,
            Self::Shared(run) => run.record.thread_id,
        }
    }

    /// Whether its streams carry event ids.
    pub(crate) fn resumable(&self) -> bool {
        match self {
            Self::Local(run) => run.resumable,
            Self::Shared(run) => run.record.payload[payload::RESUMABLE].as_bool().unwrap_or(false),
        }
    }

    /// The modes it was created with.
    pub(crate) fn modes(&self) -> Vec<Mode> {
        match self {
            Self::Local(run) => run.modes.clone(),
            Self::Shared(run) => run.modes(),
        }
    }

    /// The `Run` JSON.
    pub(crate) fn to_json(&self) -> Value {
        match self {
            Self::Local(run) => run.to_json(),
            Self::Shared(run) => run.to_json(),
        }
    }

    /// Whether it has ended (for a shared run: when the handler found it).
    pub(crate) fn is_done(&self) -> bool {
        match self {
            Self::Local(run) => run.is_done(),
            Self::Shared(run) => !run.record.status.is_active(),
        }
    }

    /// Its status's API name (for a shared run: when the handler found it).
    pub(crate) fn status_name(&self) -> &'static str {
        match self {
            Self::Local(run) => run.status().as_str(),
            Self::Shared(run) => run.record.status.as_str(),
        }
    }

    /// Wait for it to end; its result.
    pub(crate) async fn result(&self) -> Value {
        match self {
            Self::Local(run) => run.result().await,
            Self::Shared(run) => run.result().await,
        }
    }

    /// The number of parts so far.
    pub(crate) async fn parts_len(&self) -> usize {
        match self {
            Self::Local(run) => run.parts_len(),
            Self::Shared(run) => {
                let mut after = 0;
                loop {
                    match run.queue.events(run.record.run_id, after, PAGE).await {
                        Ok(page) if !page.is_empty() => after = page.last().map_or(after, |e| e.seq),
                        _ => return usize::try_from(after).unwrap_or(usize::MAX),
                    }
                }
            }
        }
    }

    /// Every part from index `from` on, with its index, as they come; ends when the run has ended.
    pub(crate) fn follow(&self, from: usize) -> BoxStream<'static, (usize, Arc<Part>)> {
        match self {
            Self::Local(run) => run.clone().follow(from).boxed(),
            Self::Shared(run) => (**run).clone().follow(from as u64),
        }
    }

    /// Ask it to stop with `action`; false when it had already ended. A shared run is flagged in
    /// the queue (a pending one stops at once), and the worker running it is told.
    pub(crate) async fn cancel(&self, action: CancelAction) -> ApiResult<bool> {
        match self {
            Self::Local(run) => Ok(run.cancel(action)),
            Self::Shared(run) => {
                let action = match action {
                    CancelAction::Interrupt => queue::CancelAction::Interrupt,
                    CancelAction::Rollback => queue::CancelAction::Rollback,
                };
                match run.queue.cancel(run.record.run_id, action).await {
                    Ok(_) => {
                        // A pending run ended at once: this process's followers see it now.
                        run.waiters.notify(&run.record.run_id);
                        Ok(true)
                    }
                    Err(QueueError::Finished(_)) => Ok(false),
                    Err(e) => Err(queue_error(e)),
                }
            }
        }
    }
}
