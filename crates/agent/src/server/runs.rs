//! Runs on a thread: `POST /threads/{id}/runs/stream` (SSE), `/runs/wait`, `/runs` (background),
//! `GET /threads/{id}/runs`, `…/runs/{run_id}` and `…/runs/{run_id}/join`.
//!
//! Every run executes on a task of its own, whatever the client does: a stream or wait whose
//! client hangs up leaves the run going. Its parts ([`Part`]) are kept in its [`RunHandle`] (in
//! memory, up to [`MAX_PART_BYTES`]) for every follower. A run belongs to its thread: it is
//! reachable only through that thread, by the thread's owner, and forgotten when the thread is
//! deleted or the server stops.
//!
//! Statuses: `pending` → `running` → `success` (also when the run stopped for approvals: the
//! thread is then `interrupted`) or `error` (the thread is then `error`).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::{Extension, Path, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use futures::{Stream, StreamExt};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tokio::sync::watch;
use trellis_middleware::runtime::events::{EventSink, RunEvent};
use trellis_middleware::{Message, RunInput};
use uuid::Uuid;

use crate::server::error::{ApiError, ApiResult};
use crate::server::extract::{JsonBody, User, parse_uuid};
use crate::server::messages::input_messages;
use crate::server::stream::{Mode, Part, Translator};
use crate::server::threads::{Rest, ThreadRecord, thread_id, time};
use crate::server::{Graph, Shared, assistants};

/// Bytes of stream parts a run keeps; past it, further `messages` and `updates` parts are
/// dropped (with a warning) and only `values` and the final parts are kept.
pub const MAX_PART_BYTES: usize = 64 * 1024 * 1024;
/// How often an idle SSE stream gets a comment line, so proxies and client timeouts keep it open.
const HEARTBEAT: Duration = Duration::from_secs(10);

/// A run's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Created, not started.
    Pending,
    /// Running.
    Running,
    /// Finished (or stopped for approvals).
    Success,
    /// Failed.
    Error,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Success => "success",
            Self::Error => "error",
        }
    }
}

#[derive(Debug)]
struct Progress {
    status: Status,
    updated_at: DateTime<Utc>,
    parts: Vec<Arc<Part>>,
    bytes: usize,
    dropping: bool,
    result: Option<Value>,
    done: bool,
}

/// One run: what it was asked, its status, its parts so far and its result.
#[derive(Debug)]
pub struct RunHandle {
    /// The run.
    pub run_id: Uuid,
    /// Its thread.
    pub thread_id: Uuid,
    /// The graph it runs.
    pub graph: String,
    created_at: DateTime<Utc>,
    metadata: Map<String, Value>,
    kwargs: Value,
    progress: Mutex<Progress>,
    /// The number of parts so far, bumped on every change.
    changed: watch::Sender<usize>,
}

impl RunHandle {
    fn lock(&self) -> std::sync::MutexGuard<'_, Progress> {
        self.progress
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn notify(&self) {
        self.changed.send_modify(|n| *n += 1);
    }

    fn set_status(&self, status: Status) {
        let mut p = self.lock();
        p.status = status;
        p.updated_at = Utc::now();
    }

    /// Keep `part` for the followers (see [`MAX_PART_BYTES`]); `always` parts are kept past it.
    fn push(&self, part: Part, always: bool) {
        {
            let mut p = self.lock();
            if p.bytes + part.data.len() > MAX_PART_BYTES && !always && part.mode != Some(Mode::Values) {
                if !p.dropping {
                    tracing::warn!(
                        "run {}: stream over {MAX_PART_BYTES} bytes, dropping parts",
                        self.run_id
                    );
                    p.dropping = true;
                }
                return;
            }
            p.bytes += part.data.len();
            p.parts.push(Arc::new(part));
        }
        self.notify();
    }

    fn finish(&self, status: Status, result: Value) {
        {
            let mut p = self.lock();
            p.status = status;
            p.updated_at = Utc::now();
            p.result = Some(result);
            p.done = true;
        }
        self.notify();
    }

    /// The `Run` JSON.
    pub fn to_json(&self) -> Value {
        let p = self.lock();
        json!({
            "run_id": self.run_id,
            "thread_id": self.thread_id,
            "assistant_id": assistants::assistant_id(&self.graph),
            "created_at": time(&self.created_at),
            "updated_at": time(&p.updated_at),
            "status": p.status.as_str(),
            "metadata": self.metadata,
            "multitask_strategy": "reject",
            "kwargs": self.kwargs,
        })
    }

    /// Every part, from the first, as they come; ends when the run has ended.
    pub fn follow(self: Arc<Self>) -> impl Stream<Item = Arc<Part>> + Send + 'static {
        let rx = self.changed.subscribe();
        futures::stream::unfold((self, rx, 0usize), |(run, mut rx, next)| async move {
            loop {
                let (part, done) = {
                    let p = run.lock();
                    (p.parts.get(next).cloned(), p.done)
                };
                if let Some(part) = part {
                    return Some((part, (run, rx, next + 1)));
                }
                if done || rx.changed().await.is_err() {
                    return None;
                }
            }
        })
    }

    /// Wait for the run to end; its result (the final values, or `{"__error__": …}`).
    pub async fn result(&self) -> Value {
        let mut rx = self.changed.subscribe();
        loop {
            if let Some(result) = self.lock().result.clone() {
                return result;
            }
            if rx.changed().await.is_err() {
                return json!({"__error__": {"error": "RunLost", "message": "the run ended without a result"}});
            }
        }
    }
}

#[derive(Debug, Default)]
struct Runs {
    by_id: HashMap<Uuid, Arc<RunHandle>>,
    active: HashMap<Uuid, Uuid>,
}

/// The runs of every thread, and which thread is running which.
#[derive(Debug, Default)]
pub struct RunRegistry {
    inner: Mutex<Runs>,
}

impl RunRegistry {
    fn lock(&self) -> std::sync::MutexGuard<'_, Runs> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The run in flight on `thread`.
    pub fn active_run(&self, thread: &Uuid) -> Option<Uuid> {
        self.lock().active.get(thread).copied()
    }

    /// Register `run` as its thread's run in flight; 409 when one is.
    fn begin(&self, run: Arc<RunHandle>) -> ApiResult<()> {
        let mut runs = self.lock();
        if runs.active.contains_key(&run.thread_id) {
            return Err(ApiError::conflict(
                "Thread is already running a task. Wait for it to finish or choose a different multitask strategy.",
            ));
        }
        runs.active.insert(run.thread_id, run.run_id);
        runs.by_id.insert(run.run_id, run);
        Ok(())
    }

    fn end(&self, run: &RunHandle) {
        let mut runs = self.lock();
        if runs.active.get(&run.thread_id) == Some(&run.run_id) {
            runs.active.remove(&run.thread_id);
        }
    }

    /// Run `run` of `thread`.
    fn get(&self, thread: &Uuid, run: &Uuid) -> ApiResult<Arc<RunHandle>> {
        self.lock()
            .by_id
            .get(run)
            .filter(|r| r.thread_id == *thread)
            .cloned()
            .ok_or_else(|| ApiError::not_found(format!("run {run}")))
    }

    /// The runs of `thread`, newest first.
    fn of_thread(&self, thread: &Uuid) -> Vec<Arc<RunHandle>> {
        let mut runs: Vec<_> = self
            .lock()
            .by_id
            .values()
            .filter(|r| r.thread_id == *thread)
            .cloned()
            .collect();
        runs.sort_by_key(|r| std::cmp::Reverse(r.created_at));
        runs
    }

    /// Forget the runs of a deleted thread.
    pub fn forget_thread(&self, thread: &Uuid) {
        self.lock().by_id.retain(|_, r| r.thread_id != *thread);
    }
}

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
    let now = Utc::now();
    let run = Arc::new(RunHandle {
        run_id: Uuid::new_v4(),
        thread_id: thread,
        graph: graph.clone(),
        created_at: now,
        metadata: body.metadata.unwrap_or_default(),
        kwargs,
        progress: Mutex::new(Progress {
            status: Status::Pending,
            updated_at: now,
            parts: Vec::new(),
            bytes: 0,
            dropping: false,
            result: None,
            done: false,
        }),
        changed: watch::channel(0).0,
    });
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
    if let Err(e) = server.threads.update(&run.thread_id, |r| r.status = rest).await {
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
        RunEvent::ModelStreamStarted { step } => translator.reply_started(*step),
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
/// the response ends with the run. Comment lines keep an idle stream open.
pub async fn stream(
    State(server): State<Shared>,
    Extension(user): Extension<User>,
    Path(thread): Path<String>,
    JsonBody(body): JsonBody<RunCreate>,
) -> ApiResult<Response> {
    let Started { run, modes } = start(&server, &user, &thread, body).await?;
    let headers = locations(&run);
    let first = Event::default()
        .event("metadata")
        .data(json!({"run_id": run.run_id, "attempt": 1}).to_string());
    let parts = run
        .follow()
        .filter(move |part| std::future::ready(part.mode.is_none_or(|m| modes.contains(&m))))
        .map(|part| Event::default().event(part.event).data(part.data.as_str()));
    let events = futures::stream::once(std::future::ready(first))
        .chain(parts)
        .map(Ok::<_, Infallible>);
    let sse = Sse::new(events).keep_alive(KeepAlive::new().interval(HEARTBEAT));
    Ok((headers, sse).into_response())
}

/// `POST /threads/{thread_id}/runs/wait`: start a run and answer with its result when it ends —
/// the final values (with `__interrupt__` when it stopped for approvals), or `{"__error__":
/// {"error", "message"}}` with status 200 when it failed, as the reference server answers.
pub async fn wait(
    State(server): State<Shared>,
    Extension(user): Extension<User>,
    Path(thread): Path<String>,
    JsonBody(body): JsonBody<RunCreate>,
) -> ApiResult<Response> {
    let Started { run, .. } = start(&server, &user, &thread, body).await?;
    let result = run.result().await;
    Ok((locations(&run), Json(result)).into_response())
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
) -> ApiResult<Json<Value>> {
    let run = find(&server, &user, &thread, &run)?;
    Ok(Json(run.result().await))
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
