//! One run a worker claimed from the shared queue: rebuilt from its payload as a [`RunHandle`]
//! in this process and run by the same code as a single server's runs
//! ([`prepare_and_run`]), while three things go on
//! beside it: its parts are appended to the queue's events table as they come (in batches, under
//! the lease), its lease is renewed (and a cancel flag read) every third of the lease, and at its
//! end its outcome and result are stored under the lease.
//!
//! A lease found lost (a heartbeat or an append refused) stops the run at once and it writes
//! nothing more ([`RunHandle::mark_lost`]).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};

use super::{Held, SharedQueue};
use crate::server::Shared;
use crate::server::cancel::{CancelAction, Strategy};
use crate::server::execute::{Input, branch_in, check_input, conclude, execute};
use crate::server::extract::User;
use crate::server::messages::input_messages;
use crate::server::queue::{self, Heartbeat, Lease, Outcome};
use crate::server::run_handle::{RunHandle, RunStatus};
use crate::server::run_ref::payload;
use crate::server::stream::{Part, thread_values};
use crate::server::threads::thread_id;

/// Parts appended to the events table in one statement at most.
const BATCH: usize = 256;

/// Renew `held`'s lease now and act on what the queue says: a cancel flag cancels the run, a
/// lost lease stops it writing anything more.
pub(crate) async fn beat(shared: &SharedQueue, held: &Held) {
    let sent = std::time::Instant::now();
    let beat = shared.queue.heartbeat(&held.lease, shared.options.lease).await;
    if let Ok(Heartbeat::Held { .. }) = &beat {
        held.fence.renewed(sent, shared.options.lease);
    }
    match beat {
        Ok(Heartbeat::Held { cancel: None }) => {}
        Ok(Heartbeat::Held { cancel: Some(action) }) => {
            held.run.cancel(match action {
                queue::CancelAction::Interrupt => CancelAction::Interrupt,
                queue::CancelAction::Rollback => CancelAction::Rollback,
            });
        }
        Ok(Heartbeat::Lost) => lost(shared, held),
        // The store is unreachable: keep going; the lease (database time) decides.
        Err(e) => tracing::warn!("run {}: heartbeat failed: {e}", held.lease.run_id),
    }
}

fn lost(shared: &SharedQueue, held: &Held) {
    if !held.run.is_lost() {
        tracing::warn!(
            "worker {}: lost the lease of run {} (attempt {}): stopping it",
            shared.worker,
            held.lease.run_id,
            held.lease.attempt
        );
    }
    held.fence.lose();
    held.run.mark_lost();
    held.run.cancel(CancelAction::Interrupt);
}

/// The run's handle, rebuilt from its payload.
fn handle(lease: &Lease) -> RunHandle {
    let p = &lease.payload;
    let strategy = Strategy::parse(p[payload::STRATEGY].as_str()).unwrap_or(Strategy::Enqueue);
    let mut run = RunHandle::new(
        lease.thread_id,
        p[payload::GRAPH].as_str().unwrap_or_default().to_owned(),
        (
            payload::modes(p),
            p[payload::RESUMABLE].as_bool().unwrap_or(false),
            strategy,
        ),
        p[payload::METADATA].as_object().cloned().unwrap_or_default(),
        p[payload::KWARGS].clone(),
    );
    run.run_id = lease.run_id;
    run
}

/// Run `lease`'s run to its end on this worker.
pub(crate) async fn run(
    server: &Shared,
    shared: &Arc<SharedQueue>,
    lease: Lease,
    claimed: std::time::Instant,
) {
    let run = Arc::new(handle(&lease));
    let thread = thread_id(&lease.thread_id);
    let fence = shared.fences.hold(thread.clone(), claimed, shared.options.lease);
    let held = Held {
        lease: lease.clone(),
        run: run.clone(),
        fence: fence.clone(),
    };
    shared.hold(held.clone());
    tracing::info!(
        "worker {}: running run {} of thread {} (attempt {})",
        shared.worker,
        lease.run_id,
        lease.thread_id,
        lease.attempt
    );
    let mirror = tokio::spawn(mirror(shared.clone(), held.clone()));
    let heart = tokio::spawn(heartbeats(shared.clone(), held.clone()));
    let user = User(lease.payload[payload::USER].as_str().map(str::to_owned));
    super::fault::point(super::fault::CLAIMED, &lease).await;
    prepare_and_run(server, run.clone(), user).await;
    let _ = mirror.await;
    heart.abort();
    shared.fences.release(&thread, &fence);
    shared.drop_held(&lease.run_id);
    let result = run.result().await;
    if run.is_lost() {
        tracing::warn!(
            "worker {}: run {} attempt {} ended after losing its lease, storing nothing: {}",
            shared.worker,
            lease.run_id,
            lease.attempt,
            result["__error__"]
        );
        return;
    }
    let outcome = match run.status() {
        RunStatus::Error => Outcome::Error(result["__error__"].clone()),
        RunStatus::Interrupted => Outcome::Interrupted,
        _ => Outcome::Success,
    };
    let rolled_back = run.cancelled_with() == Some(CancelAction::Rollback);
    super::fault::point(super::fault::FINISHED, &lease).await;
    let stored = json!({"result": result, "run": run.to_json()});
    let finished = shared.queue.finish_with(&lease, outcome, Some(stored)).await;
    shared.waiters.notify(&lease.run_id);
    match finished {
        Ok(true) if rolled_back => {
            if let Err(e) = shared.queue.delete(lease.run_id).await {
                tracing::warn!("run {}: rolled back, but its record stays: {e}", lease.run_id);
            }
        }
        Ok(true) => {}
        Ok(false) => tracing::warn!("run {}: its lease was gone at its end", lease.run_id),
        Err(e) => tracing::warn!("run {}: cannot store its end: {e}", lease.run_id),
    }
}

/// Renew the lease every third of it until the run ends.
async fn heartbeats(shared: Arc<SharedQueue>, held: Held) {
    let every = (shared.options.lease / 3).max(Duration::from_millis(50));
    loop {
        tokio::time::sleep(every).await;
        if held.run.is_done() {
            return;
        }
        beat(&shared, &held).await;
    }
}

/// Append the run's parts to the events table as they come, in batches, until the run ends. A
/// batch the queue refuses (the lease is gone) stops the run. A store that cannot be reached is
/// retried (backing off to a second) until it answers or the heartbeat finds the lease lost: no
/// event is dropped. A batch whose append failed may have been stored all the same (committed,
/// its answer lost with the connection), so before each retry the attempt's stored events are
/// counted, and a batch found stored is not appended again.
async fn mirror(shared: Arc<SharedQueue>, held: Held) {
    let mut parts = held.run.clone().follow(0).boxed().ready_chunks(BATCH);
    // This attempt's events in the queue.
    let mut stored = 0;
    while let Some(batch) = parts.next().await {
        let events: Vec<(String, String)> = batch
            .iter()
            .map(|(_, part)| (part.event_name(), part.data.clone()))
            .collect();
        let mut tries: u64 = 0;
        loop {
            if held.run.is_lost() {
                return;
            }
            if tries > 0
                && let Ok(now) = attempt_events(&shared, &held.lease).await
                && now >= stored + events.len()
            {
                stored = now;
                shared.waiters.notify(&held.lease.run_id);
                break;
            }
            match shared.queue.append_events(&held.lease, &events).await {
                Ok(true) => {
                    stored += events.len();
                    // This worker's own followers; the store notifies the other workers'.
                    shared.waiters.notify(&held.lease.run_id);
                    break;
                }
                Ok(false) => {
                    lost(&shared, &held);
                    return;
                }
                Err(e) => {
                    tries += 1;
                    tracing::warn!(
                        "run {}: cannot store its events (try {tries}): {e}",
                        held.lease.run_id
                    );
                    tokio::time::sleep(Duration::from_millis((200 * tries).min(1000))).await;
                }
            }
        }
    }
}

/// How many events `lease`'s attempt has stored.
async fn attempt_events(shared: &SharedQueue, lease: &Lease) -> Result<usize, queue::QueueError> {
    let (mut after, mut count) = (0, 0);
    loop {
        let page = shared.queue.events(lease.run_id, after, BATCH).await?;
        let Some(last) = page.last() else {
            return Ok(count);
        };
        after = last.seq;
        count += page.iter().filter(|e| e.attempt == lease.attempt).count();
    }
}

/// The payload of `spec`, a run a server enqueues for `user`.
pub(crate) fn payload_of(user: &User, spec: super::RunSpec<'_>) -> Value {
    let modes: Vec<&str> = spec.modes.iter().map(|m| payload::mode_name(*m)).collect();
    json!({
        payload::USER: user.0,
        payload::GRAPH: spec.graph,
        payload::MODES: modes,
        payload::RESUMABLE: spec.resumable,
        payload::STRATEGY: spec.strategy.as_str(),
        payload::METADATA: spec.metadata,
        payload::KWARGS: spec.kwargs,
        payload::CREATED_AT: crate::server::threads::time(&chrono::Utc::now()),
    })
}

/// Whether thread `values` end with the model's answer: an AI message that calls no tool.
fn answered(values: &Value) -> bool {
    values["messages"]
        .as_array()
        .and_then(|m| m.last())
        .is_some_and(|last| last["type"] == "ai" && last["tool_calls"].as_array().is_none_or(Vec::is_empty))
}

/// The state slot a shared run's first checkpoint names it in.
pub(crate) const RUN_SLOT: &str = "trellis_server_run";

/// Run `run`, claimed from the shared queue by this worker, for `user`: its thread's record is
/// read afresh (another worker may have written it), its input rebuilt from its `kwargs` and
/// checked against the thread as it is now, then it runs as any run of a single server. A run
/// taken over from a worker that died after saving the run's input (the thread's newest
/// checkpoint names the run in [`RUN_SLOT`]) goes on from that checkpoint with no input, so its
/// input is never added twice; one whose thread already holds its answer (the worker died after
/// the run's last checkpoint, before its end was stored) ends as it stands, calling nothing.
pub(crate) async fn prepare_and_run(server: &Shared, run: Arc<RunHandle>, user: User) {
    let refused = |message: String| {
        let run = run.clone();
        async move {
            run.push(Part::error("AssemblyError", &message), true);
            run.finish(
                RunStatus::Error,
                json!({"__error__": {"error": "AssemblyError", "message": message}}),
            );
        }
    };
    if let Err(e) = server.threads.refresh(&run.thread_id).await {
        return refused(e.detail).await;
    }
    let Some(graph) = server.graphs.get(&run.graph).cloned() else {
        return refused(format!("this worker does not serve graph {:?}", run.graph)).await;
    };
    let kwargs = run.to_json()["kwargs"].clone();
    let command = kwargs.get("command").filter(|c| !c.is_null());
    let messages = match kwargs.get("input").filter(|i| !i.is_null()) {
        Some(input) => match input_messages(input) {
            Ok(messages) => Some(messages),
            Err(e) => return refused(e.detail).await,
        },
        None => None,
    };
    let saved = match server.checkpointer.peek(&thread_id(&run.thread_id)).await {
        Ok(head) => head.and_then(|h| h.checkpoint.state.get_json(RUN_SLOT).ok().flatten()),
        Err(e) => return refused(e.to_string()).await,
    };
    let (input, from) = if saved == Some(json!(run.run_id)) {
        // A takeover: the run's input (and its branch, if any) is in the thread already; and when
        // its answer is too, the run is over: calling the model again would answer twice.
        match thread_values(server, &run.thread_id).await {
            Ok(values) if answered(&values) => {
                server.runs.adopt(run.clone());
                return conclude(server.clone(), run, values).await;
            }
            Ok(_) => {}
            Err(e) => return refused(e.detail).await,
        }
        (Input::Messages(Vec::new()), None)
    } else {
        let from = match branch_in(server, &run.thread_id, &kwargs).await {
            Ok(from) => from,
            Err(e) => return refused(e.detail).await,
        };
        match check_input(
            server,
            graph.as_ref(),
            &user,
            (&run.thread_id, true, from.is_some()),
            messages,
            command,
        )
        .await
        {
            Ok(input) => (input, from),
            Err(e) => return refused(e.detail).await,
        }
    };
    // A stateless run (`POST /runs…`) deletes its temporary thread when it ends, on whichever
    // worker ran it, unless it was created with `on_completion: keep`.
    let delete_after = kwargs["temporary"] == json!(true) && kwargs["on_completion"] != json!("keep");
    server.runs.adopt(run.clone());
    execute(
        server.clone(),
        run,
        (graph, user),
        (input, from),
        Vec::new(),
        delete_after,
    )
    .await;
}
