//! Driving one run's agent: build it for the user, run it until it ends or is cancelled, and turn
//! its events into stream parts as they come — the run's own ([`Translator`]), the inspector modes
//! ([`Introspection`]) and its subagents' ([`Subgraphs`]). [`crate::server::execute`] decides what
//! the outcome means for the run and its thread.

use serde_json::{Value, json};
use trellis_middleware::runtime::events::{EventSink, RunEvent};
use trellis_middleware::{AgentError, RunInput};

use crate::server::error::ApiError;
use crate::server::execute::Input;
use crate::server::extract::User;
use crate::server::introspection::Introspection;
use crate::server::run_registry::RunHandle;
use crate::server::stream::{Part, Translator, interrupt_json};
use crate::server::subgraphs::Subgraphs;
use crate::server::threads::thread_id;
use crate::server::update::{self, check_values};
use crate::server::workers::claimed::RUN_SLOT;
use crate::server::{Graph, Shared, assistants, files};

/// How [`drive`] ended when the agent did not finish.
pub(crate) enum Failure {
    /// Cancelled; what the thread still waits for, if anything.
    Cancelled(Option<Value>),
    /// Refused when the run started (decisions, a `command.update`): nothing changed. The
    /// error's kind and message.
    Refused(&'static str, String),
    /// Failed: the error's kind and message.
    Failed(String, String),
}

pub(crate) type Outcome = Result<(Vec<Part>, Value, Option<Value>), Failure>;

/// Build the user's agent and run it until it ends or the run is cancelled, translating its
/// events into parts as they come. On success: the final parts, the result and the interrupts the
/// thread waits on.
pub(crate) async fn drive(
    server: &Shared,
    run: &RunHandle,
    graph: &dyn Graph,
    user: &User,
    input: Input,
) -> Outcome {
    let failed = |kind: &str, message: String| Failure::Failed(kind.to_owned(), message);
    let tid = thread_id(&run.thread_id);
    apply_update(server, run, user).await?;
    let head = server
        .checkpointer
        .peek(&tid)
        .await
        .map_err(|e| failed("CheckpointError", e.to_string()))?;
    let before = head.as_ref().map_or(0, |s| s.checkpoint.state.messages.len());
    let next_seq = head.as_ref().map_or(0, |s| s.checkpoint.seq + 1);
    let metadata = json!({
        "run_id": run.run_id, "thread_id": run.thread_id, "graph_id": run.graph,
        "assistant_id": assistants::assistant_id(&run.graph),
    });
    let (sink, mut events) = EventSink::channel();
    let (mut run_input, added) = match input {
        Input::Messages(messages) => {
            let added = messages.len();
            let mut run_input = RunInput::new();
            for message in messages {
                run_input = run_input.message(message);
            }
            (run_input, added)
        }
        Input::Resume(decisions) => (RunInput::resume(decisions), 0),
    };
    let pins = crate::server::skills::pins_of(&run.kwargs()["input"]);
    if !pins.is_empty() {
        run_input = run_input.slot(&trellis_middleware::skills::PIN_SKILLS, pins);
    }
    if server.shared.is_some() {
        // Saved with the run's input in its first checkpoint: a later attempt knows from it that
        // the input is in the thread already (see `workers::claimed`).
        run_input = run_input.slot_json(crate::server::workers::claimed::RUN_SLOT, json!(run.run_id));
    }
    run_input = run_input.thread(tid.clone()).events(sink);
    let subgraphs =
        (run.kwargs()["stream_subgraphs"] == true).then(|| Subgraphs::new(run.run_id, metadata.clone()));
    let mut streams = Streams {
        main: Translator::new(run.thread_id, before + added, metadata),
        introspection: Introspection::new(run.thread_id, run.run_id, &run.modes, next_seq, before + added),
        subgraphs,
    };
    let (agent, run_input) = graph
        .prepare(user.id(), &tid, run_input)
        .await
        .map_err(|e| failed("AssemblyError", format!("{e:#}")))?;
    let running = agent.run_until(run_input, async {
        run.cancelled().await;
    });
    tokio::pin!(running);
    let result = loop {
        tokio::select! {
            Some(event) = events.recv() => on_event(server, run, &mut streams, &event).await,
            result = &mut running => break result,
        }
    };
    while let Ok(event) = events.try_recv() {
        on_event(server, run, &mut streams, &event).await;
    }
    let out = match result {
        Ok(out) => out,
        Err(e) if e.is_cancelled() => {
            let pending = agent
                .pending_interrupt(&tid)
                .await
                .ok()
                .flatten()
                .map(|i| interrupt_json(&run.thread_id, &i));
            return Err(Failure::Cancelled(pending));
        }
        Err(AgentError::Decision(e)) => return Err(Failure::Refused("DecisionError", e.to_string())),
        Err(e) => return Err(failed("AgentError", e.to_string())),
    };
    read_files(server, run, &mut streams.main).await;
    let (parts, values) = streams.main.finish(&out.state, out.interrupt.as_ref());
    let interrupts = out.interrupt.as_ref().map(|i| interrupt_json(&run.thread_id, i));
    Ok((parts, values, interrupts))
}

/// Apply the run's `command.update` ([`crate::server::command`]) as a checkpoint of its own, unless
/// an earlier attempt of the run (a shared queue's takeover) already did: it names the run.
async fn apply_update(server: &Shared, run: &RunHandle, user: &User) -> Result<(), Failure> {
    let Some(update) = run.kwargs()["command"].get("update").filter(|u| !u.is_null()) else {
        return Ok(());
    };
    let refused = |e: ApiError| Failure::Refused("UpdateError", e.detail);
    let values = check_values(Some(update), "command.update").map_err(refused)?;
    let record = server.threads.get(user, &run.thread_id).map_err(refused)?;
    let slot = match &server.shared {
        Some(_) => {
            let head = server
                .checkpointer
                .peek(&thread_id(&run.thread_id))
                .await
                .map_err(|e| Failure::Failed("CheckpointError".into(), e.to_string()))?;
            let applied = head.and_then(|h| h.checkpoint.state.get_json(RUN_SLOT).ok().flatten());
            if applied == Some(json!(run.run_id)) {
                return Ok(());
            }
            Some((RUN_SLOT, json!(run.run_id)))
        }
        None => None,
    };
    update::apply(server, &record, &values, Some("__start__"), None, slot)
        .await
        .map(|_| ())
        .map_err(refused)
}

/// Give `translator` the thread's files as they are now (`values.files`, as Deep Agents' state has
/// them), when a tool may have changed them since the last read; a read that fails leaves the
/// last ones, with a warning.
async fn read_files(server: &Shared, run: &RunHandle, translator: &mut Translator) {
    if !translator.files_stale() {
        return;
    }
    match files::files_of(server, &run.thread_id).await {
        Ok(files) => translator.files(files),
        Err(e) => tracing::warn!("run {}: cannot list its thread's files: {}", run.run_id, e.detail),
    }
}

/// What turns a run's events into parts: its own agent's ([`Translator`]), the `tasks` /
/// `checkpoints` / `debug` / `custom` modes when asked for, its subagents' with `stream_subgraphs`.
struct Streams {
    main: Translator,
    introspection: Option<Introspection>,
    subgraphs: Option<Subgraphs>,
}

/// One event of the run: counted in its usage (a subagent's too), and, for the top-level agent's,
/// turned into parts (a subagent's events are not streamed).
async fn on_event(server: &Shared, run: &RunHandle, streams: &mut Streams, event: &RunEvent) {
    run.count(event, &server.prices);
    let push_all = |parts: Vec<Part>| parts.into_iter().for_each(|p| run.push(p, false));
    let Streams {
        main: translator,
        introspection,
        subgraphs,
    } = streams;
    match event {
        RunEvent::Subagent { .. } => {
            if let Some(subgraphs) = subgraphs {
                push_all(subgraphs.event(event));
            }
        }
        RunEvent::ModelStarted { step, messages, .. } => {
            translator.reply_started(*step, *messages);
            if let Some(introspection) = introspection {
                push_all(introspection.model_started(*step));
            }
        }
        RunEvent::ToolStarted { call_id, name, .. } => {
            if let Some(introspection) = introspection {
                push_all(introspection.tool_started(call_id, name));
            }
        }
        RunEvent::Middleware {
            middleware,
            kind,
            data,
        } => {
            if let Some(introspection) = introspection {
                push_all(introspection.middleware(middleware, kind, data));
            }
        }
        RunEvent::ToolFinished { side_effects, .. } => translator.tool_ran(*side_effects),
        RunEvent::ModelDelta { delta, .. } => {
            if let Some(part) = translator.delta(delta) {
                run.push(part, false);
            }
        }
        RunEvent::CheckpointSaved { state, .. } => {
            // The state the event's checkpoint saved; reading the latest checkpoint instead could
            // find a later step's (the run goes on meanwhile) and merge two steps' updates.
            let state = match state.get() {
                Some(saved) => saved.public_view(),
                None => match server.checkpointer.peek(&thread_id(&run.thread_id)).await {
                    Ok(Some(stored)) => stored.checkpoint.state.public_view(),
                    Ok(None) => return,
                    Err(e) => {
                        tracing::warn!("run {}: cannot read its checkpoint: {e}", run.run_id);
                        return;
                    }
                },
            };
            read_files(server, run, translator).await;
            match state {
                Ok(state) => {
                    let parts = translator.checkpoint(&state);
                    if let Some(introspection) = introspection {
                        let values = translator.values_with_files(&state);
                        push_all(parts);
                        push_all(introspection.checkpoint(&state, &values));
                    } else {
                        push_all(parts);
                    }
                }
                Err(e) => tracing::warn!("run {}: cannot read its checkpoint: {e}", run.run_id),
            }
        }
        _ => {}
    }
}
