//! The LangGraph Agent Server API, the subset its clients use (the Python and JS `langgraph-sdk`,
//! `useStream`, deep-agents-ui), as an axum [`Router`] a Rust service can mount in its own app
//! ([`router`]); `trellis serve` runs it on its own. Behind the `server` feature.
//!
//! ```no_run
//! # async fn demo(server: trellis_agent::server::Server) -> anyhow::Result<()> {
//! let app = axum::Router::new().nest("/agents", trellis_agent::server::router(server));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:2024").await?;
//! axum::serve(listener, app).await?;
//! # Ok(()) }
//! ```
//!
//! | module | what |
//! |---|---|
//! | [`error`] | [`ApiError`]: `{"detail": …}` with the documented status codes |
//! | [`extract`] | JSON bodies (4xx on every malformed one), UUID ids, the [`User`] |
//! | [`auth`] | API keys (`x-api-key` or `Authorization: Bearer`) → user |
//! | [`assistants`] | `/ok`, `/info`, one assistant per graph |
//! | [`threads`] | thread records, `/threads…`, copy |
//! | [`checkpoints`] | checkpoint ids, thread state, state at a checkpoint, history |
//! | [`update`] | `update_state`: messages, todos and files, version-checked |
//! | [`files`] | the thread's files in state values and in `update_state` |
//! | [`transfer`] | upload and download of a thread's files (a Trellis extension) |
//! | [`runs`] | runs on a thread and stateless: stream (SSE), wait, background, get, list, join, join stream |
//! | [`execute`] | a run from its checked body to its end: `multitask_strategy`, cancel, rollback, thread status |
//! | [`drive`] | one run's agent driven to its end, its events turned into parts as they come |
//! | [`resume`] | `command.resume` (human-in-the-loop decisions) → Trellis decisions |
//! | [`cancel`] | cancel (`interrupt`, `rollback`), delete, `on_disconnect` |
//! | [`run_handle`] | one run in memory: status, stream parts, usage, result |
//! | [`run_registry`] | the runs in memory by id, each thread's queue of runs, which finished runs are forgotten |
//! | [`run_usage`] | what a run used and cost, in its record (a Trellis extension) |
//! | [`queue`] | the run queue: one trait, in memory and on PostgreSQL |
//! | `run_ref` | a run as the handlers see it: of this process, or of the shared queue |
//! | [`run_wake`] | wake-ups of the streams following a shared run: `NOTIFY` fanned out in-process, a fallback poll |
//! | [`workers`] | many servers sharing runs through the queue (`--database`): claims, leases, reaper, drain |
//! | [`routes`] | the table of routes: method, path, handler and documentation of each |
//! | [`openapi`] | `/openapi.json`, built from that table; request schemas from the handlers' types |
//! | [`shapes`] | the shapes of the JSON answers, for the document |
//! | [`skills`] | the skills a thread's runs see, and pinning them (a Trellis extension) |
//! | [`stream`] | a run's events turned into stream parts (`values`, `updates`, `messages`) |
//! | [`introspection`] | the stream modes `tasks`, `checkpoints`, `debug` and `custom` |
//! | [`subgraphs`] | `stream_subgraphs`: subagents' events under `tools:<task id>` namespaces |
//! | [`messages`] | Trellis messages ↔ LangChain message dicts |
//! | [`ui`] | the web page at `/` (a client of these routes, embedded in the binary) |
//!
//! # Scopes: who owns what
//! | state | belongs to | kept | survives a restart |
//! |---|---|---|---|
//! | graph / assistant | the server (one per `--agent`) | in memory, from the agent files | rebuilt from the files |
//! | thread record (owner, metadata, times, status) | a user (the key's user that created it; anonymous without keys) | `STORE/server/threads/<id>.json` on the [`Backend`] given to [`Server::open`] | yes |
//! | checkpoints and the thread's own files | a thread | the [`Checkpointer`] the agents use (`trellis serve`: the state dir's `threads/<id>/`, as `trellis run` keeps them) | yes |
//! | run record (status, times, its stream parts) | a run of a thread | in memory; with a shared queue ([`workers`]), in its store (PostgreSQL) | in memory: no, the run list of a thread starts empty after a restart; shared: yes |
//! | the user's workspace, memory, personal skills | a user | as `trellis run --user` keeps them (`users/<id>/`) | yes |
//!
//! Another user's thread is a 404, exactly like a thread that does not exist, on every route.
//!
//! # Concurrency and crashes
//! A thread runs one run at a time; a new run while one is pending or running follows its
//! `multitask_strategy` (`reject`, the default: 409; `interrupt` / `rollback`: the runs in flight
//! are cancelled first; `enqueue`: it waits `pending`), see [`execute`]. A run goes on when its
//! client disconnects unless it asked for `on_disconnect: "cancel"`.
//!
//! A `kill -9` mid-run leaves the thread's checkpoints up to its last finished step (a step is
//! saved whole or not at all) and its record as it was before the run (`busy` is never stored), so
//! the thread is `idle` after the restart and its next run continues from that checkpoint; the run
//! record and its stream are gone (`GET …/runs/{id}` is 404), and so are runs that were queued
//! behind it (`pending`) and never started. A stateless run's temporary thread outlives a `kill
//! -9` (it is deleted only when its run ends).

pub mod assistants;
pub mod auth;
pub mod cancel;
pub mod checkpoints;
pub mod command;
pub mod drive;
pub mod error;
pub mod execute;
pub mod extract;
pub mod files;
pub mod introspection;
pub mod messages;
pub mod openapi;
pub mod queue;
pub mod resume;
pub mod routes;
pub mod run_handle;
pub(crate) mod run_ref;
pub mod run_registry;
pub mod run_usage;
pub mod run_wake;
pub mod runs;
pub mod shapes;
pub mod skills;
pub mod stream;
pub mod subgraphs;
pub mod thread_copy;
pub mod threads;
pub mod transfer;
pub mod ui;
pub mod update;
pub mod view;
pub mod workers;

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::get;
use trellis_middleware::backend::Backend;
use trellis_middleware::{Agent, Checkpointer, RunInput, ThreadId};

pub use auth::ApiKeys;
pub use error::{ApiError, ApiResult};
pub use extract::User;

/// Largest request body accepted by default, in bytes (413 above it).
pub const DEFAULT_BODY_LIMIT: usize = 1024 * 1024;

/// One graph the server serves: the agent a user's run uses. Implemented by `trellis serve` over
/// an agent file; a Rust service implements it over its own agents.
///
/// Contract: the agents returned must checkpoint to the [`Checkpointer`] given to [`Server::open`]
/// (the server reads thread state and deletes threads there).
#[async_trait]
pub trait Graph: Send + Sync + std::fmt::Debug {
    /// The agent for a run of `user` (`None` without API keys) on `thread`, and `input` with what
    /// that user's runs carry (identity, workspace), for [`Agent::run`].
    async fn prepare(
        &self,
        user: Option<&str>,
        thread: &ThreadId,
        input: RunInput,
    ) -> anyhow::Result<(Agent, RunInput)>;

    /// The skills `user`'s runs see (`GET /threads/{id}/skills`, a run's `input.pin_skills`).
    /// The default: none.
    async fn skills(&self, user: Option<&str>) -> anyhow::Result<trellis_middleware::skills::SkillCatalog> {
        let _ = user;
        Ok(Default::default())
    }

    /// The agent of `user`'s runs, to read `thread` with before a run starts (what it waits
    /// for): unlike [`Graph::prepare`] it must not record anything for a run. The default calls
    /// [`Graph::prepare`] with an empty input.
    async fn agent(&self, user: Option<&str>, thread: &ThreadId) -> anyhow::Result<Agent> {
        Ok(self.prepare(user, thread, RunInput::new()).await?.0)
    }

    /// What `user`'s runs see beside each thread's own files — their `/workspace`, the shared
    /// skill and memory mounts — for downloads over the API (read-only). `None` (the default):
    /// nothing, only the thread's own files are served.
    async fn shared_view(&self, user: Option<&str>) -> anyhow::Result<Option<view::SharedView>> {
        let _ = user;
        Ok(None)
    }

    /// `thread` was deleted (its record, checkpoints and files are gone): forget what the graph
    /// kept about it. The default keeps nothing.
    async fn thread_deleted(&self, thread: &ThreadId) -> anyhow::Result<()> {
        let _ = thread;
        Ok(())
    }
}

/// The server's state: its graphs, where threads live, the runs in flight and the keys.
#[derive(Debug)]
pub struct Server {
    graphs: BTreeMap<String, Arc<dyn Graph>>,
    checkpointer: Arc<dyn Checkpointer>,
    threads: threads::ThreadStore,
    runs: run_registry::RunRegistry,
    keys: Option<Arc<ApiKeys>>,
    body_limit: usize,
    prices: crate::usage::Prices,
    started: chrono::DateTime<chrono::Utc>,
    ui: bool,
    /// With a shared queue, every run goes through it (see [`workers`]).
    shared: Option<Arc<workers::SharedQueue>>,
}

impl Server {
    /// A server keeping thread records on `store` (under `/server/threads/`, loaded now) and
    /// reading thread state from `checkpointer`. Add graphs with [`Server::graph`].
    pub async fn open(checkpointer: Arc<dyn Checkpointer>, store: Arc<dyn Backend>) -> anyhow::Result<Self> {
        Ok(Self {
            graphs: BTreeMap::new(),
            checkpointer,
            threads: threads::ThreadStore::open(store).await?,
            runs: run_registry::RunRegistry::default(),
            keys: None,
            body_limit: DEFAULT_BODY_LIMIT,
            prices: crate::usage::Prices::default(),
            started: chrono::Utc::now(),
            ui: true,
            shared: None,
        })
    }

    /// Keep runs in `queue`, shared with other servers (see [`workers`]): this server enqueues
    /// every run there and runs the runs it claims; start its loops with [`workers::start`]. The
    /// servers must share the checkpointer's and the thread records' storage.
    pub fn shared_queue(mut self, queue: workers::SharedQueue) -> Self {
        self.shared = Some(Arc::new(queue));
        self
    }

    /// Whether `thread` has a run pending or running (on any worker, with a shared queue).
    pub(crate) async fn busy(&self, thread: &uuid::Uuid) -> ApiResult<bool> {
        let Some(shared) = &self.shared else {
            return Ok(self.runs.active_run(thread).is_some());
        };
        // Runs of a thread run in enqueue order, so the active ones are among its newest.
        let runs = shared
            .queue
            .list(*thread, run_registry::MAX_QUEUED_RUNS * 2)
            .await
            .map_err(run_ref::queue_error)?;
        Ok(runs.iter().any(|r| r.status.is_active()))
    }

    /// Serve `graph` as graph id `id` (its assistant's `graph_id` and name).
    pub fn graph(mut self, id: impl Into<String>, graph: Arc<dyn Graph>) -> Self {
        self.graphs.insert(id.into(), graph);
        self
    }

    /// Require one of these keys on every request but `GET /ok`.
    pub fn api_keys(mut self, keys: ApiKeys) -> Self {
        self.keys = Some(Arc::new(keys));
        self
    }

    /// The largest request body, in bytes (default [`DEFAULT_BODY_LIMIT`]).
    pub fn body_limit(mut self, bytes: usize) -> Self {
        self.body_limit = bytes;
        self
    }

    /// The prices run records' costs are computed at (default: the built-in list prices).
    pub fn prices(mut self, prices: crate::usage::Prices) -> Self {
        self.prices = prices;
        self
    }

    /// Whether the router serves the web page at `/` ([`ui`]; default on). Off, `/` and `/ui/…`
    /// are 404 like any unknown route.
    pub fn ui(mut self, on: bool) -> Self {
        self.ui = on;
        self
    }

    /// The graph ids served.
    pub fn graph_ids(&self) -> impl Iterator<Item = &str> {
        self.graphs.keys().map(String::as_str)
    }
}

/// The shared server, as the handlers see it.
pub type Shared = Arc<Server>;

/// The routes of the API subset ([`routes`]; docs/server.md lists what is not built yet)
/// and `/openapi.json`, with the authentication layer and the body limit; and the web page
/// ([`ui`]) unless turned off, outside the key check (the page asks for a key and sends it with
/// its API calls).
pub fn router(server: Server) -> Router {
    router_shared(Arc::new(server))
}

/// [`router`] for a server already shared (to start its [`workers`] too).
pub fn router_shared(server: Shared) -> Router {
    let keys = server.keys.clone();
    let limit = server.body_limit;
    let page = server.ui;
    let refresh = server.shared.is_some();
    let doc = bytes::Bytes::from(routes::openapi_json(keys.is_some(), server.graph_ids()).to_string());
    let openapi = get(move || {
        let doc = doc.clone();
        async move { ([(axum::http::header::CONTENT_TYPE, "application/json")], doc) }
    });
    let api = routes::routes(openapi)
        .into_iter()
        .fold(Router::new(), |router, route| {
            router.route(route.path, route.handler)
        })
        .fallback(|| async { ApiError::not_found("route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                axum::http::StatusCode::METHOD_NOT_ALLOWED,
                "method not allowed on this route",
            )
        })
        .with_state(server.clone())
        .layer(axum::middleware::from_fn_with_state(
            (server, refresh),
            fresh_threads,
        ))
        .layer(axum::middleware::from_fn_with_state(keys, auth::authenticate))
        .layer(DefaultBodyLimit::max(limit));
    if page { ui::routes().merge(api) } else { api }
}

/// With a shared queue, thread records may have been written by another worker: a request on
/// `/threads/{id}…` reads that record again first, a search reads them all.
async fn fresh_threads(
    axum::extract::State((server, refresh)): axum::extract::State<(Shared, bool)>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    if refresh {
        let mut segments = request.uri().path().trim_start_matches('/').split('/');
        let fresh = match (segments.next(), segments.next()) {
            (Some("threads"), Some("search")) => server.threads.reload().await,
            (Some("threads"), Some(id)) => match uuid::Uuid::parse_str(id) {
                Ok(id) => server.threads.refresh(&id).await,
                Err(_) => Ok(()),
            },
            _ => Ok(()),
        };
        if let Err(e) = fresh {
            return e.into_response();
        }
    }
    next.run(request).await
}
