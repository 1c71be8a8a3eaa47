//! Runs: `POST /threads/{id}/runs/stream` (SSE), `/runs/wait`, `/runs` (background), their
//! stateless forms `POST /runs/stream`, `/runs/wait`, `/runs` (a temporary thread),
//! `GET /threads/{id}/runs`, `…/runs/{run_id}`, `…/runs/{run_id}/join` and
//! `…/runs/{run_id}/stream` (join the stream, replay with `Last-Event-ID`). Cancel and delete are
//! in [`crate::server::cancel`]; what a run does from start to end, in [`crate::server::execute`].
//!
//! Every run executes on a task of its own, whatever the client does: a stream or wait whose
//! client hangs up leaves the run going, unless it asked for `on_disconnect: "cancel"`. Its parts
//! ([`Part`](crate::server::stream::Part)) are kept in its [`RunHandle`](crate::server::run_handle::RunHandle) (in memory, up to
//! [`MAX_PART_BYTES`](crate::server::run_registry::MAX_PART_BYTES)) for every follower
//! ([`crate::server::run_registry`]). A run is reachable only through its thread, by the thread's
//! owner.
//!
//! Statuses: `pending` (queued behind another run of its thread) → `running` → `success` (also
//! when the run stopped for approvals: the thread is then `interrupted`), `error` (the thread is
//! then `error`) or `interrupted` (cancelled).

use std::convert::Infallible;
use std::time::Duration;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::{Extension, Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::server::cancel::{CancelOnDrop, flag};
use crate::server::checkpoints::CheckpointRef;
use crate::server::error::{ApiError, ApiResult};
use crate::server::execute::{self, Started, Target};
use crate::server::extract::{JsonBody, User, parse_uuid};
use crate::server::run_ref::{RunRef, queue_error};
use crate::server::stream::Mode;
use crate::server::{Shared, shapes};

/// How often `/wait` and `/join` write a newline while the run goes on, so proxies and the
/// clients' read timeouts (300 s in the Python client) do not cut a long run; JSON parsers skip
/// the leading whitespace. The reference server writes one every 5 s.
pub const WAIT_KEEPALIVE: Duration = Duration::from_secs(5);
/// The most runs of a thread a list reads from a shared queue.
const LIST_MAX: usize = 1000;
/// How often an idle SSE stream gets a comment line, so proxies and client timeouts keep it open.
const HEARTBEAT: Duration = Duration::from_secs(10);

/// The body of a run-create (stream, wait, background). Every field the clients send is named;
/// those not built are refused with a 422 when set to anything but their default.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunCreate {
    pub(crate) assistant_id: String,
    #[serde(default)]
    #[schemars(with = "Option<shapes::RunInput>")]
    pub(crate) input: Option<Value>,
    #[serde(default)]
    #[schemars(with = "Option<crate::server::command::CommandShape>")]
    pub(crate) command: Option<Value>,
    #[serde(default)]
    pub(crate) config: Option<Value>,
    #[serde(default)]
    pub(crate) context: Option<Value>,
    #[serde(default)]
    pub(crate) metadata: Option<Map<String, Value>>,
    #[serde(default)]
    #[schemars(with = "Option<shapes::StreamModes>")]
    pub(crate) stream_mode: Option<Value>,
    #[serde(default)]
    pub(crate) stream_subgraphs: Option<bool>,
    #[serde(default)]
    pub(crate) stream_resumable: Option<bool>,
    /// Not supported yet: null only.
    #[serde(default)]
    #[schemars(with = "()")]
    pub(crate) interrupt_before: Option<Value>,
    /// Not supported yet: null only.
    #[serde(default)]
    #[schemars(with = "()")]
    pub(crate) interrupt_after: Option<Value>,
    /// Start from this checkpoint of the thread (a branch: see docs/server.md).
    #[serde(default)]
    #[schemars(with = "Option<CheckpointRef>")]
    pub(crate) checkpoint: Option<Value>,
    /// Start from the thread's checkpoint with this id.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) checkpoint_id: Option<Value>,
    #[serde(default)]
    #[schemars(with = "Option<shapes::MultitaskStrategy>")]
    pub(crate) multitask_strategy: Option<String>,
    #[serde(default)]
    #[schemars(with = "Option<shapes::IfNotExists>")]
    pub(crate) if_not_exists: Option<String>,
    #[serde(default)]
    #[schemars(with = "Option<shapes::OnDisconnect>")]
    pub(crate) on_disconnect: Option<String>,
    #[serde(default)]
    #[schemars(with = "Option<shapes::OnCompletion>")]
    pub(crate) on_completion: Option<String>,
    /// Not supported yet: null or 0 only.
    #[serde(default)]
    #[schemars(range(max = 0.0))]
    pub(crate) after_seconds: Option<f64>,
    /// Not supported yet: null only.
    #[serde(default)]
    #[schemars(with = "()")]
    pub(crate) webhook: Option<Value>,
    #[serde(default)]
    pub(crate) feedback_keys: Option<Value>,
    #[serde(default)]
    pub(crate) durability: Option<String>,
    #[serde(default)]
    pub(crate) checkpoint_during: Option<bool>,
    #[serde(default)]
    pub(crate) langsmith_tracer: Option<Value>,
}

/// The checkpoint of `thread` that `checkpoint` (`{"checkpoint_id", …}`) or else `checkpoint_id`
/// names: its number, `None` when neither names one. 404 for an id of none of its checkpoints,
/// 422 for a malformed one.
pub(crate) fn checkpoint_named(
    checkpoint: Option<&Value>,
    checkpoint_id: Option<&Value>,
    thread: &uuid::Uuid,
) -> ApiResult<Option<u64>> {
    let reference = match (checkpoint, checkpoint_id) {
        (Some(c), _) if !c.is_null() => serde_json::from_value::<CheckpointRef>(c.clone())
            .map_err(|e| ApiError::unprocessable(format!("checkpoint: {e}")))?,
        (_, Some(Value::String(id))) => CheckpointRef {
            checkpoint_id: Some(id.clone()),
            checkpoint_ns: None,
            checkpoint_map: None,
            thread_id: None,
        },
        (_, Some(id)) if !id.is_null() => {
            return Err(ApiError::unprocessable("checkpoint_id must be a string"));
        }
        _ => return Ok(None),
    };
    reference.seq(thread)
}

fn set(value: &Option<Value>) -> bool {
    value.as_ref().is_some_and(|v| !v.is_null())
}

impl RunCreate {
    /// The requested modes (default `values`); 422 for a mode not built.
    pub(crate) fn modes(&self) -> ApiResult<Vec<Mode>> {
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

    /// `on_disconnect: "cancel"`: a client that hangs up cancels the run.
    fn cancels_on_disconnect(&self) -> bool {
        self.on_disconnect.as_deref() == Some("cancel")
    }

    /// The checkpoint of `thread` the run starts from (`checkpoint`, or `checkpoint_id`): its
    /// number, `None` for the thread's latest. 404 for an id of none of its checkpoints, 422 for a
    /// malformed one.
    pub(crate) fn start_from(&self, thread: &uuid::Uuid) -> ApiResult<Option<u64>> {
        checkpoint_named(self.checkpoint.as_ref(), self.checkpoint_id.as_ref(), thread)
    }

    /// Whether the body names a checkpoint to start from.
    pub(crate) fn names_checkpoint(&self) -> bool {
        set(&self.checkpoint) || set(&self.checkpoint_id)
    }

    /// 422 for every option set that is not built yet.
    pub(crate) fn refuse_unbuilt(&self) -> ApiResult<()> {
        let not_built = |what: &str| Err(ApiError::unprocessable(format!("{what} is not supported yet")));
        if set(&self.interrupt_before) || set(&self.interrupt_after) {
            return not_built("interrupt_before / interrupt_after");
        }
        if set(&self.webhook) {
            return not_built("webhook");
        }
        if self.after_seconds.is_some_and(|s| s > 0.0) {
            return not_built("after_seconds");
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

/// `Content-Location` of a run: `/threads/{tid}/runs/{rid}`, or `/runs/{rid}` for a stateless
/// stream or background run (as the reference server answers; the clients read both).
fn locations(run: &RunRef, stateless: bool) -> HeaderMap {
    let mut headers = HeaderMap::new();
    let at = if stateless {
        format!("/runs/{}", run.run_id())
    } else {
        format!("/threads/{}/runs/{}", run.thread_id(), run.run_id())
    };
    if let Ok(value) = HeaderValue::from_str(&at) {
        headers.insert(header::CONTENT_LOCATION, value);
    }
    headers
}

/// Check `body` for a run on `thread` (`None`: a stateless run on a temporary thread, deleted
/// when the run ends unless `on_completion` is `keep`) and start it.
async fn begin(server: &Shared, user: &User, thread: Option<&str>, body: RunCreate) -> ApiResult<Started> {
    let target = match thread {
        Some(thread) => {
            if body.on_completion.is_some() {
                return Err(ApiError::unprocessable(
                    "on_completion is for stateless runs (POST /runs…) only",
                ));
            }
            Target::Thread(parse_uuid("thread_id", thread)?)
        }
        None => Target::Stateless {
            delete: match body.on_completion.as_deref() {
                None | Some("delete") => true,
                Some("keep") => false,
                Some(other) => {
                    return Err(ApiError::unprocessable(format!(
                        "on_completion must be delete or keep, not {other:?}"
                    )));
                }
            },
        },
    };
    execute::start(server, user, target, body).await
}

/// Most runs one `POST /runs/batch` starts.
pub const MAX_BATCH: usize = 100;

/// `POST /runs/batch`: stateless background runs, one per body (1 to [`MAX_BATCH`]), answered as
/// their records in order. Every body is checked before any run starts: the first refusal answers
/// (naming the run's index) and none starts.
pub async fn stateless_batch(
    State(server): State<Shared>,
    Extension(user): Extension<User>,
    JsonBody(bodies): JsonBody<Vec<RunCreate>>,
) -> ApiResult<Json<Value>> {
    if bodies.is_empty() || bodies.len() > MAX_BATCH {
        return Err(ApiError::unprocessable(format!(
            "a batch takes 1 to {MAX_BATCH} runs, not {}",
            bodies.len()
        )));
    }
    execute::check_batch(&server, &bodies)?;
    let mut runs = Vec::with_capacity(bodies.len());
    for body in bodies {
        let Started { run, .. } = begin(&server, &user, None, body).await?;
        runs.push(run.to_json());
    }
    Ok(Json(Value::Array(runs)))
}

/// `POST /threads/{thread_id}/runs/stream`: start a run and stream its parts as SSE — `metadata`
/// (`{"run_id", "attempt"}`) first, then the parts of the requested modes, `error` if it fails;
/// the response ends with the run. With `stream_resumable`, events carry ids and `Location` names
/// the join stream, where a client that lost the connection resumes ([`join_stream`]). With
/// `on_disconnect: "cancel"`, a client that hangs up before the end cancels the run (action
/// `interrupt`); by default (`continue`) the run goes on.
pub async fn stream(
    State(server): State<Shared>,
    Extension(user): Extension<User>,
    Path(thread): Path<String>,
    JsonBody(body): JsonBody<RunCreate>,
) -> ApiResult<Response> {
    stream_run(&server, &user, Some(&thread), body).await
}

/// `POST /runs/stream`: [`stream`] on a temporary thread (a stateless run).
pub async fn stateless_stream(
    State(server): State<Shared>,
    Extension(user): Extension<User>,
    JsonBody(body): JsonBody<RunCreate>,
) -> ApiResult<Response> {
    stream_run(&server, &user, None, body).await
}

async fn stream_run(
    server: &Shared,
    user: &User,
    thread: Option<&str>,
    body: RunCreate,
) -> ApiResult<Response> {
    let cancel = body.cancels_on_disconnect();
    let Started { run, modes } = begin(server, user, thread, body).await?;
    let mut headers = locations(&run, thread.is_none());
    if run.resumable() {
        let at = format!("/threads/{}/runs/{}/stream", run.thread_id(), run.run_id());
        if let Ok(value) = HeaderValue::from_str(&at) {
            headers.insert(header::LOCATION, value);
        }
    }
    Ok((headers, sse(run, modes, Resume::FromStart, cancel).await).into_response())
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
/// With `cancel`, dropping the response before the run ends (the client hung up) cancels it.
async fn sse(run: RunRef, modes: Vec<Mode>, from: Resume, cancel: bool) -> Response {
    let ids = run.resumable();
    let guard = CancelOnDrop(cancel.then(|| run.clone()));
    let first = (from == Resume::FromStart).then(|| {
        let event = Event::default()
            .event("metadata")
            .data(json!({"run_id": run.run_id(), "attempt": 1}).to_string());
        if ids { event.id("0") } else { event }
    });
    let start = match from {
        Resume::FromStart => 0,
        Resume::After(id) => id,
        Resume::New => run.parts_len().await,
    };
    let parts = run
        .follow(start)
        .filter(move |(_, part)| std::future::ready(part.mode.is_none_or(|m| modes.contains(&m))))
        .map(move |(index, part)| {
            let event = Event::default().event(part.event_name()).data(part.data.as_str());
            if ids {
                event.id((index + 1).to_string())
            } else {
                event
            }
        });
    let events = futures::stream::iter(first).chain(parts).map(move |event| {
        let _held = &guard;
        Ok::<_, Infallible>(event)
    });
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(HEARTBEAT))
        .into_response()
}

/// `GET /threads/{thread_id}/runs/{run_id}/stream`: join a run's stream. With `Last-Event-ID:
/// -1`, from its `metadata` event; with the id of an event (resumable runs), from the event after
/// it; without the header, only the parts still to come. `stream_mode` (repeated keys, or a JSON
/// list as the JS client sends) narrows the modes; by default the run's own. A finished run's
/// stream replays and closes. With `cancel_on_disconnect=true` (or `1`), a client that hangs up
/// before the run ends cancels it.
pub async fn join_stream(
    State(server): State<Shared>,
    Extension(user): Extension<User>,
    Path((thread, run)): Path<(String, String)>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let run = find(&server, &user, &thread, &run).await?;
    let mut modes = Vec::new();
    let mut cancel = false;
    for (key, value) in url::form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        if key == "cancel_on_disconnect" {
            cancel = flag("cancel_on_disconnect", &value)?;
        }
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
        modes = run.modes();
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
    Ok(sse(run, modes, from, cancel).await)
}

/// `POST /threads/{thread_id}/runs/wait`: start a run and answer with its result when it ends
/// (newlines before it while it runs, see [`WAIT_KEEPALIVE`]) — the final values (with
/// `__interrupt__` when it stopped for approvals), or `{"__error__": {"error", "message"}}` with
/// status 200 when it failed, as the reference server answers. `on_disconnect` as for [`stream`].
pub async fn wait(
    State(server): State<Shared>,
    Extension(user): Extension<User>,
    Path(thread): Path<String>,
    JsonBody(body): JsonBody<RunCreate>,
) -> ApiResult<Response> {
    wait_run(&server, &user, Some(&thread), body).await
}

/// `POST /runs/wait`: [`wait`] on a temporary thread (a stateless run).
pub async fn stateless_wait(
    State(server): State<Shared>,
    Extension(user): Extension<User>,
    JsonBody(body): JsonBody<RunCreate>,
) -> ApiResult<Response> {
    wait_run(&server, &user, None, body).await
}

async fn wait_run(
    server: &Shared,
    user: &User,
    thread: Option<&str>,
    body: RunCreate,
) -> ApiResult<Response> {
    let cancel = body.cancels_on_disconnect();
    let Started { run, .. } = begin(server, user, thread, body).await?;
    Ok((locations(&run, false), result_body(run, cancel)).into_response())
}

/// The result of `run` as a JSON response that starts at once and writes a newline every
/// [`WAIT_KEEPALIVE`] until the run ends. With `cancel`, dropping the response before the run
/// ends (the client hung up) cancels it.
pub(crate) fn result_body(run: RunRef, cancel: bool) -> Response {
    let guard = CancelOnDrop(cancel.then(|| run.clone()));
    let chunks = futures::stream::unfold(Some((run, guard)), |state| async move {
        let (run, guard) = state?;
        tokio::select! {
            biased;
            result = run.result() => Some((Bytes::from(result.to_string()), None)),
            () = tokio::time::sleep(WAIT_KEEPALIVE) => Some((Bytes::from_static(b"\n"), Some((run, guard)))),
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
    let Started { run, .. } = begin(&server, &user, Some(&thread), body).await?;
    Ok((locations(&run, false), Json(run.to_json())).into_response())
}

/// `POST /runs`: [`create`] on a temporary thread (a stateless run); the `Run` names the thread,
/// which can be followed (`…/join`, `…/stream`) until the run ends and the thread is deleted.
pub async fn stateless_create(
    State(server): State<Shared>,
    Extension(user): Extension<User>,
    JsonBody(body): JsonBody<RunCreate>,
) -> ApiResult<Response> {
    let Started { run, .. } = begin(&server, &user, None, body).await?;
    Ok((locations(&run, true), Json(run.to_json())).into_response())
}

/// The run `run` of `thread` as `user` sees it.
pub(crate) async fn find(server: &Shared, user: &User, thread: &str, run: &str) -> ApiResult<RunRef> {
    let thread = parse_uuid("thread_id", thread)?;
    let run = parse_uuid("run_id", run)?;
    server.threads.get(user, &thread)?;
    find_of(server, &thread, &run).await
}

/// Run `run` of `thread` (whose owner the caller checked): 404 when it is not that thread's.
pub(crate) async fn find_of(server: &Shared, thread: &uuid::Uuid, run: &uuid::Uuid) -> ApiResult<RunRef> {
    let Some(shared) = &server.shared else {
        return server.runs.get(thread, run).map(RunRef::Local);
    };
    match shared.queue.get(*run).await.map_err(queue_error)? {
        Some(record) if record.thread_id == *thread => Ok(RunRef::shared(record, shared)),
        _ => Err(ApiError::not_found(format!("run {run}"))),
    }
}

/// `GET /threads/{thread_id}/runs/{run_id}`.
pub async fn get_one(
    State(server): State<Shared>,
    Extension(user): Extension<User>,
    Path((thread, run)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    Ok(Json(find(&server, &user, &thread, &run).await?.to_json()))
}

/// `GET /threads/{thread_id}/runs/{run_id}/join`: wait for the run; its result, as `/wait`.
pub async fn join(
    State(server): State<Shared>,
    Extension(user): Extension<User>,
    Path((thread, run)): Path<(String, String)>,
) -> ApiResult<Response> {
    Ok(result_body(find(&server, &user, &thread, &run).await?, false))
}

/// `GET /threads/{thread_id}/runs` query.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
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
    let all: Vec<RunRef> = match &server.shared {
        None => server
            .runs
            .of_thread(&thread)
            .into_iter()
            .map(RunRef::Local)
            .collect(),
        Some(shared) => shared
            .queue
            .list(thread, LIST_MAX)
            .await
            .map_err(queue_error)?
            .into_iter()
            .map(|record| RunRef::shared(record, shared))
            .collect(),
    };
    let runs: Vec<Value> = all
        .iter()
        .map(RunRef::to_json)
        .filter(|r| query.status.as_deref().is_none_or(|s| r["status"] == s))
        .skip(query.offset.unwrap_or(0))
        .take(query.limit.unwrap_or(10))
        .collect();
    Ok(Json(Value::Array(runs)))
}
