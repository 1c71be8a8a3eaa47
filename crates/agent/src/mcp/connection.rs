//! [`McpConnection`]: the client side of one MCP server, on the official Rust SDK (`rmcp`).
//!
//! * **Lazy.** Nothing is spawned or dialed until the first tool listing or call (in
//!   practice: when a skill that binds the server is read).
//! * **Start.** Spawn the child (stdio, in its own process group, killed if dropped) or connect
//!   (streamable HTTP), `initialize`, `tools/list` — all within the connect timeout.
//! * **Changing tools.** A `notifications/tools/list_changed` from the server marks the list
//!   stale; the next listing (in practice the next model call that offers the server's tools)
//!   reads `tools/list` again. A tool the server added is offered from then on, a removed one is
//!   no longer offered. Names are assigned afresh over the new list, so a new tool whose name
//!   clashes with an old one can change the old one's suffix. If the re-read fails, the previous
//!   list stays in use and the next listing tries again.
//! * **Crashes.** A call that finds the server gone restarts it; a failed start or a crash counts
//!   against the restart budget, after which the server stays down and says why.
//! * **Shutdown.** [`McpConnection::shutdown`] closes the session and waits for the child: stdin is
//!   closed, then SIGTERM to the process group after 3 s, then SIGKILL after 3 more. Dropping the
//!   connection starts the same sequence in the background; if the runtime is gone by then, the
//!   child is killed when its handle drops. No child outlives the agent that started it.

use std::collections::{BTreeSet, HashMap};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use process_wrap::tokio::{CommandWrap, KillOnDrop};
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{CallToolRequestParams, CallToolResult, ClientConfig, JsonObject, ProtocolVersion};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, RoleClient, ServiceError, ServiceExt};
use trellis_middleware::runtime::context::RunContext;

use super::config::{DEFAULT_INHERITED_ENV, HttpServer, McpServerConfig, McpTransport, StdioServer};
use super::error::McpError;
use super::naming::assign_names;
use super::stderr_tail::StderrTail;
use super::tool::McpTool;
use crate::providers::http::install_crypto_provider;

/// Most time [`McpConnection::shutdown`] waits for the close sequence (which itself ends in SIGKILL
/// after about 6 s).
const SHUTDOWN_WAIT: Duration = Duration::from_secs(10);

/// One configured MCP server and, once started, its live session.
#[derive(Debug)]
pub struct McpConnection {
    config: McpServerConfig,
    reserved: std::sync::RwLock<Arc<BTreeSet<String>>>,
    state: tokio::sync::Mutex<State>,
    pid: AtomicU32,
    starts: AtomicU32,
    last_failure: Mutex<Option<String>>,
}

#[derive(Debug)]
enum State {
    Idle,
    Live(Live),
    ShutDown,
}

#[derive(Debug)]
struct Live {
    /// Which start this session came from (see [`McpConnection::starts`]).
    start: u32,
    service: RunningService<RoleClient, ToolsChanged>,
    tools: Arc<[Arc<McpTool>]>,
    stderr: Arc<StderrTail>,
}

/// The client side's notification handler: records `notifications/tools/list_changed`. (rmcp
/// also drops its own cached `tools/list` answer on that notification.)
#[derive(Debug, Clone, Default)]
struct ToolsChanged(Arc<AtomicBool>);

impl ToolsChanged {
    /// True if the list changed since the last call (and clears the mark).
    fn take(&self) -> bool {
        self.0.swap(false, Ordering::AcqRel)
    }

    fn mark(&self) {
        self.0.store(true, Ordering::Release);
    }
}

impl ClientHandler for ToolsChanged {
    /// Announce the newest protocol version that still has the `initialize` handshake: rmcp's
    /// `LATEST` (2026-07-28) has none, and its docs say to name `LATEST_WITH_INITIALIZE` whenever
    /// the subject is the handshake itself, as here.
    fn get_info(&self) -> ClientConfig {
        ClientConfig::default().with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.mark();
        std::future::ready(())
    }
}

impl Live {
    fn is_up(&self) -> bool {
        !self.service.is_closed() && !self.service.peer().is_transport_closed()
    }
}

/// What a call came to.
#[derive(Debug)]
pub(crate) enum CallOutcome {
    /// The server answered (possibly with `isError`).
    Answered(CallToolResult),
    /// No answer; the text says why, for the model.
    Failed(String),
}

impl McpConnection {
    /// A connection that starts nothing yet.
    pub(crate) fn new(config: McpServerConfig) -> Arc<Self> {
        Arc::new(Self {
            config,
            reserved: std::sync::RwLock::default(),
            state: tokio::sync::Mutex::new(State::Idle),
            pid: AtomicU32::new(0),
            starts: AtomicU32::new(0),
            last_failure: Mutex::new(None),
        })
    }

    /// The server's name.
    pub fn name(&self) -> &str {
        self.config.name()
    }

    /// The server's configuration.
    pub fn config(&self) -> &McpServerConfig {
        &self.config
    }

    /// The process id of the last child started for a stdio server, which may have exited since
    /// (`None` before the first start, after [`McpConnection::shutdown`], and for HTTP servers).
    pub fn pid(&self) -> Option<u32> {
        match self.pid.load(Ordering::Acquire) {
            0 => None,
            pid => Some(pid),
        }
    }

    /// Tool names to avoid from the next start on (the agent's own tools).
    pub(crate) fn reserve_names(&self, names: &BTreeSet<String>) {
        let mut reserved = self.reserved.write().unwrap_or_else(|p| p.into_inner());
        let mut all = (**reserved).clone();
        all.extend(names.iter().cloned());
        *reserved = Arc::new(all);
    }

    /// Times the server was started (successfully or not).
    pub fn starts(&self) -> u32 {
        self.starts.load(Ordering::Acquire)
    }

    /// True while a session is up.
    pub async fn is_running(&self) -> bool {
        matches!(&*self.state.lock().await, State::Live(live) if live.is_up())
    }

    /// The tools this server offers (after the allow-list and filter), starting it if needed.
    pub(crate) async fn tools(
        self: &Arc<Self>,
        cx: Option<&RunContext>,
    ) -> Result<Arc<[Arc<McpTool>]>, McpError> {
        let mut state = self.state.lock().await;
        let live = self.ensure(&mut state, cx).await?;
        let changed = live.service.service();
        if !changed.take() {
            return Ok(live.tools.clone());
        }
        let server = self.name().to_owned();
        let listed = tokio::time::timeout(
            self.config.connect_timeout(),
            live.service.peer().list_all_tools(),
        )
        .await;
        let listed = match listed {
            Ok(Ok(listed)) => listed,
            failed => {
                let error = match failed {
                    Ok(Err(e)) => e.to_string(),
                    _ => format!("no answer within {}", seconds(self.config.connect_timeout())),
                };
                tracing::warn!(server = %server, %error, "MCP tool list changed but could not be read again");
                changed.mark();
                return Ok(live.tools.clone());
            }
        };
        let tools = self.offered_tools(&listed);
        if let Some(cx) = cx {
            let count = tools.len();
            cx.emit_middleware(
                "mcp",
                "tools_changed",
                || serde_json::json!({ "server": server, "tools": count }),
            );
        }
        if let State::Live(live) = &mut *state {
            live.tools = tools.clone();
        }
        Ok(tools)
    }

    /// The tools of `listed` this server offers (allow-list and filter), under their model names.
    fn offered_tools(self: &Arc<Self>, listed: &[rmcp::model::Tool]) -> Arc<[Arc<McpTool>]> {
        let server = self.name();
        let offered: Vec<&rmcp::model::Tool> =
            listed.iter().filter(|t| self.config.offers(&t.name)).collect();
        let mcp_names: Vec<&str> = offered.iter().map(|t| t.name.as_ref()).collect();
        let reserved = self.reserved.read().unwrap_or_else(|p| p.into_inner()).clone();
        let names = assign_names(server, &mcp_names, &reserved);
        offered
            .iter()
            .zip(names)
            .map(|(tool, name)| Arc::new(McpTool::new(Arc::downgrade(self), server, name, tool)))
            .collect()
    }

    /// Call `tool` (its MCP name) with `args`, starting or restarting the server if needed, within
    /// the call timeout.
    pub(crate) async fn call(self: &Arc<Self>, tool: &str, args: JsonObject, cx: &RunContext) -> CallOutcome {
        let name = self.name().to_owned();
        let (peer, stderr, start) = {
            let mut state = self.state.lock().await;
            match self.ensure(&mut state, Some(cx)).await {
                Ok(live) => (live.service.peer().clone(), live.stderr.clone(), live.start),
                Err(e) => {
                    return CallOutcome::Failed(format!("the MCP server {name:?} is not available: {e}"));
                }
            }
        };
        let timeout = self.config.call_timeout();
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(args);
        // Dropping the call on timeout sends `notifications/cancelled` to the server.
        let answer = tokio::time::timeout(timeout, peer.call_tool(params)).await;
        match answer {
            Ok(Ok(result)) => CallOutcome::Answered(result),
            Err(_) | Ok(Err(ServiceError::Timeout { .. })) => CallOutcome::Failed(format!(
                "{tool:?} on the MCP server {name:?} did not answer within {} and was cancelled. It may \
                 still have taken effect. Try again with a smaller request, or tell the user the tool \
                 is too slow.",
                seconds(timeout)
            )),
            Ok(Err(ServiceError::McpError(e))) => CallOutcome::Failed(format!(
                "the MCP server {name:?} rejected the call to {tool:?}: {} (JSON-RPC error {}). Check \
                 the arguments against the tool's schema.",
                e.message, e.code.0
            )),
            Ok(Err(ServiceError::TransportClosed | ServiceError::TransportSend(_))) => {
                let what = match self.config.transport() {
                    McpTransport::Stdio(_) => "the MCP server process stopped",
                    McpTransport::Http(_) => "the connection to the MCP server was lost",
                };
                let tail = stderr.text();
                let tail = if tail.is_empty() {
                    String::new()
                } else {
                    format!(" Its last output: {tail}")
                };
                let again = match (self.restarts_left() > 0, self.config.transport()) {
                    (true, McpTransport::Stdio(_)) => "It will be started again on the next call.",
                    (true, McpTransport::Http(_)) => "It will be connected again on the next call.",
                    (false, _) => "It will not be started again in this session.",
                };
                // Whatever the transport thinks, this session is done: the next call starts anew.
                self.discard(start).await;
                cx.emit_middleware("mcp", "stopped", || serde_json::json!({ "server": name }));
                let text = format!(
                    "{what} ({name:?}) while running {tool:?}; the call may or may not have taken \
                     effect.{tail} {again}"
                );
                self.note_failure(&text);
                CallOutcome::Failed(text)
            }
            Ok(Err(other)) => CallOutcome::Failed(format!(
                "the call to {tool:?} on the MCP server {name:?} failed: {other}"
            )),
        }
    }

    /// Close the session and wait for the child to exit (see the module docs). Later calls fail with
    /// [`McpError::ShutDown`]; nothing is started again.
    pub async fn shutdown(&self) {
        let previous = std::mem::replace(&mut *self.state.lock().await, State::ShutDown);
        if let State::Live(live) = previous {
            let mut service = live.service;
            if tokio::time::timeout(SHUTDOWN_WAIT, service.close())
                .await
                .is_err()
            {
                tracing::warn!(server = self.name(), "MCP server did not close in time");
            }
        }
        self.pid.store(0, Ordering::Release);
    }

    /// Drop the session from start `start` if it is still the current one (closing it in the
    /// background, as a drop does).
    async fn discard(&self, start: u32) {
        let mut state = self.state.lock().await;
        if matches!(&*state, State::Live(live) if live.start == start) {
            *state = State::Idle;
        }
    }

    fn note_failure(&self, what: &str) {
        *self.last_failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(what.to_owned());
    }

    fn restarts_left(&self) -> u32 {
        (1 + self.config.max_restarts()).saturating_sub(self.starts())
    }

    /// The live session, started (or restarted) if needed.
    async fn ensure<'s>(
        self: &Arc<Self>,
        state: &'s mut State,
        cx: Option<&RunContext>,
    ) -> Result<&'s Live, McpError> {
        let up = match &*state {
            State::Live(live) => live.is_up(),
            State::ShutDown => {
                return Err(McpError::ShutDown {
                    server: self.name().to_owned(),
                });
            }
            State::Idle => false,
        };
        if !up {
            if matches!(state, State::Live(_)) {
                tracing::warn!(server = self.name(), "MCP server stopped; starting it again");
            }
            // Drop a dead session before starting its successor.
            *state = State::Idle;
            let live = self.start(cx).await?;
            *state = State::Live(live);
        }
        match &*state {
            State::Live(live) => Ok(live),
            _ => Err(McpError::ShutDown {
                server: self.name().to_owned(),
            }),
        }
    }

    async fn start(self: &Arc<Self>, cx: Option<&RunContext>) -> Result<Live, McpError> {
        let server = self.name().to_owned();
        let attempts = self.starts.load(Ordering::Acquire);
        if attempts > self.config.max_restarts() {
            let last = self
                .last_failure
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            return Err(McpError::GaveUp {
                server,
                attempts,
                last: last.unwrap_or_else(|| "unknown".to_owned()),
            });
        }
        let start = self.starts.fetch_add(1, Ordering::AcqRel) + 1;
        let timeout = self.config.connect_timeout();
        let stderr = Arc::new(StderrTail::default());
        let started = tokio::time::timeout(timeout, self.connect(&stderr)).await;
        let (service, tools) = match started {
            Ok(Ok(ok)) => ok,
            Ok(Err(e)) => {
                tracing::warn!(server = %server, error = %e, "MCP server did not start");
                self.note_failure(&e.to_string());
                return Err(e);
            }
            Err(_) => {
                tracing::warn!(server = %server, "MCP server did not start in time");
                let e = McpError::StartTimeout {
                    server,
                    after: timeout,
                };
                self.note_failure(&e.to_string());
                return Err(e);
            }
        };
        let tools = self.offered_tools(&tools);
        if let Some(cx) = cx {
            let (count, pid) = (tools.len(), self.pid());
            cx.emit_middleware(
                "mcp",
                "started",
                || serde_json::json!({ "server": server, "tools": count, "pid": pid }),
            );
        }
        Ok(Live {
            start,
            service,
            tools,
            stderr,
        })
    }

    async fn connect(
        &self,
        stderr: &Arc<StderrTail>,
    ) -> Result<(RunningService<RoleClient, ToolsChanged>, Vec<rmcp::model::Tool>), McpError> {
        let server = self.name().to_owned();
        let start_error = |message: String| McpError::Start {
            server: server.clone(),
            message,
        };
        let service = match self.config.transport() {
            McpTransport::Stdio(stdio) => {
                let (child, err) =
                    spawn(stdio).map_err(|e| start_error(format!("cannot run {:?}: {e}", stdio.program)))?;
                self.pid.store(child.id().unwrap_or(0), Ordering::Release);
                if let Some(err) = err {
                    stderr.follow(err, server.clone());
                }
                ToolsChanged::default().serve(child).await.map_err(|e| {
                    let tail = stderr.text();
                    start_error(if tail.is_empty() {
                        e.to_string()
                    } else {
                        format!("{e}; its last output: {tail}")
                    })
                })?
            }
            McpTransport::Http(http) => {
                install_crypto_provider();
                let mut config = StreamableHttpClientTransportConfig::with_uri(http.url.as_str())
                    .custom_headers(http_headers(http)?);
                if let Some(token) = &http.bearer_token {
                    config = config.auth_header(token.clone());
                }
                let transport = StreamableHttpClientTransport::from_config(config);
                ToolsChanged::default()
                    .serve(transport)
                    .await
                    .map_err(|e| start_error(e.to_string()))?
            }
        };
        let tools = service
            .peer()
            .list_all_tools()
            .await
            .map_err(|e| McpError::ListTools {
                server: server.clone(),
                message: e.to_string(),
            })?;
        Ok((service, tools))
    }
}

/// Spawn a stdio server: a clean environment (see [`StdioServer::env`]), its own process group (so
/// signals reach its children too), killed when the handle drops, stderr piped for error messages.
fn spawn(stdio: &StdioServer) -> std::io::Result<(TokioChildProcess, Option<tokio::process::ChildStderr>)> {
    let mut command = tokio::process::Command::new(&stdio.program);
    command.args(&stdio.args).env_clear();
    let inherited = DEFAULT_INHERITED_ENV
        .iter()
        .copied()
        .chain(stdio.inherit_env.iter().map(String::as_str));
    for name in inherited {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    command.envs(stdio.env.iter().map(|(k, v)| (k, v)));
    if let Some(dir) = &stdio.cwd {
        command.current_dir(dir);
    }
    let mut wrap = CommandWrap::from(command);
    wrap.wrap(KillOnDrop);
    #[cfg(unix)]
    wrap.wrap(process_wrap::tokio::ProcessGroup::leader());
    TokioChildProcess::builder(wrap).stderr(Stdio::piped()).spawn()
}

/// The configured headers as HTTP headers; an invalid name or value is a configuration error.
pub(crate) fn http_headers(http: &HttpServer) -> Result<HashMap<HeaderName, HeaderValue>, McpError> {
    http.headers
        .iter()
        .map(|(name, value)| {
            let invalid = |what: &str| McpError::InvalidSpec {
                spec: http.url.clone(),
                reason: format!("invalid header {what} in {name:?}"),
            };
            Ok((
                HeaderName::try_from(name.as_str()).map_err(|_| invalid("name"))?,
                HeaderValue::try_from(value.as_str()).map_err(|_| invalid("value"))?,
            ))
        })
        .collect()
}

fn seconds(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{s:.0} s")
    } else {
        format!("{s:.1} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_handshake_names_a_version_that_has_initialize() {
        let info = ClientHandler::get_info(&ToolsChanged::default());
        assert_eq!(info.protocol_version, ProtocolVersion::LATEST_WITH_INITIALIZE);
        assert!(info.protocol_version.has_initialize());
    }
}
