//! The `trellis` command line, behind the default `cli` feature. `main.rs` parses [`Cli`] and
//! hands it to [`run_main`]; each command lives in a module of its own.
//!
//! | module | what |
//! |---|---|
//! | [`args`] | the clap types of every command |
//! | [`run`] | `trellis run` and `trellis resume`: the run loop and its approvals |
//! | [`chat`] | `trellis chat`: an interactive session on one thread |
//! | `acp` | `trellis acp`: the agent in editors over the Agent Client Protocol (feature `acp`) |
//! | [`inspect`] | `trellis inspect`: the first request the model would receive |
//! | `serve` | `trellis serve`: the agents behind the LangGraph Agent Server API (feature `server`) |
//! | [`threads`] | `trellis threads …` and `--fork` |
//! | [`skills`] | `trellis skills list / validate / index`, the catalog cache |
//! | [`config`] | the agent file, the [`RunConfig`](config::RunConfig) saved with a thread, trusted folders (`trellis trust`) |
//! | [`assemble`] | the agent a `RunConfig` describes (run, resume, chat and inspect build it here) |
//! | [`mounts`] | the sources mounted into the agent's backend |
//! | [`state_dir`] | the layout of `--state-dir` |
//! | [`approvals`] | deciding waiting tool calls: flags, files, the terminal prompt |
//! | [`sandbox`] | `--sandbox`: where `execute` runs |
//! | [`pin`] | a leading `/skill` in a task |
//! | [`output`] | what a run prints, and its closing summary (counted by [`crate::usage`]) |
//! | [`logging`] | the stderr log and the OTLP export |

#[cfg(feature = "acp")]
pub mod acp;
pub mod approvals;
pub mod args;
pub mod assemble;
pub mod chat;
pub mod config;
pub mod inspect;
pub mod logging;
pub mod mounts;
pub mod output;
pub mod pin;
pub mod run;
pub mod sandbox;
#[cfg(feature = "server")]
pub mod serve;
pub mod skills;
pub mod state_dir;
pub mod threads;

use std::process::ExitCode;

use anyhow::Result;

pub use args::Cli;
use args::{Command, SchemaKind, SkillsCommand, ThreadsCommand};
use state_dir::StateDir;

/// Threads the runtime may start for blocking work, against tokio's default of 512: file operations
/// where the state is not on a local file system (NFS, FUSE) and large reads and writes anywhere
/// (`crates/backend/src/local/offload.rs`). Each thread keeps its own heap with the binary's
/// allocator (mimalloc).
///
/// Measured on the serve bench with every file operation sent to the pool, state on tmpfs, 1,000
/// runs at once (2026-12-06): peak RSS 342 and 526 MB with 512 threads, 261 and 266 MB with 64, and
/// the CPU per step no higher (1.11–1.22 ms with 512, 1.03–1.11 ms with 64).
const MAX_BLOCKING_THREADS: usize = 64;

/// Run the parsed command line on a new runtime, with the logging it asks for; the process's exit
/// status.
pub fn run_main(cli: Cli) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .max_blocking_threads(MAX_BLOCKING_THREADS)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("trellis: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let telemetry = {
        // The exporters start their tasks on this runtime.
        let _inside = runtime.enter();
        logging::init_logging(cli.verbose, cli.quiet, cli.command.otlp())
    };
    let code = match runtime.block_on(dispatch(cli.command)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("trellis: {e:#}");
            ExitCode::FAILURE
        }
    };
    logging::finish_telemetry(telemetry);
    code
}

/// Run one command.
async fn dispatch(command: Command) -> Result<ExitCode> {
    match command {
        Command::Inspect(args) => inspect::command(args).await,
        Command::Run {
            agent,
            approvals,
            json,
            task,
            ..
        } => {
            let (config, state_dir, thread, fork) = agent.split()?;
            let start = run::Start::Task { thread, fork, task };
            run::run(config, &state_dir, start, approvals.read()?, json).await
        }
        Command::Chat { agent, approvals, .. } => {
            let (config, state_dir, thread, fork) = agent.split()?;
            let start = chat::ChatStart { thread, fork };
            chat::chat(config, &state_dir, start, approvals.read()?).await
        }
        Command::Resume {
            id,
            state_dir,
            approvals,
            json,
            ..
        } => run::resume(id, &StateDir::new(state_dir), approvals.read()?, json).await,
        Command::Threads { state_dir, command } => {
            let state_dir = StateDir::new(state_dir);
            match command {
                ThreadsCommand::List => threads::list(&state_dir).await,
                ThreadsCommand::Show { id } => threads::show(&state_dir, &id).await,
                ThreadsCommand::History { id } => threads::history(&state_dir, &id).await,
                ThreadsCommand::Delete { id } => threads::delete(&state_dir, &id).await,
                ThreadsCommand::Gc { id, grace } => threads::gc(&state_dir, id.as_deref(), grace).await,
            }
        }
        Command::Skills { command } => match command {
            SkillsCommand::List { json, cache, sources } => {
                skills::list(&sources, json, &cache.choice()).await
            }
            SkillsCommand::Validate { json, cache, sources } => {
                skills::validate(&sources, json, &cache.choice()).await
            }
            SkillsCommand::Index { url } => skills::index(&url).await,
        },
        #[cfg(feature = "acp")]
        Command::Acp { agent, editor_fs, .. } => acp::command(agent, editor_fs).await,
        Command::Trust { dir } => config::trust::command(dir),
        Command::Schema {
            what: SchemaKind::AgentFile,
        } => config::print_schema(),
        #[cfg(feature = "server")]
        Command::Serve(args) => serve::serve(args).await,
    }
}
