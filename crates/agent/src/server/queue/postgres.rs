//! [`PostgresQueue`]: the run queue in PostgreSQL, for many `trellis serve` workers sharing one
//! database. Each operation is one statement or one short transaction; every time is the
//! database's `now()`, so workers' clocks never matter.
//!
//! * A claim takes the oldest due pending run that is the oldest pending run of its thread and
//!   whose thread has no running run, with `FOR UPDATE
//!   SKIP LOCKED` (concurrent claimers skip each other's rows instead of waiting), and a partial
//!   unique index (`one running run per thread`) makes a second running run of one thread
//!   impossible even if two claims race on different rows of a thread: the loser's statement fails
//!   with a unique violation, which [`claim`](RunQueue::claim) treats as "try the next run".
//! * Heartbeat, finish and release match `(run_id, attempt, status = 'running')` and, for
//!   heartbeat, an unexpired lease: a worker whose run was reaped matches nothing.
//! * `enqueue` locks the thread's active runs (`FOR UPDATE`) before applying the multitask
//!   strategy, and an advisory transaction lock on the thread id serializes two enqueues on a
//!   thread that has no active run yet (there is no row to lock).
//!
//! The schema is applied on [`connect`](PostgresQueue::connect) by versioned migrations, tracked
//! in `trellis_schema_migrations` (not sqlx's default table, which an application sharing the
//! database may use for its own).
//!
//! Kill -9 of a worker leaves its runs `running` until their lease expires; the next
//! [`reap`](RunQueue::reap) by any worker requeues them. A database crash keeps every committed
//! statement (the cluster runs with `fsync` on).

use std::time::Duration;

use async_trait::async_trait;
use sqlx::Row;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use uuid::Uuid;

use serde_json::Value;

use super::postgres_schema::{self as schema, record};
use super::{
    CancelAction, Heartbeat, Lease, Multitask, NewRun, Outcome, QueueError, Retention, RunQueue, RunRecord,
    RunStatus, StoredEvent,
};

/// The channel a claimable run is announced on (payload: the run id).
pub const RUNS_CHANNEL: &str = "trellis_runs";
/// The channel a cancellation of a running run is announced on (payload: the run id).
pub const CANCEL_CHANNEL: &str = "trellis_cancel";

/// The channel a run's change is announced on: events appended, its status changed (payload: the
/// run id, 36 bytes; one per transaction and run, as PostgreSQL folds equal notifications).
/// Followers on other workers read the run again; a hint only.
pub const EVENTS_CHANNEL: &str = "trellis_run_changes";

/// The columns every read returns (a macro, so statements stay `&'static str` for `concat!`).
macro_rules! columns {
    () => {
        "run_id, thread_id, status, payload, attempt, max_attempts, worker_id, cancel, error, \
         created_at, updated_at, result"
    };
}

/// The run queue in PostgreSQL, for many workers sharing one database. See [`RunQueue`] for the
/// contract. A claim takes the oldest due pending run whose thread runs nothing with `FOR UPDATE
/// SKIP LOCKED`, and a partial unique index makes two running runs of one thread impossible;
/// heartbeat, finish and release match `(run_id, attempt)` while the run is running, so a worker
/// whose lease was reaped changes nothing; every time is the database's `now()`. The schema is
/// applied on [`connect`](Self::connect) by versioned migrations recorded in
/// `trellis_schema_migrations`.
#[derive(Debug, Clone)]
pub struct PostgresQueue {
    pool: PgPool,
}

fn unavailable(e: sqlx::Error) -> QueueError {
    QueueError::Unavailable(e.to_string())
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl PostgresQueue {
    /// Connects to `url` (`postgres://user:password@host:port/database`, `?sslmode=…` honoured)
    /// with a pool of at most `connections`, and brings the schema up to date.
    pub async fn connect(url: &str, connections: u32) -> Result<Self, QueueError> {
        let options: PgConnectOptions = url
            .parse()
            .map_err(|e: sqlx::Error| QueueError::Unavailable(format!("bad database URL: {e}")))?;
        let options = options.application_name("trellis");
        let pool = PgPoolOptions::new()
            .max_connections(connections.max(1))
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options)
            .await
            .map_err(unavailable)?;
        Self::with_pool(pool).await
    }

    /// Uses `pool`, bringing the schema up to date.
    pub async fn with_pool(pool: PgPool) -> Result<Self, QueueError> {
        schema::migrate(&pool).await?;
        Ok(Self { pool })
    }

    /// Tells listening workers that runs may be claimable (requeued, released).
    async fn wake(&self) -> Result<(), QueueError> {
        sqlx::query("SELECT pg_notify('trellis_runs', '')")
            .execute(&self.pool)
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    /// The pool, for the server's other tables.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// [`RunQueue::enqueue`]'s statements, in `tx`; the caller commits or rolls back.
    async fn enqueue_in(
        tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
        run: &NewRun,
    ) -> Result<RunRecord, QueueError> {
        // Serializes enqueues on one thread, even before it has a row to lock.
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1::text, 7341))")
            .bind(run.thread_id)
            .execute(&mut **tx)
            .await
            .map_err(unavailable)?;
        let active: Vec<(Uuid, String)> = sqlx::query_as(
            "SELECT run_id, status FROM trellis_runs
             WHERE thread_id = $1 AND status IN ('pending', 'running')
             ORDER BY seq FOR UPDATE",
        )
        .bind(run.thread_id)
        .fetch_all(&mut **tx)
        .await
        .map_err(unavailable)?;
        if run.multitask == Multitask::Reject
            && let Some((first, _)) = active.first()
        {
            return Err(QueueError::Busy {
                thread_id: run.thread_id,
                active: *first,
            });
        }
        if active.len() >= run.max_active {
            return Err(QueueError::Full {
                thread_id: run.thread_id,
                active: active.len(),
            });
        }
        if let Some(action) = run.multitask.cancels_with() {
            sqlx::query(
                "WITH cancelled AS (
                     UPDATE trellis_runs
                     SET cancel = $2,
                         status = CASE WHEN status = 'pending' THEN 'interrupted' ELSE status END,
                         updated_at = now()
                     WHERE thread_id = $1 AND status IN ('pending', 'running')
                     RETURNING run_id, status)
                 SELECT pg_notify('trellis_cancel', run_id::text) FROM cancelled
                 WHERE status = 'running'",
            )
            .bind(run.thread_id)
            .bind(action.as_str())
            .execute(&mut **tx)
            .await
            .map_err(unavailable)?;
        }
        let row = sqlx::query(concat!(
            "INSERT INTO trellis_runs (run_id, thread_id, payload, multitask, max_attempts)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (run_id) DO NOTHING
             RETURNING ",
            columns!(),
            ""
        ))
        .bind(run.run_id)
        .bind(run.thread_id)
        .bind(&run.payload)
        .bind(run.multitask.as_str())
        .bind(i32::try_from(run.max_attempts.max(1)).unwrap_or(i32::MAX))
        .fetch_optional(&mut **tx)
        .await
        .map_err(unavailable)?;
        let Some(row) = row else {
            return Err(QueueError::Duplicate(run.run_id));
        };
        let stored = record(&row)?;
        sqlx::query("SELECT pg_notify('trellis_runs', $1::text)")
            .bind(run.run_id)
            .execute(&mut **tx)
            .await
            .map_err(unavailable)?;
        Ok(stored)
    }

    /// One claim attempt; `Ok(None)` when nothing is due, `Err(None)` when the chosen run's thread
    /// was just taken by another claimer (try again).
    async fn claim_once(&self, worker: &str, lease: Duration) -> Result<Option<Lease>, Option<QueueError>> {
        let row = sqlx::query(
            "WITH next AS (
                 SELECT r.run_id FROM trellis_runs r
                 WHERE r.status = 'pending' AND r.run_after <= now()
                   AND NOT EXISTS (SELECT 1 FROM trellis_runs x
                                   WHERE x.thread_id = r.thread_id AND x.status = 'running')
                   -- Only the oldest pending run of its thread: another claimer's lock on that
                   -- one makes SKIP LOCKED pass over it, and the next run must not jump ahead.
                   AND NOT EXISTS (SELECT 1 FROM trellis_runs y
                                   WHERE y.thread_id = r.thread_id AND y.status = 'pending'
                                     AND y.seq < r.seq)
                 ORDER BY r.seq
                 FOR UPDATE SKIP LOCKED
                 LIMIT 1)
             UPDATE trellis_runs r
             SET status = 'running', attempt = r.attempt + 1, worker_id = $1,
                 lease_until = now() + make_interval(secs => $2::float8 / 1000), updated_at = now()
             FROM next WHERE r.run_id = next.run_id
             RETURNING r.run_id, r.thread_id, r.attempt, r.payload",
        )
        .bind(worker)
        .bind(millis(lease))
        .fetch_optional(&self.pool)
        .await;
        match row {
            Ok(None) => Ok(None),
            Ok(Some(row)) => {
                let corrupt = |e: sqlx::Error| Some(QueueError::Corrupt(e.to_string()));
                let attempt: i32 = row.try_get("attempt").map_err(corrupt)?;
                Ok(Some(Lease {
                    run_id: row.try_get("run_id").map_err(corrupt)?,
                    thread_id: row.try_get("thread_id").map_err(corrupt)?,
                    attempt: u32::try_from(attempt).unwrap_or(0),
                    payload: row.try_get("payload").map_err(corrupt)?,
                }))
            }
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => Err(None),
            Err(e) => Err(Some(unavailable(e))),
        }
    }
}

#[async_trait]
impl RunQueue for PostgresQueue {
    async fn enqueue(&self, run: NewRun) -> Result<RunRecord, QueueError> {
        let mut tx = self.pool.begin().await.map_err(unavailable)?;
        match Self::enqueue_in(&mut tx, &run).await {
            Ok(stored) => {
                tx.commit().await.map_err(unavailable)?;
                Ok(stored)
            }
            Err(e) => {
                // Roll back now: a dropped transaction is rolled back only when its connection is
                // next used, and until then its row locks make claims skip the thread's runs.
                let _ = tx.rollback().await;
                Err(e)
            }
        }
    }

    async fn claim(&self, worker: &str, lease: Duration) -> Result<Option<Lease>, QueueError> {
        // A unique violation means another claimer took that thread between our scan and our
        // update: the next scan sees it running and moves on. Bounded, in case of a storm.
        for _ in 0..16 {
            match self.claim_once(worker, lease).await {
                Ok(found) => return Ok(found),
                Err(Some(e)) => return Err(e),
                Err(None) => continue,
            }
        }
        Ok(None)
    }

    async fn heartbeat(&self, lease: &Lease, extend: Duration) -> Result<Heartbeat, QueueError> {
        let row: Option<(Option<String>,)> = sqlx::query_as(
            "UPDATE trellis_runs
             SET lease_until = now() + make_interval(secs => $3::float8 / 1000), updated_at = now()
             WHERE run_id = $1 AND attempt = $2 AND status = 'running' AND lease_until > now()
             RETURNING cancel",
        )
        .bind(lease.run_id)
        .bind(i32::try_from(lease.attempt).unwrap_or(i32::MAX))
        .bind(millis(extend))
        .fetch_optional(&self.pool)
        .await
        .map_err(unavailable)?;
        Ok(match row {
            None => Heartbeat::Lost,
            Some((cancel,)) => Heartbeat::Held {
                cancel: cancel.as_deref().and_then(CancelAction::parse),
            },
        })
    }

    async fn finish_with(
        &self,
        lease: &Lease,
        outcome: Outcome,
        result: Option<Value>,
    ) -> Result<bool, QueueError> {
        let (status, error) = match outcome {
            Outcome::Success => (RunStatus::Success, None),
            Outcome::Error(error) => (RunStatus::Error, Some(error)),
            Outcome::Interrupted => (RunStatus::Interrupted, None),
        };
        let done = sqlx::query(
            "WITH done AS (
                 UPDATE trellis_runs
                 SET status = $3, error = $4, result = $5, worker_id = NULL, lease_until = NULL,
                     updated_at = now()
                 WHERE run_id = $1 AND attempt = $2 AND status = 'running'
                 RETURNING run_id)
             SELECT pg_notify('trellis_run_changes', run_id::text) FROM done",
        )
        .bind(lease.run_id)
        .bind(i32::try_from(lease.attempt).unwrap_or(i32::MAX))
        .bind(status.as_str())
        .bind(error)
        .bind(result)
        .fetch_optional(&self.pool)
        .await
        .map_err(unavailable)?;
        Ok(done.is_some())
    }

    async fn append_events(&self, lease: &Lease, events: &[(String, String)]) -> Result<bool, QueueError> {
        if events.is_empty() {
            return Ok(self
                .get(lease.run_id)
                .await?
                .is_some_and(|r| r.status == RunStatus::Running && r.attempt == lease.attempt));
        }
        let (names, data): (Vec<&str>, Vec<&str>) =
            events.iter().map(|(e, d)| (e.as_str(), d.as_str())).unzip();
        // `FOR SHARE` on the run's row: a reap (an UPDATE of that row) waits for this insert, so
        // once a run was taken from this lease no event of it can slip in; one holder at a time
        // makes `max(seq)` safe.
        let done = sqlx::query(
            "WITH held AS (
                 SELECT run_id FROM trellis_runs
                 WHERE run_id = $1 AND attempt = $2 AND status = 'running'
                 FOR SHARE),
             last AS (
                 SELECT coalesce(max(seq), 0) AS seq FROM trellis_run_events WHERE run_id = $1),
             stored AS (
                 INSERT INTO trellis_run_events (run_id, seq, attempt, event, data)
                 SELECT held.run_id, last.seq + e.n, $2, e.event, e.data
                 FROM held, last, unnest($3::text[], $4::text[]) WITH ORDINALITY AS e(event, data, n)
                 RETURNING 1)
             -- The followers on other workers: delivered when this statement commits.
             SELECT count(*) AS n, (SELECT pg_notify('trellis_run_changes', $1::text)
                                    WHERE EXISTS (SELECT 1 FROM stored)) AS notified
             FROM stored",
        )
        .bind(lease.run_id)
        .bind(i32::try_from(lease.attempt).unwrap_or(i32::MAX))
        .bind(names)
        .bind(data)
        .fetch_one(&self.pool)
        .await
        .map_err(unavailable)?;
        let stored: i64 = done
            .try_get("n")
            .map_err(|e| QueueError::Corrupt(e.to_string()))?;
        Ok(stored > 0)
    }

    async fn events(&self, run_id: Uuid, after: u64, limit: usize) -> Result<Vec<StoredEvent>, QueueError> {
        let rows: Vec<(i64, i32, String, String)> = sqlx::query_as(
            "SELECT seq, attempt, event, data FROM trellis_run_events
             WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
        )
        .bind(run_id)
        .bind(i64::try_from(after).unwrap_or(i64::MAX))
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&self.pool)
        .await
        .map_err(unavailable)?;
        Ok(rows
            .into_iter()
            .map(|(seq, attempt, event, data)| StoredEvent {
                seq: u64::try_from(seq).unwrap_or(0),
                attempt: u32::try_from(attempt).unwrap_or(0),
                event,
                data,
            })
            .collect())
    }

    async fn release(&self, lease: &Lease) -> Result<bool, QueueError> {
        let done = sqlx::query(
            "UPDATE trellis_runs
             SET status = 'pending', worker_id = NULL, lease_until = NULL, run_after = now(),
                 max_attempts = max_attempts + 1, updated_at = now()
             WHERE run_id = $1 AND attempt = $2 AND status = 'running'",
        )
        .bind(lease.run_id)
        .bind(i32::try_from(lease.attempt).unwrap_or(i32::MAX))
        .execute(&self.pool)
        .await
        .map_err(unavailable)?;
        if done.rows_affected() == 1 {
            self.wake().await?;
        }
        Ok(done.rows_affected() == 1)
    }

    async fn cancel(&self, run_id: Uuid, action: CancelAction) -> Result<RunRecord, QueueError> {
        let row = sqlx::query(concat!(
            "UPDATE trellis_runs
             SET cancel = $2,
                 status = CASE WHEN status = 'pending' THEN 'interrupted' ELSE status END,
                 updated_at = now()
             WHERE run_id = $1 AND status IN ('pending', 'running')
             RETURNING ",
            columns!(),
            ""
        ))
        .bind(run_id)
        .bind(action.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(unavailable)?;
        match row {
            Some(row) => {
                let stored = record(&row)?;
                // A hint for the worker holding a running run (its heartbeat reads the flag
                // anyway), or for the followers of a pending run that just ended.
                let channel = if stored.status == RunStatus::Running {
                    CANCEL_CHANNEL
                } else {
                    EVENTS_CHANNEL
                };
                sqlx::query("SELECT pg_notify($1, $2::text)")
                    .bind(channel)
                    .bind(run_id)
                    .execute(&self.pool)
                    .await
                    .map_err(unavailable)?;
                Ok(stored)
            }
            None => match self.get(run_id).await? {
                Some(_) => Err(QueueError::Finished(run_id)),
                None => Err(QueueError::NotFound(run_id)),
            },
        }
    }

    async fn reap(&self, backoff: Duration) -> Result<usize, QueueError> {
        let done = sqlx::query(
            "WITH reaped AS (
             UPDATE trellis_runs
             SET status = CASE WHEN attempt >= max_attempts THEN 'error' ELSE 'pending' END,
                 error = CASE WHEN attempt >= max_attempts
                              THEN jsonb_build_object('error', 'LeaseExpired', 'message',
                                   'the run''s worker stopped renewing its lease ' || attempt || ' times')
                              ELSE error END,
                 worker_id = NULL, lease_until = NULL,
                 run_after = now() + make_interval(secs => $1::float8 / 1000), updated_at = now()
             WHERE status = 'running' AND lease_until <= now()
             RETURNING run_id, status)
             -- Their followers (a run given up has ended).
             SELECT pg_notify('trellis_run_changes', run_id::text) FROM reaped",
        )
        .bind(millis(backoff))
        .fetch_all(&self.pool)
        .await
        .map_err(unavailable)?;
        if !done.is_empty() {
            self.wake().await?;
        }
        Ok(done.len())
    }

    async fn get(&self, run_id: Uuid) -> Result<Option<RunRecord>, QueueError> {
        let row = sqlx::query(concat!(
            "SELECT ",
            columns!(),
            " FROM trellis_runs WHERE run_id = $1"
        ))
        .bind(run_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(unavailable)?;
        row.as_ref().map(record).transpose()
    }

    async fn list(&self, thread_id: Uuid, limit: usize) -> Result<Vec<RunRecord>, QueueError> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            columns!(),
            " FROM trellis_runs WHERE thread_id = $1 ORDER BY seq DESC LIMIT $2"
        ))
        .bind(thread_id)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&self.pool)
        .await
        .map_err(unavailable)?;
        rows.iter().map(record).collect()
    }

    async fn active(&self, limit: usize) -> Result<Vec<RunRecord>, QueueError> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            columns!(),
            " FROM trellis_runs WHERE status IN ('pending', 'running') ORDER BY seq LIMIT $1"
        ))
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&self.pool)
        .await
        .map_err(unavailable)?;
        rows.iter().map(record).collect()
    }

    async fn prune(&self, rule: Retention) -> Result<usize, QueueError> {
        // Events go with their run (ON DELETE CASCADE). A finished run is never written again,
        // so its updated_at is when it finished.
        let pruned: Vec<(Uuid,)> = sqlx::query_as(
            "WITH finished AS (
                 SELECT run_id, updated_at,
                        row_number() OVER (ORDER BY updated_at DESC, seq DESC) AS n
                 FROM trellis_runs WHERE status IN ('success', 'error', 'interrupted'))
             DELETE FROM trellis_runs r USING finished f
             WHERE r.run_id = f.run_id AND r.status IN ('success', 'error', 'interrupted')
               AND (f.n > $1 OR f.updated_at <= now() - make_interval(secs => $2::float8 / 1000))
             RETURNING r.run_id",
        )
        .bind(i64::try_from(rule.keep).unwrap_or(i64::MAX))
        // At most a century: an interval PostgreSQL can hold.
        .bind(millis(
            rule.max_age.min(Duration::from_secs(100 * 365 * 24 * 3600)),
        ))
        .fetch_all(&self.pool)
        .await
        .map_err(unavailable)?;
        Ok(pruned.len())
    }

    async fn delete(&self, run_id: Uuid) -> Result<bool, QueueError> {
        let row: Option<(Uuid, String)> = sqlx::query_as(
            "DELETE FROM trellis_runs WHERE run_id = $1 AND status <> 'running'
             RETURNING thread_id, status",
        )
        .bind(run_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(unavailable)?;
        if row.is_some() {
            return Ok(true);
        }
        match self.get(run_id).await? {
            Some(running) => Err(QueueError::Busy {
                thread_id: running.thread_id,
                active: run_id,
            }),
            None => Ok(false),
        }
    }
}
