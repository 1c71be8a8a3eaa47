//! The integration tests of trellis-agent, built as one test binary: each module below was a
//! `tests/*.rs` file of its own. The `providers` and `mcp` folders keep what their tests share in
//! their `common` modules; the MCP server they start is `tests/mcp_server/server.py`.

mod adversarial_cli;
mod agent_file;
mod call_ids;
mod cli;
mod cli_agent_file;
mod cli_approvals;
mod cli_chat;
mod cli_logging;
mod cli_sandbox;
mod cli_skills_cache;
mod cli_streaming;
mod cli_threads;
mod cli_users;
mod inspect;
mod load;
mod mcp;
mod providers;
mod support;
mod telemetry;
