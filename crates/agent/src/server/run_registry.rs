//! The runs of the server, in memory: each run's [`RunHandle`] (what it was asked, its status,
//! the stream parts it produced so far and its result, with a watch channel its followers wait
//! on) and the [`RunRegistry`] (every run by id, and each thread's queue of runs not ended: the
//! first runs, the others wait `pending`, at most [`MAX_QUEUED_RUNS`]).
//!
//! A run belongs to its thread: it is found only through that thread, and forgotten when the
//! thread is deleted, when [`MAX_FINISHED_RUNS`] newer runs have finished or the finished runs'
//! parts together pass [`MAX_FINISHED_PART_BYTES`] (oldest first), or when the server stops
//! (nothing here is persisted). Memory is so bounded by the runs in flight, each at most
//! [`MAX_PART_BYTES`] of parts, plus [`MAX_FINISHED_PART_BYTES`] (and final values) for finished
//! ones.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use futures::Stream;
use serde_json::{Map, Value, json};
use tokio::sync::watch;
use uuid::Uuid;

use crate::server::assistants;
pub use crate::server::cancel::{CancelAction, Strategy};
use crate::server::error::{ApiError, ApiResult};
use crate::server::run_usage::RunUsage;
use crate::server::stream::{Mode, Part};
use crate::server::threads::time;
use crate::usage::Prices;
use trellis_middleware::runtime::events::RunEvent;

/// Bytes of stream parts a run keeps; past it, further `messages` and `updates` parts are
/// dropped (with a warning) and only `values` and the final parts are kept.
pub const MAX_PART_BYTES: usize = 64 * 1024 * 1024;

/// Finished runs kept in memory (with their parts, for get, join and replay); when one more
/// finishes, the oldest is forgotten (404 afterwards).
pub const MAX_FINISHED_RUNS: usize = 1000;

/// Runs a thread may have not ended (one running, the others `pending`); one more is a 409.
pub const MAX_QUEUED_RUNS: usize = 32;

/// Bytes of parts all finished runs keep together; past it the oldest finished runs are forgotten
/// (the newest one is always kept, at most [`MAX_PART_BYTES`]).
pub const MAX_FINISHED_PART_BYTES: usize = 256 * 1024 * 1024;

/// The next [`RunHandle`]'s creation order.
static NEXT_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A run's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Created, not started.
    Pending,
    /// Running.
    Running,
    /// Finished (or stopped for approvals).
    Success,
    /// Failed.
    Error,
    /// Cancelled ([`CancelAction`]), or by a newer run's `multitask_strategy`.
    Interrupted,
}

impl Status {
    /// Its name in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Success => "success",
            Self::Error => "error",
            Self::Interrupted => "interrupted",
        }
    }
}

#[derive(Debug)]
struct Progress {
    status: Status,
    updated_at: DateTime<Utc>,
    parts: Vec<Arc<Part>>,
    bytes: usize,
    dropping: bool,
    result: Option<Value>,
    done: bool,
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
    seq: u64,
    metadata: Map<String, Value>,
    kwargs: Value,
    strategy: Strategy,
    /// Set once when the run is cancelled.
    cancel: watch::Sender<Option<CancelAction>>,
    progress: Mutex<Progress>,
    /// What it used so far ([`RunUsage`]).
    usage: Mutex<RunUsage>,
    /// The number of parts so far, bumped on every change.
    changed: watch::Sender<usize>,
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
                status: Status::Pending,
                updated_at: now,
                parts: Vec::new(),
                bytes: 0,
                dropping: false,
                result: None,
                done: false,
            }),
            changed: watch::channel(0).0,
            usage: Mutex::new(RunUsage::default()),
        }
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

    fn lock(&self) -> std::sync::MutexGuard<'_, Progress> {
        self.progress
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn notify(&self) {
        self.changed.send_modify(|n| *n += 1);
    }

    pub(crate) fn set_status(&self, status: Status) {
        if status == Status::Running {
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

    pub(crate) fn finish(&self, status: Status, result: Value) {
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
    pub fn status(&self) -> Status {
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

/// A finished run, as [`to_forget`] weighs it.
#[derive(Debug, Clone, Copy)]
struct Finished {
    seq: u64,
    id: Uuid,
    bytes: usize,
}

/// The oldest of `finished` to forget so that at most `max_runs` stay and their parts weigh at
/// most `max_bytes` together; the newest is always kept.
fn to_forget(finished: &mut [Finished], max_runs: usize, max_bytes: usize) -> Vec<Uuid> {
    finished.sort_by_key(|f| f.seq);
    let mut kept = finished.len();
    let mut bytes: usize = finished.iter().map(|f| f.bytes).sum();
    let mut forget = Vec::new();
    for f in finished.iter() {
        if kept <= 1 || (kept <= max_runs && bytes <= max_bytes) {
            break;
        }
        forget.push(f.id);
        kept -= 1;
        bytes -= f.bytes;
    }
    forget
}

#[derive(Debug, Default)]
struct Runs {
    by_id: HashMap<Uuid, Arc<RunHandle>>,
    /// Per thread, its runs not ended yet in the order they run: the first is running (or about
    /// to), the others wait `pending`.
    queues: HashMap<Uuid, Vec<Arc<RunHandle>>>,
}

/// The runs of every thread, and which thread is running which.
#[derive(Debug, Default)]
pub struct RunRegistry {
    inner: Mutex<Runs>,
}

impl RunRegistry {
    fn lock(&self) -> std::sync::MutexGuard<'_, Runs> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The run in flight on `thread` (the first of its queue: running, or about to).
    pub fn active_run(&self, thread: &Uuid) -> Option<Uuid> {
        self.lock()
            .queues
            .get(thread)
            .and_then(|q| q.first())
            .map(|r| r.run_id)
    }

    /// Register `run` at the end of its thread's queue, as its `strategy` says when the thread
    /// has runs not ended: 409 for [`Strategy::Reject`]; the others are queued behind them, and
    /// [`Strategy::Interrupt`] and [`Strategy::Rollback`] cancel them. Returns the runs ahead of
    /// `run`: it starts once they have all ended.
    pub(crate) fn begin(&self, run: Arc<RunHandle>) -> ApiResult<Vec<Arc<RunHandle>>> {
        let mut runs = self.lock();
        let queue = runs.queues.entry(run.thread_id).or_default();
        let ahead = queue.clone();
        match run.strategy {
            Strategy::Reject if !ahead.is_empty() => {
                return Err(ApiError::conflict(
                    "Thread is already running a task. Wait for it to finish or choose a different multitask strategy.",
                ));
            }
            _ if ahead.len() >= MAX_QUEUED_RUNS => {
                return Err(ApiError::conflict(format!(
                    "the thread has {MAX_QUEUED_RUNS} runs waiting: wait for them to finish"
                )));
            }
            Strategy::Interrupt => ahead.iter().for_each(|r| {
                r.cancel(CancelAction::Interrupt);
            }),
            Strategy::Rollback => ahead.iter().for_each(|r| {
                r.cancel(CancelAction::Rollback);
            }),
            Strategy::Reject | Strategy::Enqueue => {}
        }
        queue.push(run.clone());
        runs.by_id.insert(run.run_id, run);
        Ok(ahead)
    }

    /// Forget `run` (a rollback, or `DELETE …/runs/{id}`): 404 afterwards.
    pub(crate) fn remove(&self, run: &RunHandle) {
        let mut runs = self.lock();
        runs.by_id.remove(&run.run_id);
        if let Some(queue) = runs.queues.get_mut(&run.thread_id) {
            queue.retain(|r| r.run_id != run.run_id);
        }
    }

    /// `run` is ending: it leaves its thread's queue, and past [`MAX_FINISHED_RUNS`] or
    /// [`MAX_FINISHED_PART_BYTES`] the oldest finished runs are forgotten (`run` itself counts as
    /// finished).
    pub(crate) fn end(&self, run: &RunHandle) {
        let mut runs = self.lock();
        if let Some(queue) = runs.queues.get_mut(&run.thread_id) {
            queue.retain(|r| r.run_id != run.run_id);
            if queue.is_empty() {
                runs.queues.remove(&run.thread_id);
            }
        }
        let mut finished: Vec<Finished> = runs
            .by_id
            .values()
            .filter_map(|r| {
                let p = r.lock();
                (r.run_id == run.run_id || p.done).then_some(Finished {
                    seq: r.seq,
                    id: r.run_id,
                    bytes: p.bytes,
                })
            })
            .collect();
        for id in to_forget(&mut finished, MAX_FINISHED_RUNS, MAX_FINISHED_PART_BYTES) {
            runs.by_id.remove(&id);
        }
    }

    /// Run `run` of `thread`.
    pub(crate) fn get(&self, thread: &Uuid, run: &Uuid) -> ApiResult<Arc<RunHandle>> {
        self.lock()
            .by_id
            .get(run)
            .filter(|r| r.thread_id == *thread)
            .cloned()
            .ok_or_else(|| ApiError::not_found(format!("run {run}")))
    }

    /// Every run not ended yet (running or pending), of every thread.
    pub(crate) fn in_flight(&self) -> Vec<Arc<RunHandle>> {
        self.lock().queues.values().flatten().cloned().collect()
    }

    /// The runs of `thread`, newest first.
    pub(crate) fn of_thread(&self, thread: &Uuid) -> Vec<Arc<RunHandle>> {
        let mut runs: Vec<_> = self
            .lock()
            .by_id
            .values()
            .filter(|r| r.thread_id == *thread)
            .cloned()
            .collect();
        runs.sort_by_key(|r| std::cmp::Reverse(r.seq));
        runs
    }

    /// Forget the runs of a deleted thread.
    pub fn forget_thread(&self, thread: &Uuid) {
        self.lock().by_id.retain(|_, r| r.thread_id != *thread);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn run() -> Arc<RunHandle> {
        Arc::new(RunHandle::new(
            Uuid::new_v4(),
            "agent".into(),
            (vec![Mode::Values], false, Strategy::Reject),
            Map::new(),
            Value::Null,
        ))
    }

    #[test]
    fn a_run_keeps_at_most_its_part_budget_except_values_and_final_parts() {
        let r = run();
        let big = "x".repeat(MAX_PART_BYTES / 4 + 1);
        let part = |mode| Part {
            mode,
            event: "updates",
            data: big.clone(),
        };
        for _ in 0..8 {
            r.push(part(Some(Mode::Updates)), false);
        }
        // Three fit under the budget; the other five were dropped, not buffered.
        assert_eq!(r.parts_len(), 3);
        r.push(part(Some(Mode::Values)), false);
        r.push(part(None), true);
        assert_eq!(r.parts_len(), 5);
    }

    #[test]
    fn the_oldest_finished_runs_go_first_by_count_and_by_weight() {
        let ids: Vec<Uuid> = (0..5).map(|_| Uuid::new_v4()).collect();
        let finished = |bytes: [usize; 5]| -> Vec<Finished> {
            // Out of order on purpose: creation order decides, not position.
            [3, 0, 4, 1, 2]
                .into_iter()
                .map(|i| Finished {
                    seq: i as u64,
                    id: ids[i],
                    bytes: bytes[i],
                })
                .collect()
        };
        // By count: 5 finished, 3 allowed.
        assert_eq!(to_forget(&mut finished([1; 5]), 3, usize::MAX), ids[..2]);
        // By weight: 10 + 10 + 10 + 10 + 10 over a budget of 25 keeps the newest two.
        assert_eq!(to_forget(&mut finished([10; 5]), 100, 25), ids[..3]);
        // The newest is kept even when it alone is over the budget.
        assert_eq!(to_forget(&mut finished([1, 1, 1, 1, 99]), 100, 50), ids[..4]);
        // Within both bounds nothing goes.
        assert!(to_forget(&mut finished([1; 5]), 5, 5).is_empty());
    }

    #[test]
    fn a_thread_runs_one_run_at_a_time() {
        let registry = RunRegistry::default();
        let first = run();
        registry.begin(first.clone()).unwrap();
        let next = |strategy| {
            Arc::new(RunHandle::new(
                first.thread_id,
                "agent".into(),
                (vec![], false, strategy),
                Map::new(),
                Value::Null,
            ))
        };
        assert_eq!(registry.begin(next(Strategy::Reject)).unwrap_err().status, 409);
        // Queued behind the first, which is left alone.
        let queued = next(Strategy::Enqueue);
        let ahead = registry.begin(queued.clone()).unwrap();
        assert_eq!(ahead.iter().map(|r| r.run_id).collect::<Vec<_>>(), [first.run_id]);
        assert_eq!(first.cancelled_with(), None);
        // Cancels both before it, with its own action.
        let rolling = next(Strategy::Rollback);
        assert_eq!(registry.begin(rolling.clone()).unwrap().len(), 2);
        assert_eq!(first.cancelled_with(), Some(CancelAction::Rollback));
        assert_eq!(queued.cancelled_with(), Some(CancelAction::Rollback));
        assert_eq!(registry.active_run(&first.thread_id), Some(first.run_id));
        for r in [&first, &queued] {
            registry.end(r);
            r.finish(Status::Interrupted, Value::Null);
        }
        assert_eq!(registry.active_run(&first.thread_id), Some(rolling.run_id));
        registry.end(&rolling);
        rolling.finish(Status::Success, Value::Null);
        assert!(
            !rolling.cancel(CancelAction::Interrupt),
            "an ended run is not cancelled"
        );
        assert_eq!(registry.active_run(&first.thread_id), None);
        // A queue is bounded, whatever the strategy.
        for _ in 0..MAX_QUEUED_RUNS {
            registry.begin(next(Strategy::Enqueue)).unwrap();
        }
        for strategy in [Strategy::Enqueue, Strategy::Interrupt, Strategy::Rollback] {
            assert_eq!(registry.begin(next(strategy)).unwrap_err().status, 409);
        }
    }

    #[test]
    fn only_the_newest_finished_runs_are_kept() {
        let registry = RunRegistry::default();
        let runs: Vec<_> = (0..MAX_FINISHED_RUNS + 3).map(|_| run()).collect();
        let running = run();
        registry.begin(running.clone()).unwrap();
        for r in &runs {
            registry.begin(r.clone()).unwrap();
            registry.end(r);
            r.finish(Status::Success, Value::Null);
        }
        assert!(
            registry.get(&running.thread_id, &running.run_id).is_ok(),
            "a run in flight stays"
        );
        for r in &runs[..3] {
            assert!(
                registry.get(&r.thread_id, &r.run_id).is_err(),
                "the oldest are forgotten"
            );
        }
        for r in &runs[3..] {
            assert!(registry.get(&r.thread_id, &r.run_id).is_ok());
        }
    }
}
