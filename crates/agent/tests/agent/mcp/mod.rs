//! MCP servers bound to skills, against the real MCP server in `tests/mcp_server/server.py`
//! (official Python SDK): through the agent loop (`agent`), the `trellis` command (`cli`), process
//! lifecycle and failures (`lifecycle`), per-user sessions (`sessions`) and servers whose tools
//! change (`tool_changes`). `common` starts the server and builds the agents they share.

mod agent;
mod cli;
pub(crate) mod common;
mod lifecycle;
mod sessions;
mod tool_changes;
