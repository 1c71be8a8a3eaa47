//! `trellis acp`: the agent in editors (Zed, JetBrains, Neovim) over the Agent Client Protocol,
//! version 1, on stdio. [`serve`] answers one client until its input ends; the protocol engine and
//! the message types are the `agent-client-protocol` crate's, the transport is [`transport`]
//! (bounded lines).
//!
//! | method | what Trellis does |
//! |---|---|
//! | `initialize` | protocol version 1; capabilities: `loadSession`, `sessionCapabilities.list`, embedded context in prompts, MCP over HTTP, nothing else optional (no images or audio, no resume or close, no auth methods) |
//! | `session/new` | builds the agent with the editor's `cwd` as `/workspace` (as `--workdir` does) and starts a thread in the state dir; the session id is the thread id. The editor's `mcpServers` are bound as `--mcp` binds its servers ([`mcp`]) |
//! | `session/load` | the session on a thread of the state dir (the session id is the thread id), the agent rebuilt for the given `cwd`; the conversation is replayed as updates ([`replay`]) before the response; unknown → -32002 |
//! | `session/list` | the threads of the state dir with a working directory, newest first, in pages with a cursor ([`list`]) |
//! | `session/prompt` | text, resource links (as `[@name](uri)` mentions) and embedded text resources; streams [`updates`]; asks `session/request_permission` for the calls `--ask` names; ends with `end_turn`, `max_tokens`, `max_turn_requests`, `refusal` or `cancelled` |
//! | after `session/new` | `available_commands_update`: the skills as slash commands; a prompt starting with `/skill-name` pins the skill as `trellis chat` does ([`crate::cli::pin`]) |
//! | subagents | a `task` call's subagent steps are that call's content ([`progress`]) |
//! | `fs/read_text_file`, `fs/write_text_file` | with `--editor-fs` ([`Options::editor_fs`]) and when the client offers them, the session's text files go through the editor ([`editor_fs`]) |
//! | `session/cancel` | stops the turn (model call, tool, or permission question) and answers it `cancelled` |
//!
//! Scopes are in [`session`]. Anything else gets the engine's JSON-RPC errors (method not found,
//! invalid params, parse error); unknown sessions get -32002. stdout carries protocol messages
//! only; logs go to stderr.

pub mod always;
pub mod editor_fs;
pub mod list;
pub mod mcp;
pub mod progress;
pub mod replay;
pub mod session;
pub mod transport;
pub mod updates;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    AgentCapabilities, AvailableCommandsUpdate, CancelNotification, Implementation, InitializeRequest,
    InitializeResponse, ListSessionsRequest, LoadSessionRequest, LoadSessionResponse, McpCapabilities,
    McpServer, NewSessionRequest, NewSessionResponse, PromptCapabilities, PromptRequest, PromptResponse,
    SessionCapabilities, SessionListCapabilities, SessionNotification, SessionUpdate,
};
use agent_client_protocol::{Agent, Client, Error, Lines};
use tokio::io::{AsyncBufRead, AsyncWrite};
use trellis_middleware::{Checkpointer, ThreadId};

use crate::cli::assemble;
use crate::cli::config::RunConfig;
use crate::cli::state_dir::StateDir;
use editor_fs::{EditorFiles, EditorFs};
use session::Session;

/// How `trellis acp` serves, beyond the agent's own configuration.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// `--editor-fs`: each session's files through the editor, when it offers `fs/*`
    /// ([`editor_fs`]).
    pub editor_fs: bool,
}

/// The sessions of one connection, by id.
#[derive(Debug)]
struct Server {
    config: RunConfig,
    state_dir: StateDir,
    options: Options,
    /// What the client's `initialize` offered of `fs/*`.
    client_fs: Mutex<EditorFs>,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
}

impl Server {
    fn session(&self, id: &str) -> Result<Arc<Session>, Error> {
        self.sessions
            .lock()
            .ok()
            .and_then(|s| s.get(id).cloned())
            .ok_or_else(|| Error::new(-32002, format!("no session {id}")))
    }

    async fn new_session(
        &self,
        request: NewSessionRequest,
        cx: &ConnectionTo<Client>,
    ) -> Result<(NewSessionResponse, Arc<Session>), Error> {
        let session = self.open(request.cwd, &request.mcp_servers, None, cx).await?;
        Ok((NewSessionResponse::new(session.thread.to_string()), session))
    }

    /// `session/load`: the session on an existing thread, and the updates replaying it.
    async fn load_session(
        &self,
        request: LoadSessionRequest,
        cx: &ConnectionTo<Client>,
    ) -> Result<(Arc<Session>, Vec<SessionUpdate>), Error> {
        let unknown = || Error::new(-32002, format!("no session {}", request.session_id.0));
        let thread = ThreadId::new(request.session_id.0.to_string()).map_err(|_| unknown())?;
        if !self.state_dir.run_config_file(&thread).exists() {
            return Err(unknown());
        }
        let session = self
            .open(request.cwd, &request.mcp_servers, Some(thread), cx)
            .await?;
        let stored = session
            .checkpointer()
            .load(&session.thread)
            .await
            .map_err(|e| Error::internal_error().data(serde_json::Value::String(e.to_string())))?;
        let messages = stored
            .map(|s| s.checkpoint.state.messages.to_vec())
            .unwrap_or_default();
        let updates = replay::replay(&messages, &session.cwd);
        Ok((session, updates))
    }

    /// Build the agent for `cwd` and register the session on `thread` (a new one when `None`).
    async fn open(
        &self,
        cwd: std::path::PathBuf,
        mcp_servers: &[McpServer],
        thread: Option<ThreadId>,
        cx: &ConnectionTo<Client>,
    ) -> Result<Arc<Session>, Error> {
        if !cwd.is_absolute() || !Path::new(&cwd).is_dir() {
            return Err(Error::invalid_params().data(serde_json::Value::String(format!(
                "cwd must be an absolute path of a directory: {}",
                cwd.display()
            ))));
        }
        let mut config = self.config.clone();
        config.workdir = Some(cwd.clone());
        let internal = |e: anyhow::Error| {
            tracing::warn!("session/new: {e:#}");
            Error::internal_error().data(serde_json::Value::String(format!("{e:#}")))
        };
        let servers = mcp::servers(&config, mcp_servers, &cwd).map_err(internal)?;
        let mut built = assemble::build(&config, &self.state_dir, servers)
            .await
            .map_err(internal)?;
        let new = thread.is_none();
        let thread = thread.unwrap_or_else(ThreadId::generate);
        let fs = self.client_fs.lock().map(|f| *f).unwrap_or_default();
        if self.options.editor_fs
            && (fs.read || fs.write)
            && let Some(disk) = built.ws.user_files.take()
        {
            let files = EditorFiles::new(disk, cwd.clone(), thread.to_string(), fs, cx.clone());
            built.ws.user_files = Some(Arc::new(files));
        }
        if new {
            config.save(&self.state_dir, &thread).map_err(internal)?;
        }
        let session = Arc::new(Session::new(thread.clone(), cwd, built).await);
        if let Ok(mut sessions) = self.sessions.lock() {
            sessions.insert(thread.to_string(), session.clone());
        }
        tracing::info!("session {thread} opened");
        Ok(session)
    }
}

/// The skills of `session` as slash commands; sent after the `session/new` or `session/load`
/// response, never before (JetBrains hangs when they come first).
fn send_commands(connection: &ConnectionTo<Client>, session: &Session) -> Result<(), Error> {
    let commands = AvailableCommandsUpdate::new(session.commands());
    connection.send_notification(SessionNotification::new(
        session.thread.to_string(),
        SessionUpdate::AvailableCommandsUpdate(commands),
    ))
}

/// The capabilities `initialize` answers with: only what is implemented.
pub fn capabilities() -> AgentCapabilities {
    AgentCapabilities::new()
        .load_session(true)
        .prompt_capabilities(PromptCapabilities::new().embedded_context(true))
        .mcp_capabilities(McpCapabilities::new().http(true))
        .session_capabilities(SessionCapabilities::new().list(SessionListCapabilities::new()))
}

/// Serve one client on `input` / `output` until the input ends: sessions are built from `config`
/// (its `workdir` replaced by each session's `cwd`) and keep their threads in `state_dir`.
pub async fn serve<R, W>(
    config: RunConfig,
    state_dir: StateDir,
    options: Options,
    input: R,
    output: W,
) -> anyhow::Result<()>
where
    R: AsyncBufRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let server = Arc::new(Server {
        config,
        state_dir,
        options,
        client_fs: Mutex::new(EditorFs::default()),
        sessions: Mutex::new(HashMap::new()),
    });
    let init = server.clone();
    let transport = Lines::new(
        Box::pin(transport::sink(output)),
        Box::pin(transport::lines(input, transport::MAX_LINE)),
    );
    let (new, load, prompt, cancel) = (server.clone(), server.clone(), server.clone(), server.clone());
    let listing = server.clone();
    Agent
        .v1()
        .name("trellis")
        .on_receive_request(
            async move |request: InitializeRequest, responder, _cx| {
                if let Ok(mut fs) = init.client_fs.lock() {
                    *fs = EditorFs {
                        read: request.client_capabilities.fs.read_text_file,
                        write: request.client_capabilities.fs.write_text_file,
                    };
                }
                tracing::info!(
                    "initialize from {:?}",
                    request.client_info.as_ref().map(|c| &c.name)
                );
                responder.respond(
                    InitializeResponse::new(ProtocolVersion::V1)
                        .agent_capabilities(capabilities())
                        .agent_info(
                            Implementation::new("trellis", env!("CARGO_PKG_VERSION"))
                                .title("Trellis".to_owned()),
                        ),
                )
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: NewSessionRequest, responder, cx| {
                let server = new.clone();
                // Building the agent reads skills and memory: off the dispatch loop.
                let connection = cx.clone();
                cx.spawn(async move {
                    match server.new_session(request, &connection).await {
                        Ok((response, session)) => {
                            responder.respond(response)?;
                            send_commands(&connection, &session)
                        }
                        Err(e) => responder.respond_with_error(e),
                    }
                })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: LoadSessionRequest, responder, cx| {
                let server = load.clone();
                let connection = cx.clone();
                cx.spawn(async move {
                    match server.load_session(request, &connection).await {
                        Ok((session, replayed)) => {
                            // The whole conversation first, then the response.
                            for update in replayed {
                                let id = session.thread.to_string();
                                connection.send_notification(SessionNotification::new(id, update))?;
                            }
                            responder.respond(LoadSessionResponse::new())?;
                            send_commands(&connection, &session)
                        }
                        Err(e) => responder.respond_with_error(e),
                    }
                })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: ListSessionsRequest, responder, cx| {
                let server = listing.clone();
                // Reads the state dir: off the dispatch loop.
                cx.spawn(async move {
                    let listed = list::list(
                        &server.state_dir,
                        request.cwd.as_deref(),
                        request.cursor.as_deref(),
                    )
                    .await;
                    match listed {
                        Ok(response) => responder.respond(response),
                        Err(e) => responder.respond_with_error(e),
                    }
                })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: PromptRequest, responder, cx| {
                let session = match prompt.session(&request.session_id.0) {
                    Ok(s) => s,
                    Err(e) => return responder.respond_with_error(e),
                };
                let connection = cx.clone();
                cx.spawn(async move {
                    match session.turn(request.prompt, connection).await {
                        Ok(stop) => responder.respond(PromptResponse::new(stop)),
                        Err(e) => responder.respond_with_error(e),
                    }
                })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            async move |notification: CancelNotification, _cx| {
                if let Ok(session) = cancel.session(&notification.session_id.0) {
                    tracing::info!("session {} cancelled", session.thread);
                    session.cancel();
                }
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_to(transport)
        .await
        .map_err(|e| anyhow::anyhow!("ACP connection: {e}"))
}
