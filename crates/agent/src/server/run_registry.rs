//! The runs of the server, in memory: the [`RunRegistry`] of every run's [`RunHandle`] (see
//! `run_handle.rs`) by id, and each thread's queue of runs not ended (the first runs, the others
//! wait `pending`, at most [`MAX_QUEUED_RUNS`]).
//!
//! A run belongs to its thread: it is found only through that thread, and forgotten when the
//! thread is deleted, when [`MAX_FINISHED_RUNS`] newer runs have finished or the finished runs'
//! parts together pass [`MAX_FINISHED_PART_BYTES`] (oldest first), or when the server stops
//! (nothing here is persisted). Memory is so bounded by the runs in flight, each at most
//! [`MAX_PART_BYTES`] of parts, plus [`MAX_FINISHED_PART_BYTES`] (and final values) for finished
//! ones.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use uuid::Uuid;

pub use crate::server::cancel::{CancelAction, Strategy};
use crate::server::error::{ApiError, ApiResult};
pub use crate::server::run_handle::{MAX_PART_BYTES, RunHandle, RunStatus};

/// Finished runs kept in memory (with their parts, for get, join and replay); when one more
/// finishes, the oldest is forgotten (404 afterwards).
pub const MAX_FINISHED_RUNS: usize = 1000;

/// Runs a thread may have not ended (one running, the others `pending`); one more is a 409.
pub const MAX_QUEUED_RUNS: usize = 32;

/// Bytes of parts all finished runs keep together; past it the oldest finished runs are forgotten
/// (the newest one is always kept, at most [`MAX_PART_BYTES`]).
pub const MAX_FINISHED_PART_BYTES: usize = 256 * 1024 * 1024;

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

    /// Register `run`, claimed by this worker from the shared queue (which already applied its
    /// strategy and lets one run of a thread run at a time), as its thread's running run.
    pub(crate) fn adopt(&self, run: Arc<RunHandle>) {
        let mut runs = self.lock();
        runs.queues.entry(run.thread_id).or_default().push(run.clone());
        runs.by_id.insert(run.run_id, run);
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
    use serde_json::{Map, Value};

    use super::*;
    use crate::server::stream::{Mode, Part};

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
            namespace: None,
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
            r.finish(RunStatus::Interrupted, Value::Null);
        }
        assert_eq!(registry.active_run(&first.thread_id), Some(rolling.run_id));
        registry.end(&rolling);
        rolling.finish(RunStatus::Success, Value::Null);
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
            r.finish(RunStatus::Success, Value::Null);
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
