//! MCP servers as skill-bound tool groups.
//!
//! A whole [MCP](https://modelcontextprotocol.io) server is bound to one label in a skill's
//! `metadata.include_tools` (`mcp:<server>`). Its tools stay out of the model's tool list until the
//! skill is read, and only users the server admits ever see or run them. See `docs/mcp.md`.
//!
//! | module | concept |
//! |---|---|
//! | [`config`] | [`McpServerConfig`]: transport (stdio command or streamable-HTTP URL), tool filter, roles, limits |
//! | [`connection`] | [`McpConnection`]: lazy start, the `rmcp` session, calls with timeouts, crashes, shutdown |
//! | [`tool`] | [`McpTool`]: one MCP tool as an `Tool`; results and failures as tool results |
//! | [`naming`] | the `<server>__<tool>` names the model sees, sanitized and made unique |
//! | [`resolver`] | [`McpServers`]: the servers of an agent, and the `ToolResolver` for `mcp:` labels |
//! | `sessions` | one session per server, shared, or one per user ([`McpServerConfig::session_per_user`]) |
//! | [`error`] | [`McpError`] |
//!
//! ```no_run
//! # use std::sync::Arc;
//! use trellis_agent::mcp::{McpServerConfig, McpServers};
//! use trellis_middleware::skills::{BoundTools, SkillsMiddleware};
//! # fn f(sources: Vec<trellis_middleware::skills::SkillSource>) -> Result<(), Box<dyn std::error::Error>> {
//! let crm = McpServerConfig::stdio("crm", "python3", ["crm_server.py"])?.required_roles(["sales"]);
//! let servers = Arc::new(McpServers::new([crm])?);
//! let skills = SkillsMiddleware::new(sources).with_bound_tools(BoundTools::new().resolver(servers.clone()));
//! // … build the agent with `skills`; at the end: `servers.shutdown().await`.
//! # let _ = skills; Ok(()) }
//! ```

pub mod config;
pub mod connection;
pub mod error;
pub mod naming;
pub mod resolver;
mod sessions;
mod stderr_tail;
pub mod tool;

pub use config::{
    DEFAULT_CALL_TIMEOUT, DEFAULT_INHERITED_ENV, HttpServer, McpServerConfig, McpTransport, StdioServer,
    USER_ENV, USER_HEADER,
};
pub use connection::McpConnection;
pub use error::McpError;
pub use resolver::{LABEL_PREFIX, McpServers, parse_label};
pub use tool::McpTool;
