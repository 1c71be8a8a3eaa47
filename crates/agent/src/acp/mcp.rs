//! The MCP servers an editor passes in `session/new` / `session/load` ([`servers`]): bound as tool
//! groups exactly as `trellis run --mcp NAME=…` binds its servers, next to them. A skill offers a
//! server's tools with `include_tools: mcp:NAME` in its metadata; they are named `NAME__tool`.
//!
//! * stdio servers (every agent must take them): the command, its arguments and exactly the
//!   environment the editor lists (plus the few variables every MCP SDK passes on: `PATH`, `HOME`,
//!   …; never the rest of Trellis's environment, API keys included), started in the session's
//!   `cwd` when a skill that binds them is first read.
//! * streamable-HTTP servers, with their headers (`mcpCapabilities.http` is advertised).
//! * SSE servers (deprecated; not advertised) and any transport this version does not know are
//!   skipped with a warning on stderr.
//!
//! A name that is not a valid Trellis server name (`[A-Za-z0-9_-]`, at most 32) has each other
//! character replaced by `_` and is cut to 32 (editors allow spaces). A server that still cannot be
//! bound — an empty command, a bad URL, a name already taken by `--mcp` or an earlier server — is
//! skipped with a warning: one bad server never fails the session.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agent_client_protocol::v1::schema::McpServer;

use crate::cli::config::RunConfig;
use crate::mcp::{HttpServer, McpServerConfig, McpServers, McpTransport, StdioServer};

/// The longest server name Trellis takes.
pub const MAX_NAME: usize = 32;

/// The servers of `config` (`--mcp`) and those the editor `given` for a session rooted at `cwd`,
/// as one set; `None` when there are none. Errors only for the command line's own servers (as
/// `trellis run` would).
pub fn servers(
    config: &RunConfig,
    given: &[McpServer],
    cwd: &Path,
) -> anyhow::Result<Option<Arc<McpServers>>> {
    let timeout = Duration::from_secs(config.mcp_timeout_secs.max(1));
    let mut all = config
        .mcp
        .iter()
        .map(|spec| McpServerConfig::parse_spec(spec).map(|c| c.with_call_timeout(timeout)))
        .collect::<Result<Vec<_>, _>>()?;
    for server in given {
        match editor_server(server, cwd) {
            Ok(server) if all.iter().any(|s| s.name() == server.name()) => tracing::warn!(
                "the editor's MCP server {:?} is skipped: a server of that name is already bound",
                server.name()
            ),
            Ok(server) => {
                tracing::info!(
                    "the editor's MCP server {:?} is bound as mcp:{}",
                    server.name(),
                    server.name()
                );
                all.push(server.with_call_timeout(timeout));
            }
            Err(why) => tracing::warn!("an MCP server the editor gave is skipped: {why}"),
        }
    }
    if all.is_empty() {
        return Ok(None);
    }
    Ok(Some(Arc::new(McpServers::new(all)?)))
}

/// One server the editor gave, as Trellis binds it.
fn editor_server(server: &McpServer, cwd: &Path) -> Result<McpServerConfig, String> {
    let (name, transport) = match server {
        McpServer::Stdio(stdio) => (
            &stdio.name,
            McpTransport::Stdio(StdioServer {
                program: stdio.command.to_string_lossy().into_owned(),
                args: stdio.args.clone(),
                env: stdio
                    .env
                    .iter()
                    .map(|v| (v.name.clone(), v.value.clone()))
                    .collect(),
                inherit_env: Vec::new(),
                cwd: Some(cwd.to_path_buf()),
            }),
        ),
        McpServer::Http(http) => (
            &http.name,
            McpTransport::Http(HttpServer {
                url: http.url.clone(),
                headers: http
                    .headers
                    .iter()
                    .map(|h| (h.name.clone(), h.value.clone()))
                    .collect(),
                bearer_token: None,
            }),
        ),
        McpServer::Sse(sse) => return Err(format!("{:?}: SSE servers are not supported", sse.name)),
        _ => return Err("a transport this version does not know".to_owned()),
    };
    let bound = server_name(name);
    McpServerConfig::new(bound.clone(), transport).map_err(|e| format!("{bound:?}: {e}"))
}

/// `name` as a Trellis server name: characters other than ASCII letters, digits, `-` and `_`
/// become `_`, cut to [`MAX_NAME`]; an empty name is `mcp`.
pub fn server_name(name: &str) -> String {
    let name: String = name
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(MAX_NAME)
        .collect();
    if name.is_empty() { "mcp".to_owned() } else { name }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn editor_names_become_valid_server_names() {
        assert_eq!(server_name("crm"), "crm");
        assert_eq!(server_name("My Context Server"), "My_Context_Server");
        assert_eq!(server_name("ünï.côde"), "_n__c_de");
        assert_eq!(server_name("  "), "mcp");
        assert_eq!(server_name(&"x".repeat(100)).len(), MAX_NAME);
        assert!(crate::mcp::naming::validate_server_name(&server_name("a b/c:d")).is_ok());
    }
}
