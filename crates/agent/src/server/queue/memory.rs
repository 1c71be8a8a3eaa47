//! [`MemoryQueue`]: the run queue of a single `trellis serve`, in this process's memory. A kill -9
//! loses every run record (threads and checkpoints are on the `Backend` and survive).
//!
//! One mutex over a map of runs: every operation is a few map lookups, and a claim scans the
//! active runs in enqueue order (a server holds hundreds of active runs, not millions; finished
//! ones are outside the index of active runs). Finished runs are kept for `get` and `list` up to
//! [`FINISHED_KEPT`], the oldest forgotten first, so memory stays bounded however long it serves.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::Utc;
use uuid::Uuid;

use serde_json::Value;

use super::{
    CancelAction, Heartbeat, Lease, Multitask, NewRun, Outcome, QueueError, Retention, RunQueue, RunRecord,
    RunStatus, StoredEvent,
};

/// How many finished runs are remembered.
pub const FINISHED_KEPT: usize = 10_000;

#[derive(Debug)]
struct Entry {
    record: RunRecord,
    /// Enqueue order.
    seq: u64,
    /// While running: when the lease runs out.
    lease_until: Option<Instant>,
    /// While pending: not claimable before.
    run_after: Instant,
    /// Its stream events, in order (the `n`th has `seq` n + 1).
    events: Vec<StoredEvent>,
    /// When it finished.
    finished_at: Option<Instant>,
}

#[derive(Debug, Default)]
struct State {
    runs: HashMap<Uuid, Entry>,
    /// Active (pending or running) runs by enqueue order.
    active: BTreeMap<u64, Uuid>,
    /// Finished runs, oldest first (ids of deleted ones are skipped when they come up).
    finished: VecDeque<Uuid>,
    next_seq: u64,
}

impl State {
    fn entry(&mut self, run_id: Uuid) -> Result<&mut Entry, QueueError> {
        self.runs.get_mut(&run_id).ok_or(QueueError::NotFound(run_id))
    }

    /// The entry `lease` still holds.
    fn held(&mut self, lease: &Lease) -> Option<&mut Entry> {
        self.runs
            .get_mut(&lease.run_id)
            .filter(|e| e.record.status == RunStatus::Running && e.record.attempt == lease.attempt)
    }

    fn active_of(&self, thread_id: Uuid) -> impl Iterator<Item = &Entry> {
        self.active
            .values()
            .filter_map(|id| self.runs.get(id))
            .filter(move |e| e.record.thread_id == thread_id)
    }

    /// Moves a run out of the active index with `status`.
    fn settle(&mut self, run_id: Uuid, status: RunStatus) {
        if let Some(entry) = self.runs.get_mut(&run_id) {
            entry.record.status = status;
            entry.record.worker = None;
            entry.record.updated_at = Utc::now();
            entry.lease_until = None;
            entry.finished_at = Some(Instant::now());
            self.active.remove(&entry.seq);
            self.finished.push_back(run_id);
        }
        while self.finished.len() > FINISHED_KEPT {
            if let Some(oldest) = self.finished.pop_front()
                && self
                    .runs
                    .get(&oldest)
                    .is_some_and(|e| !e.record.status.is_active())
            {
                self.runs.remove(&oldest);
            }
        }
    }

    /// Cancels `run_id` (active) with `action`: a pending run stops now, a running one is flagged.
    fn cancel_active(&mut self, run_id: Uuid, action: CancelAction) {
        let Some(entry) = self.runs.get_mut(&run_id) else {
            return;
        };
        entry.record.cancel = Some(action);
        entry.record.updated_at = Utc::now();
        if entry.record.status == RunStatus::Pending {
            self.settle(run_id, RunStatus::Interrupted);
        }
    }
}

/// The run queue in this process's memory. See [`RunQueue`] for the contract.
#[derive(Debug, Default)]
pub struct MemoryQueue {
    state: Mutex<State>,
}

impl MemoryQueue {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind, still consistent per field.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait]
impl RunQueue for MemoryQueue {
    async fn enqueue(&self, run: NewRun) -> Result<RunRecord, QueueError> {
        let mut state = self.lock();
        if state.runs.contains_key(&run.run_id) {
            return Err(QueueError::Duplicate(run.run_id));
        }
        let active: Vec<Uuid> = state.active_of(run.thread_id).map(|e| e.record.run_id).collect();
        match run.multitask {
            Multitask::Reject => {
                if let Some(&first) = active.first() {
                    return Err(QueueError::Busy {
                        thread_id: run.thread_id,
                        active: first,
                    });
                }
            }
            Multitask::Enqueue | Multitask::Interrupt | Multitask::Rollback => {
                if active.len() >= run.max_active {
                    return Err(QueueError::Full {
                        thread_id: run.thread_id,
                        active: active.len(),
                    });
                }
            }
        }
        if let Some(action) = run.multitask.cancels_with() {
            for id in active {
                state.cancel_active(id, action);
            }
        }
        let now = Utc::now();
        let record = RunRecord {
            run_id: run.run_id,
            thread_id: run.thread_id,
            status: RunStatus::Pending,
            payload: run.payload,
            attempt: 0,
            max_attempts: run.max_attempts.max(1),
            worker: None,
            cancel: None,
            error: None,
            created_at: now,
            updated_at: now,
            result: None,
        };
        let seq = state.next_seq;
        state.next_seq += 1;
        state.active.insert(seq, run.run_id);
        state.runs.insert(
            run.run_id,
            Entry {
                record: record.clone(),
                seq,
                lease_until: None,
                run_after: Instant::now(),
                events: Vec::new(),
                finished_at: None,
            },
        );
        Ok(record)
    }

    async fn claim(&self, worker: &str, lease: Duration) -> Result<Option<Lease>, QueueError> {
        let mut state = self.lock();
        let now = Instant::now();
        // Threads that run something, or whose oldest pending run is not due yet: a thread's runs
        // start in enqueue order, so none of its later runs may start first.
        let mut blocked: HashSet<Uuid> = state
            .active
            .values()
            .filter_map(|id| state.runs.get(id))
            .filter(|e| e.record.status == RunStatus::Running)
            .map(|e| e.record.thread_id)
            .collect();
        let mut next = None;
        for entry in state.active.values().filter_map(|id| state.runs.get(id)) {
            if entry.record.status != RunStatus::Pending || blocked.contains(&entry.record.thread_id) {
                continue;
            }
            if entry.run_after <= now {
                next = Some(entry.record.run_id);
                break;
            }
            blocked.insert(entry.record.thread_id);
        }
        let Some(run_id) = next else {
            return Ok(None);
        };
        let entry = state.entry(run_id)?;
        entry.record.status = RunStatus::Running;
        entry.record.attempt += 1;
        entry.record.worker = Some(worker.to_owned());
        entry.record.updated_at = Utc::now();
        entry.lease_until = Some(now + lease);
        Ok(Some(Lease {
            run_id,
            thread_id: entry.record.thread_id,
            attempt: entry.record.attempt,
            payload: entry.record.payload.clone(),
        }))
    }

    async fn heartbeat(&self, lease: &Lease, extend: Duration) -> Result<Heartbeat, QueueError> {
        let mut state = self.lock();
        let now = Instant::now();
        match state.held(lease) {
            Some(entry) if entry.lease_until.is_some_and(|until| until > now) => {
                entry.lease_until = Some(now + extend);
                Ok(Heartbeat::Held {
                    cancel: entry.record.cancel,
                })
            }
            // Expired but not reaped yet: still lost, as on PostgreSQL, whose heartbeat renews
            // only a lease that has not run out.
            _ => Ok(Heartbeat::Lost),
        }
    }

    async fn finish_with(
        &self,
        lease: &Lease,
        outcome: Outcome,
        result: Option<Value>,
    ) -> Result<bool, QueueError> {
        let mut state = self.lock();
        let Some(entry) = state.held(lease) else {
            return Ok(false);
        };
        entry.record.result = result;
        let status = match outcome {
            Outcome::Success => RunStatus::Success,
            Outcome::Error(error) => {
                entry.record.error = Some(error);
                RunStatus::Error
            }
            Outcome::Interrupted => RunStatus::Interrupted,
        };
        state.settle(lease.run_id, status);
        Ok(true)
    }

    async fn append_events(&self, lease: &Lease, events: &[(String, String)]) -> Result<bool, QueueError> {
        let mut state = self.lock();
        let Some(entry) = state.held(lease) else {
            return Ok(false);
        };
        for (event, data) in events {
            let seq = entry.events.len() as u64 + 1;
            entry.events.push(StoredEvent {
                seq,
                attempt: lease.attempt,
                event: event.clone(),
                data: data.clone(),
            });
        }
        Ok(true)
    }

    async fn events(&self, run_id: Uuid, after: u64, limit: usize) -> Result<Vec<StoredEvent>, QueueError> {
        let state = self.lock();
        let Some(entry) = state.runs.get(&run_id) else {
            return Ok(Vec::new());
        };
        let from = usize::try_from(after).unwrap_or(usize::MAX);
        Ok(entry.events.iter().skip(from).take(limit).cloned().collect())
    }

    async fn release(&self, lease: &Lease) -> Result<bool, QueueError> {
        let mut state = self.lock();
        let Some(entry) = state.held(lease) else {
            return Ok(false);
        };
        entry.record.status = RunStatus::Pending;
        entry.record.worker = None;
        entry.record.max_attempts += 1;
        entry.record.updated_at = Utc::now();
        entry.lease_until = None;
        entry.run_after = Instant::now();
        Ok(true)
    }

    async fn cancel(&self, run_id: Uuid, action: CancelAction) -> Result<RunRecord, QueueError> {
        let mut state = self.lock();
        if !state.entry(run_id)?.record.status.is_active() {
            return Err(QueueError::Finished(run_id));
        }
        state.cancel_active(run_id, action);
        Ok(state.entry(run_id)?.record.clone())
    }

    async fn reap(&self, backoff: Duration) -> Result<usize, QueueError> {
        let mut state = self.lock();
        let now = Instant::now();
        let expired: Vec<Uuid> = state
            .active
            .values()
            .filter_map(|id| state.runs.get(id))
            .filter(|e| {
                e.record.status == RunStatus::Running && e.lease_until.is_some_and(|until| until <= now)
            })
            .map(|e| e.record.run_id)
            .collect();
        for &run_id in &expired {
            let entry = state.entry(run_id)?;
            if entry.record.attempt >= entry.record.max_attempts {
                entry.record.error = Some(serde_json::json!({
                    "error": "LeaseExpired",
                    "message": format!("the run's worker stopped renewing its lease {} times", entry.record.attempt),
                }));
                state.settle(run_id, RunStatus::Error);
            } else {
                entry.record.status = RunStatus::Pending;
                entry.record.worker = None;
                entry.record.updated_at = Utc::now();
                entry.lease_until = None;
                entry.run_after = now + backoff;
            }
        }
        Ok(expired.len())
    }

    async fn get(&self, run_id: Uuid) -> Result<Option<RunRecord>, QueueError> {
        Ok(self.lock().runs.get(&run_id).map(|e| e.record.clone()))
    }

    async fn list(&self, thread_id: Uuid, limit: usize) -> Result<Vec<RunRecord>, QueueError> {
        let state = self.lock();
        let mut runs: Vec<&Entry> = state
            .runs
            .values()
            .filter(|e| e.record.thread_id == thread_id)
            .collect();
        runs.sort_by_key(|e| std::cmp::Reverse(e.seq));
        Ok(runs.into_iter().take(limit).map(|e| e.record.clone()).collect())
    }

    async fn delete(&self, run_id: Uuid) -> Result<bool, QueueError> {
        let mut state = self.lock();
        let Some(entry) = state.runs.get(&run_id) else {
            return Ok(false);
        };
        if entry.record.status == RunStatus::Running {
            return Err(QueueError::Busy {
                thread_id: entry.record.thread_id,
                active: run_id,
            });
        }
        let seq = entry.seq;
        state.active.remove(&seq);
        state.runs.remove(&run_id);
        Ok(true)
    }

    async fn active(&self, limit: usize) -> Result<Vec<RunRecord>, QueueError> {
        let state = self.lock();
        Ok(state
            .active
            .values()
            .filter_map(|id| state.runs.get(id))
            .take(limit)
            .map(|e| e.record.clone())
            .collect())
    }

    async fn prune(&self, rule: Retention) -> Result<usize, QueueError> {
        let mut state = self.lock();
        let now = Instant::now();
        // The finished runs still here, oldest finished first.
        let finished: Vec<Uuid> = state
            .finished
            .iter()
            .copied()
            .filter(|id| state.runs.get(id).is_some_and(|e| !e.record.status.is_active()))
            .collect();
        let beyond = finished.len().saturating_sub(rule.keep);
        let mut pruned = 0;
        for (i, id) in finished.iter().enumerate() {
            let old = state
                .runs
                .get(id)
                .and_then(|e| e.finished_at)
                .is_some_and(|at| now.saturating_duration_since(at) >= rule.max_age);
            if i < beyond || old {
                state.runs.remove(id);
                pruned += 1;
            }
        }
        let State {
            finished: order,
            runs,
            ..
        } = &mut *state;
        order.retain(|id| runs.contains_key(id));
        Ok(pruned)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Finished runs are remembered up to [`FINISHED_KEPT`], the oldest forgotten first; active
    /// runs are never forgotten.
    #[tokio::test]
    async fn finished_runs_are_kept_up_to_the_bound() {
        let q = MemoryQueue::new();
        let thread = Uuid::new_v4();
        let waiting = q.enqueue(NewRun::new(Uuid::new_v4(), json!(0))).await.unwrap();
        let mut ids = Vec::new();
        for n in 0..FINISHED_KEPT + 5 {
            let run = q.enqueue(NewRun::new(thread, json!(n))).await.unwrap();
            let lease = q.claim("w", Duration::from_secs(60)).await.unwrap().unwrap();
            if lease.run_id == waiting.run_id {
                // The other thread's run is claimed first once: leave it running.
                let lease = q.claim("w", Duration::from_secs(60)).await.unwrap().unwrap();
                assert!(q.finish(&lease, Outcome::Success).await.unwrap());
            } else {
                assert!(q.finish(&lease, Outcome::Success).await.unwrap());
            }
            ids.push(run.run_id);
        }
        assert!(
            q.get(ids[0]).await.unwrap().is_none(),
            "the oldest finished run is forgotten"
        );
        assert!(q.get(ids[4]).await.unwrap().is_none());
        assert!(q.get(ids[5]).await.unwrap().is_some());
        assert!(q.get(*ids.last().unwrap()).await.unwrap().is_some());
        assert_eq!(
            q.get(waiting.run_id).await.unwrap().unwrap().status,
            RunStatus::Running,
            "a running run is never forgotten"
        );
        assert_eq!(q.lock().runs.len(), FINISHED_KEPT + 1);
    }
}
