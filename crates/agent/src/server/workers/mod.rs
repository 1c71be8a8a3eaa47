//! Many `trellis serve` processes sharing runs through one [`RunQueue`] (`trellis serve
//! --database URL`): every run is enqueued in the queue, whichever worker the client asked, and
//! each worker's loop ([`start`]) claims runs and runs them (`claimed.rs`).
//!
//! * **Claims.** A worker claims while it has a free slot ([`WorkerOptions::runs`]), on a wake-up
//!   ([`Wakeup::Runs`]: PostgreSQL `NOTIFY`, a hint only) or every [`WorkerOptions::poll`]. The
//!   queue lets one run of a thread run at a time and starts a thread's runs in enqueue order.
//! * **Leases.** A claimed run's lease is renewed every third of [`WorkerOptions::lease`]; a
//!   heartbeat that finds the lease gone (the worker stalled past it and the run was requeued)
//!   stops the run at once, and it writes nothing more: not its events, not its thread's status,
//!   not its result — and a checkpoint it was saving fails on the thread head's version, which
//!   the new worker moved.
//! * **Reaping.** Every worker reaps expired leases every half lease: the run goes back to
//!   `pending` (attempt + 1 on its next claim) or, past its attempts, to `error`.
//! * **Cancel.** A cancel on any worker flags the run in the queue and notifies
//!   ([`Wakeup::Cancel`]); the worker holding it reads the flag at once, or at its next
//!   heartbeat when the notification was lost.
//! * **Outages.** A store that cannot be reached fails claims, reaps and heartbeats (logged, tried
//!   again at the next turn) while runs go on; a run's events wait in the worker and are appended
//!   once it answers, never twice (`claimed.rs`). An outage longer than a lease lets it expire:
//!   the run is taken over once the store is back, and the old worker then finds its lease lost.
//! * **Drain** ([`Workers::drain`], on SIGTERM): no more claims; runs that end within
//!   [`WorkerOptions::drain`] end normally, the others are handed back (`release`, no attempt
//!   spent) and stopped, writing nothing more.

pub(crate) mod claimed;
pub(crate) mod fault;
pub mod fence;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, Semaphore, mpsc};
use uuid::Uuid;

use crate::server::queue::{Lease, Retention, RunQueue};
use crate::server::run_handle::RunHandle;
use crate::server::run_wake::RunWaiters;

/// How a worker runs.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// How long a claim holds its run without a heartbeat (renewed every third of it).
    pub lease: Duration,
    /// Runs this worker runs at once.
    pub runs: usize,
    /// Claims a run may use before it is given up (`error`).
    pub max_attempts: u32,
    /// How often the worker looks for runs without a wake-up.
    pub poll: Duration,
    /// How long a draining worker lets its runs finish before handing them back.
    pub drain: Duration,
    /// How often a stream, `/join` or `/wait` following a run reads the queue again when no
    /// wake-up came ([`crate::server::run_wake`]).
    pub follow_poll: Duration,
    /// Which finished runs the reaper keeps (it prunes the others every [`PRUNE_EVERY`]).
    pub retention: Retention,
}

/// How often a worker's reaper prunes finished runs.
pub const PRUNE_EVERY: Duration = Duration::from_secs(60);

impl Default for WorkerOptions {
    fn default() -> Self {
        Self {
            lease: Duration::from_secs(30),
            runs: 16,
            max_attempts: 3,
            poll: Duration::from_secs(1),
            drain: Duration::from_secs(10),
            follow_poll: crate::server::run_wake::DEFAULT_POLL,
            retention: Retention::default(),
        }
    }
}

/// A hint from the queue's store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wakeup {
    /// Runs may be claimable.
    Runs,
    /// This run was asked to stop.
    Cancel(Uuid),
}

/// A run this worker holds.
#[derive(Debug, Clone)]
pub(crate) struct Held {
    pub(crate) lease: Lease,
    pub(crate) run: Arc<RunHandle>,
    /// The fence on the run's thread's files.
    pub(crate) fence: Arc<fence::Fence>,
}

/// This worker's side of the shared queue: the queue, its name, its options and the runs it holds.
#[derive(Debug)]
pub struct SharedQueue {
    pub(crate) queue: Arc<dyn RunQueue>,
    pub(crate) worker: String,
    pub(crate) options: WorkerOptions,
    held: Mutex<HashMap<Uuid, Held>>,
    wake: Notify,
    draining: AtomicBool,
    slots: Arc<Semaphore>,
    /// The tasks of this process following runs, woken by the worker holding a run and by the
    /// store's notifications.
    pub(crate) waiters: Arc<RunWaiters>,
    /// The fences of the threads whose runs this worker holds ([`fence`]).
    pub(crate) fences: fence::ThreadFences,
}

impl SharedQueue {
    /// This worker (named `worker`, unique among the workers) on `queue`.
    pub fn new(queue: Arc<dyn RunQueue>, worker: impl Into<String>, options: WorkerOptions) -> Self {
        let slots = Arc::new(Semaphore::new(options.runs.max(1)));
        let waiters = Arc::new(RunWaiters::new(options.follow_poll));
        Self {
            queue,
            worker: worker.into(),
            options,
            held: Mutex::new(HashMap::new()),
            wake: Notify::new(),
            draining: AtomicBool::new(false),
            slots,
            waiters,
            fences: fence::ThreadFences::default(),
        }
    }

    /// This worker with `fences` (the ones its checkpointer guards thread files with: see
    /// [`fence`]).
    pub fn with_fences(mut self, fences: fence::ThreadFences) -> Self {
        self.fences = fences;
        self
    }

    /// The followers of runs in this process, for [`listen`] to wake.
    pub fn waiters(&self) -> Arc<RunWaiters> {
        self.waiters.clone()
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, Held>> {
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn hold(&self, held: Held) {
        self.held().insert(held.lease.run_id, held);
    }

    pub(crate) fn drop_held(&self, run_id: &Uuid) {
        self.held().remove(run_id);
    }

    /// The run `run_id` if this worker holds it.
    pub(crate) fn holding(&self, run_id: &Uuid) -> Option<Held> {
        self.held().get(run_id).cloned()
    }

    /// The runs this worker holds.
    pub(crate) fn holding_all(&self) -> Vec<Held> {
        self.held().values().cloned().collect()
    }

    /// Claim now rather than at the next poll.
    pub(crate) fn wake(&self) {
        self.wake.notify_one();
    }
}

/// What a server enqueues for a run besides its thread and user.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RunSpec<'a> {
    /// The graph id.
    pub(crate) graph: &'a str,
    /// The stream modes its creator asked for.
    pub(crate) modes: &'a [crate::server::stream::Mode],
    /// `stream_resumable`.
    pub(crate) resumable: bool,
    /// `multitask_strategy`.
    pub(crate) strategy: crate::server::cancel::Strategy,
    /// The run's metadata.
    pub(crate) metadata: &'a serde_json::Map<String, serde_json::Value>,
    /// The run-create's fields (`kwargs` of the `Run`).
    pub(crate) kwargs: &'a serde_json::Value,
}

/// Enqueue `spec`, a run of `user` on `thread`, in the shared queue under its strategy; the run
/// as the handlers see it. A `reject` run on a busy thread is a 409 and nothing is stored.
pub(crate) async fn enqueue(
    shared: &SharedQueue,
    user: &crate::server::User,
    thread: Uuid,
    spec: RunSpec<'_>,
) -> crate::server::ApiResult<crate::server::run_ref::RunRef> {
    use crate::server::cancel::Strategy;
    use crate::server::queue::{Multitask, NewRun};
    let multitask = match spec.strategy {
        Strategy::Reject => Multitask::Reject,
        Strategy::Enqueue => Multitask::Enqueue,
        Strategy::Interrupt => Multitask::Interrupt,
        Strategy::Rollback => Multitask::Rollback,
    };
    let payload = claimed::payload_of(user, spec);
    let new = NewRun::new(thread, payload)
        .multitask(multitask)
        .max_attempts(shared.options.max_attempts);
    let record = shared
        .queue
        .enqueue(new)
        .await
        .map_err(crate::server::run_ref::queue_error)?;
    shared.wake();
    Ok(crate::server::run_ref::RunRef::shared(record, shared))
}

/// The active runs of `user`'s threads in the shared queue whose status is in `wanted` (for
/// `POST /runs/cancel` by status), at most [`ACTIVE_MAX`] scanned.
pub(crate) async fn active_of(
    shared: &SharedQueue,
    user: &crate::server::User,
    wanted: &[crate::server::queue::RunStatus],
) -> crate::server::ApiResult<Vec<crate::server::run_ref::RunRef>> {
    let records = shared
        .queue
        .active(ACTIVE_MAX)
        .await
        .map_err(crate::server::run_ref::queue_error)?;
    Ok(records
        .into_iter()
        .filter(|r| r.status.is_active() && wanted.contains(&r.status))
        .filter(|r| user_owns(user, r))
        .map(|r| crate::server::run_ref::RunRef::shared(r, shared))
        .collect())
}

/// Whether `record` was enqueued by `user` (the owner of its thread: runs are enqueued only on
/// the caller's own threads).
fn user_owns(user: &crate::server::User, record: &crate::server::queue::RunRecord) -> bool {
    record.payload[crate::server::run_ref::payload::USER].as_str() == user.0.as_deref()
}

/// Active runs scanned by one cancel by status.
pub const ACTIVE_MAX: usize = 100_000;

/// The worker loops of one server; [`drain`](Self::drain) them before exiting.
#[derive(Debug)]
pub struct Workers {
    server: crate::server::Shared,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// Start `server`'s worker loops (claims, reaper, wake-ups); `None` when it has no shared queue.
pub fn start(server: &crate::server::Shared, wakeups: Option<mpsc::Receiver<Wakeup>>) -> Option<Workers> {
    let shared = server.shared.clone()?;
    let mut tasks = vec![
        tokio::spawn(claim_loop(server.clone(), shared.clone())),
        tokio::spawn(reap_loop(shared.clone())),
    ];
    if let Some(wakeups) = wakeups {
        tasks.push(tokio::spawn(wakeup_loop(shared, wakeups)));
    }
    Some(Workers {
        server: server.clone(),
        tasks,
    })
}

async fn claim_loop(server: crate::server::Shared, shared: Arc<SharedQueue>) {
    loop {
        if shared.draining.load(Ordering::SeqCst) {
            return;
        }
        // Claim while a slot is free and runs come.
        while let Ok(slot) = shared.slots.clone().try_acquire_owned() {
            // The lease runs from no earlier than the claim was sent (the thread-file fence).
            let sent = std::time::Instant::now();
            match shared.queue.claim(&shared.worker, shared.options.lease).await {
                Ok(Some(lease)) => {
                    let (server, shared) = (server.clone(), shared.clone());
                    tokio::spawn(async move {
                        claimed::run(&server, &shared, lease, sent).await;
                        drop(slot);
                        shared.wake();
                    });
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!("worker {}: cannot claim: {e}", shared.worker);
                    break;
                }
            }
        }
        tokio::select! {
            () = shared.wake.notified() => {}
            () = tokio::time::sleep(shared.options.poll) => {}
        }
    }
}

async fn reap_loop(shared: Arc<SharedQueue>) {
    let every = (shared.options.lease / 2).max(Duration::from_millis(100));
    let mut pruned_at = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(every).await;
        if pruned_at.elapsed() >= PRUNE_EVERY {
            pruned_at = tokio::time::Instant::now();
            match shared.queue.prune(shared.options.retention).await {
                Ok(0) => {}
                Ok(n) => tracing::info!("worker {}: deleted {n} finished runs", shared.worker),
                Err(e) => tracing::warn!("worker {}: cannot prune finished runs: {e}", shared.worker),
            }
        }
        match shared.queue.reap(Duration::ZERO).await {
            Ok(0) => {}
            Ok(n) => {
                tracing::info!("worker {}: requeued {n} runs whose lease expired", shared.worker);
                shared.wake();
            }
            Err(e) => tracing::warn!("worker {}: cannot reap: {e}", shared.worker),
        }
    }
}

async fn wakeup_loop(shared: Arc<SharedQueue>, mut wakeups: mpsc::Receiver<Wakeup>) {
    while let Some(wakeup) = wakeups.recv().await {
        match wakeup {
            Wakeup::Runs => shared.wake(),
            Wakeup::Cancel(run_id) => {
                if let Some(held) = shared.holding(&run_id) {
                    claimed::beat(&shared, &held).await;
                }
            }
        }
    }
}

impl Workers {
    /// Stop claiming; let the runs this worker holds end within [`WorkerOptions::drain`], then
    /// hand the others back to the queue (no attempt spent) and stop them.
    pub async fn drain(self) {
        let Some(shared) = self.server.shared.clone() else {
            return;
        };
        shared.draining.store(true, Ordering::SeqCst);
        shared.wake();
        let deadline = tokio::time::Instant::now() + shared.options.drain;
        while !shared.holding_all().is_empty() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for held in shared.holding_all() {
            held.run.mark_lost();
            match shared.queue.release(&held.lease).await {
                Ok(true) => tracing::info!("worker {}: handed run {} back", shared.worker, held.lease.run_id),
                Ok(false) => {}
                Err(e) => tracing::warn!(
                    "worker {}: cannot hand run {} back: {e}",
                    shared.worker,
                    held.lease.run_id
                ),
            }
            held.run.cancel(crate::server::cancel::CancelAction::Interrupt);
        }
        for task in self.tasks {
            task.abort();
        }
    }
}

/// The PostgreSQL wake-ups: `LISTEN` on the queue's channels (one connection), turned into
/// [`Wakeup`]s, and a run's changes ([`EVENTS_CHANNEL`](crate::server::queue::EVENTS_CHANNEL))
/// fanned out to `waiters`, the tasks of this process following it; the listener reconnects by
/// itself (notifications sent meanwhile are lost: the polls cover them).
#[cfg(feature = "postgres")]
pub async fn listen(
    queue: &crate::server::queue::PostgresQueue,
    waiters: Arc<RunWaiters>,
) -> anyhow::Result<mpsc::Receiver<Wakeup>> {
    use crate::server::queue::{CANCEL_CHANNEL, EVENTS_CHANNEL, RUNS_CHANNEL};
    let mut listener = sqlx::postgres::PgListener::connect_with(queue.pool()).await?;
    listener
        .listen_all([RUNS_CHANNEL, CANCEL_CHANNEL, EVENTS_CHANNEL])
        .await?;
    let (tx, rx) = mpsc::channel(1024);
    tokio::spawn(async move {
        loop {
            let wakeup = match listener.recv().await {
                Ok(n) if n.channel() == EVENTS_CHANNEL => {
                    if let Ok(id) = n.payload().parse() {
                        waiters.notify(&id);
                    }
                    continue;
                }
                Ok(n) if n.channel() == CANCEL_CHANNEL => match n.payload().parse() {
                    Ok(id) => Wakeup::Cancel(id),
                    Err(_) => continue,
                },
                Ok(_) => Wakeup::Runs,
                Err(e) => {
                    tracing::warn!("listening for run wake-ups: {e}");
                    // Notifications may have been lost: let every follower read once more.
                    waiters.notify_all();
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            // A full channel means the worker is behind: dropping a hint is fine.
            if tx.try_send(wakeup).is_err() && tx.is_closed() {
                return;
            }
        }
    });
    Ok(rx)
}
