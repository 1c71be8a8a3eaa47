//! The `trellis` command line's arguments: the clap types of every command and what they turn
//! into ([`AgentArgs::split`], [`ApprovalArgs::read`]).

use std::path::PathBuf;

use anyhow::Result;
use clap::{ArgAction, Parser, Subcommand};

use crate::cli::approvals::ApproveRule;
use crate::cli::config::{self, Flags, RunConfig};
use crate::cli::logging::Otlp;
use crate::cli::run::{self, Approvals};
use crate::cli::sandbox::SandboxChoice;
use crate::cli::skills::CacheChoice;
use crate::cli::state_dir::StateDir;
use crate::model_settings::{Effort, ModelSettings};
use crate::usage::Prices;

/// `trellis inspect`'s model when neither --model nor the agent file names one.
pub const DEFAULT_INSPECT_MODEL: &str = "anthropic:claude-sonnet-4-5";

/// Shown after the options of every command.
pub const LOGGING_HELP: &str = "\
Logging (to stderr): warnings and errors by default; -v adds info, -vv debug, -vvv trace;
-q keeps errors only. RUST_LOG, when set and not empty, takes precedence over -v and -q: it is
a tracing EnvFilter, e.g. RUST_LOG=debug or RUST_LOG=warn,trellis_middleware=trace.
Log lines are coloured only when stderr is a terminal and NO_COLOR is unset or empty.";

#[derive(Parser, Debug)]
#[command(
    name = "trellis",
    version,
    about = "A skills-and-memory agent harness",
    after_help = LOGGING_HELP
)]
pub struct Cli {
    /// Log more: -v info, -vv debug, -vvv trace (RUST_LOG, when set, takes precedence).
    #[arg(short, long, action = ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Log errors only (RUST_LOG, when set, takes precedence).
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    #[command(subcommand)]
    pub command: Command,
}

// One parsed command per process: the size of its largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Print the exact first request the model would receive (no API key needed).
    #[command(after_help = LOGGING_HELP)]
    Inspect(InspectArgs),
    /// Run the agent on a task, printing progress; resume a thread with --thread.
    #[command(after_help = LOGGING_HELP)]
    Run {
        #[command(flatten)]
        agent: AgentArgs,
        #[command(flatten)]
        approvals: ApprovalArgs,
        #[command(flatten)]
        otlp: Otlp,
        /// Write every run event to stdout as one JSON object per line (text deltas included)
        /// instead of the answer.
        #[arg(long)]
        json: bool,
        /// The task.
        task: String,
    },
    /// Talk with the agent on one thread: streamed answers, approvals inline, /commands (/help
    /// lists them); Ctrl-C cancels the running step, Ctrl-D or /quit leaves.
    #[command(after_help = LOGGING_HELP)]
    Chat {
        #[command(flatten)]
        agent: AgentArgs,
        #[command(flatten)]
        approvals: ApprovalArgs,
        #[command(flatten)]
        otlp: Otlp,
    },
    /// Serve the agent to an editor (Zed, JetBrains, Neovim) over the Agent Client Protocol on
    /// stdin/stdout; each session's working directory becomes /workspace (see docs/acp.md).
    #[cfg(feature = "acp")]
    #[command(after_help = LOGGING_HELP)]
    Acp {
        #[command(flatten)]
        agent: AgentArgs,
        /// Read and write the text files of each session's working directory through the editor
        /// (`fs/read_text_file`, `fs/write_text_file`: unsaved buffers, the editor's review of
        /// edits) when it offers them.
        #[arg(long)]
        editor_fs: bool,
        #[command(flatten)]
        otlp: Otlp,
    },
    /// Continue a thread whose run stopped to wait for approvals, or was cut short in the middle
    /// of a tool step (killed): with the settings it was started with (exit status 3 when calls
    /// still wait). Calls whose results were recorded do not run again; see docs/differences.md.
    #[command(after_help = LOGGING_HELP)]
    Resume {
        /// The thread.
        id: String,
        /// Where `trellis run` kept the thread.
        #[arg(long, default_value = ".trellis")]
        state_dir: PathBuf,
        #[command(flatten)]
        approvals: ApprovalArgs,
        #[command(flatten)]
        otlp: Otlp,
        /// Write every run event to stdout as one JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// List, show or delete the threads `trellis run` kept (checkpoints and each thread's files).
    #[command(after_help = LOGGING_HELP)]
    Threads {
        /// Where `trellis run` keeps threads.
        #[arg(long, default_value = ".trellis", global = true)]
        state_dir: PathBuf,
        #[command(subcommand)]
        command: ThreadsCommand,
    },
    /// Skill libraries.
    #[command(after_help = LOGGING_HELP)]
    Skills {
        #[command(subcommand)]
        command: SkillsCommand,
    },
    /// Trust a folder (default: this one): its trellis.toml, and its subfolders', may then set the
    /// keys that can send your keys elsewhere or run commands (added to trusted_projects in the
    /// user config, $TRELLIS_CONFIG_HOME/config.toml, else $XDG_CONFIG_HOME/trellis/config.toml,
    /// else ~/.config/trellis/config.toml).
    #[command(after_help = LOGGING_HELP)]
    Trust {
        /// The folder to trust.
        dir: Option<PathBuf>,
    },
    /// Serve the agents over the LangGraph Agent Server API (the subset its clients use; tested
    /// with the Python langgraph-sdk), threads kept in the state dir.
    #[cfg(feature = "server")]
    #[command(after_help = LOGGING_HELP)]
    Serve(crate::cli::serve::ServeArgs),
    /// Print a JSON schema, for editors that complete and check the file.
    #[command(after_help = LOGGING_HELP)]
    Schema {
        /// Which file's schema.
        #[arg(value_enum)]
        what: SchemaKind,
    },
}

/// What `trellis inspect` is told.
#[derive(clap::Args, Debug)]
pub struct InspectArgs {
    /// A skills directory or object-store URL (repeatable; later sources override earlier ones).
    #[arg(long = "skills", value_name = "SRC")]
    pub skills: Vec<String>,
    /// A memory file (AGENTS.md), local or an object-store URL (repeatable).
    #[arg(long = "memory", value_name = "SRC")]
    pub memory: Vec<String>,
    /// The agent file (default: trellis.toml in this directory, if there is one); flags
    /// override it.
    #[arg(long, value_name = "FILE")]
    pub agent: Option<PathBuf>,
    /// The model whose capabilities shape the request (default: the agent file's, else
    /// anthropic:claude-sonnet-4-5).
    #[arg(long)]
    pub model: Option<String>,
    #[command(flatten)]
    pub settings: ModelSettingsArgs,
    /// Print JSON (the request, token estimates, warnings and the provider's request body).
    #[arg(long)]
    pub json: bool,
    /// Where `execute` would run: bwrap (default where it works), none, or unsandboxed.
    #[arg(long, value_enum, value_name = "KIND")]
    pub sandbox: Option<SandboxChoice>,
    /// Show this user's first request: with their memory (agents/AGENTS.md, agents/USER.md,
    /// agents/MEMORY.md) and personal skills (agents/skills/) from their workspace, which is
    /// --workdir if given, else STATE_DIR/users/ID.
    #[arg(long, value_name = "ID")]
    pub user: Option<String>,
    /// The user's workspace (with --user).
    #[arg(long, requires = "user")]
    pub workdir: Option<PathBuf>,
    /// Where `trellis run` keeps threads and users' workspaces (with --user).
    #[arg(long, default_value = ".trellis")]
    pub state_dir: PathBuf,
    /// The task to put in the first user message.
    #[arg(default_value = "(your task)")]
    pub task: String,
}

/// The files `trellis schema` describes.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum SchemaKind {
    AgentFile,
}

/// What builds the agent of `run` and `chat`, and the thread it works on.
#[derive(clap::Args, Debug)]
pub struct AgentArgs {
    /// The agent file (default: trellis.toml in this directory, if there is one); flags
    /// override it. A file named here is trusted; a trellis.toml found here may set the keys that
    /// can send your keys elsewhere or run commands only in a folder you trusted (`trellis
    /// trust`).
    #[arg(long = "agent", value_name = "FILE")]
    pub agent_file: Option<PathBuf>,
    /// The model, e.g. anthropic:claude-sonnet-4-5 or openai:gpt-4.1 (default: the agent
    /// file's).
    #[arg(long)]
    pub model: Option<String>,
    #[command(flatten)]
    pub settings: ModelSettingsArgs,
    /// A skills directory or object-store URL, mounted under /skills (repeatable; later sources
    /// override earlier ones).
    #[arg(long = "skills", value_name = "SRC")]
    pub skills: Vec<String>,
    /// A memory file (AGENTS.md), local or an object-store URL, loaded into the system prompt
    /// (repeatable).
    #[arg(long = "memory", value_name = "SRC")]
    pub memory: Vec<String>,
    /// Continue this thread (its checkpoints and its own files live in --state-dir).
    #[arg(long)]
    pub thread: Option<String>,
    /// Run as this user (1-128 ASCII letters, digits, '-', '_' or '.'; not starting with '.'):
    /// their memory (agents/AGENTS.md, agents/USER.md, agents/MEMORY.md) and personal skills
    /// (agents/skills/SLUG/SKILL.md, over the --skills sources, for them only) come from
    /// their workspace, which is --workdir if given, else STATE_DIR/users/ID.
    #[arg(long, value_name = "ID")]
    pub user: Option<String>,
    /// Start a new thread from checkpoint STEP of thread ID (`trellis threads history ID`
    /// lists them), with a copy of ID's files.
    #[arg(long, value_name = "ID@STEP", conflicts_with = "thread")]
    pub fork: Option<String>,
    /// Your workspace: a directory the agent sees at /workspace in every thread you run
    /// (without it and without --user, the agent has only the thread's own files, kept with
    /// the thread).
    #[arg(long)]
    pub workdir: Option<PathBuf>,
    /// Where thread checkpoints and each thread's own files are kept.
    #[arg(long, default_value = ".trellis")]
    pub state_dir: PathBuf,
    /// An MCP server skills can bind with `include_tools: mcp:NAME` (repeatable):
    /// NAME=COMMAND (stdio; split like a shell) or NAME=http(s)://… (streamable HTTP).
    #[arg(long = "mcp", value_name = "NAME=COMMAND|URL")]
    pub mcp: Vec<String>,
    /// Seconds an MCP tool call may take (default 60).
    #[arg(long, value_name = "SECS")]
    pub mcp_timeout: Option<u64>,
    /// Let the agent change the mounted skill sources (read-only by default).
    #[arg(long)]
    pub writable_skills: bool,
    /// Where `execute` runs skill scripts and commands: bwrap (isolated; the default where it
    /// works, else no execute tool), none (no execute tool), or unsandboxed (on this host,
    /// isolating nothing: trusted development only).
    #[arg(long, value_enum, value_name = "KIND")]
    pub sandbox: Option<SandboxChoice>,
    /// Let commands use the host's whole network, its loopback services and cloud metadata
    /// endpoints included (none by default; unsafe with untrusted commands: prefer
    /// --allow-domain). `--sandbox-network` is its former name.
    #[arg(long = "unsafe-host-network", alias = "sandbox-network")]
    pub sandbox_network: bool,
    /// Let commands reach DOMAIN over HTTP(S) through Trellis's proxy, and nothing else
    /// (repeatable; `*.example.com` for the names below it; an IP address to allow that
    /// address, loopback and private ones included).
    #[arg(long = "allow-domain", value_name = "DOMAIN")]
    pub allow_domain: Vec<String>,
    /// Only let `execute` run simple commands starting with PREFIX, e.g. "python3 /skills/"
    /// (repeatable; without it any command may run).
    #[arg(long = "allow-command", value_name = "PREFIX")]
    pub allow_command: Vec<String>,
    /// Tools whose calls wait for your approval before they run (comma-separated or
    /// repeated; `none` for no approvals; default execute,write_file,edit_file).
    #[arg(long, value_name = "TOOL,...")]
    pub ask: Vec<String>,
    #[command(flatten)]
    pub cache: CacheArgs,
}

impl AgentArgs {
    /// The configuration (the agent file under these flags, local paths made absolute), the
    /// state dir, `--thread`, `--fork`.
    pub fn split(self) -> Result<(RunConfig, StateDir, Option<String>, Option<String>)> {
        let flags = Flags {
            model: self.model,
            fallback_model: None,
            model_settings: self.settings.settings(),
            skills: self.skills,
            memory: self.memory,
            user: self.user,
            workdir: self.workdir,
            mcp: self.mcp,
            mcp_timeout_secs: self.mcp_timeout,
            writable_skills: self.writable_skills,
            sandbox: self.sandbox,
            sandbox_network: self.sandbox_network,
            allow_domain: self.allow_domain,
            allow_command: self.allow_command,
            ask: self.ask,
        };
        let cwd = std::env::current_dir()?;
        let (mut config, refusal) = config::resolve_checked(self.agent_file.as_deref(), &cwd, flags)?;
        if let Some(refusal) = refusal {
            return Err(refusal.into());
        }
        config.skills_cache = self.cache.choice();
        let config = config.absolute(&cwd);
        Ok((config, StateDir::new(self.state_dir), self.thread, self.fork))
    }
}

/// The typed model settings as flags (`trellis run`, `trellis inspect`); each overrides the
/// agent file's `[model_settings]` key of the same name.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ModelSettingsArgs {
    /// Sampling temperature, 0 to 2.
    #[arg(long, value_name = "T")]
    pub temperature: Option<f32>,
    /// Nucleus sampling, above 0 and at most 1.
    #[arg(long, value_name = "P")]
    pub top_p: Option<f32>,
    /// Cap on output tokens per model call.
    #[arg(long, value_name = "N")]
    pub max_tokens: Option<u32>,
    /// A text that ends the reply when the model writes it (repeatable).
    #[arg(long = "stop", value_name = "TEXT")]
    pub stop: Vec<String>,
    /// Extended thinking budget in tokens (Anthropic: at least 1024, below --max-tokens).
    #[arg(long, value_name = "N")]
    pub thinking_budget: Option<u32>,
    /// Reasoning effort (OpenAI reasoning models).
    #[arg(long, value_enum, value_name = "LEVEL")]
    pub reasoning_effort: Option<Effort>,
}

impl ModelSettingsArgs {
    /// The settings these flags give.
    pub fn settings(self) -> ModelSettings {
        ModelSettings {
            temperature: self.temperature,
            top_p: self.top_p,
            max_tokens: self.max_tokens,
            stop: self.stop,
            thinking_budget: self.thinking_budget,
            reasoning_effort: self.reasoning_effort.map(Into::into),
        }
    }
}

/// How waiting tool calls are decided without asking.
#[derive(clap::Args, Debug)]
pub struct ApprovalArgs {
    /// Approve these calls without asking: all, none (ask on a terminal, else stop with exit
    /// status 3 and print the `trellis resume` command), or TOOL,...
    #[arg(long, value_name = "all|none|TOOL,...", default_value = "none")]
    pub approve: ApproveRule,
    /// Decisions from a JSON file (or - for stdin): {"CALL_ID": {"decision": "approve" | "reject"
    /// | "edit" | "respond", ...}}.
    #[arg(long, value_name = "FILE")]
    pub decisions: Option<PathBuf>,
    /// Model prices for the cost in the closing summary, over the built-in list prices: a JSON
    /// file {"MODEL_PREFIX": {"input": USD, "output": USD, "cache_read": USD, "cache_write": USD}}
    /// per million tokens.
    #[arg(long, value_name = "FILE")]
    pub prices: Option<PathBuf>,
}

impl ApprovalArgs {
    pub fn read(self) -> Result<Approvals> {
        let overrides = match &self.prices {
            Some(path) => Prices::read_overrides(path)?,
            None => Default::default(),
        };
        Ok(Approvals {
            prices: Prices::default().with(overrides),
            rule: self.approve,
            given: self.decisions.as_deref().map(run::read_decisions).transpose()?,
        })
    }
}

#[derive(Subcommand, Debug)]
pub enum ThreadsCommand {
    /// Print the ids of the stored threads, one a line.
    List,
    /// Print a thread's messages in brief and its files.
    Show {
        /// The thread id.
        id: String,
    },
    /// Print a thread's checkpoints, one a line: step, time (UTC), messages, what it added.
    History {
        /// The thread id.
        id: String,
    },
    /// Delete a thread: its checkpoints and its files.
    Delete {
        /// The thread id.
        id: String,
    },
    /// Remove what no checkpoint refers to any more (steps of lost races or killed processes,
    /// unreferenced blobs), in one thread or in all of them.
    Gc {
        /// The thread id (all threads without it).
        id: Option<String>,
        /// Leave objects younger than this many seconds (a save in flight elsewhere).
        #[arg(long, default_value_t = 600, value_name = "SECONDS")]
        grace: u64,
    },
}

#[derive(Subcommand, Debug)]
pub enum SkillsCommand {
    /// List the skills of one or more sources.
    #[command(after_help = LOGGING_HELP)]
    List {
        /// Print JSON (each skill's fields and the load warnings) instead of one entry per skill.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        cache: CacheArgs,
        /// Skills directories or object-store URLs (later sources override earlier ones).
        #[arg(required = true, value_name = "SOURCE")]
        sources: Vec<String>,
    },
    /// Check every skill against the Agent Skills rules; exit 1 on errors.
    #[command(after_help = LOGGING_HELP)]
    Validate {
        /// Print JSON (findings per SKILL.md, source warnings, error and warning counts) instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        cache: CacheArgs,
        /// Skills directories or object-store URLs to check.
        #[arg(required = true, value_name = "SOURCE")]
        sources: Vec<String>,
    },
    /// Publish an object-store source's catalog into the source itself (URL/.trellis-skills-index),
    /// so every worker's `skills list` and agent start read only what changed since.
    #[command(after_help = LOGGING_HELP)]
    Index {
        /// The object-store URL of the skills source (s3://bucket/org/skills).
        #[arg(value_name = "URL")]
        url: String,
    },
}

/// Where persisted skill catalogs are kept.
#[derive(clap::Args, Debug)]
pub struct CacheArgs {
    /// Scan every source from scratch and write no catalog cache.
    #[arg(long)]
    pub no_cache: bool,
    /// The catalog cache directory (default: $TRELLIS_CACHE_DIR, else $XDG_CACHE_HOME/trellis/skills,
    /// else ~/.cache/trellis/skills).
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
}

impl CacheArgs {
    pub fn choice(self) -> CacheChoice {
        CacheChoice {
            disabled: self.no_cache,
            dir: self.cache_dir,
        }
    }
}

impl Command {
    /// The telemetry options of the commands that run agents.
    pub fn otlp(&self) -> Option<&Otlp> {
        match self {
            Command::Run { otlp, .. } | Command::Chat { otlp, .. } | Command::Resume { otlp, .. } => {
                Some(otlp)
            }
            #[cfg(feature = "acp")]
            Command::Acp { otlp, .. } => Some(otlp),
            _ => None,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every argument of every command, nested ones included, says what it is for.
    #[test]
    fn every_argument_has_help_text() {
        fn check(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            let path = format!("{path} {}", cmd.get_name());
            if cmd.get_about().is_none() && path != " trellis" {
                missing.push(format!("{path} (the command itself)"));
            }
            for arg in cmd.get_arguments() {
                let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
                if help.trim().is_empty() {
                    missing.push(format!("{path} {}", arg.get_id()));
                }
            }
            for sub in cmd.get_subcommands() {
                check(sub, &path, missing);
            }
        }
        let cmd = Cli::command();
        cmd.clone().debug_assert();
        let mut missing = Vec::new();
        check(&cmd, "", &mut missing);
        assert!(missing.is_empty(), "no help text: {missing:?}");
    }

    #[test]
    fn verbose_counts_and_quiet_conflicts() {
        let cli = Cli::try_parse_from(["trellis", "-vv", "skills", "list", "x"]).unwrap();
        assert_eq!(cli.verbose, 2);
        let cli = Cli::try_parse_from(["trellis", "skills", "list", "-v", "x", "-v", "-v"]).unwrap();
        assert_eq!(cli.verbose, 3, "global: accepted after the subcommand too");
        assert!(Cli::try_parse_from(["trellis", "-q", "inspect"]).unwrap().quiet);
        assert!(Cli::try_parse_from(["trellis", "-q", "-v", "inspect"]).is_err());
    }
}
