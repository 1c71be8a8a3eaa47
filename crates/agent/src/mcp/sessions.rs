//! [`ServerSessions`]: the live session(s) behind one configured server — one shared by every run,
//! or one per user ([`McpServerConfig::session_per_user`]).
//!
//! Per-user sessions are kept in least-recently-used order. Asking for a user beyond the limit
//! drops the least recently used session; dropping a connection stops its server in the background
//! (see [`super::connection`]), after any call still running on it finishes. After
//! [`ServerSessions::shutdown`] no session is created again.

use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use reqwest::header::HeaderValue;
use trellis_middleware::runtime::context::RunContext;

use super::config::{McpServerConfig, McpTransport, viewer};
use super::connection::McpConnection;

/// The session(s) of one configured server.
#[derive(Debug)]
pub(crate) enum ServerSessions {
    /// One session for every run.
    Shared(Arc<McpConnection>),
    /// One session per user id.
    PerUser(Box<PerUser>),
}

/// Sessions keyed by user id, most recently used last.
#[derive(Debug)]
pub(crate) struct PerUser {
    config: McpServerConfig,
    max: usize,
    reserved: Mutex<BTreeSet<String>>,
    sessions: Mutex<VecDeque<(String, Arc<McpConnection>)>>,
    shut_down: AtomicBool,
}

impl ServerSessions {
    pub(crate) fn new(config: McpServerConfig) -> Self {
        match config.per_user_sessions() {
            None => Self::Shared(McpConnection::new(config)),
            Some(max) => Self::PerUser(Box::new(PerUser {
                config,
                max,
                reserved: Mutex::default(),
                sessions: Mutex::default(),
                shut_down: AtomicBool::new(false),
            })),
        }
    }

    /// The server's configuration (for a per-user server, without any user's id).
    pub(crate) fn config(&self) -> &McpServerConfig {
        match self {
            Self::Shared(connection) => connection.config(),
            Self::PerUser(per_user) => &per_user.config,
        }
    }

    /// The session this run uses, created if needed: the shared one, or the run's user's. `None`
    /// for a per-user server when the run has no usable user id, or after shutdown.
    pub(crate) fn for_run(&self, cx: &RunContext) -> Option<Arc<McpConnection>> {
        match self {
            Self::Shared(connection) => Some(connection.clone()),
            Self::PerUser(per_user) => {
                let user = viewer(cx).and_then(|v| v.user_id)?;
                per_user.session(&user)
            }
        }
    }

    /// The shared session, or `user`'s if it is live.
    pub(crate) fn existing(&self, user: &str) -> Option<Arc<McpConnection>> {
        match self {
            Self::Shared(connection) => Some(connection.clone()),
            Self::PerUser(per_user) => per_user
                .lock()
                .iter()
                .find(|(u, _)| u == user)
                .map(|(_, c)| c.clone()),
        }
    }

    /// Tool names to avoid, for sessions started from now on.
    pub(crate) fn reserve_names(&self, names: &BTreeSet<String>) {
        match self {
            Self::Shared(connection) => connection.reserve_names(names),
            Self::PerUser(per_user) => {
                per_user
                    .reserved
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .extend(names.iter().cloned());
                for (_, connection) in per_user.lock().iter() {
                    connection.reserve_names(names);
                }
            }
        }
    }

    /// Stop every session and wait for their processes; final.
    pub(crate) async fn shutdown(&self) {
        match self {
            Self::Shared(connection) => connection.shutdown().await,
            Self::PerUser(per_user) => {
                per_user.shut_down.store(true, Ordering::Release);
                let sessions: Vec<Arc<McpConnection>> = per_user.lock().drain(..).map(|(_, c)| c).collect();
                futures::future::join_all(sessions.iter().map(|c| c.shutdown())).await;
            }
        }
    }
}

impl PerUser {
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<(String, Arc<McpConnection>)>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn session(&self, user: &str) -> Option<Arc<McpConnection>> {
        if self.shut_down.load(Ordering::Acquire) {
            return None;
        }
        if matches!(self.config.transport(), McpTransport::Http(_)) && HeaderValue::try_from(user).is_err() {
            tracing::warn!(
                server = self.config.name(),
                "a user id that cannot be sent as a header gets no session"
            );
            return None;
        }
        let mut sessions = self.lock();
        if let Some(at) = sessions.iter().position(|(u, _)| u == user) {
            let entry = sessions.remove(at)?;
            let connection = entry.1.clone();
            sessions.push_back(entry);
            return Some(connection);
        }
        let connection = McpConnection::new(self.config.for_user(user));
        connection.reserve_names(&self.reserved.lock().unwrap_or_else(|p| p.into_inner()));
        sessions.push_back((user.to_owned(), connection.clone()));
        while sessions.len() > self.max {
            if let Some((evicted, _)) = sessions.pop_front() {
                tracing::info!(server = self.config.name(), user = %evicted, "MCP session evicted");
            }
        }
        Some(connection)
    }
}
