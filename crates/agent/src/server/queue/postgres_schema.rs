//! The run queue's schema in PostgreSQL: its versioned migrations, and a `trellis_runs` row read
//! back as a [`RunRecord`]. Used by [`PostgresQueue`](super::PostgresQueue).

use chrono::{DateTime, Utc};
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::postgres::{PgPool, PgRow};
use sqlx::{Row, SqlSafeStr};

use super::{CancelAction, QueueError, RunRecord, RunStatus};

/// The schema, in order; a released migration is never edited, only followed by another.
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "runs", include_str!("migrations/0001_runs.sql")),
    (2, "events", include_str!("migrations/0002_events.sql")),
];

/// Where applied migrations are recorded.
const MIGRATIONS_TABLE: &str = "trellis_schema_migrations";

/// Brings the schema in `pool`'s database up to date, recording applied migrations in
/// [`MIGRATIONS_TABLE`] (not sqlx's default table, which an application sharing the database may
/// use for its own).
pub(super) async fn migrate(pool: &PgPool) -> Result<(), QueueError> {
    let migrations = MIGRATIONS
        .iter()
        .map(|&(version, name, sql)| {
            Migration::new(
                version,
                name.into(),
                MigrationType::Simple,
                sql.into_sql_str(),
                false,
            )
        })
        .collect();
    let mut migrator = Migrator::with_migrations(migrations);
    migrator.dangerous_set_table_name(MIGRATIONS_TABLE);
    migrator
        .run(pool)
        .await
        .map_err(|e| QueueError::Unavailable(format!("applying the schema: {e}")))?;
    Ok(())
}

/// A `runs` row as a record.
pub(super) fn record(row: &PgRow) -> Result<RunRecord, QueueError> {
    let corrupt = |e: sqlx::Error| QueueError::Corrupt(e.to_string());
    let status: String = row.try_get("status").map_err(corrupt)?;
    let cancel: Option<String> = row.try_get("cancel").map_err(corrupt)?;
    let attempt: i32 = row.try_get("attempt").map_err(corrupt)?;
    let max_attempts: i32 = row.try_get("max_attempts").map_err(corrupt)?;
    Ok(RunRecord {
        run_id: row.try_get("run_id").map_err(corrupt)?,
        thread_id: row.try_get("thread_id").map_err(corrupt)?,
        status: RunStatus::parse(&status)
            .ok_or_else(|| QueueError::Corrupt(format!("unknown run status {status:?}")))?,
        payload: row.try_get("payload").map_err(corrupt)?,
        attempt: u32::try_from(attempt).unwrap_or(0),
        max_attempts: u32::try_from(max_attempts).unwrap_or(1),
        worker: row.try_get("worker_id").map_err(corrupt)?,
        cancel: match cancel {
            None => None,
            Some(name) => Some(
                CancelAction::parse(&name)
                    .ok_or_else(|| QueueError::Corrupt(format!("unknown cancel action {name:?}")))?,
            ),
        },
        error: row.try_get("error").map_err(corrupt)?,
        created_at: row.try_get::<DateTime<Utc>, _>("created_at").map_err(corrupt)?,
        updated_at: row.try_get::<DateTime<Utc>, _>("updated_at").map_err(corrupt)?,
        result: row.try_get("result").map_err(corrupt)?,
    })
}
