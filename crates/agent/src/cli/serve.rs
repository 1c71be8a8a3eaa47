//! `trellis serve`: the agents of one or more agent files behind the LangGraph Agent Server API
//! ([`crate::server`]), with threads and checkpoints in the state dir as `trellis run` keeps them.
//!
//! Each `--agent NAME=FILE` is one graph `NAME`; a single `--agent FILE` (or `./trellis.toml` when
//! no `--agent` is given) is graph `agent`. Files are read with `trellis run`'s rules: a file named
//! on the command line is trusted; a `./trellis.toml` may set the keys that need trust only in a
//! trusted folder. Each user (an `--api-keys` user id) gets the agent `trellis run --user ID`
//! would build — their workspace, memory and personal skills — built on their first run and kept.
//! Without `--api-keys` the server listens only on a loopback address.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use async_trait::async_trait;
use trellis_middleware::backend::{Backend, CompositeBackend, FilesystemBackend, VirtualPath};
use trellis_middleware::skills::SkillCatalog;
use trellis_middleware::tools::WORKSPACE_DIR;
use trellis_middleware::{Agent, BackendCheckpointer, RunInput, ThreadId};

use crate::cli::assemble::{self, Built};
use crate::cli::config::{self, Flags, RunConfig};
use crate::cli::state_dir::{StateDir, threads_on};
use crate::mcp::McpServers;
use crate::server::{self, ApiKeys, Graph, Server};

/// The graph id of a single agent given without a name.
pub const DEFAULT_GRAPH: &str = "agent";

/// What `trellis serve` is told.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// The address to listen on (a non-loopback address needs --api-keys).
    #[arg(long, default_value = "127.0.0.1:2024", value_name = "ADDR")]
    pub listen: SocketAddr,
    /// An agent file served as graph NAME, or FILE alone for graph `agent` (repeatable; default
    /// ./trellis.toml as graph `agent`).
    #[arg(long = "agent", value_name = "[NAME=]FILE")]
    pub agents: Vec<String>,
    /// Where threads, checkpoints, the server's thread records and users' workspaces are kept.
    #[arg(long, default_value = ".trellis")]
    pub state_dir: PathBuf,
    /// Keep threads (checkpoints, thread files) and the server's thread records here instead: an
    /// object-store URL (s3://bucket/prefix, gs://…, az://…, with the usual environment for
    /// credentials) or a directory. Users' workspaces and saved run settings stay in --state-dir.
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    /// A file of `USER_ID KEY` lines (`#` comments): every request must send one of the keys as
    /// x-api-key or Authorization: Bearer, and its threads belong to that user.
    #[arg(long, value_name = "FILE")]
    pub api_keys: Option<PathBuf>,
    /// Model prices for the cost in run records, over the built-in list prices: a JSON object of
    /// model-id prefix → {"input", "output", "cache_read", "cache_write"} in dollars per million
    /// tokens (as `trellis run --prices`).
    #[arg(long, value_name = "FILE")]
    pub prices: Option<PathBuf>,
    /// Do not serve the web page at `/` (the API alone; `/` is then a 404).
    #[arg(long)]
    pub no_ui: bool,
    /// Keep runs in this PostgreSQL database (postgres://user:password@host:port/db), shared with
    /// every `trellis serve` given the same database and the same --state-dir: any of them takes
    /// any request, and each runs the runs it claims (see docs/server.md, "Many workers").
    /// Default: the environment variable TRELLIS_DATABASE_URL, when set and not empty.
    #[arg(long, value_name = "URL")]
    pub database: Option<String>,
    /// With --database: how long a worker holds a run without renewing its lease, in seconds; a
    /// worker that died loses its runs to another after this long.
    #[arg(long, default_value_t = 30.0, value_name = "SECONDS")]
    pub lease_seconds: f64,
    /// With --database: runs this worker runs at once.
    #[arg(long, default_value_t = 16, value_name = "N")]
    pub worker_runs: usize,
    /// With --database: how often a stream, /join or /wait following a run reads the database
    /// again when no notification came (a notification wakes it at once), in seconds.
    #[arg(long, default_value_t = 1.0, value_name = "SECONDS")]
    pub follow_poll_seconds: f64,
    /// With --database: finished runs kept (with their stream events), the most recently
    /// finished; older ones are deleted by the workers' reaper, every minute.
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    pub keep_finished_runs: usize,
    /// With --database: finished runs (with their stream events) are deleted this many hours
    /// after they finished, however few there are.
    #[arg(long, default_value_t = 168.0, value_name = "HOURS")]
    pub finished_run_hours: f64,
}

/// `NAME=FILE` or `FILE` → (graph id, file).
fn parse_agents(specs: &[String]) -> Result<Vec<(String, Option<PathBuf>)>> {
    if specs.is_empty() {
        return Ok(vec![(DEFAULT_GRAPH.to_owned(), None)]);
    }
    let mut out: Vec<(String, Option<PathBuf>)> = Vec::new();
    for spec in specs {
        let (name, file) = match spec.split_once('=') {
            Some((name, file)) => (name.to_owned(), file),
            None => (DEFAULT_GRAPH.to_owned(), spec.as_str()),
        };
        let valid = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !valid {
            bail!("--agent {spec:?}: the graph name must be 1-64 ASCII letters, digits, '-' or '_'");
        }
        if out.iter().any(|(n, _)| *n == name) {
            bail!("--agent: graph {name:?} is given twice (name each file: --agent NAME=FILE)");
        }
        out.push((name, Some(PathBuf::from(file))));
    }
    Ok(out)
}

/// The configuration of one graph: its agent file under no flags, with `trellis run`'s trust rules.
fn graph_config(file: Option<&std::path::Path>, cwd: &std::path::Path) -> Result<RunConfig> {
    if file.is_none() && !cwd.join(config::DEFAULT_FILE).is_file() {
        bail!(
            "no agent: give --agent FILE (or NAME=FILE) or put {} in this folder",
            config::DEFAULT_FILE
        );
    }
    let (config, refusal) = config::resolve_checked(file, cwd, Flags::default())?;
    if let Some(refusal) = refusal {
        return Err(refusal.into());
    }
    if config.model.is_empty() {
        bail!("the agent file names no model (model = \"provider:name\")");
    }
    Ok(config.absolute(cwd))
}

/// One agent file served as a graph: the agent of each user, built on first use.
#[derive(Debug)]
struct FileGraph {
    config: RunConfig,
    state_dir: StateDir,
    servers: Option<Arc<McpServers>>,
    checkpointer: Arc<BackendCheckpointer>,
    built: tokio::sync::Mutex<HashMap<Option<String>, Arc<Built>>>,
}

impl FileGraph {
    /// The agent of `user`, built on their first run and kept.
    async fn built(&self, user: Option<&str>) -> Result<Arc<Built>> {
        let key = user.map(str::to_owned);
        let mut cache = self.built.lock().await;
        if let Some(built) = cache.get(&key) {
            return Ok(built.clone());
        }
        let mut config = self.config.clone();
        config.user = key.clone();
        let built = Arc::new(
            assemble::build_on(
                &config,
                &self.state_dir,
                self.servers.clone(),
                self.checkpointer.clone(),
            )
            .await?,
        );
        cache.insert(key, built.clone());
        Ok(built)
    }
}

#[async_trait]
impl Graph for FileGraph {
    async fn prepare(
        &self,
        user: Option<&str>,
        thread: &ThreadId,
        input: RunInput,
    ) -> Result<(Agent, RunInput)> {
        let built = self.built(user).await?;
        // Saved beside the thread as `trellis run` saves it, so `trellis resume ID` continues a
        // thread whose run stopped for approvals with this user's agent.
        let mut config = self.config.clone();
        config.user = user.map(str::to_owned);
        config.save(&self.state_dir, thread)?;
        Ok((built.agent.clone(), built.prepare(input, thread)))
    }

    /// The skills a pin may name, as in `trellis chat`: the agent file's sources and the user's
    /// personal skills.
    async fn skills(&self, user: Option<&str>) -> Result<SkillCatalog> {
        Ok(crate::cli::pin::catalog(&self.built(user).await?.ws).await)
    }

    /// The user's agent, saving nothing.
    async fn agent(&self, user: Option<&str>, _thread: &ThreadId) -> Result<Agent> {
        Ok(self.built(user).await?.agent.clone())
    }

    /// The user's `/workspace` (when they have one) and the agent file's skill and memory mounts.
    async fn shared_view(&self, user: Option<&str>) -> Result<Option<server::view::SharedView>> {
        let built = self.built(user).await?;
        let mut backend = CompositeBackend::new(built.ws.backend.clone());
        let mut mount_points = Vec::new();
        for (at, _) in &built.ws.mounts {
            mount_points.push(VirtualPath::parse(at)?);
        }
        if let Some(files) = &built.ws.user_files {
            backend = backend.mount(WORKSPACE_DIR, files.clone())?;
            mount_points.push(VirtualPath::parse(WORKSPACE_DIR)?);
        }
        Ok(Some(server::view::SharedView {
            backend: Arc::new(backend),
            mount_points,
        }))
    }

    /// The run settings saved for `trellis resume` go with the thread.
    async fn thread_deleted(&self, thread: &ThreadId) -> Result<()> {
        RunConfig::delete_saved(&self.state_dir, thread)
    }
}

/// `trellis serve`: serve until Ctrl-C or SIGTERM. Prints `trellis serve: listening on
/// http://ADDR` (the bound address, so `--listen 127.0.0.1:0` tells its port) to stderr.
pub async fn serve(args: ServeArgs) -> Result<ExitCode> {
    let keys = match &args.api_keys {
        Some(path) => {
            let text =
                std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
            Some(ApiKeys::parse(&text).with_context(|| format!("{}", path.display()))?)
        }
        None => None,
    };
    if keys.is_none() && !args.listen.ip().is_loopback() {
        bail!(
            "--listen {}: without --api-keys the server listens only on a loopback address (127.0.0.1, ::1)",
            args.listen
        );
    }
    let cwd = std::env::current_dir()?;
    let state_dir = StateDir::new(args.state_dir.clone());
    let database = args.database.clone().or_else(|| {
        std::env::var("TRELLIS_DATABASE_URL")
            .ok()
            .filter(|url| !url.is_empty())
    });
    // With a shared queue, a run's thread files are written only while its lease surely holds.
    let fences = server::workers::fence::ThreadFences::default();
    let (threads, store): (BackendCheckpointer, Arc<dyn Backend>) = match &args.store {
        Some(url) => {
            let store = crate::cli::mounts::backend_for(url).context("--store")?;
            (threads_on(store.clone())?, store)
        }
        None => (
            state_dir.checkpointer()?,
            Arc::new(FilesystemBackend::new(state_dir.root())?),
        ),
    };
    let checkpointer = Arc::new(match &database {
        Some(_) => threads.with_files_guard(Arc::new(fences.clone())),
        None => threads,
    });
    let mut server = Server::open(checkpointer.clone(), store).await?;
    let mut all_servers = Vec::new();
    for (name, file) in parse_agents(&args.agents)? {
        let config = graph_config(file.as_deref(), &cwd).with_context(|| format!("graph {name}"))?;
        if keys.is_some() && config.workdir.is_some() {
            bail!(
                "graph {name}: the agent file sets workdir, which every user would share; with --api-keys each user's workspace is STATE_DIR/users/ID (remove workdir)"
            );
        }
        let servers = assemble::mcp_servers(&config)?;
        all_servers.extend(servers.clone());
        let graph = FileGraph {
            config,
            state_dir: state_dir.clone(),
            servers,
            checkpointer: checkpointer.clone(),
            built: Default::default(),
        };
        server = server.graph(name, Arc::new(graph));
    }
    if let Some(keys) = keys {
        server = server.api_keys(keys);
    }
    if let Some(path) = &args.prices {
        let overrides = crate::usage::Prices::read_overrides(path)?;
        server = server.prices(crate::usage::Prices::default().with(overrides));
    }
    server = server.ui(!args.no_ui);
    let mut wakeups = None;
    if let Some(url) = &database {
        let (queue, hints) = shared_queue(url, &args).await?;
        server = server.shared_queue(queue.with_fences(fences));
        wakeups = hints;
    }
    let graphs: Vec<String> = server.graph_ids().map(str::to_owned).collect();
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr()?;
    eprintln!("trellis serve: graphs {}", graphs.join(", "));
    eprintln!("trellis serve: listening on http://{addr}");
    if !args.no_ui {
        eprintln!("trellis serve: the web page is at http://{addr}/");
    }
    let server: server::Shared = Arc::new(server);
    let workers = server::workers::start(&server, wakeups);
    let drain = async move {
        shutdown().await;
        if let Some(workers) = workers {
            eprintln!("trellis serve: draining");
            workers.drain().await;
        }
    };
    // As a make-service, each connection gets a clone of the router (a reference count). Served
    // as a plain router, axum rebuilds its route table for every connection (`with_state`), about
    // 18 KB each: 18 MB held at 1,000 streaming clients (heaptrack, serve bench).
    axum::serve(listener, server::router_shared(server).into_make_service())
        .with_graceful_shutdown(drain)
        .await?;
    for servers in all_servers {
        servers.shutdown().await;
    }
    Ok(ExitCode::SUCCESS)
}

/// This worker's side of the run queue in the database at `url`, and its wake-ups.
#[cfg(feature = "postgres")]
async fn shared_queue(
    url: &str,
    args: &ServeArgs,
) -> Result<(
    server::workers::SharedQueue,
    Option<tokio::sync::mpsc::Receiver<server::workers::Wakeup>>,
)> {
    if !(args.lease_seconds.is_finite() && (0.3..=3600.0).contains(&args.lease_seconds)) {
        bail!("--lease-seconds must be between 0.3 and 3600");
    }
    if !(args.follow_poll_seconds.is_finite() && (0.01..=86400.0).contains(&args.follow_poll_seconds)) {
        bail!("--follow-poll-seconds must be between 0.01 and 86400");
    }
    if !(args.finished_run_hours.is_finite() && (0.0..=876_000.0).contains(&args.finished_run_hours)) {
        bail!("--finished-run-hours must be between 0 and 876000");
    }
    let runs = args.worker_runs.clamp(1, 1024);
    let queue = server::queue::PostgresQueue::connect(url, u32::try_from(runs).unwrap_or(64) + 4)
        .await
        .context("--database")?;
    let options = server::workers::WorkerOptions {
        lease: std::time::Duration::from_secs_f64(args.lease_seconds),
        runs,
        follow_poll: std::time::Duration::from_secs_f64(args.follow_poll_seconds),
        retention: server::queue::Retention {
            keep: args.keep_finished_runs,
            max_age: std::time::Duration::from_secs_f64(args.finished_run_hours * 3600.0),
        },
        ..Default::default()
    };
    let worker = format!("{}-{}", std::process::id(), uuid::Uuid::new_v4().simple());
    let shared = server::workers::SharedQueue::new(Arc::new(queue.clone()), worker.clone(), options);
    let wakeups = server::workers::listen(&queue, shared.waiters())
        .await
        .context("--database: LISTEN")?;
    eprintln!("trellis serve: worker {worker} on a shared run queue");
    Ok((shared, Some(wakeups)))
}

/// Without the `postgres` feature there is no shared queue.
#[cfg(not(feature = "postgres"))]
async fn shared_queue(
    _url: &str,
    _args: &ServeArgs,
) -> Result<(
    server::workers::SharedQueue,
    Option<tokio::sync::mpsc::Receiver<server::workers::Wakeup>>,
)> {
    bail!("--database needs a build with the `postgres` feature")
}

/// Ctrl-C or SIGTERM.
async fn shutdown() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn agents_are_named_or_default_to_agent() {
        let got = parse_agents(&[]).unwrap();
        assert_eq!(got, vec![("agent".to_owned(), None)]);
        let got = parse_agents(&["a.toml".into()]).unwrap();
        assert_eq!(got, vec![("agent".to_owned(), Some(PathBuf::from("a.toml")))]);
        let got = parse_agents(&["x=a.toml".into(), "y=b.toml".into()]).unwrap();
        assert_eq!(got[1], ("y".to_owned(), Some(PathBuf::from("b.toml"))));
        assert!(
            parse_agents(&["a.toml".into(), "b.toml".into()]).is_err(),
            "two unnamed"
        );
        assert!(parse_agents(&["../x=a.toml".into()]).is_err());
        assert!(parse_agents(&["=a.toml".into()]).is_err());
    }
}
