//! One run of the server, in memory: its [`RunHandle`] — what it was asked, its status, the stream
//! parts it produced so far (at most [`MAX_PART_BYTES`]), its usage and its result, with a watch
//! channel its followers wait on. The [`RunRegistry`](super::run_registry::RunRegistry) keeps the
//! handles and decides when one is forgotten.

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use futures::Stream;
use serde_json::{Map, Value, json};
use tokio::sync::watch;
use trellis_middleware::runtime::events::RunEvent;
use uuid::Uuid;

use crate::server::assistants;
use crate::server::cancel::{CancelAction, Strategy};
pub use crate::server::queue::RunStatus;
use crate::server::run_usage::RunUsage;
use crate::server::stream::{Mode, Part};
use crate::server::threads::time;
use crate::usage::Prices;

/// Bytes of stream parts a run keeps; past it, further `messages` and `updates` parts are
/// dropped (with a warning) and only `values` and the final parts are kept.
pub const MAX_PART_BYTES: usize = 64 * 1024 * 1024;

/// The next [`RunHandle`]'s creation order.
static NEXT_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

#[derive(Debug)]
pub(super) struct Progress {
    pub(super) status: RunStatus,
    pub(super) updated_at: DateTime<Utc>,
    pub(super) parts: Vec<Arc<Part>>,
    pub(super) bytes: usize,
    pub(super) dropping: bool,
    pub(super) result: Option<Value>,
    pub(super) done: bool,
}

/// One run: what it was asked, its status, its parts so far and its result.
#[derive(Debug)]
pub struct RunHandle {
    /// The run.
    pub run_id: Uuid,
    /// Its thread.
    pub thread_id: Uuid,
    /// The graph it runs.
    pub graph: String,
    /// The stream modes it was created with (what a join streams by default).
    pub modes: Vec<Mode>,
    /// Created with `stream_resumable`: its streams carry `id:` lines.
    pub resumable: bool,
    created_at: DateTime<Utc>,
    /// Order of creation in this process (times can tie).
    pub(super) seq: u64,
    metadata: Map<String, Value>,
    kwargs: Value,
    pub(super) strategy: Strategy,
    /// Set once when the run is cancelled.
    cancel: watch::Sender<Option<CancelAction>>,
    progress: Mutex<Progress>,
    /// What it used so far ([`RunUsage`]).
    usage: Mutex<RunUsage>,
    /// The number of parts so far, bumped on every change.
    changed: watch::Sender<usize>,
    /// Set when a shared worker lost the run's lease: it must write nothing more for it.
    lost: std::sync::atomic::AtomicBool,
}

impl RunHandle {
    /// A new `pending` run of `graph` on `thread_id`, created with `strategy`.
    pub fn new(
        thread_id: Uuid,
        graph: String,
        (modes, resumable, strategy): (Vec<Mode>, bool, Strategy),
        metadata: Map<String, Value>,
        kwargs: Value,
    ) -> Self {
        let now = Utc::now();
        Self {
            run_id: Uuid::new_v4(),
            thread_id,
            graph,
            modes,
            resumable,
            created_at: now,
            seq: NEXT_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            metadata,
            kwargs,
            strategy,
            cancel: watch::channel(None).0,
            progress: Mutex::new(Progress {
                status: RunStatus::Pending,
                updated_at: now,
                parts: Vec::new(),
                bytes: 0,
                dropping: false,
                result: None,
                done: false,
            }),
            changed: watch::channel(0).0,
            usage: Mutex::new(RunUsage::default()),
            lost: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// This worker no longer holds the run (its lease was lost or handed back): the run's end
    /// writes nothing to its thread (see `execute`).
    pub(crate) fn mark_lost(&self) {
        self.lost.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// See [`mark_lost`](Self::mark_lost).
    pub(crate) fn is_lost(&self) -> bool {
        self.lost.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn usage(&self) -> std::sync::MutexGuard<'_, RunUsage> {
        self.usage
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Count `event` of the run in its usage.
    pub(crate) fn count(&self, event: &RunEvent, prices: &Prices) {
        self.usage().add(event, prices);
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Progress> {
        self.progress
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn notify(&self) {
        self.changed.send_modify(|n| *n += 1);
    }

    pub(crate) fn set_status(&self, status: RunStatus) {
        if status == RunStatus::Running {
            self.usage().started();
        }
        let mut p = self.lock();
        p.status = status;
        p.updated_at = Utc::now();
    }

    /// Keep `part` for the followers (see [`MAX_PART_BYTES`]); `always` parts are kept past it.
    pub(crate) fn push(&self, part: Part, always: bool) {
        {
            let mut p = self.lock();
            if p.bytes + part.data.len() > MAX_PART_BYTES && !always && part.mode != Some(Mode::Values) {
                if !p.dropping {
                    tracing::warn!(
                        "run {}: stream over {MAX_PART_BYTES} bytes, dropping parts",
                        self.run_id
                    );
                    p.dropping = true;
                }
                return;
            }
            p.bytes += part.data.len();
            p.parts.push(Arc::new(part));
        }
        self.notify();
    }

    pub(crate) fn finish(&self, status: RunStatus, result: Value) {
        self.usage().ended();
        {
            let mut p = self.lock();
            p.status = status;
            p.updated_at = Utc::now();
            p.result = Some(result);
            p.done = true;
        }
        self.notify();
    }

    /// What the run was created with (`kwargs` of its record: `stream_subgraphs`, `config`, …).
    pub fn kwargs(&self) -> &Value {
        &self.kwargs
    }

    /// The `Run` JSON, with Trellis's `started_at`, `ended_at`, `usage` and `subagent_runs`
    /// ([`RunUsage`]).
    pub fn to_json(&self) -> Value {
        let extension = self.usage().fields();
        let p = self.lock();
        let mut run = json!({
            "run_id": self.run_id,
            "thread_id": self.thread_id,
            "assistant_id": assistants::assistant_id(&self.graph),
            "created_at": time(&self.created_at),
            "updated_at": time(&p.updated_at),
            "status": p.status.as_str(),
            "metadata": self.metadata,
            "multitask_strategy": self.strategy.as_str(),
            "kwargs": self.kwargs,
        });
        for (key, value) in extension {
            run[key] = value;
        }
        run
    }

    /// Ask the run to stop with `action` (the first request wins); a run that has ended is left
    /// as it is. Returns false when it had already ended.
    pub fn cancel(&self, action: CancelAction) -> bool {
        if self.is_done() {
            return false;
        }
        self.cancel.send_if_modified(|current| {
            if current.is_some() {
                return false;
            }
            *current = Some(action);
            true
        });
        true
    }

    /// How the run was asked to stop, if it was.
    pub fn cancelled_with(&self) -> Option<CancelAction> {
        *self.cancel.borrow()
    }

    /// Completes when the run is asked to stop, with how.
    pub async fn cancelled(&self) -> CancelAction {
        let mut rx = self.cancel.subscribe();
        let action = rx.wait_for(Option::is_some).await.ok().and_then(|a| *a);
        match action {
            Some(action) => action,
            // The sender lives as long as `self`: never reached while it is borrowed.
            None => std::future::pending().await,
        }
    }

    /// True once the run has ended (its result is set).
    pub fn is_done(&self) -> bool {
        self.lock().done
    }

    /// The run's status.
    pub fn status(&self) -> RunStatus {
        self.lock().status
    }

    /// The number of parts so far.
    pub fn parts_len(&self) -> usize {
        self.lock().parts.len()
    }

    /// Every part from index `from` on, with its index, as they come; ends when the run has ended.
    pub fn follow(self: Arc<Self>, from: usize) -> impl Stream<Item = (usize, Arc<Part>)> + Send + 'static {
        let rx = self.changed.subscribe();
        futures::stream::unfold((self, rx, from), |(run, mut rx, next)| async move {
            loop {
                let (part, done) = {
                    let p = run.lock();
                    (p.parts.get(next).cloned(), p.done)
                };
                if let Some(part) = part {
                    return Some(((next, part), (run, rx, next + 1)));
                }
                if done || rx.changed().await.is_err() {
                    return None;
                }
            }
        })
    }

    /// Wait for the run to end; its result (the final values, or `{"__error__": …}`).
    pub async fn result(&self) -> Value {
        let mut rx = self.changed.subscribe();
        loop {
            if let Some(result) = self.lock().result.clone() {
                return result;
            }
            if rx.changed().await.is_err() {
                return json!({"__error__": {"error": "RunLost", "message": "the run ended without a result"}});
            }
        }
    }
}
