//! `trellis run` and `trellis resume`: build the agent a [`RunConfig`] describes
//! ([`crate::cli::assemble`]), run a thread, and carry it through approvals (see
//! [`crate::cli::approvals`]). `run` saves the configuration beside the thread (see
//! [`crate::cli::config::run_config`]) so `resume` rebuilds the same agent in another process.

use std::io::IsTerminal;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use trellis_middleware::runtime::interrupt::Decisions;
use trellis_middleware::{Agent, RunInput, ThreadId};

use crate::cli::approvals::{self, ApproveRule, EXIT_WAITING, LinePrompter, Outcome, Prompter};
use crate::cli::assemble::{self, mcp_servers};
use crate::cli::config::RunConfig;
use crate::cli::output::{self, OutputMode};
use crate::cli::state_dir::StateDir;
use crate::mcp::McpServers;
use crate::usage::Prices;

/// How decisions are made in this process (and the prices the summary uses).
#[derive(Debug, Clone, Default)]
pub struct Approvals {
    /// Prices for the summary's cost.
    pub prices: Prices,
    /// `--approve`.
    pub rule: ApproveRule,
    /// `--decisions FILE`.
    pub given: Option<Decisions>,
}

/// Where a run starts.
#[derive(Debug)]
pub enum Start {
    /// A new thread, or `--thread ID`, with this task.
    Task {
        /// `--thread`.
        thread: Option<String>,
        /// `--fork ID@STEP`.
        fork: Option<String>,
        /// The task.
        task: String,
    },
    /// `trellis resume ID`: the thread waits for decisions, or its last step was cut short.
    Resume(ThreadId),
}

/// `trellis resume ID`: continue the thread with the configuration its run saved.
pub async fn resume(id: String, state_dir: &StateDir, approvals: Approvals, json: bool) -> Result<ExitCode> {
    let thread = ThreadId::new(id)?;
    let config = RunConfig::load(state_dir, &thread)?;
    run(config, state_dir, Start::Resume(thread), approvals, json).await
}

/// `trellis run` / `trellis resume`: start the MCP servers, run, and stop them again.
pub async fn run(
    config: RunConfig,
    state_dir: &StateDir,
    start: Start,
    approvals: Approvals,
    json: bool,
) -> Result<ExitCode> {
    let servers = mcp_servers(&config)?;
    let result = run_agent(&config, state_dir, start, servers.clone(), &approvals, json).await;
    // Stop the MCP servers (and wait for their processes) whether the run succeeded or not.
    if let Some(servers) = servers {
        servers.shutdown().await;
    }
    result
}

async fn run_agent(
    config: &RunConfig,
    state_dir: &StateDir,
    start: Start,
    servers: Option<Arc<McpServers>>,
    approvals: &Approvals,
    json: bool,
) -> Result<ExitCode> {
    let built = assemble::build(config, state_dir, servers).await?;
    let agent = &built.agent;
    let (thread_id, task) = match start {
        Start::Task { thread, fork, task } => (
            assemble::start_thread(&built.checkpointer, thread, fork).await?,
            Some(task),
        ),
        Start::Resume(id) => (id, None),
    };
    let first = match task {
        Some(task) => {
            let first = assemble::task_input(task, &built.ws).await?;
            config.save(state_dir, &thread_id)?;
            eprintln!("thread {thread_id} (resume with --thread {thread_id})");
            first
        }
        None => {
            let Some(interrupt) = agent.pending_interrupt(&thread_id).await? else {
                if agent.has_cut_step(&thread_id).await? {
                    // Killed mid-step: finish that step (see the middleware's step_recovery).
                    eprintln!("thread {thread_id}: finishing the step its last run left unfinished");
                    let prepare = |input: RunInput| built.prepare(input, &thread_id);
                    return drive(agent, RunInput::new(), prepare, approvals, json, state_dir).await;
                }
                bail!(
                    "thread {thread_id} waits for no decisions and has no unfinished step; continue it with \
                     `trellis run --thread {thread_id}`"
                );
            };
            match decide(&interrupt, approvals)? {
                Outcome::Decided(decisions) => RunInput::resume(decisions),
                Outcome::Waiting(waiting) => {
                    eprint!(
                        "{}",
                        approvals::waiting_message(&interrupt, &waiting, state_dir.root())
                    );
                    return Ok(ExitCode::from(EXIT_WAITING));
                }
            }
        }
    };
    let prepare = |input: RunInput| built.prepare(input, &thread_id);
    drive(agent, first, prepare, approvals, json, state_dir).await
}

/// Run, and while the run stops for decisions, decide and resume.
async fn drive(
    agent: &Agent,
    first: RunInput,
    prepare: impl Fn(RunInput) -> RunInput,
    approvals: &Approvals,
    json: bool,
    state_dir: &StateDir,
) -> Result<ExitCode> {
    let mode = if json {
        OutputMode::Json
    } else if std::io::stdout().is_terminal() {
        OutputMode::Terminal
    } else {
        OutputMode::Plain
    };
    let started = std::time::Instant::now();
    let (events, printed) = output::sink(mode, approvals.prices.clone());
    let mut input = prepare(first).events(events.clone());
    loop {
        let out = agent.run(input).await?;
        let Some(interrupt) = &out.interrupt else {
            output::finish(&out, mode, &printed);
            output::summary(&printed, mode, started.elapsed());
            return Ok(ExitCode::SUCCESS);
        };
        match decide(interrupt, approvals)? {
            Outcome::Decided(decisions) => {
                input = prepare(RunInput::resume(decisions)).events(events.clone());
            }
            Outcome::Waiting(waiting) => {
                output::summary(&printed, mode, started.elapsed());
                eprint!(
                    "{}",
                    approvals::waiting_message(interrupt, &waiting, state_dir.root())
                );
                return Ok(ExitCode::from(EXIT_WAITING));
            }
        }
    }
}

/// Decide with the flags, and on a terminal (stdin and stderr) by asking.
fn decide(
    interrupt: &trellis_middleware::runtime::interrupt::Interrupt,
    approvals: &Approvals,
) -> Result<Outcome> {
    let given = approvals.given.as_ref();
    if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
        return approvals::decide(interrupt, &approvals.rule, given, None);
    }
    let mut prompter = LinePrompter::new(std::io::stdin().lock(), std::io::stderr());
    approvals::decide(
        interrupt,
        &approvals.rule,
        given,
        Some(&mut prompter as &mut dyn Prompter),
    )
}

/// Read `--decisions`: a JSON object of request id → decision, from a file or `-` (stdin).
pub fn read_decisions(path: &Path) -> Result<Decisions> {
    let text = if path == Path::new("-") {
        std::io::read_to_string(std::io::stdin())?
    } else {
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?
    };
    serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not a decisions file: a JSON object like {{\"CALL_ID\": {{\"decision\": \"approve\"}}}}",
            path.display()
        )
    })
}
