//! The `trellis` command line: `inspect`, `run`, `threads`, `skills list`, `skills validate`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{ArgAction, Parser, Subcommand};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::LevelFilter;
use trellis_agent::mcp::{McpServerConfig, McpServers};
use trellis_agent::run_output::{self, OutputMode};
use trellis_agent::sandbox_cli::{self, SandboxChoice};
use trellis_agent::{builder::deep_agent, inspect, providers, skills_cli, threads_cli, workspace};
use trellis_middleware::backend::sandbox::Network;
use trellis_middleware::tools::{CommandPolicy, UserFiles, UserIdentity};
use trellis_middleware::{RunInput, ThreadId};

/// Shown after the options of every command.
const LOGGING_HELP: &str = "\
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
struct Cli {
    /// Log more: -v info, -vv debug, -vvv trace (RUST_LOG, when set, takes precedence).
    #[arg(short, long, action = ArgAction::Count, global = true)]
    verbose: u8,
    /// Log errors only (RUST_LOG, when set, takes precedence).
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the exact first request the model would receive (no API key needed).
    #[command(after_help = LOGGING_HELP)]
    Inspect {
        /// A skills directory or object-store URL (repeatable; later sources override earlier ones).
        #[arg(long = "skills", value_name = "SRC")]
        skills: Vec<String>,
        /// A memory file (AGENTS.md), local or an object-store URL (repeatable).
        #[arg(long = "memory", value_name = "SRC")]
        memory: Vec<String>,
        /// The model whose capabilities shape the request.
        #[arg(long, default_value = "anthropic:claude-sonnet-4-5")]
        model: String,
        /// Print JSON (the request, token estimates, warnings and the provider's request body).
        #[arg(long)]
        json: bool,
        /// Where `execute` would run: bwrap (default where it works), none, or unsandboxed.
        #[arg(long, value_enum, value_name = "KIND")]
        sandbox: Option<SandboxChoice>,
        /// Show this user's first request: with their memory (agents/AGENTS.md, agents/USER.md,
        /// agents/MEMORY.md) and personal skills (agents/skills/) from their workspace, which is
        /// --workdir if given, else STATE_DIR/users/ID.
        #[arg(long, value_name = "ID")]
        user: Option<String>,
        /// The user's workspace (with --user).
        #[arg(long, requires = "user")]
        workdir: Option<PathBuf>,
        /// Where `trellis run` keeps threads and users' workspaces (with --user).
        #[arg(long, default_value = ".trellis")]
        state_dir: PathBuf,
        /// The task to put in the first user message.
        #[arg(default_value = "(your task)")]
        task: String,
    },
    /// Run the agent on a task, printing progress; resume a thread with --thread.
    #[command(after_help = LOGGING_HELP)]
    Run {
        /// The model, e.g. anthropic:claude-sonnet-4-5 or openai:gpt-4.1.
        #[arg(long)]
        model: String,
        /// A skills directory or object-store URL, mounted under /skills (repeatable; later sources
        /// override earlier ones).
        #[arg(long = "skills", value_name = "SRC")]
        skills: Vec<String>,
        /// A memory file (AGENTS.md), local or an object-store URL, loaded into the system prompt
        /// (repeatable).
        #[arg(long = "memory", value_name = "SRC")]
        memory: Vec<String>,
        /// Continue this thread (its checkpoints and its own files live in --state-dir).
        #[arg(long)]
        thread: Option<String>,
        /// Run as this user (1-128 ASCII letters, digits, '-', '_' or '.'; not starting with '.'):
        /// their memory (agents/AGENTS.md, agents/USER.md, agents/MEMORY.md) and personal skills
        /// (agents/skills/SLUG/SKILL.md, over the --skills sources, for them only) come from
        /// their workspace, which is --workdir if given, else STATE_DIR/users/ID.
        #[arg(long, value_name = "ID")]
        user: Option<String>,
        /// Start a new thread from checkpoint STEP of thread ID (`trellis threads history ID`
        /// lists them), with a copy of ID's files.
        #[arg(long, value_name = "ID@STEP", conflicts_with = "thread")]
        fork: Option<String>,
        /// Your workspace: a directory the agent sees at /workspace in every thread you run
        /// (without it and without --user, the agent has only the thread's own files, kept with
        /// the thread).
        #[arg(long)]
        workdir: Option<PathBuf>,
        /// Where thread checkpoints and each thread's own files are kept.
        #[arg(long, default_value = ".trellis")]
        state_dir: PathBuf,
        /// An MCP server skills can bind with `include_tools: mcp:NAME` (repeatable):
        /// NAME=COMMAND (stdio; split like a shell) or NAME=http(s)://… (streamable HTTP).
        #[arg(long = "mcp", value_name = "NAME=COMMAND|URL")]
        mcp: Vec<String>,
        /// Seconds an MCP tool call may take.
        #[arg(long, value_name = "SECS", default_value_t = 60)]
        mcp_timeout: u64,
        /// Let the agent change the mounted skill sources (read-only by default).
        #[arg(long)]
        writable_skills: bool,
        /// Where `execute` runs skill scripts and commands: bwrap (isolated; the default where it
        /// works, else no execute tool), none (no execute tool), or unsandboxed (on this host,
        /// isolating nothing: trusted development only).
        #[arg(long, value_enum, value_name = "KIND")]
        sandbox: Option<SandboxChoice>,
        /// Let commands use the network (none by default).
        #[arg(long)]
        sandbox_network: bool,
        /// Only let `execute` run simple commands starting with PREFIX, e.g. "python3 /skills/"
        /// (repeatable; without it any command may run).
        #[arg(long = "allow-command", value_name = "PREFIX")]
        allow_command: Vec<String>,
        /// Write every run event to stdout as one JSON object per line (text deltas included)
        /// instead of the answer.
        #[arg(long)]
        json: bool,
        /// The task.
        task: String,
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
}

#[derive(Subcommand, Debug)]
enum ThreadsCommand {
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
enum SkillsCommand {
    /// List the skills of one or more sources.
    #[command(after_help = LOGGING_HELP)]
    List {
        /// Print JSON (each skill's fields and the load warnings) instead of one entry per skill.
        #[arg(long)]
        json: bool,
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
        /// Skills directories or object-store URLs to check.
        #[arg(required = true, value_name = "SOURCE")]
        sources: Vec<String>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose, cli.quiet);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("trellis: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(dispatch(cli.command)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("trellis: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Log to stderr at the level `-v`/`-q` ask for, unless `RUST_LOG` says otherwise.
fn init_logging(verbose: u8, quiet: bool) {
    let default = default_level(verbose, quiet);
    let rust_log = std::env::var("RUST_LOG").unwrap_or_default();
    let builder = EnvFilter::builder().with_default_directive(default.into());
    let filter = builder.parse(rust_log.trim()).unwrap_or_else(|e| {
        eprintln!("trellis: ignoring RUST_LOG ({e}); logging at {default}");
        builder.parse_lossy("")
    });
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter)
        .with_ansi(use_color(
            std::io::stderr().is_terminal(),
            std::env::var_os("NO_COLOR").as_deref(),
        ))
        .with_target(false)
        .init();
}

/// The level when `RUST_LOG` is unset or empty: WARN, raised by each `-v`, or ERROR with `-q`.
fn default_level(verbose: u8, quiet: bool) -> LevelFilter {
    match (quiet, verbose) {
        (true, _) => LevelFilter::ERROR,
        (false, 0) => LevelFilter::WARN,
        (false, 1) => LevelFilter::INFO,
        (false, 2) => LevelFilter::DEBUG,
        (false, _) => LevelFilter::TRACE,
    }
}

/// Colours only on a terminal, and never when `NO_COLOR` is set to something (<https://no-color.org>).
fn use_color(stderr_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

async fn dispatch(command: Command) -> Result<ExitCode> {
    match command {
        Command::Inspect {
            skills,
            memory,
            model,
            json,
            sandbox,
            user,
            workdir,
            state_dir,
            task,
        } => {
            let mut ws = workspace::assemble(&skills, &memory, workdir.as_deref())?;
            if let Some(user) = &user {
                ws = ws.for_user(user, &state_dir)?;
            }
            let sandbox = sandbox_cli::select(sandbox)?;
            let report = inspect::inspect(&model, &ws, &sandbox, &task).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", inspect::render_text(&report));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Run {
            model,
            skills,
            memory,
            thread,
            user,
            fork,
            workdir,
            state_dir,
            mcp,
            mcp_timeout,
            writable_skills,
            sandbox,
            sandbox_network,
            allow_command,
            json,
            task,
        } => {
            let options = RunOptions {
                thread,
                user,
                fork,
                workdir,
                state_dir,
                mcp,
                mcp_timeout: Duration::from_secs(mcp_timeout.max(1)),
                writable_skills,
                sandbox,
                sandbox_network,
                allow_command,
                json,
            };
            run(&model, &skills, &memory, options, &task).await
        }
        Command::Threads { state_dir, command } => match command {
            ThreadsCommand::List => threads_cli::list(&state_dir).await,
            ThreadsCommand::Show { id } => threads_cli::show(&state_dir, &id).await,
            ThreadsCommand::History { id } => threads_cli::history(&state_dir, &id).await,
            ThreadsCommand::Delete { id } => threads_cli::delete(&state_dir, &id).await,
            ThreadsCommand::Gc { id, grace } => threads_cli::gc(&state_dir, id.as_deref(), grace).await,
        },
        Command::Skills {
            command: SkillsCommand::List { json, sources },
        } => skills_cli::list(&sources, json).await,
        Command::Skills {
            command: SkillsCommand::Validate { json, sources },
        } => skills_cli::validate(&sources, json).await,
    }
}

/// `trellis run` settings besides the model, sources and task.
#[derive(Debug)]
struct RunOptions {
    thread: Option<String>,
    user: Option<String>,
    fork: Option<String>,
    workdir: Option<PathBuf>,
    state_dir: PathBuf,
    mcp: Vec<String>,
    mcp_timeout: Duration,
    writable_skills: bool,
    sandbox: Option<SandboxChoice>,
    sandbox_network: bool,
    allow_command: Vec<String>,
    json: bool,
}

async fn run(
    model: &str,
    skills: &[String],
    memory: &[String],
    options: RunOptions,
    task: &str,
) -> Result<ExitCode> {
    let mcp = options
        .mcp
        .iter()
        .map(|spec| McpServerConfig::parse_spec(spec).map(|c| c.with_call_timeout(options.mcp_timeout)))
        .collect::<Result<Vec<_>, _>>()?;
    let servers = (!mcp.is_empty())
        .then(|| McpServers::new(mcp).map(Arc::new))
        .transpose()?;
    let result = run_agent(model, skills, memory, options, servers.clone(), task).await;
    // Stop the MCP servers (and wait for their processes) whether the run succeeded or not.
    if let Some(servers) = servers {
        servers.shutdown().await;
    }
    result
}

async fn run_agent(
    model: &str,
    skills: &[String],
    memory: &[String],
    options: RunOptions,
    servers: Option<Arc<McpServers>>,
    task: &str,
) -> Result<ExitCode> {
    let RunOptions {
        thread,
        user,
        fork,
        workdir,
        state_dir,
        writable_skills,
        sandbox,
        sandbox_network,
        allow_command,
        json,
        ..
    } = options;
    let model = providers::from_model_string(model)?;
    let sandbox = sandbox_cli::select(sandbox)?;
    if let Some(note) = &sandbox.status.note {
        tracing::warn!("{note}");
    }
    let mut ws = workspace::assemble(skills, memory, workdir.as_deref())?;
    if let Some(user) = &user {
        ws = ws.for_user(user, &state_dir)?;
    }
    std::fs::create_dir_all(&state_dir).with_context(|| format!("cannot create {}", state_dir.display()))?;
    let checkpointer = Arc::new(threads_cli::checkpointer(&state_dir)?);
    let forked = match &fork {
        Some(spec) => Some(threads_cli::fork(&checkpointer, spec).await?),
        None => None,
    };
    // The thread's own files live in the state dir beside its checkpoints; skills and memory are
    // shared mounts; --workdir is the user's workspace at /workspace.
    let mut builder = deep_agent(model)
        .backend(ws.backend.clone())
        .file_layout(ws.layout())
        .permissions(ws.permissions(writable_skills)?)
        .checkpointer(checkpointer);
    for source in &ws.skills {
        builder = builder.skills_source(source.clone());
    }
    for path in &ws.memory {
        builder = builder.memory_source(path.clone());
    }
    if let Some(servers) = servers {
        builder = builder.mcp_servers(servers);
    }
    if let Some(sandbox) = sandbox.sandbox {
        builder = builder.sandbox(sandbox);
    }
    if sandbox_network {
        builder = builder.sandbox_network(Network::Host);
    }
    if !allow_command.is_empty() {
        builder = builder.commands(CommandPolicy::allow_only(allow_command));
    }
    if ws.user.is_some() {
        builder = builder
            .user_memory(workspace::USER_MEMORY)
            .personal_skills(workspace::PERSONAL_SKILLS_DIR);
    }
    let agent = builder.build()?;
    let thread_id = match (forked, thread) {
        (Some(id), _) => id,
        (None, Some(id)) => ThreadId::new(id)?,
        (None, None) => ThreadId::generate(),
    };
    eprintln!("thread {thread_id} (resume with --thread {thread_id})");
    let mode = if json {
        OutputMode::Json
    } else if std::io::stdout().is_terminal() {
        OutputMode::Terminal
    } else {
        OutputMode::Plain
    };
    let (events, printed) = run_output::sink(mode);
    let mut input = RunInput::human(task).thread(thread_id).events(events);
    if let Some(files) = &ws.user_files {
        input = input
            .extension(UserIdentity::new(ws.user.clone().unwrap_or_else(local_user)))
            .extension(UserFiles(files.clone()));
    }
    let out = agent.run(input).await?;
    run_output::finish(&out, mode, &printed);
    Ok(ExitCode::SUCCESS)
}

/// The local user a `--workdir` belongs to: `$USER`, else `local`.
fn local_user() -> String {
    std::env::var("USER")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "local".to_owned())
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
    fn levels_follow_the_flags() {
        assert_eq!(default_level(0, false), LevelFilter::WARN);
        assert_eq!(default_level(1, false), LevelFilter::INFO);
        assert_eq!(default_level(2, false), LevelFilter::DEBUG);
        assert_eq!(default_level(3, false), LevelFilter::TRACE);
        assert_eq!(default_level(9, false), LevelFilter::TRACE);
        assert_eq!(default_level(0, true), LevelFilter::ERROR);
    }

    #[test]
    fn colour_needs_a_terminal_and_no_no_color() {
        use std::ffi::OsStr;
        assert!(use_color(true, None));
        assert!(
            use_color(true, Some(OsStr::new(""))),
            "an empty NO_COLOR does not count"
        );
        assert!(!use_color(true, Some(OsStr::new("1"))));
        assert!(!use_color(false, None));
        assert!(!use_color(false, Some(OsStr::new(""))));
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
