//! The agent file: `trellis.toml` in the working directory, or `--agent FILE`, read by `trellis
//! inspect` and `trellis run` (and any command that builds an agent) through one function,
//! [`resolve`]: given the optional `--agent` path, the working directory and the flags the user
//! gave explicitly, it yields the effective [`RunConfig`].
//!
//! Rules:
//! * Flags override the file. A list flag (`--skills`, `--memory`, `--mcp`, `--allow-command`,
//!   `--ask`, `--stop`) given at least once replaces the file's list; a switch
//!   (`--writable-skills`, `--unsafe-host-network`) can only turn a setting on.
//! * Local paths in the file (skills, memory, workdir, subagents' skills) are relative to the
//!   file's directory; object-store URLs (`s3://…`, `gs://…`, `az://…`) are left alone.
//! * Every table refuses keys it does not have: the error names the key and its line and suggests
//!   the closest known key. A bad value names its key and line too.
//! * Without `--agent`, a missing `trellis.toml` is no error: the flags alone are used.
//! * A `trellis.toml` found without `--agent` is obeyed for the keys that can leak a key or run
//!   commands only in a trusted folder ([`resolve_checked`], [`super::restricted`],
//!   [`super::trust`]).
//!
//! The file is configuration of the agent, not state: nothing in it belongs to a thread or a
//! user. What a run was built from is saved with the thread (see [`crate::cli::config::run_config`]), so a later
//! `trellis resume` rebuilds the same agent even if the file changed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::Deserialize;

use super::error::{self, AgentFileError, line_of_key};
use super::sections::{LimitsSettings, PermissionSpec, SubagentConfig, SummarizationSettings};

use super::run_config::RunConfig;
use super::{restricted, trust};
use crate::cli::approvals;
use crate::cli::sandbox::SandboxChoice;
use crate::cli::skills::CacheChoice;
use crate::mcp::McpServerConfig;
use crate::model_settings::ModelSettings;
use crate::providers::ModelSpec;

/// The file looked for in the working directory when `--agent` is not given.
pub const DEFAULT_FILE: &str = "trellis.toml";

/// Seconds an MCP tool call may take when neither the file nor `--mcp-timeout` says: the MCP
/// client's own default.
pub const DEFAULT_MCP_TIMEOUT_SECS: u64 = crate::mcp::DEFAULT_CALL_TIMEOUT.as_secs();

/// An agent file, as written (see the module docs and docs/cli.md).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "trellis agent file (trellis.toml)")]
pub struct AgentFile {
    /// The model string, e.g. `anthropic:claude-sonnet-4-5` or `openai:gpt-4.1`.
    #[serde(default)]
    pub model: Option<String>,
    /// Typed settings for every model call.
    #[serde(default)]
    pub model_settings: ModelSettings,
    /// The system prompt (default: trellis's own).
    #[serde(default)]
    pub system_prompt: Option<String>,
    /// Skills directories (relative to this file) or object-store URLs; later ones override
    /// earlier ones by skill name.
    #[serde(default)]
    pub skills: Vec<String>,
    /// Memory files (AGENTS.md), relative to this file, or object-store URLs.
    #[serde(default)]
    pub memory: Vec<String>,
    /// Most characters of memory shown to the model.
    #[serde(default)]
    pub memory_budget_chars: Option<usize>,
    /// Let the agent change the mounted skill sources (read-only by default).
    #[serde(default)]
    pub writable_skills: bool,
    /// The user's workspace, seen by the agent at /workspace (relative to this file).
    #[serde(default)]
    pub workdir: Option<String>,
    /// Most model calls in one run.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub max_steps: Option<u32>,
    /// Give the agent Deep Agents' todo list: the `write_todos` tool, its prompt, and `todos` in the
    /// thread's state (shown by `trellis serve`'s page). Off by default.
    #[serde(default)]
    pub todos: bool,
    /// MCP servers skills can bind with `include_tools: mcp:NAME`.
    #[serde(default)]
    pub mcp: McpSection,
    /// Where and how `execute` runs commands.
    #[serde(default)]
    pub sandbox: SandboxSection,
    /// Which tool calls wait for a person's approval.
    #[serde(default)]
    pub approvals: ApprovalsSection,
    /// File-tool permission rules, first match wins.
    #[serde(default)]
    pub permissions: Vec<PermissionSpec>,
    /// Condensing long threads.
    #[serde(default)]
    pub summarization: SummarizationSettings,
    /// Output and eviction limits of the file tools.
    #[serde(default)]
    pub limits: LimitsSettings,
    /// Subagents the `task` tool can start.
    #[serde(default)]
    pub subagents: Vec<SubagentConfig>,
}

/// `[mcp]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpSection {
    /// Seconds an MCP tool call may take (default 60).
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub timeout_secs: Option<u64>,
    /// NAME = "COMMAND ARGS…" (stdio, split like a shell) or NAME = "http(s)://…" (streamable HTTP).
    #[serde(default)]
    pub servers: BTreeMap<String, String>,
}

/// `[sandbox]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SandboxSection {
    /// bwrap (the default where it works), none (no execute tool), or unsandboxed (trusted
    /// development only).
    #[serde(default)]
    pub kind: Option<SandboxChoice>,
    /// Let commands use the host's whole network, its loopback services and cloud metadata
    /// endpoints included (default false; unsafe with untrusted commands: prefer
    /// `allow_domains`). `network` is its former name.
    #[serde(default, alias = "network")]
    pub unsafe_host_network: bool,
    /// Domains commands may reach over HTTP(S) through Trellis's proxy, and nothing else
    /// (`example.com`, `*.example.com`, or an IP address; default none).
    #[serde(default)]
    pub allow_domains: Vec<String>,
    /// Only simple commands starting with one of these prefixes may run (default: any).
    #[serde(default)]
    pub allow_commands: Vec<String>,
}

/// `[approvals]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApprovalsSection {
    /// Tools whose calls wait for approval (default `execute`; `["none"]` for none).
    #[serde(default)]
    pub ask: Option<Vec<String>>,
}

/// What the user gave on the command line (`None` / empty / false: not given).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Flags {
    /// `--model`.
    pub model: Option<String>,
    /// The model when neither `--model` nor the file names one (`inspect` has one; `run` none).
    pub fallback_model: Option<String>,
    /// `--temperature`, `--top-p`, `--max-tokens`, `--stop`, `--thinking-budget`,
    /// `--reasoning-effort`.
    pub model_settings: ModelSettings,
    /// `--skills`.
    pub skills: Vec<String>,
    /// `--memory`.
    pub memory: Vec<String>,
    /// `--user`.
    pub user: Option<String>,
    /// `--workdir`.
    pub workdir: Option<PathBuf>,
    /// `--mcp`.
    pub mcp: Vec<String>,
    /// `--mcp-timeout`.
    pub mcp_timeout_secs: Option<u64>,
    /// `--writable-skills`.
    pub writable_skills: bool,
    /// `--sandbox`.
    pub sandbox: Option<SandboxChoice>,
    /// `--unsafe-host-network`.
    pub sandbox_network: bool,
    /// `--allow-domain`.
    pub allow_domain: Vec<String>,
    /// `--allow-command`.
    pub allow_command: Vec<String>,
    /// `--ask`.
    pub ask: Vec<String>,
}

/// The JSON schema of the agent file, for editors (`trellis schema agent-file`), its keys sorted.
pub fn schema() -> serde_json::Value {
    trellis_middleware::tools::canonical::canonical(schemars::schema_for!(AgentFile).to_value())
}

/// Read and check an agent file (paths as written, not yet resolved).
pub fn parse(path: &Path, text: &str) -> Result<AgentFile, AgentFileError> {
    let file: AgentFile = toml::from_str(text).map_err(|e| error::from_toml(path, text, &e))?;
    let invalid = |table: &str, index: usize, key: &str, message: String| {
        let line = line_of_key(text, table, index, key);
        let key = if table.is_empty() {
            key.to_owned()
        } else if table == "subagents" {
            format!("subagents[{index}].{key}")
        } else {
            format!("{table}.{key}")
        };
        AgentFileError::Invalid {
            path: path.to_owned(),
            key: Some(key),
            line,
            message,
        }
    };
    if let Some(model) = &file.model {
        ModelSpec::parse(model).map_err(|e| invalid("", 0, "model", e.to_string()))?;
    }
    file.model_settings.validate().map_err(|message| {
        let key = message.split_whitespace().next().unwrap_or_default().to_owned();
        invalid("model_settings", 0, &key, message)
    })?;
    if file.max_steps == Some(0) {
        return Err(invalid("", 0, "max_steps", "must be at least 1".to_owned()));
    }
    if file.mcp.timeout_secs == Some(0) {
        return Err(invalid("mcp", 0, "timeout_secs", "must be at least 1".to_owned()));
    }
    for (name, spec) in &file.mcp.servers {
        McpServerConfig::parse_spec(&format!("{name}={spec}"))
            .map_err(|e| invalid("mcp.servers", 0, name, e.to_string()))?;
    }
    if let Some(ask) = &file.approvals.ask {
        approvals::gate(ask).map_err(|e| invalid("approvals", 0, "ask", e.to_string()))?;
    }
    for (i, rule) in file.permissions.iter().enumerate() {
        rule.rule().map_err(|e| invalid("permissions", i, "pattern", e))?;
    }
    file.summarization
        .config()
        .map_err(|(key, message)| invalid("summarization", 0, key, message))?;
    let mut names = Vec::new();
    for (i, sub) in file.subagents.iter().enumerate() {
        let ok_name = !sub.name.is_empty()
            && sub
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !ok_name {
            return Err(invalid(
                "subagents",
                i,
                "name",
                format!("`{}` is not a name of letters, digits, '-' and '_'", sub.name),
            ));
        }
        if names.contains(&sub.name.as_str()) || sub.name == "general-purpose" {
            return Err(invalid(
                "subagents",
                i,
                "name",
                format!("`{}` is taken", sub.name),
            ));
        }
        names.push(&sub.name);
        for (key, value) in [("description", &sub.description), ("prompt", &sub.prompt)] {
            if value.trim().is_empty() {
                return Err(invalid("subagents", i, key, "must not be empty".to_owned()));
            }
        }
        if let Some(model) = &sub.model {
            ModelSpec::parse(model).map_err(|e| invalid("subagents", i, "model", e.to_string()))?;
        }
    }
    Ok(file)
}

/// The effective configuration: the agent file (`agent`, else `cwd/trellis.toml` if it exists)
/// under the flags the user gave. The file's relative paths come back absolute; the flags' stay as
/// given (make them absolute with [`RunConfig::absolute`] before saving a run).
///
/// This does not check trust: `run` and `chat` use [`resolve_checked`].
pub fn resolve(agent: Option<&Path>, cwd: &Path, flags: Flags) -> Result<RunConfig, AgentFileError> {
    resolve_checked(agent, cwd, flags).map(|(config, _)| config)
}

/// [`resolve`], and why the configuration may not be used to run: a `trellis.toml` found in `cwd`
/// (not given with `--agent`) that sets keys needing trust ([`super::restricted`]) in a folder
/// the user has not trusted ([`AgentFileError::Untrusted`]), or a user config that cannot be read.
/// `run` and `chat` stop on it; `inspect`, which runs nothing, shows it as a note.
pub fn resolve_checked(
    agent: Option<&Path>,
    cwd: &Path,
    flags: Flags,
) -> Result<(RunConfig, Option<AgentFileError>), AgentFileError> {
    let (file, dir, refusal) = match load(agent, cwd)? {
        Some((file, path, text)) => {
            let dir = path.parent().map_or_else(|| cwd.to_owned(), Path::to_owned);
            let refusal = if agent.is_none() {
                let keys = restricted::restricted(&file, &text, &dir, &flags);
                trust::check(&path, &dir, keys).err()
            } else {
                None
            };
            (file, dir, refusal)
        }
        None => (AgentFile::default(), cwd.to_owned(), None),
    };
    flags
        .model_settings
        .validate()
        .map_err(|message| AgentFileError::Flag {
            flag: flag_of(&message),
            message,
        })?;
    let either = |flag: Vec<String>, file: Vec<String>| if flag.is_empty() { file } else { flag };
    let model = flags
        .model
        .or(file.model)
        .or(flags.fallback_model)
        .ok_or(AgentFileError::NoModel)?;
    let in_file_dir =
        |list: Vec<String>| -> Vec<String> { list.into_iter().map(|s| absolute(&dir, s)).collect() };
    let file_mcp = file
        .mcp
        .servers
        .into_iter()
        .map(|(name, spec)| format!("{name}={spec}"))
        .collect();
    let subagents = file
        .subagents
        .into_iter()
        .map(|mut s| {
            s.skills = in_file_dir(s.skills);
            s
        })
        .collect();
    let config = RunConfig {
        model,
        skills: either(flags.skills, in_file_dir(file.skills)),
        memory: either(flags.memory, in_file_dir(file.memory)),
        user: flags.user,
        workdir: flags
            .workdir
            .or_else(|| file.workdir.map(|w| PathBuf::from(absolute(&dir, w)))),
        mcp: either(flags.mcp, file_mcp),
        mcp_timeout_secs: flags
            .mcp_timeout_secs
            .or(file.mcp.timeout_secs)
            .unwrap_or(DEFAULT_MCP_TIMEOUT_SECS),
        writable_skills: flags.writable_skills || file.writable_skills,
        sandbox: flags.sandbox.or(file.sandbox.kind),
        sandbox_network: flags.sandbox_network || file.sandbox.unsafe_host_network,
        allow_domain: either(flags.allow_domain, file.sandbox.allow_domains),
        allow_command: either(flags.allow_command, file.sandbox.allow_commands),
        ask: either(
            flags.ask,
            file.approvals
                .ask
                .unwrap_or_else(|| vec![approvals::DEFAULT_ASK.to_owned()]),
        ),
        model_settings: file.model_settings.overridden_by(&flags.model_settings),
        system_prompt: file.system_prompt,
        memory_budget_chars: file.memory_budget_chars,
        max_steps: file.max_steps,
        todos: file.todos,
        permissions: file.permissions,
        summarization: file.summarization,
        limits: file.limits,
        skills_cache: CacheChoice::default(),
        subagents,
    };
    Ok((config, refusal))
}

/// The agent file to use, its path and its text, if any.
fn load(agent: Option<&Path>, cwd: &Path) -> Result<Option<(AgentFile, PathBuf, String)>, AgentFileError> {
    let path = match agent {
        Some(p) => cwd.join(p),
        None => {
            let p = cwd.join(DEFAULT_FILE);
            if !p.is_file() {
                return Ok(None);
            }
            p
        }
    };
    let text = std::fs::read_to_string(&path).map_err(|source| AgentFileError::Read {
        path: path.clone(),
        source,
    })?;
    Ok(Some((parse(&path, &text)?, path, text)))
}

fn absolute(dir: &Path, s: String) -> String {
    if s.contains("://") || Path::new(&s).is_absolute() {
        s
    } else {
        dir.join(s).to_string_lossy().into_owned()
    }
}

/// The flag a model-settings message is about (the message starts with the setting's name).
fn flag_of(message: &str) -> &'static str {
    match message.split_whitespace().next().unwrap_or_default() {
        "temperature" => "--temperature",
        "top_p" => "--top-p",
        "max_tokens" => "--max-tokens",
        "thinking_budget" => "--thinking-budget",
        _ => "--stop",
    }
}
