//! `trellis acp`: serve the agent the flags and the agent file describe to an editor over the
//! Agent Client Protocol on stdin/stdout ([`crate::acp`]). Each session's `cwd` replaces
//! `--workdir`; sessions start new threads, so `--thread` and `--fork` are refused. `--editor-fs`
//! reads and writes that directory's text files through the editor when it offers that.

use std::process::ExitCode;

use anyhow::{Result, bail};

use crate::cli::args::AgentArgs;

/// Run `trellis acp` until the editor closes stdin.
pub async fn command(agent: AgentArgs, editor_fs: bool) -> Result<ExitCode> {
    let (config, state_dir, thread, fork) = agent.split()?;
    if thread.is_some() || fork.is_some() {
        bail!("trellis acp starts a thread per editor session: --thread and --fork do not apply");
    }
    if config.workdir.is_some() {
        tracing::warn!("--workdir is replaced by each session's working directory");
    }
    let input = tokio::io::BufReader::new(tokio::io::stdin());
    let options = crate::acp::Options { editor_fs };
    crate::acp::serve(config, state_dir, options, input, tokio::io::stdout()).await?;
    Ok(ExitCode::SUCCESS)
}
