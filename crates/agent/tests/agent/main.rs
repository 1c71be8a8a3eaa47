//! The integration tests of trellis-agent, built as one test binary. `cli/` holds the tests of the
//! `trellis` command line (with their one harness, `cli/harness.rs`); `mcp_common`,
//! `providers_common` and `providers_anthropic_common` hold what several of the other modules
//! share; the MCP server they start is `tests/mcp_server/server.py`.

mod call_ids;
mod cli;
mod load;
mod mcp_agent;
mod mcp_cli;
mod mcp_common;
mod mcp_lifecycle;
mod mcp_sessions;
mod mcp_tool_changes;
mod providers_anthropic_common;
mod providers_anthropic_errors;
mod providers_anthropic_messages;
mod providers_anthropic_options;
mod providers_bedrock;
mod providers_common;
mod providers_error_details;
mod providers_limits;
mod providers_openai;
mod providers_openai_schemas;
mod providers_parsers_never_panic;
mod providers_platform_matrix;
mod providers_registry;
mod providers_request_settings;
mod providers_responses;
mod providers_responses_streaming;
mod providers_sigv4;
mod providers_stop_reasons;
mod providers_stream_error_ids;
mod providers_streaming;
mod providers_vertex;
mod telemetry;
