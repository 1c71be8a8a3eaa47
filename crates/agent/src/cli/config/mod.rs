//! What builds an agent from the command line: the agent file (`trellis.toml` or `--agent FILE`,
//! [`agent_file`]) read under the flags into the effective [`RunConfig`], which is saved with
//! the thread ([`run_config`]). A `trellis.toml` found in the working directory is obeyed for the
//! keys that can leak a key or run commands ([`restricted`]) only in a folder the user trusts
//! ([`trust`]).

pub mod agent_file;
mod error;
pub mod restricted;
pub mod run_config;
pub mod sections;
pub mod trust;

pub use agent_file::{
    AgentFile, ApprovalsSection, DEFAULT_FILE, DEFAULT_MCP_TIMEOUT_SECS, Flags, McpSection, SandboxSection,
    parse, resolve, resolve_checked, schema,
};
pub use error::AgentFileError;
pub use run_config::RunConfig;
pub use sections::{LimitsSettings, PermissionSpec, SubagentConfig, SummarizationSettings};

/// `trellis schema agent-file`: print the agent file's JSON schema.
pub fn print_schema() -> anyhow::Result<std::process::ExitCode> {
    use std::io::Write;
    // An error (a closed pipe), not a panic, when stdout goes away.
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", serde_json::to_string_pretty(&schema())?)?;
    Ok(std::process::ExitCode::SUCCESS)
}
