//! A run from a checked run-create to its end: `start` checks the body against the thread
//! (its pending interrupt, `if_not_exists`), registers the run in its thread's queue
//! (`RunRegistry::begin`, which applies the `multitask_strategy`) and spawns its task; the task waits for the runs ahead of it, runs the
//! agent until it ends or is cancelled, and leaves the run's status and its thread's true.
//!
//! | how the run ends | run status | thread status | thread state |
//! |---|---|---|---|
//! | the agent finished | `success` | `idle` | what the run saved |
//! | it stopped for approvals | `success` | `interrupted` (`interrupts` set) | what the run saved, the calls waiting |
//! | the agent failed | `error` | `error` | what the run saved before the failure |
//! | decisions or a `command.update` refused when the run started (a race with another resume, a removed message the thread does not have) | `error` | as before the run | as before the run |
//! | cancelled, `action=interrupt` (also: a newer run with `multitask_strategy` `interrupt`, a client gone with `on_disconnect` `cancel`) | `interrupted` | `interrupted` if it still waits for decisions, else `idle` | every checkpoint saved before the cancel (a step is saved whole or not at all); a command running in the sandbox is killed |
//! | cancelled, `action=rollback` | `interrupted`, then the run is forgotten (404) | as before the run | as before the run (see `roll_back`) |
//! | cancelled while still `pending` | as above | unchanged | unchanged |

use std::sync::Arc;

use chrono::Utc;
use serde_json::{Map, Value, json};
use trellis_middleware::runtime::checkpoint::Checkpoint;
use trellis_middleware::runtime::state::State;
use trellis_middleware::{Message, ThreadId};
use uuid::Uuid;

use crate::server::drive::{Failure, drive};
use crate::server::error::{ApiError, ApiResult};
use crate::server::extract::User;
use crate::server::messages::input_messages;
use crate::server::run_ref::RunRef;
use crate::server::run_registry::{CancelAction, RunHandle, RunStatus, Strategy};
use crate::server::runs::RunCreate;
use crate::server::stream::{Mode, Part, thread_values};
use crate::server::threads::{Rest, ThreadRecord, thread_id};
use crate::server::{Graph, Shared, assistants, resume};

/// A run that has been checked and registered, not yet started.
pub(crate) struct Started {
    /// The run.
    pub run: RunRef,
    /// The modes its creator streams.
    pub modes: Vec<Mode>,
}

/// What the run hands the agent.
pub(crate) enum Input {
    /// New messages.
    Messages(Vec<Message>),
    /// Decisions for the calls the thread waits on.
    Resume(trellis_middleware::runtime::interrupt::Decisions),
}

/// Where a run runs: a thread of the caller's, or a temporary one (a stateless run), deleted when
/// the run ends unless `on_completion` is `keep`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// `POST /threads/{id}/runs…`.
    Thread(Uuid),
    /// `POST /runs…`: a new thread; `true` to delete it when the run ends.
    Stateless {
        /// Delete the thread when the run ends.
        delete: bool,
    },
}

/// A run-create body as checked before anything changes.
struct Checked {
    modes: Vec<Mode>,
    strategy: Strategy,
    graph_id: String,
    graph: Arc<dyn Graph>,
    /// The new messages (`None`: a resume).
    messages: Option<Vec<Message>>,
}

/// Check `body` for a run on `target` without changing anything: every refusal a body alone can
/// earn (a batch checks all its runs before it starts any).
fn check(server: &Shared, target: &Target, body: &RunCreate) -> ApiResult<Checked> {
    body.refuse_unbuilt()?;
    let modes = body.modes()?;
    let strategy = Strategy::parse(body.multitask_strategy.as_deref())?;
    let graph_id = assistants::resolve(server, &body.assistant_id)?;
    let graph = server
        .graphs
        .get(&graph_id)
        .cloned()
        .ok_or_else(|| ApiError::not_found("graph"))?;
    let command = body.command.as_ref().filter(|c| !c.is_null());
    let input = body.input.as_ref().filter(|i| !i.is_null());
    if command.is_some() && matches!(target, Target::Stateless { .. }) {
        return Err(ApiError::new(
            axum::http::StatusCode::BAD_REQUEST,
            "You must provide a thread_id when resuming",
        ));
    }
    if body.names_checkpoint() && matches!(target, Target::Stateless { .. }) {
        return Err(ApiError::unprocessable(
            "a new thread has no checkpoints to start from",
        ));
    }
    let resumes = match command {
        Some(command) => crate::server::command::parse(command)?.resume.is_some(),
        None => false,
    };
    let messages = match (input, command) {
        (Some(_), Some(_)) => {
            return Err(ApiError::unprocessable(
                "give input or command, not both: a thread waiting for decisions takes command.resume alone",
            ));
        }
        // `command.update` / `goto` alone: the run goes on from the updated state.
        (None, Some(_)) if !resumes => Some(Vec::new()),
        // From an older checkpoint, no input runs the model again there (a regenerate).
        (None, None) if body.names_checkpoint() => Some(Vec::new()),
        (None, None) => {
            return Err(ApiError::unprocessable(
                "input is required: {\"messages\": [...]}, or command: {\"resume\": ...}",
            ));
        }
        (Some(input), None) => Some(input_messages(input)?),
        (None, Some(_)) => None,
    };
    Ok(Checked {
        modes,
        strategy,
        graph_id,
        graph,
        messages,
    })
}

/// Check a batch of stateless run-creates: the first refusal, before any run starts.
pub(crate) fn check_batch(server: &Shared, bodies: &[RunCreate]) -> ApiResult<()> {
    let target = Target::Stateless { delete: true };
    for (i, body) in bodies.iter().enumerate() {
        check(server, &target, body)
            .map_err(|e| ApiError::new(e.status, format!("run {i}: {}", e.detail)))?;
    }
    Ok(())
}

/// Check a run-create of `user` on `target`, register it and start it on a task of its own.
/// Nothing is changed when it is refused.
pub(crate) async fn start(
    server: &Shared,
    user: &User,
    target: Target,
    body: RunCreate,
) -> ApiResult<Started> {
    let Checked {
        modes,
        strategy,
        graph_id,
        graph,
        messages,
    } = check(server, &target, &body)?;
    let command = body.command.as_ref().filter(|c| !c.is_null());
    let (thread, exists) = match target {
        Target::Stateless { .. } => (Uuid::new_v4(), false),
        Target::Thread(thread) => match (server.threads.get(user, &thread), body.if_not_exists.as_deref()) {
            (Ok(_), None | Some("reject" | "create")) => (thread, true),
            (Err(missing), None | Some("reject")) => return Err(missing),
            (Err(_), Some("create")) => (thread, false),
            (_, Some(other)) => {
                return Err(ApiError::unprocessable(format!(
                    "if_not_exists must be reject or create, not {other:?}"
                )));
            }
        },
    };
    let from = match (exists, body.names_checkpoint(), messages.is_none()) {
        (_, false, _) => None,
        (_, true, true) => {
            return Err(ApiError::unprocessable(
                "a resume continues the thread's latest checkpoint: give no checkpoint",
            ));
        }
        (false, true, false) => {
            return Err(ApiError::unprocessable(
                "a new thread has no checkpoints to start from",
            ));
        }
        (true, true, false) => branch_point(server, &thread, &body).await?,
    };
    let input = check_input(
        server,
        graph.as_ref(),
        user,
        (&thread, exists, from.is_some()),
        messages,
        command,
    )
    .await?;
    if !exists {
        let now = Utc::now();
        let record = ThreadRecord {
            thread_id: thread,
            owner: user.0.clone(),
            created_at: now,
            updated_at: now,
            metadata: Map::new(),
            status: Rest::Idle,
            interrupts: None,
        };
        if server.threads.insert(record).await?.is_err() {
            return Err(ApiError::conflict(format!("thread {thread} exists")));
        }
    }
    let kwargs = json!({
        "input": body.input, "command": body.command, "config": body.config, "context": body.context,
        "stream_mode": body.stream_mode, "stream_subgraphs": body.stream_subgraphs,
        "stream_resumable": body.stream_resumable, "on_disconnect": body.on_disconnect,
        "on_completion": body.on_completion, "feedback_keys": body.feedback_keys,
        "durability": body.durability, "checkpoint_during": body.checkpoint_during,
        "langsmith_tracer": body.langsmith_tracer, "temporary": matches!(target, Target::Stateless { .. }),
        "checkpoint": body.checkpoint, "checkpoint_id": body.checkpoint_id,
    });
    let resumable = body.stream_resumable.unwrap_or(false);
    if let Some(shared) = &server.shared {
        let metadata = body.metadata.unwrap_or_default();
        let spec = crate::server::workers::RunSpec {
            graph: &graph_id,
            modes: &modes,
            resumable,
            strategy,
            metadata: &metadata,
            kwargs: &kwargs,
        };
        let enqueued = crate::server::workers::enqueue(shared, user, thread, spec).await;
        if enqueued.is_err() && !exists {
            // The thread was made for this run only.
            let _ = server.threads.remove(&thread).await;
        }
        return Ok(Started {
            run: enqueued?,
            modes,
        });
    }
    let run = Arc::new(RunHandle::new(
        thread,
        graph_id,
        (modes.clone(), resumable, strategy),
        body.metadata.unwrap_or_default(),
        kwargs,
    ));
    let ahead = match server.runs.begin(run.clone()) {
        Ok(ahead) => ahead,
        Err(e) => {
            if !exists {
                // The thread was made for this run only.
                let _ = server.threads.remove(&thread).await;
            }
            return Err(e);
        }
    };
    let delete_after = matches!(target, Target::Stateless { delete: true });
    tokio::spawn(execute(
        server.clone(),
        run.clone(),
        (graph, user.clone()),
        (input, from),
        ahead,
        delete_after,
    ));
    Ok(Started {
        run: RunRef::Local(run),
        modes,
    })
}

/// The older checkpoint of `thread` a run starts from, when the body names one; `None` for its
/// latest (or none named). 404 for an id of none of its checkpoints.
async fn branch_point(server: &Shared, thread: &Uuid, body: &RunCreate) -> ApiResult<Option<u64>> {
    branch_at(server, thread, body.start_from(thread)?).await
}

/// [`branch_point`] of a queued run, from the `checkpoint` / `checkpoint_id` its `kwargs` keep
/// (checked when it was created; the thread may have moved on since).
pub(crate) async fn branch_in(server: &Shared, thread: &Uuid, kwargs: &Value) -> ApiResult<Option<u64>> {
    let named =
        crate::server::runs::checkpoint_named(kwargs.get("checkpoint"), kwargs.get("checkpoint_id"), thread)?;
    branch_at(server, thread, named).await
}

async fn branch_at(server: &Shared, thread: &Uuid, seq: Option<u64>) -> ApiResult<Option<u64>> {
    let Some(seq) = seq else {
        return Ok(None);
    };
    let head = server
        .checkpointer
        .peek(&thread_id(thread))
        .await
        .map_err(|e| ApiError::internal("reading a thread's checkpoints", e))?
        .map(|s| s.checkpoint.seq);
    match head {
        Some(head) if seq == head => Ok(None),
        Some(head) if seq < head => Ok(Some(seq)),
        _ => Err(ApiError::not_found(format!(
            "checkpoint {} of thread {thread}",
            crate::server::checkpoints::checkpoint_id(thread, seq)
        ))),
    }
}

/// The run's input: its messages (none for a `command` without `resume`: its `update` is applied
/// when the run starts, see [`crate::server::command`]), or the decisions `command.resume` gives
/// for what the thread waits on.
/// A new message for a thread that waits for decisions, with no run ahead that could answer them,
/// is a 409, as a resume of a thread that waits for nothing.
pub(crate) async fn check_input(
    server: &Shared,
    graph: &dyn Graph,
    user: &User,
    (thread, exists, branching): (&Uuid, bool, bool),
    messages: Option<Vec<Message>>,
    command: Option<&Value>,
) -> ApiResult<Input> {
    // A branch starts from an older checkpoint: what the latest waits for does not matter.
    let pending = if exists && !branching {
        // The agent only reads the thread here; the run prepares its own input later.
        match graph.agent(user.id(), &thread_id(thread)).await {
            Ok(agent) => agent
                .pending_interrupt(&thread_id(thread))
                .await
                .map_err(|e| ApiError::internal("reading the thread's pending interrupt", e))?,
            Err(e) if command.is_some() => {
                return Err(ApiError::internal("building the agent", format!("{e:#}")));
            }
            // The run reports it as its error, as any other run would.
            Err(_) => None,
        }
    } else {
        None
    };
    let resume = command.filter(|c| c.get("resume").is_some_and(|r| !r.is_null()));
    // A command without `resume` (`update`, `goto`) runs on from the thread as new input would.
    let messages = messages.or_else(|| command.map(|_| Vec::new()));
    match (messages, resume) {
        (_, Some(command)) => Ok(Input::Resume(resume::decisions(
            thread,
            command,
            pending.as_ref(),
        )?)),
        (Some(messages), None) => {
            if let Some(pending) = pending
                && !server.busy(thread).await?
            {
                let ids: Vec<&str> = pending.requests.iter().map(|r| r.tool.as_str()).collect();
                return Err(ApiError::conflict(format!(
                    "thread {thread} is waiting for decisions on {ids:?}: resume it with command.resume"
                )));
            }
            Ok(Input::Messages(messages))
        }
        (None, None) => Err(ApiError::unprocessable("input is required")),
    }
}

/// The run's task: wait for its turn, run it, set its status and its thread's.
pub(crate) async fn execute(
    server: Shared,
    run: Arc<RunHandle>,
    (graph, user): (Arc<dyn Graph>, User),
    (input, from): (Input, Option<u64>),
    ahead: Vec<Arc<RunHandle>>,
    delete_after: bool,
) {
    for before in ahead {
        tokio::select! {
            _ = before.result() => {}
            _ = run.cancelled() => break,
        }
    }
    if let Some(action) = run.cancelled_with() {
        // Cancelled while pending: it never ran.
        let values = thread_values(&server, &run.thread_id)
            .await
            .unwrap_or(Value::Null);
        end(
            &server,
            &run,
            RunStatus::Interrupted,
            values,
            action == CancelAction::Rollback,
        );
        return finish_thread(&server, &run, delete_after).await;
    }
    run.set_status(RunStatus::Running);
    let tid = thread_id(&run.thread_id);
    let before_run = server.threads.get(&user, &run.thread_id).ok();
    let start_seq = match server.checkpointer.peek(&tid).await {
        Ok(stored) => stored.map(|s| s.checkpoint.seq),
        Err(e) => {
            let message = e.to_string();
            run.push(Part::error("CheckpointError", &message), true);
            let result = json!({"__error__": {"error": "CheckpointError", "message": message}});
            set_thread(&server, &run, Rest::Error, None).await;
            end(&server, &run, RunStatus::Error, result, false);
            return finish_thread(&server, &run, delete_after).await;
        }
    };
    if let Some(seq) = from
        && let Err(e) = roll_back(&server, &tid, Some(seq)).await
    {
        // The branch could not be made: the run fails before it changed anything.
        let message = format!("{e:#}");
        run.push(Part::error("CheckpointError", &message), true);
        let result = json!({"__error__": {"error": "CheckpointError", "message": message}});
        end(&server, &run, RunStatus::Error, result, false);
        return finish_thread(&server, &run, delete_after).await;
    }
    let outcome = drive(&server, &run, graph.as_ref(), &user, input).await;
    let (status, result, forget) = match outcome {
        Ok((parts, result, interrupts)) => {
            for part in parts {
                run.push(part, true);
            }
            let rest = if interrupts.is_some() {
                Rest::Interrupted
            } else {
                Rest::Idle
            };
            set_thread(&server, &run, rest, interrupts).await;
            (RunStatus::Success, result, false)
        }
        Err(Failure::Failed(kind, message)) => {
            run.push(Part::error(&kind, &message), true);
            set_thread(&server, &run, Rest::Error, None).await;
            (
                RunStatus::Error,
                json!({"__error__": {"error": kind, "message": message}}),
                false,
            )
        }
        Err(Failure::Refused(kind, message)) => {
            run.push(Part::error(kind, &message), true);
            (
                RunStatus::Error,
                json!({"__error__": {"error": kind, "message": message}}),
                false,
            )
        }
        Err(Failure::Cancelled(pending)) => {
            let rollback = run.cancelled_with() == Some(CancelAction::Rollback);
            if rollback && !run.is_lost() {
                if let Err(e) = roll_back(&server, &tid, start_seq).await {
                    tracing::warn!("run {}: cannot roll its thread back: {e:#}", run.run_id);
                }
                if let Some(before) = before_run {
                    set_thread(&server, &run, before.status, before.interrupts).await;
                }
            } else {
                let rest = if pending.is_some() {
                    Rest::Interrupted
                } else {
                    Rest::Idle
                };
                set_thread(&server, &run, rest, pending).await;
            }
            // Every stream of a run ends with the thread's whole state.
            let values = thread_values(&server, &run.thread_id)
                .await
                .unwrap_or(Value::Null);
            if !values.is_null() {
                run.push(Part::new(Mode::Values, &values), true);
            }
            (RunStatus::Interrupted, values, rollback)
        }
    };
    end(&server, &run, status, result, forget);
    finish_thread(&server, &run, delete_after).await;
}

/// End `run` as its thread stands, running nothing: a run taken over from a worker that died
/// after the run's work was done (its thread's newest checkpoint holds its answer) and before
/// its end was stored. Its stream ends, as every run's does, with the thread's state (`values`).
pub(crate) async fn conclude(server: Shared, run: Arc<RunHandle>, values: Value) {
    run.set_status(RunStatus::Running);
    run.push(Part::new(Mode::Values, &values), true);
    set_thread(&server, &run, Rest::Idle, None).await;
    end(&server, &run, RunStatus::Success, values, false);
}

/// Free the thread before the followers see the end (a client that starts its next run as soon as
/// the stream closes gets no 409), then set the run's result; a forgotten run is a 404 afterwards.
fn end(server: &Shared, run: &RunHandle, status: RunStatus, result: Value, forget: bool) {
    server.runs.end(run);
    if forget {
        server.runs.remove(run);
    }
    run.finish(status, result);
}

/// Store the thread's status after `run`.
async fn set_thread(server: &Shared, run: &RunHandle, rest: Rest, interrupts: Option<Value>) {
    if let Some(shared) = &server.shared
        && let Some(held) = shared.holding(&run.run_id)
    {
        // A worker that stalled past its lease learns it here, before it writes.
        crate::server::workers::claimed::beat(shared, &held).await;
    }
    if run.is_lost() {
        // Another worker has the run now: its end is that worker's to record.
        return;
    }
    let stored = server.threads.update(&run.thread_id, |r| {
        r.status = rest;
        r.interrupts = interrupts;
    });
    if let Err(e) = stored.await {
        tracing::warn!("run {}: cannot store its thread's status: {e}", run.run_id);
    }
}

/// A stateless run's thread is deleted when it ends (`on_completion` `delete`, the default).
async fn finish_thread(server: &Shared, run: &RunHandle, delete: bool) {
    if !delete {
        return;
    }
    let id = run.thread_id;
    if server.runs.active_run(&id).is_some() {
        // Somebody queued a run on the temporary thread: it is deleted only with its last run.
        return;
    }
    if let Some(shared) = &server.shared {
        // The same, for runs queued through any worker (this run is still `running` there).
        use crate::server::queue::RunStatus;
        match shared.queue.list(id, 64).await {
            Ok(runs)
                if runs.iter().any(|r| {
                    r.run_id != run.run_id && matches!(r.status, RunStatus::Pending | RunStatus::Running)
                }) =>
            {
                return;
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(
                    "stateless run {}: cannot tell whether its thread {id} has other runs, so it is kept: {e}",
                    run.run_id
                );
                return;
            }
        }
    }
    if let Err(e) = delete_thread(server, &id).await {
        tracing::warn!("stateless run {}: cannot delete its thread {id}: {e}", run.run_id);
    }
}

/// Delete thread `id` whole: checkpoints and files, record, runs, what the graphs kept.
async fn delete_thread(server: &Shared, id: &Uuid) -> ApiResult<()> {
    let tid = thread_id(id);
    server
        .checkpointer
        .delete(&tid)
        .await
        .map_err(|e| ApiError::internal("deleting a thread", e))?;
    server.threads.remove(id).await?;
    server.runs.forget_thread(id);
    for graph in server.graphs.values() {
        if let Err(e) = graph.thread_deleted(&tid).await {
            tracing::warn!("thread {id} deleted, but a graph could not forget it: {e:#}");
        }
    }
    Ok(())
}

/// Put thread `tid` back to its checkpoint `start` (`None`: it had none, so back to an empty
/// state): a rollback, or the branch point of a run started from an older checkpoint. The checkpoint store keeps every checkpoint and has no way to drop the newest, so the
/// state before the run is saved again as the newest checkpoint: the thread's state, values and
/// pending interrupt are as before the run, its history shows the run's checkpoints followed by
/// the restored one. Files the run wrote in the thread's file space stay (files are not versioned
/// with checkpoints).
pub(crate) async fn roll_back(server: &Shared, tid: &ThreadId, start: Option<u64>) -> anyhow::Result<()> {
    let Some(latest) = server.checkpointer.load(tid).await? else {
        return Ok(());
    };
    if start == Some(latest.checkpoint.seq) {
        return Ok(());
    }
    let state = match start {
        Some(seq) => {
            server
                .checkpointer
                .load_at(tid, seq)
                .await?
                .ok_or_else(|| anyhow::anyhow!("checkpoint {seq} of thread {tid} is gone"))?
                .state
        }
        None => State::default(),
    };
    let checkpoint = Checkpoint::new(tid.clone(), latest.checkpoint.seq + 1, state);
    server
        .checkpointer
        .save(checkpoint, Some(&latest.version))
        .await?;
    Ok(())
}
