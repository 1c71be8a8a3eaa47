//! Framework overhead per model call: a scripted model that costs (almost) nothing, 50 tool-calling
//! turns and a final answer per run, so everything measured is the loop, the middleware stack, the
//! tool dispatch and the checkpointing. Prints one JSON object.
//!
//! The `backend_checkpointer` scenarios save every step through `BackendCheckpointer` with a
//! 5,000-skill catalog in the state, on an in-memory `StateBackend`, on local disk (a temporary
//! directory) and on `memory://` (`ObjectStoreBackend`). Every run is a new thread, so each run
//! also stores the catalog once. They report the bytes written per run and the ratio of their
//! per-call overhead to the in-memory checkpointer's in the same run.
//!
//! `cargo bench -p trellis-middleware --bench loop_overhead`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use trellis_middleware::runtime::checkpoint::Checkpoint;
use trellis_middleware::runtime::message::AiMessage;
use trellis_middleware::runtime::model::ModelCapabilities;
use trellis_middleware::runtime::scripted_model::ScriptedModel;
use trellis_middleware::skills::SkillSource;
use trellis_middleware::*;

#[path = "../tests/middleware/common/mod.rs"]
mod common;

const TURNS: usize = 50;
const CALLS_PER_RUN: usize = TURNS + 1;
const WARMUP_RUNS: usize = 20;
const RUNS: usize = 200;

/// `cargo bench` passes `--bench`; under `cargo test --all-targets` this binary runs without it and
/// only does a quick smoke run (few runs, a small skills library).
fn smoke() -> bool {
    !std::env::args().any(|a| a == "--bench")
}

fn runs() -> (usize, usize) {
    if smoke() { (1, 3) } else { (WARMUP_RUNS, RUNS) }
}

/// Answers with a tool call for 50 calls, then with text; and again for the next run.
fn model() -> Arc<ScriptedModel> {
    let counter = AtomicUsize::new(0);
    Arc::new(
        ScriptedModel::from_fn(move |_req| {
            let n = counter.fetch_add(1, Ordering::Relaxed) % CALLS_PER_RUN;
            let message = if n < TURNS {
                AiMessage::tool_calls([ToolCall::new(format!("call_{n}"), "noop", json!({"n": n}))])
            } else {
                AiMessage::text("done")
            };
            Ok(ModelResponse::new(message))
        })
        .with_capabilities(ModelCapabilities {
            prompt_caching: true,
            max_cache_breakpoints: 4,
            ..ModelCapabilities::default()
        })
        .without_recording(),
    )
}

fn noop_tool() -> FnTool {
    FnTool::new(
        "noop",
        "Does nothing.",
        json!({"type": "object"}),
        |_| async move { Ok(ToolOutput::text("ok")) },
    )
}

/// Ten more tools with schemas of a realistic size (the file tools, `task`, …).
fn with_extra_tools(mut builder: AgentBuilder) -> AgentBuilder {
    for i in 0..10 {
        let schema = json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Absolute path of the file to work on."},
                "offset": {"type": "integer", "description": "First line to read, 0-based."},
                "limit": {"type": "integer", "description": "How many lines to read at most."},
                "pattern": {"type": "string", "description": "A glob pattern such as **/*.md."},
            },
            "required": ["path"],
        });
        builder = builder.tool(FnTool::new(
            format!("tool_{i}"),
            "A tool with a description of typical length, telling the model what it does and when to use it.",
            schema,
            |_| async move { Ok(ToolOutput::text("ok")) },
        ));
    }
    builder
}

fn core_stack(builder: AgentBuilder) -> AgentBuilder {
    builder
        .middleware(TodoListMiddleware::new())
        .middleware(PatchToolCallsMiddleware::new())
        .middleware(ModelRetryMiddleware::default())
        .middleware(TokenUsageMiddleware::new())
        .middleware(PromptCachingMiddleware::new())
}

/// An agent with the core stack and a skills library of `n` skills, and the loaded skills state.
async fn skills_agent(n: usize) -> (Agent, trellis_middleware::skills::SkillsState) {
    skills_agent_with(n, None).await
}

/// [`skills_agent`], saving through `checkpointer` when given.
async fn skills_agent_with(
    n: usize,
    checkpointer: Option<Arc<dyn Checkpointer>>,
) -> (Agent, trellis_middleware::skills::SkillsState) {
    use trellis_middleware::backend::{Backend, StateBackend, VirtualPath, WriteMode};
    let backend = Arc::new(StateBackend::new());
    for i in 0..n {
        let text = format!(
            "---\nname: skill-{i:05}\ndescription: Handles requests of kind {i} for the team, with checks.\n---\n# Skill {i}\n"
        );
        let path = VirtualPath::parse(&format!("/skills/skill-{i:05}/SKILL.md")).unwrap();
        backend
            .write(&path, text.into(), WriteMode::Overwrite)
            .await
            .unwrap();
    }
    use trellis_middleware::skills::{DiscoveryOptions, RenderOptions, SkillsState, discover, render};
    let source = SkillSource::new(backend, "/skills").unwrap();
    let found = discover(std::slice::from_ref(&source), &DiscoveryOptions::default()).await;
    let section = render(&found.catalog, &RenderOptions::for_context_window(200_000));
    let loaded = SkillsState {
        catalog: Arc::new(found.catalog),
        generation: 1,
        needs_search: section.needs_search(),
        section: section.text,
        ..SkillsState::default()
    };
    let mut builder = Agent::builder(model())
        .system_prompt("You are a benchmark.")
        .tool(noop_tool())
        .middleware(SkillsMiddleware::new(vec![source]));
    if let Some(checkpointer) = checkpointer {
        builder = builder.checkpointer(checkpointer);
    }
    (core_stack(builder).build().unwrap(), loaded)
}

/// Per-call time and bytes written per run with a 5,000-skill catalog saved through
/// `BackendCheckpointer` on `store`.
fn backend_checkpointer_scenario(
    rt: &tokio::runtime::Runtime,
    store: Arc<dyn trellis_middleware::backend::Backend>,
) -> (Duration, u64) {
    use trellis_middleware::backend::VirtualPath;
    let spy = common::Spy::new(store);
    let checkpointer =
        BackendCheckpointer::new(spy.clone(), VirtualPath::parse("/threads").unwrap()).unwrap();
    let n = if smoke() { 200 } else { 5_000 };
    let (agent, loaded) = rt.block_on(skills_agent_with(n, Some(Arc::new(checkpointer))));
    let one = || {
        rt.block_on(async {
            spy.take();
            let start = Instant::now();
            let out = agent
                .run(RunInput::human("go").slot(&trellis_middleware::skills::SKILLS, loaded.clone()))
                .await
                .unwrap();
            let elapsed = start.elapsed();
            assert_eq!(out.model_calls as usize, CALLS_PER_RUN);
            let written: u64 = spy
                .take()
                .iter()
                .filter(|o| o.op == "write" || o.op == "append")
                .map(|o| o.bytes)
                .sum();
            (elapsed, written)
        })
    };
    let (warmup, runs) = if smoke() { (0, 1) } else { (2, 9) };
    for _ in 0..warmup {
        one();
    }
    let samples: Vec<(Duration, u64)> = (0..runs).map(|_| one()).collect();
    let bytes = samples[0].1;
    (median(samples.into_iter().map(|(d, _)| d).collect()), bytes)
}

/// Bytes written over a thread of about 200 checkpoints (two runs of 51 model calls on one thread,
/// 5,000 skills) on local disk, against what the thread occupies at the end; and resuming it in a
/// new process (median time, objects read: head, steps since the last snapshot, message chunks,
/// the catalog blob; a listing counts as one).
fn thread_bytes(rt: &tokio::runtime::Runtime) -> serde_json::Value {
    use trellis_middleware::backend::{Backend, FilesystemBackend, VirtualPath};
    let disk = tempfile::tempdir().unwrap();
    let spy = common::Spy::new(Arc::new(FilesystemBackend::new(disk.path()).unwrap()));
    let checkpointer =
        Arc::new(BackendCheckpointer::new(spy.clone(), VirtualPath::parse("/threads").unwrap()).unwrap());
    let n = if smoke() { 200 } else { 5_000 };
    let (agent, loaded) = rt.block_on(skills_agent_with(n, Some(checkpointer.clone())));
    let thread = ThreadId::new("bench-200-steps").unwrap();
    rt.block_on(async {
        spy.take();
        for run in 0..2 {
            let mut input = RunInput::human("go").thread(thread.clone());
            if run == 0 {
                input = input.slot(&trellis_middleware::skills::SKILLS, loaded.clone());
            }
            agent.run(input).await.unwrap();
        }
        let written: u64 = spy
            .take()
            .iter()
            .filter(|o| o.op == "write" || o.op == "append")
            .map(|o| o.bytes)
            .sum();
        let checkpoints = checkpointer.history(&thread).await.unwrap().len();
        let dir = VirtualPath::parse("/threads/bench-200-steps").unwrap();
        let stored: u64 = spy
            .list_files(&dir, 1_000_000)
            .await
            .unwrap()
            .files
            .iter()
            .filter(|f| !f.path.as_str().contains("/files/"))
            .map(|f| f.size)
            .sum();
        let state = checkpointer
            .load(&thread)
            .await
            .unwrap()
            .unwrap()
            .checkpoint
            .state;
        let state_json = serde_json::to_vec(&state).unwrap().len() as u64;
        // Resuming the thread in a new process: a fresh store and checkpointer each time.
        let mut samples = Vec::new();
        let mut objects_read = 0;
        for _ in 0..if smoke() { 2 } else { 21 } {
            let fresh = common::Spy::new(Arc::new(FilesystemBackend::new(disk.path()).unwrap()));
            let cold =
                BackendCheckpointer::new(fresh.clone(), VirtualPath::parse("/threads").unwrap()).unwrap();
            let start = Instant::now();
            let loaded = cold.load(&thread).await.unwrap().unwrap();
            samples.push(start.elapsed());
            assert_eq!(loaded.checkpoint.state.messages.len(), state.messages.len());
            objects_read = fresh
                .ops()
                .iter()
                .filter(|o| o.op == "read" || o.op == "ls")
                .count();
        }
        let resume = median(samples);
        json!({
            "store": "local",
            "resume_ms": (resume.as_secs_f64() * 1e5).round() / 100.0,
            "resume_objects_read": objects_read,
            "checkpoints": checkpoints,
            "bytes_written": written,
            "thread_bytes": stored,
            "state_json_bytes": state_json,
            "ratio_written_to_thread": (written as f64 / stored as f64 * 100.0).round() / 100.0,
            "ratio_written_to_state_json": (written as f64 / state_json as f64 * 100.0).round() / 100.0,
            "target_ratio": 2,
        })
    })
}

/// Listing the history of a thread of 1,000 checkpoints on local disk, through a fresh
/// checkpointer each time (as `trellis threads history` does); loading it, for scale.
fn history_listing(rt: &tokio::runtime::Runtime) -> serde_json::Value {
    use trellis_middleware::backend::{FilesystemBackend, VirtualPath};
    let disk = tempfile::tempdir().unwrap();
    let open = || {
        BackendCheckpointer::new(
            Arc::new(FilesystemBackend::new(disk.path()).unwrap()),
            VirtualPath::parse("/threads").unwrap(),
        )
        .unwrap()
    };
    let steps = if smoke() { 50 } else { 1_000 };
    let thread = ThreadId::new("bench-history").unwrap();
    rt.block_on(async {
        let cp = open();
        let mut state = State::with_messages(vec![Message::human("start")]);
        let mut version = None;
        for i in 0..steps {
            if i > 0 {
                state.messages.push(Message::ai(format!(
                    "step {i}: a reply of ordinary length, a sentence or two."
                )));
            }
            let v = cp
                .save(
                    Checkpoint::new(thread.clone(), i as u64, state.clone()),
                    version.as_ref(),
                )
                .await
                .unwrap();
            version = Some(v);
        }
        let time = |load: bool| {
            let (open, thread) = (&open, &thread);
            async move {
                let mut samples = Vec::new();
                for _ in 0..if smoke() { 2 } else { 21 } {
                    let cp = open();
                    let start = Instant::now();
                    if load {
                        assert_eq!(
                            cp.load(thread).await.unwrap().unwrap().checkpoint.seq as usize,
                            steps - 1
                        );
                    } else {
                        assert_eq!(cp.history(thread).await.unwrap().len(), steps);
                    }
                    samples.push(start.elapsed());
                }
                median(samples)
            }
        };
        let history = time(false).await;
        let load = time(true).await;
        json!({
            "store": "local",
            "checkpoints": steps,
            "history_ms": (history.as_secs_f64() * 1e5).round() / 100.0,
            "load_ms": (load.as_secs_f64() * 1e5).round() / 100.0,
            "target_history_ms": 50,
        })
    })
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

/// Median wall time of one run.
fn measure(rt: &tokio::runtime::Runtime, agent: &Agent) -> Duration {
    measure_with(rt, agent, || RunInput::human("go"))
}

/// Median wall time of one run started with `input()`.
fn measure_with(rt: &tokio::runtime::Runtime, agent: &Agent, input: impl Fn() -> RunInput) -> Duration {
    let one = || {
        rt.block_on(async {
            let start = Instant::now();
            let out = agent.run(input()).await.unwrap();
            let elapsed = start.elapsed();
            assert_eq!(out.model_calls as usize, CALLS_PER_RUN);
            elapsed
        })
    };
    let (warmup, runs) = runs();
    for _ in 0..warmup {
        one();
    }
    median((0..runs).map(|_| one()).collect())
}

/// Median time of the model alone for one run's worth of calls (subtracted from the loop's time).
fn model_floor(rt: &tokio::runtime::Runtime) -> Duration {
    let model = model();
    let one = || {
        rt.block_on(async {
            let start = Instant::now();
            for _ in 0..CALLS_PER_RUN {
                model.invoke(ModelRequest::default()).await.unwrap();
            }
            start.elapsed()
        })
    };
    let (warmup, runs) = runs();
    for _ in 0..warmup {
        one();
    }
    median((0..runs).map(|_| one()).collect())
}

/// One result: the median run, per call, and per call above the model's own cost.
fn row(scenario: &str, per_run: Duration, floor: Duration) -> serde_json::Value {
    let per_call = per_run.as_secs_f64() * 1e6 / CALLS_PER_RUN as f64;
    let overhead = per_run.saturating_sub(floor).as_secs_f64() * 1e6 / CALLS_PER_RUN as f64;
    json!({
        "scenario": scenario,
        "median_run_us": (per_run.as_secs_f64() * 1e6 * 10.0).round() / 10.0,
        "per_call_us": (per_call * 100.0).round() / 100.0,
        "overhead_per_call_us": (overhead * 100.0).round() / 100.0,
    })
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let floor = model_floor(&rt);

    let base = || {
        Agent::builder(model())
            .system_prompt("You are a benchmark.")
            .tool(noop_tool())
    };
    let scenarios = [
        (
            "bare_loop_no_checkpointer",
            base().without_checkpointer().build().unwrap(),
        ),
        ("bare_loop_in_memory_checkpointer", base().build().unwrap()),
        (
            "core_stack_no_checkpointer",
            core_stack(base().without_checkpointer()).build().unwrap(),
        ),
        (
            "core_stack_in_memory_checkpointer",
            core_stack(base()).build().unwrap(),
        ),
        (
            "core_stack_in_memory_checkpointer_12_tools",
            core_stack(with_extra_tools(base())).build().unwrap(),
        ),
    ];

    let mut results = Vec::new();
    // A 5,000-skill library: the catalog is loaded once (as in any running thread) and handed to
    // each run, so what is measured is the per-call cost of the skills section and activation scan.
    let (skills_agent, loaded) = rt.block_on(skills_agent(if smoke() { 200 } else { 5_000 }));
    let skills_run = measure_with(&rt, &skills_agent, || {
        RunInput::human("go").slot(&trellis_middleware::skills::SKILLS, loaded.clone())
    });
    results.push(row(
        "core_stack_in_memory_checkpointer_skills_5000",
        skills_run,
        floor,
    ));
    let in_memory = skills_run.saturating_sub(floor).as_secs_f64().max(1e-9);
    let disk = tempfile::tempdir().unwrap();
    let stores: [(&str, Arc<dyn trellis_middleware::backend::Backend>); 3] = [
        (
            "core_stack_backend_checkpointer_skills_5000",
            Arc::new(trellis_middleware::backend::StateBackend::new()),
        ),
        (
            "core_stack_backend_checkpointer_skills_5000_local_disk",
            Arc::new(trellis_middleware::backend::FilesystemBackend::new(disk.path()).unwrap()),
        ),
        (
            "core_stack_backend_checkpointer_skills_5000_memory_url",
            Arc::new(
                trellis_middleware::backend::ObjectStoreBackend::from_url(
                    "memory://",
                    &trellis_middleware::backend::StoreOptions::default(),
                )
                .unwrap(),
            ),
        ),
    ];
    for (name, store) in stores {
        let (per_run, bytes) = backend_checkpointer_scenario(&rt, store);
        let mut result = row(name, per_run, floor);
        result["bytes_written_per_run"] = json!(bytes);
        let ratio = per_run.saturating_sub(floor).as_secs_f64() / in_memory;
        result["ratio_to_in_memory"] = json!((ratio * 100.0).round() / 100.0);
        results.push(result);
    }
    for (name, agent) in &scenarios {
        results.push(row(name, measure(&rt, agent), floor));
    }
    let report = json!({
        "benchmark": "loop_overhead",
        "turns": TURNS,
        "model_calls_per_run": CALLS_PER_RUN,
        "runs": runs().1,
        "model_floor_per_call_us": (floor.as_secs_f64() * 1e6 / CALLS_PER_RUN as f64 * 100.0).round() / 100.0,
        "target_per_call_us": 50,
        "target_backend_checkpointer_per_call_us": 100,
        "target_backend_checkpointer_ratio_to_in_memory": 5,
        "results": results,
        "thread_bytes": thread_bytes(&rt),
        "history_listing": history_listing(&rt),
    });
    println!("{}", serde_json::to_string_pretty(&report).unwrap());
}
