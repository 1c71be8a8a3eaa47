//! The integration tests of trellis-agent, built as one test binary. `cli/` holds the tests of the
//! `trellis` command line (with their one harness, `cli/harness.rs`); the `providers` and `mcp`
//! folders keep what their tests share in their `common` modules; `support.rs` is the one guard for
//! tests that need the emulators or the Python MCP SDK. The MCP server they start is
//! `tests/mcp_server/server.py`. `server/` tests `trellis serve` with the Python `langgraph-sdk`;
//! `acp/` tests `trellis acp` with the TypeScript ACP SDK (the `acp` feature, on by default).

#[cfg(feature = "acp")]
mod acp;
mod call_ids;
mod cli;
mod load;
mod mcp;
mod providers;
mod queue;
mod server;
mod support;
mod telemetry;
