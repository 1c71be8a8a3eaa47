//! One agent serving many concurrent threads against the scripted model (`scripted.rs`), shared by
//! the `load` bench and the load test of this crate (included with `#[path]`, beside the
//! middleware benches' `bench_util` as `bench_util`; not a bench target).
//!
//! The agent is what `trellis run` assembles (the default stack, skills mounted from one local
//! source, per-thread files beside the checkpoints) with a `BackendCheckpointer` on the store it
//! is given. Every thread gets the task `steps=N thread=ID`: it writes its own `/notes.md`, reads
//! skills and lists `/`, reads its notes back, and answers. Afterwards every thread's stored state
//! is loaded and checked: all its messages are there, in order, and none names another thread.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use trellis_agent::backend::{Backend, VirtualPath};
use trellis_agent::cli::mounts::Mounts;
use trellis_agent::deep_agent;
use trellis_agent::middleware::{BackendCheckpointer, RunInput, ThreadId};
use trellis_agent::providers::{OpenAiConfig, OpenAiModel};

use super::scripted::Scripted;

/// What a load run did.
#[derive(Debug)]
pub struct Load {
    /// Wall time from the first run started to the last finished.
    pub elapsed: Duration,
    /// Threads whose run returned an error, with the error.
    pub failed: Vec<(usize, String)>,
    /// Threads whose stored messages were not exactly what the script produced, and why.
    pub wrong: Vec<(usize, String)>,
    /// Model calls made (requests answered by the script).
    pub model_calls: usize,
    /// Requests that named another thread.
    pub crossed: usize,
    /// Step latencies, sorted.
    pub gaps: Vec<Duration>,
    /// This process's peak RSS (`VmHWM`, MB) when the last run finished, before the threads
    /// are loaded back for checking; 0 where `/proc` does not say.
    pub serving_peak_rss_mb: f64,
}

/// The id of thread `i` of a run tagged `tag`.
pub fn thread_id(tag: &str, i: usize) -> String {
    format!("{tag}-t{i}")
}

/// Serve `threads` threads of `steps` tool calls each, all at once, on one agent.
pub async fn serve(
    model_url: &str,
    scripted: &Scripted,
    skills: &Path,
    store: Arc<dyn Backend>,
    tag: &str,
    threads: usize,
    steps: usize,
) -> Load {
    let mut config = OpenAiConfig::compatible("bench", model_url);
    config.stream = false;
    let model = Arc::new(OpenAiModel::new(config).unwrap());
    let ws = Mounts::from_sources(&[skills.display().to_string()], &[], None).unwrap();
    let checkpointer =
        Arc::new(BackendCheckpointer::new(store, VirtualPath::parse("/threads").unwrap()).unwrap());
    let mut builder = deep_agent(model)
        .backend(ws.backend.clone())
        .file_layout(ws.layout())
        .permissions(ws.permissions(false).unwrap())
        .checkpointer(checkpointer);
    for source in &ws.skills {
        builder = builder.skills_source(source.clone());
    }
    let agent = Arc::new(builder.build().unwrap());
    let calls_before = scripted.requests();
    let started = Instant::now();
    let runs: Vec<_> = (0..threads)
        .map(|i| {
            let agent = agent.clone();
            let id = thread_id(tag, i);
            tokio::spawn(async move {
                let input = RunInput::human(format!("Work. steps={steps} thread={id}"))
                    .thread(ThreadId::new(id).unwrap());
                agent.run(input).await.map(|_| ()).map_err(|e| e.to_string())
            })
        })
        .collect();
    let mut failed = Vec::new();
    for (i, run) in runs.into_iter().enumerate() {
        if let Err(e) = run.await.unwrap() {
            failed.push((i, e));
        }
    }
    let elapsed = started.elapsed();
    let serving_peak_rss_mb = super::bench_util::peak_rss_mb();
    let mut wrong = Vec::new();
    for i in 0..threads {
        let id = thread_id(tag, i);
        if let Err(why) = check_thread(&agent, &id, steps).await {
            wrong.push((i, why));
        }
    }
    Load {
        elapsed,
        failed,
        wrong,
        model_calls: scripted.requests() - calls_before,
        crossed: scripted.crossed(),
        gaps: scripted.gaps(),
        serving_peak_rss_mb,
    }
}

/// The stored thread `id` holds its task, `steps` calls each with its result, and its answer, and
/// names no other thread.
async fn check_thread(
    agent: &trellis_agent::middleware::Agent,
    id: &str,
    steps: usize,
) -> Result<(), String> {
    let state = agent
        .state(&ThreadId::new(id).unwrap())
        .await
        .map_err(|e| e.to_string())?
        .ok_or("no stored state")?;
    let messages: Vec<_> = state.messages.iter().collect();
    let calls = messages
        .iter()
        .filter(|m| m.as_ai().is_some_and(|a| a.has_tool_calls()))
        .count();
    let results = messages.iter().filter(|m| m.as_tool().is_some()).count();
    if calls != steps || results != steps {
        return Err(format!(
            "{calls} calls and {results} results stored, expected {steps} of each"
        ));
    }
    let own = format!("thread={id}");
    let first = messages.iter().find(|m| m.as_human().is_some()).map(|m| m.text());
    if !first.is_some_and(|t| t.ends_with(&own)) {
        return Err("the task is not this thread's".into());
    }
    let last = messages.last().map(|m| m.text()).unwrap_or_default();
    if last != format!("done {own} after {steps} steps") {
        return Err(format!("the last message is {last:?}"));
    }
    let notes = messages
        .iter()
        .filter(|m| m.as_tool().is_some())
        .map(|m| m.text())
        .find(|t| t.contains("thread="))
        .unwrap_or_default();
    if !notes.contains(&own) {
        return Err(format!("its notes read back as {notes:?}"));
    }
    for m in &messages {
        let text = m.text();
        let mut rest = text.as_str();
        while let Some(at) = rest.find("thread=") {
            rest = &rest[at + "thread=".len()..];
            if !rest.starts_with(id) || rest[id.len()..].starts_with(|c: char| c.is_ascii_alphanumeric()) {
                return Err(format!("a message names another thread: {text:?}"));
            }
        }
    }
    Ok(())
}
