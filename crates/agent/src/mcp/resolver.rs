//! [`McpServers`]: the configured servers, and the [`ToolResolver`] that binds them to skills.
//!
//! A skill binds a server with a label in `metadata.include_tools`:
//!
//! | label | tools |
//! |---|---|
//! | `mcp:crm` | every tool of the server `crm` (after its allow-list and filter) |
//! | `mcp:crm/search_calls` | only the tool `search_calls` (its name on the server) |
//!
//! Anything else is not this resolver's (an empty answer). A user the server does not admit
//! ([`McpServerConfig::required_roles`]) gets no tools, so they never appear in the tool list and a
//! call fails like a call to an unknown tool; the server is not even started for them.
//!
//! A per-user server ([`McpServerConfig::session_per_user`]) gives each user id a session of its
//! own; a run without a user id gets none of its tools.
//!
//! A server that cannot be started yields no tools (the reason is logged and sent as an `mcp`
//! middleware event); the resolver is asked again before the next model call, within the server's
//! restart budget.

use std::collections::BTreeSet;
use std::sync::Arc;

use async_trait::async_trait;
use trellis_middleware::Tool;
use trellis_middleware::runtime::context::RunContext;
use trellis_middleware::skills::ToolResolver;

use super::config::{McpServerConfig, McpTransport};
use super::connection::{McpConnection, http_headers};
use super::error::McpError;
use super::sessions::ServerSessions;

/// Prefix of the labels this resolver answers.
pub const LABEL_PREFIX: &str = "mcp:";

/// The MCP servers an agent may use. Servers start on first use and stop on
/// [`McpServers::shutdown`] or when the last handle is dropped (see [`super::connection`]).
#[derive(Debug)]
pub struct McpServers {
    servers: Vec<ServerSessions>,
}

impl McpServers {
    /// Servers from `configs`; names must be unique and HTTP headers valid. Nothing starts yet.
    pub fn new(configs: impl IntoIterator<Item = McpServerConfig>) -> Result<Self, McpError> {
        let mut servers: Vec<ServerSessions> = Vec::new();
        for config in configs {
            if servers.iter().any(|s| s.config().name() == config.name()) {
                return Err(McpError::DuplicateServer(config.name().to_owned()));
            }
            if let McpTransport::Http(http) = config.transport() {
                http_headers(http)?;
            }
            servers.push(ServerSessions::new(config));
        }
        Ok(Self { servers })
    }

    /// Tool names the model must never see for an MCP tool (the agent's own tools). They apply to
    /// servers started after this call; `deep_agent` reserves its tools' names when it builds.
    pub fn reserve_names(&self, names: impl IntoIterator<Item = impl Into<String>>) {
        let names: BTreeSet<String> = names.into_iter().map(Into::into).collect();
        for server in &self.servers {
            server.reserve_names(&names);
        }
    }

    /// The session of the shared server named `name` (`None` for a per-user server: see
    /// [`McpServers::user_session`]).
    pub fn server(&self, name: &str) -> Option<Arc<McpConnection>> {
        match self.sessions(name)? {
            ServerSessions::Shared(connection) => Some(connection.clone()),
            ServerSessions::PerUser(_) => None,
        }
    }

    /// The live session of `user` on the per-user server `name` (for a shared server: its one
    /// session). Creates nothing.
    pub fn user_session(&self, name: &str, user: &str) -> Option<Arc<McpConnection>> {
        self.sessions(name)?.existing(user)
    }

    /// The configured servers, in configuration order.
    pub fn configs(&self) -> impl Iterator<Item = &McpServerConfig> {
        self.servers.iter().map(ServerSessions::config)
    }

    fn sessions(&self, name: &str) -> Option<&ServerSessions> {
        self.servers.iter().find(|s| s.config().name() == name)
    }

    /// True when no server is configured.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// Stop every running server and wait for their processes to exit. Final: nothing starts again.
    pub async fn shutdown(&self) {
        futures::future::join_all(self.servers.iter().map(|s| s.shutdown())).await;
    }

    /// Every tool the run's identity may use under `label` (see the module docs).
    pub async fn tools_for(&self, label: &str, cx: &RunContext) -> Vec<Arc<dyn Tool>> {
        let Some((server, tool)) = parse_label(label) else {
            return Vec::new();
        };
        let Some(sessions) = self.sessions(server) else {
            tracing::warn!(label, "a skill binds an MCP server that is not configured");
            return Vec::new();
        };
        if !sessions.config().admits_run(cx) {
            return Vec::new();
        }
        let Some(connection) = sessions.for_run(cx) else {
            return Vec::new();
        };
        match connection.tools(Some(cx)).await {
            Ok(tools) => tools
                .iter()
                .filter(|t| tool.is_none_or(|name| t.mcp_name() == name))
                .map(|t| t.clone() as Arc<dyn Tool>)
                .collect(),
            Err(e) => {
                tracing::warn!(server, error = %e, "MCP server tools are unavailable");
                cx.emit_middleware(
                    "mcp",
                    "unavailable",
                    || serde_json::json!({ "server": server, "error": e.to_string() }),
                );
                Vec::new()
            }
        }
    }
}

#[async_trait]
impl ToolResolver for McpServers {
    async fn resolve(&self, label: &str, cx: &RunContext) -> Vec<Arc<dyn Tool>> {
        self.tools_for(label, cx).await
    }
}

/// `mcp:<server>` → (server, None); `mcp:<server>/<tool>` → (server, Some(tool)).
pub fn parse_label(label: &str) -> Option<(&str, Option<&str>)> {
    let rest = label.strip_prefix(LABEL_PREFIX)?;
    match rest.split_once('/') {
        Some((server, tool)) if !server.is_empty() && !tool.is_empty() => Some((server, Some(tool))),
        Some(_) => None,
        None if !rest.is_empty() => Some((rest, None)),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        assert_eq!(parse_label("mcp:crm"), Some(("crm", None)));
        assert_eq!(
            parse_label("mcp:crm/search_calls"),
            Some(("crm", Some("search_calls")))
        );
        for other in ["crm", "mcp:", "mcp:/x", "mcp:crm/", "search_calls"] {
            assert_eq!(parse_label(other), None, "{other}");
        }
    }

    #[test]
    fn duplicate_names_and_bad_headers_are_errors() {
        let a = McpServerConfig::stdio("crm", "x", ["y"]).ok();
        let b = McpServerConfig::stdio("crm", "z", ["w"]).ok();
        assert!(matches!(
            McpServers::new(a.into_iter().chain(b)),
            Err(McpError::DuplicateServer(_))
        ));
        let bad = McpServerConfig::http("docs", "http://127.0.0.1:1/mcp")
            .ok()
            .map(|c| c.header("bad header", "x"));
        assert!(McpServers::new(bad).is_err());
    }
}
