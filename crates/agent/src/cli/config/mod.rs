//! What builds an agent from the command line: the agent file (`trellis.toml` or `--agent FILE`,
//! [`agent_file`]) read under the flags into the effective [`RunConfig`].

pub mod agent_file;
mod error;
pub mod sections;

pub use agent_file::{
    AgentFile, ApprovalsSection, DEFAULT_FILE, DEFAULT_MCP_TIMEOUT_SECS, Flags, McpSection, SandboxSection, parse,
    resolve, schema,
};
pub use error::AgentFileError;
pub use sections::{LimitsSettings, PermissionSpec, SubagentConfig, SummarizationSettings};
