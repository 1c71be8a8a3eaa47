//! The integration tests of trellis-agent, built as one test binary: each module below was a
//! `tests/*.rs` file of its own. `mcp_common`, `providers_common` and `providers_anthropic_common`
//! hold what several of them share; the MCP server they start is `tests/mcp_server/server.py`.

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
mod providers_redirects;
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
