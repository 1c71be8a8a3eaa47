//! The run queue: where a served agent's runs wait, which worker runs each, and how a worker that
//! died or stalled loses its run. One small object-safe trait, [`RunQueue`], with two
//! implementations that pass one conformance suite (`crates/agent/tests/agent/queue/`):
//! [`MemoryQueue`] for a single `trellis serve`, and `PostgresQueue` (feature `postgres`) for many
//! workers sharing one PostgreSQL.
//!
//! # The contract
//!
//! * **One running run per thread, in order.** [`claim`](RunQueue::claim) takes the oldest due
//!   pending run whose thread runs nothing; runs of one thread start in the order they were
//!   enqueued (a later run never starts before an earlier one, even one waiting out a backoff).
//! * **Leases and attempts.** A claim holds its run for a lease; the worker renews it with
//!   [`heartbeat`](RunQueue::heartbeat). Every claim adds one to the run's `attempt`, and
//!   `(run_id, attempt)` — a [`Lease`] — is the fencing token: heartbeat, finish and release act
//!   only while the run is still `running` under that attempt. A worker whose lease expired and was
//!   reaped gets [`Heartbeat::Lost`] and `false` from `finish`: it must stop and commit nothing.
//!   (Its checkpoint writes are fenced separately by the thread's version-checked head.)
//! * **Reaping.** [`reap`](RunQueue::reap) puts runs whose lease expired back to `pending` (after a
//!   backoff), or to `error` once they used `max_attempts` attempts. Any instance may call it; it is
//!   idempotent.
//! * **Cancellation** is a flag a running run's worker reads on its next heartbeat; a pending run is
//!   cancelled at once (`interrupted`, never claimed).
//! * **Multitask strategies** apply at [`enqueue`](RunQueue::enqueue), against the thread's active
//!   (pending or running) runs: `reject` refuses while there is one ([`QueueError::Busy`]);
//!   `enqueue` queues behind them; `interrupt` and `rollback` cancel them with that action (pending
//!   ones at once, the running one by its flag) and queue the new run, which can start once the
//!   running one finished.
//! * **A thread's queue is bounded.** A run enqueued (any strategy but `reject`) while its thread
//!   has [`NewRun::max_active`] active runs is refused ([`QueueError::Full`], nothing changed);
//!   [`MAX_ACTIVE`] by default, as a single server's thread queue.
//! * **Retention.** [`prune`](RunQueue::prune) deletes finished runs, with their events, that
//!   finished longer than [`Retention::max_age`] ago or are not among the
//!   [`Retention::keep`] most recently finished; active runs are never pruned.
//! * **Draining.** [`release`](RunQueue::release) hands a run back to `pending` without spending an
//!   attempt of its budget (a worker shutting down).
//! * **Stream events.** The worker holding a run appends its stream events
//!   ([`append_events`](RunQueue::append_events)) under its lease: a worker that lost its lease
//!   stores nothing. Events of one run are numbered 1, 2, … in the order they were appended,
//!   across attempts (an attempt after a takeover continues the numbering), and anyone reads them
//!   back from a number on ([`events`](RunQueue::events)) — the replay behind `Last-Event-ID`.
//!   They are deleted with their run.
//!
//! Times are the queue's own clock (PostgreSQL's `now()`, or this process's monotonic clock), never
//! a worker's.
//!
//! # Scope
//!
//! Runs belong to their thread; the queue knows threads only by id and does not check who owns
//! them — the server does that before it enqueues or cancels.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

mod memory;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "postgres")]
mod postgres_schema;

pub use memory::MemoryQueue;
#[cfg(feature = "postgres")]
pub use postgres::{CANCEL_CHANNEL, EVENTS_CHANNEL, PostgresQueue, RUNS_CHANNEL};

/// Where a run stands: in the queue and, for a run of this process, in its
/// [`RunHandle`](crate::server::run_handle::RunHandle).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunStatus {
    /// Created, waiting to be claimed.
    Pending,
    /// A worker holds it and runs it.
    Running,
    /// Finished, or stopped for approvals (the thread is then `interrupted`, as on the Agent
    /// Server).
    Success,
    /// Failed, or used all its attempts.
    Error,
    /// Cancelled ([`CancelAction`](crate::server::cancel::CancelAction)), or by a newer run's
    /// `multitask_strategy`.
    Interrupted,
}

impl RunStatus {
    /// The Agent Server's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Success => "success",
            Self::Error => "error",
            Self::Interrupted => "interrupted",
        }
    }

    /// The status named `name`, if it is one.
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "pending" => Self::Pending,
            "running" => Self::Running,
            "success" => Self::Success,
            "error" => Self::Error,
            "interrupted" => Self::Interrupted,
            _ => return None,
        })
    }

    /// Pending or running.
    pub fn is_active(self) -> bool {
        matches!(self, Self::Pending | Self::Running)
    }
}

/// Active (pending or running) runs a thread may have by default; one more is [`QueueError::Full`].
pub const MAX_ACTIVE: usize = 32;

/// Which finished runs [`RunQueue::prune`] keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// The most recently finished runs kept, whatever their age.
    pub keep: usize,
    /// A finished run older than this (since it finished) is deleted.
    pub max_age: Duration,
}

impl Default for Retention {
    /// The 10,000 most recently finished runs, none finished more than 7 days ago.
    fn default() -> Self {
        Self {
            keep: 10_000,
            max_age: Duration::from_secs(7 * 24 * 3600),
        }
    }
}

/// What to do with a thread's active runs when another run is enqueued on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Multitask {
    /// Refuse the new run while one is active.
    Reject,
    /// Queue the new run behind them.
    Enqueue,
    /// Cancel them with [`CancelAction::Interrupt`], then queue the new run.
    Interrupt,
    /// Cancel them with [`CancelAction::Rollback`], then queue the new run.
    Rollback,
}

impl Multitask {
    /// The Agent Server's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Reject => "reject",
            Self::Enqueue => "enqueue",
            Self::Interrupt => "interrupt",
            Self::Rollback => "rollback",
        }
    }

    /// How the thread's active runs are cancelled, for the two strategies that cancel them.
    pub fn cancels_with(self) -> Option<CancelAction> {
        match self {
            Self::Interrupt => Some(CancelAction::Interrupt),
            Self::Rollback => Some(CancelAction::Rollback),
            Self::Reject | Self::Enqueue => None,
        }
    }
}

/// How a run is cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelAction {
    /// Stop it; the thread keeps what it checkpointed.
    Interrupt,
    /// Stop it and undo it: the server drops its checkpoints and its record.
    Rollback,
}

impl CancelAction {
    /// The Agent Server's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Interrupt => "interrupt",
            Self::Rollback => "rollback",
        }
    }

    /// The action named `name`, if it is one.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "interrupt" => Some(Self::Interrupt),
            "rollback" => Some(Self::Rollback),
            _ => None,
        }
    }
}

/// A run to enqueue.
#[derive(Debug, Clone, PartialEq)]
pub struct NewRun {
    /// Its id (the caller's: the API returns it before any worker sees the run).
    pub run_id: Uuid,
    /// The thread it runs on.
    pub thread_id: Uuid,
    /// What the worker needs to run it (the request, the user, …), opaque to the queue.
    pub payload: Value,
    /// Against the thread's active runs.
    pub multitask: Multitask,
    /// Claims allowed before a run whose leases keep expiring is given up (`error`); at least 1.
    pub max_attempts: u32,
    /// Active runs its thread may already have for it to be enqueued ([`MAX_ACTIVE`] by default).
    pub max_active: usize,
}

impl NewRun {
    /// A run of `thread_id` with a new id, queued behind active runs, three attempts.
    pub fn new(thread_id: Uuid, payload: Value) -> Self {
        Self {
            run_id: Uuid::new_v4(),
            thread_id,
            payload,
            multitask: Multitask::Enqueue,
            max_attempts: 3,
            max_active: MAX_ACTIVE,
        }
    }

    /// Refused while its thread has this many active runs (at least 1).
    pub fn max_active(mut self, runs: usize) -> Self {
        self.max_active = runs.max(1);
        self
    }

    /// With this strategy.
    pub fn multitask(mut self, multitask: Multitask) -> Self {
        self.multitask = multitask;
        self
    }

    /// With this many attempts (at least 1).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }
}

/// A run as the queue keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRecord {
    /// Its id.
    pub run_id: Uuid,
    /// Its thread.
    pub thread_id: Uuid,
    /// Where it stands.
    pub status: RunStatus,
    /// What [`NewRun::payload`] said.
    pub payload: Value,
    /// Claims so far (the current lease's attempt while running).
    pub attempt: u32,
    /// Claims allowed.
    pub max_attempts: u32,
    /// The worker holding it, while running.
    pub worker: Option<String>,
    /// A cancellation waiting for its worker, or the one that stopped it.
    pub cancel: Option<CancelAction>,
    /// Why it failed.
    pub error: Option<Value>,
    /// When it was enqueued.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
    /// What its worker gave [`finish_with`](RunQueue::finish_with) (`None` before it finished,
    /// or when it was finished without one).
    pub result: Option<Value>,
}

/// One stream event of a run, as [`RunQueue::events`] returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEvent {
    /// Its number: 1 for the run's first event, one more for each after it.
    pub seq: u64,
    /// The attempt that appended it.
    pub attempt: u32,
    /// The SSE event name.
    pub event: String,
    /// The SSE data (one line of JSON).
    pub data: String,
}

/// A claimed run: what the worker runs, and the fencing token for everything it then asks.
#[derive(Debug, Clone, PartialEq)]
pub struct Lease {
    /// The run.
    pub run_id: Uuid,
    /// Its thread.
    pub thread_id: Uuid,
    /// This claim's attempt (1 for the first).
    pub attempt: u32,
    /// What [`NewRun::payload`] said.
    pub payload: Value,
}

/// What a heartbeat found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heartbeat {
    /// The lease is renewed; `cancel` says whether the run was asked to stop.
    Held {
        /// A cancellation to act on now.
        cancel: Option<CancelAction>,
    },
    /// The run is no longer this lease's (expired and reaped, or finished by someone else): stop
    /// and commit nothing.
    Lost,
}

/// How a worker ends a run.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// It finished.
    Success,
    /// It failed, with this error (an Agent Server error object).
    Error(Value),
    /// It stopped: cancelled, or waiting for an approval.
    Interrupted,
}

/// The queue's one error type.
#[derive(Debug)]
pub enum QueueError {
    /// A `reject` run found another run active on its thread.
    Busy {
        /// The thread.
        thread_id: Uuid,
        /// One of its active runs.
        active: Uuid,
    },
    /// The thread has [`NewRun::max_active`] active runs already.
    Full {
        /// The thread.
        thread_id: Uuid,
        /// Its active runs.
        active: usize,
    },
    /// A run id enqueued twice.
    Duplicate(Uuid),
    /// No such run.
    NotFound(Uuid),
    /// The run is finished: it cannot be cancelled.
    Finished(Uuid),
    /// The store could not be reached or refused the statement (a database outage, …).
    Unavailable(String),
    /// The store holds something this version cannot read.
    Corrupt(String),
}

impl fmt::Display for QueueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Busy { thread_id, active } => {
                write!(f, "thread {thread_id} has an active run ({active})")
            }
            Self::Full { thread_id, active } => {
                write!(f, "thread {thread_id} has {active} runs waiting")
            }
            Self::Duplicate(id) => write!(f, "run {id} already exists"),
            Self::NotFound(id) => write!(f, "run {id} not found"),
            Self::Finished(id) => write!(f, "run {id} has finished"),
            Self::Unavailable(why) => write!(f, "the run queue is unavailable: {why}"),
            Self::Corrupt(why) => write!(f, "the run queue holds an unreadable record: {why}"),
        }
    }
}

impl std::error::Error for QueueError {}

/// Where runs wait and who runs them. See the [module docs](self) for the contract every
/// implementation keeps.
#[async_trait]
pub trait RunQueue: Send + Sync + fmt::Debug {
    /// Adds a pending run under its [`Multitask`] strategy; the record as stored.
    async fn enqueue(&self, run: NewRun) -> Result<RunRecord, QueueError>;

    /// Claims the oldest pending run (due after any backoff) whose thread has no running run, for
    /// `worker`, for `lease`; `None` when there is none.
    async fn claim(&self, worker: &str, lease: Duration) -> Result<Option<Lease>, QueueError>;

    /// Renews `lease` for `extend` from now.
    async fn heartbeat(&self, lease: &Lease, extend: Duration) -> Result<Heartbeat, QueueError>;

    /// Ends the run with no result: [`finish_with`](RunQueue::finish_with) and `null`.
    async fn finish(&self, lease: &Lease, outcome: Outcome) -> Result<bool, QueueError> {
        self.finish_with(lease, outcome, None).await
    }

    /// Ends the run, keeping `result` in its record; `false` (and nothing changed) when `lease`
    /// no longer holds it.
    async fn finish_with(
        &self,
        lease: &Lease,
        outcome: Outcome,
        result: Option<Value>,
    ) -> Result<bool, QueueError>;

    /// Appends `events` (SSE event name, data) to the run's stream, numbered after the last one
    /// stored; `false` (and nothing stored) when `lease` no longer holds the run.
    async fn append_events(&self, lease: &Lease, events: &[(String, String)]) -> Result<bool, QueueError>;

    /// The run's events numbered after `after`, in order, at most `limit` (none for a run the
    /// queue does not have).
    async fn events(&self, run_id: Uuid, after: u64, limit: usize) -> Result<Vec<StoredEvent>, QueueError>;

    /// Puts the run back to `pending` without spending an attempt of its budget; `false` when
    /// `lease` no longer holds it.
    async fn release(&self, lease: &Lease) -> Result<bool, QueueError>;

    /// Asks a run to stop: a pending run is `interrupted` at once; a running run gets the flag its
    /// worker reads on its next heartbeat. The record after the change.
    async fn cancel(&self, run_id: Uuid, action: CancelAction) -> Result<RunRecord, QueueError>;

    /// Puts runs whose lease expired back to `pending`, due after `backoff`, or to `error` when
    /// they used their attempts; how many it changed.
    async fn reap(&self, backoff: Duration) -> Result<usize, QueueError>;

    /// The run, if the queue has it.
    async fn get(&self, run_id: Uuid) -> Result<Option<RunRecord>, QueueError>;

    /// The thread's runs, newest first, at most `limit`.
    async fn list(&self, thread_id: Uuid, limit: usize) -> Result<Vec<RunRecord>, QueueError>;

    /// Forgets a run that is not running; `false` when there was none. A running run is
    /// [`QueueError::Busy`]: cancel it first.
    async fn delete(&self, run_id: Uuid) -> Result<bool, QueueError>;

    /// Every active (pending or running) run of every thread, oldest first, at most `limit`.
    async fn active(&self, limit: usize) -> Result<Vec<RunRecord>, QueueError>;

    /// Deletes the finished runs (and their events) `rule` does not keep; how many.
    async fn prune(&self, rule: Retention) -> Result<usize, QueueError>;
}
