//! Runs on a thread: `POST /threads/{id}/runs/stream` (SSE), `/runs/wait`, `/runs` (background),
//! `GET /threads/{id}/runs`, `…/runs/{run_id}`, `…/runs/{run_id}/join` and
//! `…/runs/{run_id}/stream` (join the stream, replay with `Last-Event-ID`).
//!
//! Every run executes on a task of its own, whatever the client does: a stream or wait whose
//! client hangs up leaves the run going. Its parts ([`Part`]) are kept in its [`RunHandle`] (in
//! memory, up to [`MAX_PART_BYTES`](crate::server::run_registry::MAX_PART_BYTES)) for every follower ([`crate::server::run_registry`]). A run
//! is reachable only through its thread, by the thread's owner.
//!
//! Statuses: `pending` → `running` → `success` (also when the run stopped for approvals: the
//! thread is then `interrupted`) or `error` (the thread is then `error`).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::{Extension, Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use trellis_middleware::runtime::events::{EventSink, RunEvent};
use trellis_middleware::{Message, RunInput};

use crate::server::error::{ApiError, ApiResult};
use crate::server::extract::{JsonBody, User, parse_uuid};
use crate::server::messages::input_messages;
use crate::server::run_registry::{RunHandle, Status};
use crate::server::stream::{Mode, Part, Translator};
use crate::server::threads::{Rest, ThreadRecord, thread_id};
use crate::server::{Graph, Shared, assistants};

/// How often `/wait` and `/join` write a newline while the run goes on, so proxies and the
/// clients' read timeouts (300 s in the Python client) do not cut a long run; JSON parsers skip
/// the leading whitespace. The reference server writes one every 5 s.
pub const WAIT_KEEPALIVE: Duration = Duration::from_secs(5);
/// How often an idle SSE stream gets a comment line, so proxies and client timeouts keep it open.
const HEARTBEAT: Duration = Duration::from_secs(10);

/// The body of a run-create (stream, wait, background). Every field the clients send is named;
/// those not built are refused with a 422 when set to anything but their default.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunCreate {
    assistant_id: String,
    #[serde(default)]
    input: Option<Value>,
    #[serde(default)]
    command: Option<Value>,
    #[serde(default)]
    config: Option<Value>,
    #[serde(default)]
    context: Option<Value>,
    #[serde(default)]
    metadata: Option<Map<String, Value>>,
    #[serde(default)]
    stream_mode: Option<Value>,
    #[serde(default)]
    stream_subgraphs: Option<bool>,
    #[serde(default)]
    stream_resumable: Option<bool>,
    #[serde(default)]
    interrupt_before: Option<Value>,
    #[serde(default)]
    interrupt_after: Option<Value>,
    #[serde(default)]
    checkpoint: Option<Value>,
    #[serde(default)]
    checkpoint_id: Option<Value>,
    #[serde(default)]
    multitask_strategy: Option<String>,
    #[serde(default)]
    if_not_exists: Option<String>,
    #[serde(default)]
    on_disconnect: Option<String>,
    #[serde(default)]
    on_completion: Option<String>,
    #[serde(default)]
    after_seconds: Option<f64>,
    #[serde(default)]
    webhook: Option<Value>,
    #[serde(default)]
    feedback_keys: Option<Value>,
    #[serde(default)]
    durability: Option<String>,
    #[serde(default)]
    checkpoint_during: Option<bool>,
    #[serde(default)]
    langsmith_tracer: Option<Value>,
}

fn set(value: &Option<Value>) -> bool {
    value.as_ref().is_some_and(|v| !v.is_null())
}

impl RunCreate {
    /// The requested modes (default `values`); 422 for a mode not built.
    fn modes(&self) -> ApiResult<Vec<Mode>> {
        match &self.stream_mode {
            None | Some(Value::Null) => Ok(vec![Mode::Values]),
            Some(Value::String(mode)) => Ok(vec![Mode::parse(mode)?]),
            Some(Value::Array(modes)) => modes
                .iter()
                .map(|m| {
                    m.as_str()
                        .ok_or_else(|| ApiError::unprocessable("stream_mode must be strings"))
                        .and_then(Mode::parse)
                })
                .collect(),
            Some(_) => Err(ApiError::unprocessable(
                "stream_mode must be a string or a list of strings",
            )),
        }
    }

    /// 422 for every option set that is not built yet.
    fn refuse_unbuilt(&self) -> ApiResult<()> {
        let not_built = |what: &str| Err(ApiError::unprocessable(format!("{what} is not supported yet")));
        if set(&self.command) {
            return not_built("command (resume, update, goto)");
        }
        if set(&self.interrupt_before) || set(&self.interrupt_after) {
            return not_built("interrupt_before / interrupt_after");
        }
        if set(&self.checkpoint) || set(&self.checkpoint_id) {
            return not_built("starting from a checkpoint");
        }
        if set(&self.webhook) {
            return not_built("webhook");
        }
        if self.after_seconds.is_some_and(|s| s > 0.0) {
            return not_built("after_seconds");
        }
        match self.multitask_strategy.as_deref() {
            None | Some("reject") => {}
            Some(other) => return not_built(&format!("multitask_strategy {other:?} (only \"reject\")")),
        }
        match self.on_disconnect.as_deref() {
            None | Some("cancel" | "continue") => {}
            Some(other) => {
                return Err(ApiError::unprocessable(format!(
                    "on_disconnect must be cancel or continue, not {other:?}"
                )));
            }
        }
        Ok(())
    }
}

/// A run that has been checked and registered, not yet started.
struct Started {
    run: Arc<RunHandle>,
    modes: Vec<Mode>,
}

/// Check a run-create of `user` on `thread`, register it (409 when the thread is running) and
/// start it on a task of its own.
async fn start(server: &Shared, user: &User, thread: &str, body: RunCreate) -> ApiResult<Started> {
    let thread = parse_uuid("thread_id", thread)?;
    body.refuse_unbuilt()?;
    let modes = body.modes()?;
    let graph = assistants::resolve(server, &body.assistant_id)?;
    let messages = match &body.input {
        None | Some(Value::Null) => {
            return Err(ApiError::unprocessable(
                "input is required: {\"messages\": [...]}",
            ));
        }
        Some(input) => input_messages(input)?,
    };
    match (server.threads.get(user, &thread), body.if_not_exists.as_deref()) {
        (Ok(_), _) => {}
        (Err(missing), None | Some("reject")) => return Err(missing),
        (Err(_), Some("create")) => {
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
        (Err(_), Some(other)) => {
            return Err(ApiError::unprocessable(format!(
                "if_not_exists must be reject or create, not {other:?}"
            )));
        }
    }
    let kwargs = json!({
        "input": body.input, "config": body.config, "context": body.context,
        "stream_mode": body.stream_mode, "stream_subgraphs": body.stream_subgraphs,
        "stream_resumable": body.stream_resumable, "on_disconnect": body.on_disconnect,
        "on_completion": body.on_completion, "feedback_keys": body.feedback_keys,
        "durability": body.durability, "checkpoint_during": body.checkpoint_during,
        "langsmith_tracer": body.langsmith_tracer,
    });
    let resumable = body.stream_resumable.unwrap_or(false);
    let run = Arc::new(RunHandle::new(
        thread,
        graph.clone(),
        (modes.clone(), resumable),
        body.metadata.unwrap_or_default(),
        kwargs,
    ));
    server.runs.begin(run.clone())?;
    let graph = server
        .graphs
        .get(&graph)
        .cloned()
        .ok_or_else(|| ApiError::not_found("graph"))?;
    tokio::spawn(execute(
        server.clone(),
        run.clone(),
        graph,
        user.clone(),
        messages,
    ));
    Ok(Started { run, modes })
}

/// Run `run` to its end, keeping its parts; then set its status and its thread's.
async fn execute(
    server: Shared,
    run: Arc<RunHandle>,
    graph: Arc<dyn Graph>,
    user: User,
    messages: Vec<Message>,
) {
    run.set_status(Status::Running);
    let outcome = drive(&server, &run, graph.as_ref(), &user, messages).await;
    let (status, rest, result) = match outcome {
        Ok((parts, result, interrupted)) => {
            for part in parts {
                run.push(part, true);
            }
            (
                Status::Success,
                if interrupted {
                    Rest::Interrupted
                } else {
                    Rest::Idle
                },
                result,
            )
        }
        Err((kind, message)) => {
            run.push(Part::error(&kind, &message), true);
            (
                Status::Error,
                Rest::Error,
                json!({"__error__": {"error": kind, "message": message}}),
            )
        }
    };
    let interrupts = result.get("__interrupt__").cloned();
    let stored = server.threads.update(&run.thread_id, |r| {
        r.status = rest;
        r.interrupts = interrupts;
    });
    if let Err(e) = stored.await {
        tracing::warn!("run {}: cannot store its thread's status: {e}", run.run_id);
    }
    // Free the thread before the followers see the end, so a client that starts its next run
    // as soon as the stream closes does not get a 409.
    server.runs.end(&run);
    run.finish(status, result);
}

type Outcome = Result<(Vec<Part>, Value, bool), (String, String)>;

/// Build the user's agent and run it, translating its events into parts as they come.
async fn drive(
    server: &Shared,
    run: &RunHandle,
    graph: &dyn Graph,
    user: &User,
    messages: Vec<Message>,
) -> Outcome {
    let tid = thread_id(&run.thread_id);
    let before = server
        .checkpointer
        .peek(&tid)
        .await
        .map_err(|e| ("CheckpointError".to_owned(), e.to_string()))?
        .map_or(0, |s| s.checkpoint.state.messages.len());
    let metadata = json!({
        "run_id": run.run_id, "thread_id": run.thread_id, "graph_id": run.graph,
        "assistant_id": assistants::assistant_id(&run.graph),
    });
    let mut translator = Translator::new(run.thread_id, before + messages.len(), metadata);
    let (sink, mut events) = EventSink::channel();
    let mut input = RunInput::new().thread(tid.clone()).events(sink);
    for message in messages {
        input = input.message(message);
    }
    let (agent, input) = graph
        .prepare(user.id(), &tid, input)
        .await
        .map_err(|e| ("AssemblyError".to_owned(), format!("{e:#}")))?;
    let running = agent.run(input);
    tokio::pin!(running);
    let result = loop {
        tokio::select! {
            Some(event) = events.recv() => on_event(server, run, &mut translator, &event).await,
            result = &mut running => break result,
        }
    };
    while let Ok(event) = events.try_recv() {
        on_event(server, run, &mut translator, &event).await;
    }
    let out = result.map_err(|e| ("AgentError".to_owned(), e.to_string()))?;
    let (parts, values) = translator.finish(&out.state, out.interrupt.as_ref());
    Ok((parts, values, out.interrupt.is_some()))
}

/// One event of the top-level agent as parts (a subagent's events are not streamed).
async fn on_event(server: &Shared, run: &RunHandle, translator: &mut Translator, event: &RunEvent) {
    match event {
        RunEvent::ModelStarted { step, messages, .. } => translator.reply_started(*step, *messages),
        RunEvent::ModelDelta { delta, .. } => {
            if let Some(part) = translator.delta(delta) {
                run.push(part, false);
            }
        }
        RunEvent::CheckpointSaved { .. } => {
            let state = match server.checkpointer.peek(&thread_id(&run.thread_id)).await {
                Ok(Some(stored)) => stored.checkpoint.state.public_view(),
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!("run {}: cannot read its checkpoint: {e}", run.run_id);
                    return;
                }
            };
            match state {
                Ok(state) => translator
                    .checkpoint(&state)
                    .into_iter()
                    .for_each(|p| run.push(p, false)),
                Err(e) => tracing::warn!("run {}: cannot read its checkpoint: {e}", run.run_id),
            }
        }
        _ => {}
    }
}

fn locations(run: &RunHandle) -> HeaderMap {
    let mut headers = HeaderMap::new();
    let at = format!("/threads/{}/runs/{}", run.thread_id, run.run_id);
    if let Ok(value) = HeaderValue::from_str(&at) {
        headers.insert(header::CONTENT_LOCATION, value);
    }
    headers
}

/// `POST /threads/{thread_id}/runs/stream`: start a run and stream its parts as SSE — `metadata`
/// (`{"run_id", "attempt"}`) first, then the parts of the requested modes, `error` if it fails;
/// the response ends with the run. With `stream_resumable`, events carry ids and `Location` names
/// the join stream, where a client that lost the connection resumes ([`join_stream`]).
pub async fn stream(
    State(server): State<Shared>,
    Extension(user): Extension<User>,
    Path(thread): Path<String>,
    JsonBody(body): JsonBody<RunCreate>,
) -> ApiResult<Response> {
    let Started { run, modes } = start(&server, &user, &thread, body).await?;
    let mut headers = locations(&run);
    if run.resumable {
        let at = format!("/threads/{}/runs/{}/stream", run.thread_id, run.run_id);
        if let Ok(value) = HeaderValue::from_str(&at) {
            headers.insert(header::LOCATION, value);
        }
    }
    Ok((headers, sse(run, modes, Resume::FromStart)).into_response())
}

/// Where a stream of a run starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resume {
    /// `metadata`, then every part.
    FromStart,
    /// The parts after the one with this event id (`metadata` is id 0, part `k` is id `k + 1`).
    After(usize),
    /// Only the parts still to come.
    New,
}

/// The SSE response of `run`'s parts in `modes` (an `error` part whatever the modes), starting
/// at `from`; with `id:` lines when the run is resumable. Comment lines keep it open when idle.
fn sse(run: Arc<RunHandle>, modes: Vec<Mode>, from: Resume) -> Response {
    let ids = run.resumable;
    let first = (from == Resume::FromStart).then(|| {
        let event = Event::default()
            .event("metadata")
            .data(json!({"run_id": run.run_id, "attempt": 1}).to_string());
        if ids { event.id("0") } else { event }
    });
    let start = match from {
        Resume::FromStart => 0,
        Resume::After(id) => id,
        Resume::New => run.parts_len(),
    };
    let parts = run
        .follow(start)
        .filter(move |(_, part)| std::future::ready(part.mode.is_none_or(|m| modes.contains(&m))))
        .map(move |(index, part)| {
            let event = Event::default().event(part.event).data(part.data.as_str());
            if ids {
                event.id((index + 1).to_string())
            } else {
                event
            }
        });
    let events = futures::stream::iter(first).chain(parts).map(Ok::<_, Infallible>);
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(HEARTBEAT))
        .into_response()
}

/// `GET /threads/{thread_id}/runs/{run_id}/stream`: join a run's stream. With `Last-Event-ID:
/// -1`, from its `metadata` event; with the id of an event (resumable runs), from the event after
/// it; without the header, only the parts still to come. `stream_mode` (repeated keys, or a JSON
/// list as the JS client sends) narrows the modes; by default the run's own. A finished run's
/// stream replays and closes. `cancel_on_disconnect` is accepted and not honoured.
pub async fn join_stream(
    State(server): State<Shared>,
    Extension(user): Extension<User>,
    Path((thread, run)): Path<(String, String)>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let run = find(&server, &user, &thread, &run)?;
    let mut modes = Vec::new();
    for (key, value) in url::form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        // The Python client sends an empty `stream_mode=` when it has none.
        if key != "stream_mode" || value.is_empty() {
            continue;
        }
        match serde_json::from_str::<Vec<String>>(&value) {
            Ok(list) => {
                for mode in list {
                    modes.push(Mode::parse(&mode)?);
                }
            }
            Err(_) => modes.push(Mode::parse(&value)?),
        }
    }
    if modes.is_empty() {
        modes = run.modes.clone();
    }
    let from = match headers.get("last-event-id").map(|v| v.to_str().map(str::trim)) {
        None => Resume::New,
        Some(Ok("-1")) => Resume::FromStart,
        Some(Ok(id)) => match id.parse::<usize>() {
            Ok(id) => Resume::After(id),
            Err(_) => {
                return Err(ApiError::unprocessable(
                    "Last-Event-ID must be -1 or an event id of this run",
                ));
            }
        },
        Some(Err(_)) => {
            return Err(ApiError::unprocessable(
                "Last-Event-ID must be -1 or an event id of this run",
            ));
        }
    };
    Ok(sse(run, modes, from))
}

/// `POST /threads/{thread_id}/runs/wait`: start a run and answer with its result when it ends
/// (newlines before it while it runs, see [`WAIT_KEEPALIVE`]) — the final values (with `__interrupt__` when it stopped for approvals), or `{"__error__":
/// {"error", "message"}}` with status 200 when it failed, as the reference server answers.
pub async fn wait(
    State(server): State<Shared>,
    Extension(user): Extension<User>,
    Path(thread): Path<String>,
    JsonBody(body): JsonBody<RunCreate>,
) -> ApiResult<Response> {
    let Started { run, .. } = start(&server, &user, &thread, body).await?;
    Ok((locations(&run), result_body(run)).into_response())
}

/// The result of `run` as a JSON response that starts at once and writes a newline every
/// [`WAIT_KEEPALIVE`] until the run ends.
fn result_body(run: Arc<RunHandle>) -> Response {
    let chunks = futures::stream::unfold(Some(run), |run| async move {
        let run = run?;
        tokio::select! {
            biased;
            result = run.result() => Some((Bytes::from(result.to_string()), None)),
            () = tokio::time::sleep(WAIT_KEEPALIVE) => Some((Bytes::from_static(b"\n"), Some(run))),
        }
    });
    let body = Body::from_stream(chunks.map(Ok::<_, Infallible>));
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// `POST /threads/{thread_id}/runs`: start a run in the background; the `Run`.
pub async fn create(
    State(server): State<Shared>,
    Extension(user): Extension<User>,
    Path(thread): Path<String>,
    JsonBody(body): JsonBody<RunCreate>,
) -> ApiResult<Response> {
    let Started { run, .. } = start(&server, &user, &thread, body).await?;
    Ok((locations(&run), Json(run.to_json())).into_response())
}

/// The run `run` of `thread` as `user` sees it.
fn find(server: &Shared, user: &User, thread: &str, run: &str) -> ApiResult<Arc<RunHandle>> {
    let thread = parse_uuid("thread_id", thread)?;
    let run = parse_uuid("run_id", run)?;
    server.threads.get(user, &thread)?;
    server.runs.get(&thread, &run)
}

/// `GET /threads/{thread_id}/runs/{run_id}`.
pub async fn get_one(
    State(server): State<Shared>,
    Extension(user): Extension<User>,
    Path((thread, run)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    Ok(Json(find(&server, &user, &thread, &run)?.to_json()))
}

/// `GET /threads/{thread_id}/runs/{run_id}/join`: wait for the run; its result, as `/wait`.
pub async fn join(
    State(server): State<Shared>,
    Extension(user): Extension<User>,
    Path((thread, run)): Path<(String, String)>,
) -> ApiResult<Response> {
    Ok(result_body(find(&server, &user, &thread, &run)?))
}

/// `GET /threads/{thread_id}/runs` query.
#[derive(Debug, Deserialize)]
pub struct ListQuery {
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    offset: Option<usize>,
    #[serde(default)]
    status: Option<String>,
}

/// `GET /threads/{thread_id}/runs`: the thread's runs since the server started, newest first.
pub async fn list(
    State(server): State<Shared>,
    Extension(user): Extension<User>,
    Path(thread): Path<String>,
    query: Result<axum::extract::Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<Value>> {
    let axum::extract::Query(query) = query.map_err(|e| ApiError::unprocessable(e.body_text()))?;
    let thread = parse_uuid("thread_id", &thread)?;
    server.threads.get(&user, &thread)?;
    let runs: Vec<Value> = server
        .runs
        .of_thread(&thread)
        .iter()
        .map(|r| r.to_json())
        .filter(|r| query.status.as_deref().is_none_or(|s| r["status"] == s))
        .skip(query.offset.unwrap_or(0))
        .take(query.limit.unwrap_or(10))
        .collect();
    Ok(Json(Value::Array(runs)))
}
