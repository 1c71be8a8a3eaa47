//! `trellis threads list | show ID | history ID | delete ID | gc [ID]`: the threads `trellis run` kept in a
//! state dir, and `trellis run --fork ID@STEP` ([`fork`]).
//!
//! A thread is its checkpoints and its own files, both under `<state-dir>/threads/<id>/`. `show`
//! prints the conversation in brief (one line a message, cut at [`BRIEF_CHARS`] characters) and
//! the thread's files; `history` prints one line per checkpoint (step, UTC time, messages, what the
//! step added); `delete` removes all of it. Text that came from the model or from tools goes
//! through `escape_controls`, so a stored message cannot send terminal escape sequences.

use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use trellis_middleware::backend::{DEFAULT_LIST_LIMIT, VirtualPath};
use trellis_middleware::runtime::checkpoint::CheckpointInfo;
use trellis_middleware::untrusted::escape_controls as safe;
use trellis_middleware::{BackendCheckpointer, Checkpointer, Message, ThreadId};

use crate::cli::config::RunConfig;
use crate::cli::state_dir::StateDir;

/// Characters of a message `show` prints.
pub const BRIEF_CHARS: usize = 120;

/// Print the ids of the stored threads, one a line, sorted.
pub async fn list(state_dir: &StateDir) -> Result<ExitCode> {
    for id in state_dir.checkpointer()?.threads().await? {
        println!("{id}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Print a thread's messages in brief and its files.
pub async fn show(state_dir: &StateDir, id: &str) -> Result<ExitCode> {
    let thread = ThreadId::new(id)?;
    let checkpointer = state_dir.checkpointer()?;
    let Some(stored) = checkpointer.load(&thread).await? else {
        bail!("no thread {thread} in {}", state_dir.display());
    };
    let state = &stored.checkpoint.state;
    println!("thread {thread}: {} messages", state.messages.len());
    for message in state.messages.iter() {
        println!("  {}", brief(message));
    }
    let files = match checkpointer.thread_files(&thread) {
        Some(files) => files.list_files(&VirtualPath::root(), DEFAULT_LIST_LIMIT).await?,
        None => return Ok(ExitCode::SUCCESS),
    };
    println!("files: {}", files.files.len());
    for file in &files.files {
        println!("  {} ({} bytes)", safe(file.path.as_str()), file.size);
    }
    if files.truncated {
        println!("  … (more files not listed)");
    }
    Ok(ExitCode::SUCCESS)
}

/// Delete a thread: its checkpoints and its files.
pub async fn delete(state_dir: &StateDir, id: &str) -> Result<ExitCode> {
    let thread = ThreadId::new(id)?;
    let checkpointer = state_dir.checkpointer()?;
    if checkpointer.load(&thread).await?.is_none() {
        bail!("no thread {thread} in {}", state_dir.display());
    }
    checkpointer.delete(&thread).await?;
    RunConfig::delete_saved(state_dir, &thread)?;
    println!("deleted thread {thread}");
    Ok(ExitCode::SUCCESS)
}

/// Collect the garbage of one thread (or of every thread): step objects no head reaches (threads
/// kept as one file of steps have none) and blobs no committed step names, when last modified at
/// least `grace_s` seconds ago. Prints one line per
/// thread and a total.
pub async fn gc(state_dir: &StateDir, id: Option<&str>, grace_s: u64) -> Result<ExitCode> {
    let checkpointer = state_dir.checkpointer()?;
    let threads = match id {
        Some(id) => {
            let thread = ThreadId::new(id)?;
            if checkpointer.history(&thread).await?.is_empty() {
                bail!("no thread {thread} in {}", state_dir.display());
            }
            vec![thread]
        }
        None => checkpointer.threads().await?,
    };
    let grace = std::time::Duration::from_secs(grace_s);
    let (mut steps, mut blobs) = (0, 0);
    for thread in &threads {
        let report = checkpointer.collect_garbage(thread, grace).await?;
        println!("{thread}: removed {} steps, {} blobs", report.steps, report.blobs);
        steps += report.steps;
        blobs += report.blobs;
    }
    println!("{} threads: removed {steps} steps, {blobs} blobs", threads.len());
    Ok(ExitCode::SUCCESS)
}

/// Print one line per checkpoint of a thread, oldest first: `STEP  TIME  N msgs  SUMMARY`.
pub async fn history(state_dir: &StateDir, id: &str) -> Result<ExitCode> {
    let thread = ThreadId::new(id)?;
    let history = state_dir.checkpointer()?.history(&thread).await?;
    if history.is_empty() {
        bail!("no thread {thread} in {}", state_dir.display());
    }
    for info in &history {
        println!("{}", history_line(info));
    }
    Ok(ExitCode::SUCCESS)
}

/// One `history` line.
fn history_line(info: &CheckpointInfo) -> String {
    let origin = info
        .forked_from
        .as_ref()
        .map(|o| format!(" (fork of {}@{})", o.thread_id, o.seq))
        .unwrap_or_default();
    format!(
        "{:>4}  {}  {:>4} msgs  {}{origin}",
        info.seq,
        utc(info.saved_at_ms),
        info.messages,
        safe(&info.summary)
    )
}

/// `trellis run --fork ID@STEP`: a new thread starting from checkpoint STEP of thread ID, with a
/// copy of ID's files as they are now. Returns the new thread's id.
pub async fn fork(checkpointer: &BackendCheckpointer, spec: &str) -> Result<ThreadId> {
    let (from, step) = parse_fork(spec)?;
    let to = ThreadId::generate();
    checkpointer
        .fork(&from, step, &to)
        .await
        .with_context(|| format!("cannot fork {from}@{step}"))?;
    eprintln!("forked {from}@{step} as thread {to}");
    Ok(to)
}

/// `ID@STEP` → (thread, step).
fn parse_fork(spec: &str) -> Result<(ThreadId, u64)> {
    let Some((id, step)) = spec.rsplit_once('@') else {
        bail!("--fork takes ID@STEP (a step from `trellis threads history ID`), not {spec:?}");
    };
    let step = step
        .parse()
        .with_context(|| format!("--fork {spec:?}: {step:?} is not a step number"))?;
    Ok((ThreadId::new(id)?, step))
}

/// Milliseconds since the epoch as `YYYY-MM-DD HH:MM:SS` (UTC); the milliseconds themselves for a
/// time chrono cannot represent.
fn utc(ms: u64) -> String {
    i64::try_from(ms)
        .ok()
        .and_then(chrono::DateTime::from_timestamp_millis)
        .map_or_else(
            || format!("{ms} ms"),
            |t| t.format("%Y-%m-%d %H:%M:%S").to_string(),
        )
}

/// `role: text`, on one line, cut at [`BRIEF_CHARS`].
pub fn brief(message: &Message) -> String {
    let role = match message {
        Message::Human(_) => "user",
        Message::Ai(ai) if ai.has_tool_calls() => {
            let names: Vec<&str> = ai.calls().map(|c| c.name.as_str()).collect();
            return format!("assistant: calls {}", safe(&names.join(", ")));
        }
        Message::Ai(_) => "assistant",
        Message::Tool(t) if t.is_error => "tool (error)",
        Message::Tool(_) => "tool",
        _ => "system",
    };
    let text: String = message.text().split_whitespace().collect::<Vec<_>>().join(" ");
    let mut shown: String = text.chars().take(BRIEF_CHARS).collect();
    if shown.len() < text.len() {
        shown.push('…');
    }
    format!("{role}: {}", safe(&shown))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn times_are_utc_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(1_764_547_200_000), "2025-12-01 00:00:00");
        assert_eq!(utc(951_782_400_000 + 3_723_000), "2000-02-29 01:02:03");
    }

    #[test]
    fn fork_specs_are_checked() {
        let (id, step) = parse_fork("t-abc@12").unwrap();
        assert_eq!((id.as_str(), step), ("t-abc", 12));
        for bad in ["t-abc", "t-abc@", "t-abc@x", "../x@1"] {
            assert!(parse_fork(bad).is_err(), "{bad}");
        }
    }
}
