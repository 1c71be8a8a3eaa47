//! [`McpError`]: why an MCP server could not be configured or reached.
//!
//! These errors never reach the model as such: a failed start makes the server's tools unavailable
//! (the resolver returns none and logs the reason), and a failed call becomes an error tool result
//! written for the model (see [`super::tool`]).

use std::time::Duration;

/// Why an MCP server could not be configured, started or listed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// A server name that cannot be a tool-name prefix.
    #[error(
        "invalid MCP server name {name:?}: {reason} (use 1-32 ASCII letters, digits, '-' or single '_', \
         starting with a letter or digit)"
    )]
    InvalidName {
        /// The name given.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A `NAME=COMMAND` / `NAME=URL` specification (or a config value) that does not parse.
    #[error("invalid MCP server specification {spec:?}: {reason}")]
    InvalidSpec {
        /// The specification given.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Two servers with the same name.
    #[error("two MCP servers are named {0:?}; names must be unique")]
    DuplicateServer(String),
    /// The process could not be spawned, the connection failed, or `initialize` failed.
    #[error("MCP server {server:?} could not be started: {message}")]
    Start {
        /// The server.
        server: String,
        /// Why.
        message: String,
    },
    /// Starting (spawn, `initialize`, `tools/list`) took longer than the connect timeout.
    #[error("MCP server {server:?} did not finish starting within {after:?}")]
    StartTimeout {
        /// The server.
        server: String,
        /// The connect timeout.
        after: Duration,
    },
    /// `tools/list` failed.
    #[error("MCP server {server:?} could not list its tools: {message}")]
    ListTools {
        /// The server.
        server: String,
        /// Why.
        message: String,
    },
    /// The server failed to start (or crashed) too often; it is not started again.
    #[error(
        "MCP server {server:?} is not started again after {attempts} failed or crashed starts; last error: {last}"
    )]
    GaveUp {
        /// The server.
        server: String,
        /// Start attempts made.
        attempts: u32,
        /// The last failure.
        last: String,
    },
    /// [`McpServers::shutdown`](super::McpServers::shutdown) was called.
    #[error("MCP server {server:?} was shut down")]
    ShutDown {
        /// The server.
        server: String,
    },
}
