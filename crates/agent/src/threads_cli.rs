//! `trellis threads list | show ID | delete ID`: the threads `trellis run` kept in a state dir.
//!
//! A thread is its checkpoints and its own files, both under `<state-dir>/threads/<id>/`. `show`
//! prints the conversation in brief (one line a message, cut at [`BRIEF_CHARS`] characters) and
//! the thread's files; `delete` removes both. Text that came from the model or from tools goes
//! through `escape_controls`, so a stored message cannot send terminal escape sequences.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use trellis_middleware::backend::{Backend, DEFAULT_LIST_LIMIT, FilesystemBackend, VirtualPath};
use trellis_middleware::skills::escape_controls as safe;
use trellis_middleware::{BackendCheckpointer, Checkpointer, Message, ThreadId};

/// Characters of a message `show` prints.
pub const BRIEF_CHARS: usize = 120;

/// The checkpointer `trellis run` uses for `state_dir`.
pub fn checkpointer(state_dir: &Path) -> Result<BackendCheckpointer> {
    std::fs::create_dir_all(state_dir).with_context(|| format!("cannot create {}", state_dir.display()))?;
    let store: Arc<dyn Backend> = Arc::new(FilesystemBackend::new(state_dir)?);
    Ok(BackendCheckpointer::new(store, VirtualPath::parse("/threads")?)?)
}

/// Print the ids of the stored threads, one a line, sorted.
pub async fn list(state_dir: &Path) -> Result<ExitCode> {
    for id in checkpointer(state_dir)?.threads().await? {
        println!("{id}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Print a thread's messages in brief and its files.
pub async fn show(state_dir: &Path, id: &str) -> Result<ExitCode> {
    let thread = ThreadId::new(id)?;
    let checkpointer = checkpointer(state_dir)?;
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
pub async fn delete(state_dir: &Path, id: &str) -> Result<ExitCode> {
    let thread = ThreadId::new(id)?;
    let checkpointer = checkpointer(state_dir)?;
    if checkpointer.load(&thread).await?.is_none() {
        bail!("no thread {thread} in {}", state_dir.display());
    }
    checkpointer.delete(&thread).await?;
    println!("deleted thread {thread}");
    Ok(ExitCode::SUCCESS)
}

/// `role: text`, on one line, cut at [`BRIEF_CHARS`].
fn brief(message: &Message) -> String {
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
