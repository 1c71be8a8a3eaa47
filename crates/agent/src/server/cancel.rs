//! Stopping and forgetting runs: `POST /threads/{id}/runs/{run_id}/cancel` (`action=interrupt`
//! or `rollback`: [`CancelAction`], `wait`), `POST /runs/cancel` (many runs at once),
//! `DELETE /threads/{id}/runs/{run_id}`, what a new run
//! does to the runs in flight ([`Strategy`]), and `CancelOnDrop`, which
//! cancels a run whose client hung up when it asked for that (`on_disconnect: "cancel"`,
//! `cancel_on_disconnect=true`).
//!
//! What a cancelled run leaves is in [`crate::server::execute`]: `interrupt` keeps what the run
//! checkpointed and ends it `interrupted`; `rollback` puts the thread back as it was before the run
//! and forgets the run. The run's future is dropped at its current await point, so a command it
//! was running in the sandbox is killed with its whole process group.

use axum::extract::{Extension, Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use crate::server::Shared;
use crate::server::error::{ApiError, ApiResult};
use crate::server::extract::{JsonBody, User, parse_uuid};
use crate::server::run_ref::RunRef;
use crate::server::run_registry::RunStatus;
use crate::server::runs::{find, find_of, result_body};

/// How a run is cancelled (`action` of `POST …/cancel`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelAction {
    /// Stop it; the thread keeps what it checkpointed.
    Interrupt,
    /// Stop it, put the thread back as it was before the run and forget the run.
    Rollback,
}

impl CancelAction {
    /// `interrupt` or `rollback`; a 422 for anything else.
    pub fn parse(name: &str) -> ApiResult<Self> {
        match name {
            "interrupt" => Ok(Self::Interrupt),
            "rollback" => Ok(Self::Rollback),
            other => Err(ApiError::unprocessable(format!(
                "action must be interrupt or rollback, not {other:?}"
            ))),
        }
    }
}

/// What a new run does when its thread is already running (`multitask_strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Refuse the new run: 409.
    Reject,
    /// Cancel the runs in flight ([`CancelAction::Interrupt`]), then run.
    Interrupt,
    /// Cancel the runs in flight ([`CancelAction::Rollback`]), then run.
    Rollback,
    /// Wait `pending` until the runs before it have ended.
    Enqueue,
}

impl Strategy {
    /// A `multitask_strategy` value (default `reject`); a 422 for anything else.
    pub fn parse(name: Option<&str>) -> ApiResult<Self> {
        match name {
            None | Some("reject") => Ok(Self::Reject),
            Some("interrupt") => Ok(Self::Interrupt),
            Some("rollback") => Ok(Self::Rollback),
            Some("enqueue") => Ok(Self::Enqueue),
            Some(other) => Err(ApiError::unprocessable(format!(
                "multitask_strategy must be reject, interrupt, rollback or enqueue, not {other:?}"
            ))),
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Reject => "reject",
            Self::Interrupt => "interrupt",
            Self::Rollback => "rollback",
            Self::Enqueue => "enqueue",
        }
    }
}

/// Cancels its run (action `interrupt`) when dropped before the run has ended: held by a
/// response whose client asked for it, so a hung-up client stops the run.
#[derive(Debug)]
pub(crate) struct CancelOnDrop(pub(crate) Option<RunRef>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        match self.0.take() {
            Some(RunRef::Local(run)) if run.cancel(CancelAction::Interrupt) => {
                tracing::info!("run {}: its client hung up, cancelling it", run.run_id);
            }
            Some(shared @ RunRef::Shared(_)) => {
                // Dropped inside the runtime (a response body): the queue is asked on a task.
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    runtime.spawn(async move {
                        if let Ok(true) = shared.cancel(CancelAction::Interrupt).await {
                            tracing::info!("run {}: its client hung up, cancelling it", shared.run_id());
                        }
                    });
                }
            }
            Some(RunRef::Local(_)) | None => {}
        }
    }
}

/// A boolean query parameter as both clients send it: `true`/`false` (Python), `1`/`0` (JS),
/// also `yes`/`no`; a 422 otherwise.
pub(crate) fn flag(name: &str, value: &str) -> ApiResult<bool> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" => Ok(true),
        "false" | "0" | "no" | "" => Ok(false),
        other => Err(ApiError::unprocessable(format!(
            "{name} must be true or false, not {:?}",
            other.chars().take(32).collect::<String>()
        ))),
    }
}

/// `POST /threads/{thread_id}/runs/{run_id}/cancel?wait=0|1&action=interrupt|rollback`: ask the
/// run to stop. Without `wait`, 202 with no body at once; with `wait=1`, the run's result once it
/// has stopped (keep-alive newlines first, as `/join`). A `pending` run is cancelled before it
/// starts. Cancelling a run that has already ended changes nothing (`interrupt`) or is a 409
/// (`rollback`: it can no longer be undone).
pub async fn cancel(
    State(server): State<Shared>,
    Extension(user): Extension<User>,
    Path((thread, run)): Path<(String, String)>,
    RawQuery(query): RawQuery,
) -> ApiResult<Response> {
    let run = find(&server, &user, &thread, &run).await?;
    let mut wait = false;
    let mut action = CancelAction::Interrupt;
    for (key, value) in url::form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        match key.as_ref() {
            "wait" => wait = flag("wait", &value)?,
            "action" => action = CancelAction::parse(&value)?,
            _ => {}
        }
    }
    if !run.cancel(action).await? && action == CancelAction::Rollback {
        return Err(ApiError::conflict(format!(
            "run {} has already ended: it can no longer be rolled back",
            run.run_id()
        )));
    }
    if wait {
        return Ok(result_body(run, false));
    }
    Ok(StatusCode::ACCEPTED.into_response())
}

/// `DELETE /threads/{thread_id}/runs/{run_id}`: forget a run that has ended (204); one still
/// pending or running is a 409 (cancel it first). The thread's state is not touched.
pub async fn delete(
    State(server): State<Shared>,
    Extension(user): Extension<User>,
    Path((thread, run)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    let run = find(&server, &user, &thread, &run).await?;
    if !run.is_done() {
        return Err(ApiError::conflict(format!(
            "run {} is still {}: cancel it first",
            run.run_id(),
            run.status_name()
        )));
    }
    match &run {
        RunRef::Local(run) => server.runs.remove(run),
        RunRef::Shared(shared) => {
            shared
                .queue
                .delete(shared.record.run_id)
                .await
                .map_err(crate::server::run_ref::queue_error)?;
        }
    }
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /runs/cancel` body: the runs of one thread by id, or every run of the caller's threads in
/// a status.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelMany {
    #[serde(default)]
    thread_id: Option<String>,
    #[serde(default)]
    run_ids: Option<Vec<String>>,
    #[serde(default)]
    status: Option<String>,
}

/// `POST /runs/cancel?action=interrupt|rollback`: cancel `run_ids` of `thread_id` (every id must
/// be a run of that thread: 404 otherwise, and nothing is cancelled), or every run of the
/// caller's threads that is `pending`, `running` or either (`all`). 204. Both forms, or neither:
/// 422. Runs that have already ended are skipped.
pub async fn cancel_many(
    State(server): State<Shared>,
    Extension(user): Extension<User>,
    RawQuery(query): RawQuery,
    JsonBody(body): JsonBody<CancelMany>,
) -> ApiResult<StatusCode> {
    let mut action = CancelAction::Interrupt;
    for (key, value) in url::form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        if key == "action" {
            action = CancelAction::parse(&value)?;
        }
    }
    let runs = match (body.thread_id, body.run_ids, body.status) {
        (Some(thread), Some(ids), None) => {
            let thread = parse_uuid("thread_id", &thread)?;
            server.threads.get(&user, &thread)?;
            let mut runs = Vec::new();
            for id in &ids {
                runs.push(find_of(&server, &thread, &parse_uuid("run_id", id)?).await?);
            }
            runs
        }
        (None, None, Some(status)) => {
            let wanted: &[RunStatus] = match status.as_str() {
                "pending" => &[RunStatus::Pending],
                "running" => &[RunStatus::Running],
                "all" => &[RunStatus::Pending, RunStatus::Running],
                other => {
                    return Err(ApiError::unprocessable(format!(
                        "status must be pending, running or all, not {:?}",
                        other.chars().take(32).collect::<String>()
                    )));
                }
            };
            if let Some(shared) = &server.shared {
                crate::server::workers::active_of(shared, &user, wanted).await?
            } else {
                server
                    .runs
                    .in_flight()
                    .into_iter()
                    .filter(|r| {
                        wanted.contains(&r.status()) && server.threads.get(&user, &r.thread_id).is_ok()
                    })
                    .map(RunRef::Local)
                    .collect()
            }
        }
        _ => {
            return Err(ApiError::unprocessable(
                "give thread_id and run_ids, or status, not both",
            ));
        }
    };
    for run in runs {
        run.cancel(action).await?;
    }
    Ok(StatusCode::NO_CONTENT)
}
