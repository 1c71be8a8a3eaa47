//! What resuming a thread costs when its file space holds 100 files of 10 KiB, on local disk and on
//! the S3 emulator.
//!
//! Setup, per store: the agent loop (scripted model, core middleware stack, `BackendCheckpointer`)
//! runs two user turns of eight tool calls each on one thread, so its checkpoint is what a real run
//! writes (36 messages, tool results of about 1.5 KB); then 100 files of 10,240 bytes are written
//! into the thread's file space (`Checkpointer::thread_files`, `{root}/{thread}/files/`).
//!
//! Measured, every iteration with a fresh store backend and a fresh `BackendCheckpointer` (as a new
//! worker process would have), the three cases interleaved:
//! * `resume`: load the checkpoint and obtain the thread's files: what a run does before its first
//!   model call;
//! * `resume_read_one`: the same plus one `read_file`-equivalent read (a prefix read of up to
//!   `Limits::max_file_bytes`) of one file;
//! * `resume_read_all`: the same plus `list_files` of the space and one `read_many` of all 100 files
//!   (what a tool that greps the whole space costs).
//!
//! The store is wrapped in a counting `Backend` that sums the bytes `read` / `read_many` return and
//! counts requests (every call; a batch counts once per path). `resume` reads the thread's
//! checkpoints only, so resume costs O(checkpoint), not O(files): on local disk the thread is one
//! file of steps, read by a `stat` and one read of its end; on S3 its head and the steps since its
//! last snapshot, one read each (checked: at most 34 objects, no listing, at most two other
//! requests, looking for the layout the thread does not have, at most the stored size of the
//! checkpoints, so no file is read).
//!
//! Local disk: `FilesystemBackend` on a temporary directory (page cache warm). S3 (when
//! `TRELLIS_S3_ENDPOINT` is set, as `cargo xtask bench` does): `ObjectStoreBackend` under a fresh
//! prefix of `TRELLIS_TEST_BUCKET` (default `trellis-test`); with `TRELLIS_EMULATORS=required` a
//! missing endpoint fails the bench, otherwise the S3 rows are reported as skipped.
//!
//! Prints one JSON object per line: one per store and case (median and p90 over the iterations,
//! bytes and requests of one iteration, and `ratio_to_resume`, this case's median / `resume`'s).
//! Nothing is asserted about time.
//!
//! `cargo bench -p trellis-middleware --bench thread_resume`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use serde_json::json;
use trellis_middleware::backend::{
    Backend, ByteRange, Capabilities, Entry, FileListing, FilesystemBackend, GlobOutput, GrepOutput,
    GrepQuery, ObjectStoreBackend, ReadOutput, Result as BackendResult, StoreOptions, VirtualPath, WriteMode,
    WriteOutcome,
};
use trellis_middleware::runtime::message::{AiMessage, ContentBlock};
use trellis_middleware::runtime::model::Usage;
use trellis_middleware::runtime::scripted_model::ScriptedModel;
use trellis_middleware::tools::Limits;
use trellis_middleware::{
    Agent, BackendCheckpointer, Checkpointer, FnTool, ModelResponse, ModelRetryMiddleware,
    PatchToolCallsMiddleware, PromptCachingMiddleware, RunInput, ThreadId, TodoListMiddleware,
    TokenUsageMiddleware, ToolCall, ToolOutput,
};

const FILES: usize = 100;
const FILE_BYTES: usize = 10 * 1024;
/// User turns in the thread, and tool-calling model turns in each.
const USER_TURNS: usize = 2;
const TOOL_TURNS: usize = 8;
const ROOT: &str = "/threads";
const THREAD: &str = "bench-thread";
const CASES: [&str; 3] = ["resume", "resume_read_one", "resume_read_all"];

/// `cargo bench` passes `--bench`; under `cargo test --all-targets` this binary runs without it and
/// only does a quick smoke run (few iterations).
fn smoke() -> bool {
    !std::env::args().any(|a| a == "--bench")
}

/// Delegates everything to `inner` (its own `list_files` / `glob` / `grep` fast paths included) and
/// counts: bytes returned by `read` / `read_many`, files read, and requests (every call; a batch
/// counts once per path).
#[derive(Debug)]
struct Counting {
    inner: Arc<dyn Backend>,
    bytes_read: AtomicU64,
    files_read: AtomicU64,
    requests: AtomicU64,
}

impl Counting {
    fn new(inner: Arc<dyn Backend>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            bytes_read: AtomicU64::new(0),
            files_read: AtomicU64::new(0),
            requests: AtomicU64::new(0),
        })
    }

    fn request(&self, n: usize) {
        self.requests.fetch_add(n as u64, Ordering::Relaxed);
    }

    fn count_read(&self, out: &ReadOutput) {
        self.bytes_read
            .fetch_add(out.bytes.len() as u64, Ordering::Relaxed);
        self.files_read.fetch_add(1, Ordering::Relaxed);
    }

    /// (bytes read, files read, requests).
    fn totals(&self) -> (u64, u64, u64) {
        (
            self.bytes_read.load(Ordering::Relaxed),
            self.files_read.load(Ordering::Relaxed),
            self.requests.load(Ordering::Relaxed),
        )
    }
}

#[async_trait]
impl Backend for Counting {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    async fn ls(&self, dir: &VirtualPath) -> BackendResult<Vec<Entry>> {
        self.request(1);
        self.inner.ls(dir).await
    }
    async fn stat(&self, path: &VirtualPath) -> BackendResult<Entry> {
        self.request(1);
        self.inner.stat(path).await
    }
    async fn stat_many(&self, paths: &[VirtualPath]) -> Vec<BackendResult<Entry>> {
        self.request(paths.len());
        self.inner.stat_many(paths).await
    }
    async fn read(&self, path: &VirtualPath, range: Option<ByteRange>) -> BackendResult<ReadOutput> {
        self.request(1);
        let out = self.inner.read(path, range).await;
        if let Ok(o) = &out {
            self.count_read(o);
        }
        out
    }
    async fn read_many(
        &self,
        paths: &[VirtualPath],
        range: Option<ByteRange>,
    ) -> Vec<BackendResult<ReadOutput>> {
        self.request(paths.len());
        let out = self.inner.read_many(paths, range).await;
        for o in out.iter().flatten() {
            self.count_read(o);
        }
        out
    }
    async fn write(&self, path: &VirtualPath, data: Bytes, mode: WriteMode) -> BackendResult<WriteOutcome> {
        self.request(1);
        self.inner.write(path, data, mode).await
    }
    async fn delete(&self, path: &VirtualPath) -> BackendResult<()> {
        self.request(1);
        self.inner.delete(path).await
    }
    async fn list_files(&self, base: &VirtualPath, limit: usize) -> BackendResult<FileListing> {
        self.request(1);
        self.inner.list_files(base, limit).await
    }
    async fn glob(&self, pattern: &str, base: &VirtualPath) -> BackendResult<GlobOutput> {
        self.request(1);
        self.inner.glob(pattern, base).await
    }
    async fn grep(&self, query: &GrepQuery) -> BackendResult<GrepOutput> {
        self.request(1);
        self.inner.grep(query).await
    }
}

/// Where a store lives: a fresh backend on it can be opened any number of times.
#[derive(Clone)]
enum Store {
    Local(std::path::PathBuf),
    S3 { endpoint: String, prefix: String },
}

impl Store {
    fn name(&self) -> &'static str {
        match self {
            Store::Local(_) => "local",
            Store::S3 { .. } => "s3-emulator",
        }
    }

    /// A new backend on the store, as a new process would open it.
    fn open(&self) -> Arc<dyn Backend> {
        match self {
            Store::Local(dir) => Arc::new(FilesystemBackend::new(dir).unwrap()),
            Store::S3 { endpoint, prefix } => {
                let bucket = std::env::var("TRELLIS_TEST_BUCKET").unwrap_or_else(|_| "trellis-test".into());
                let options = StoreOptions::s3_compatible(endpoint, "test", "test");
                Arc::new(ObjectStoreBackend::from_url(&format!("s3://{bucket}/{prefix}"), &options).unwrap())
            }
        }
    }
}

fn root() -> VirtualPath {
    VirtualPath::parse(ROOT).unwrap()
}

fn thread() -> ThreadId {
    ThreadId::new(THREAD).unwrap()
}

fn file_path(i: usize) -> VirtualPath {
    let dir = ["uploads", "outputs", "notes", "scratch"][i % 4];
    VirtualPath::parse(&format!("/{dir}/part-{i:03}.md")).unwrap()
}

/// File `i`: numbered lines of text, exactly [`FILE_BYTES`] bytes.
fn file_body(i: usize) -> String {
    let mut text = String::with_capacity(FILE_BYTES + 100);
    let mut line = 0;
    while text.len() < FILE_BYTES {
        line += 1;
        text.push_str(&format!(
            "{line:04} file {i:03}: quarterly figures, reviewed notes and the follow-up items for the team\n"
        ));
    }
    text.truncate(FILE_BYTES - 1);
    text.push('\n');
    text
}

/// A tool result of about 1.5 KB, like a `read_file` excerpt or a `grep` listing.
fn tool_result(turn: usize) -> String {
    let mut text = String::new();
    let mut line = 0;
    while text.len() < 1_500 {
        line += 1;
        text.push_str(&format!(
            "{line:6}\tturn {turn}: the line of a file the agent looked at, with some ordinary words in it\n"
        ));
    }
    text
}

/// Eight tool-calling turns (a sentence and one call each), then a text answer; the same for the
/// next user turn.
fn model() -> Arc<ScriptedModel> {
    let counter = AtomicUsize::new(0);
    let tools = ["ls", "read_file", "grep", "read_file"];
    Arc::new(
        ScriptedModel::from_fn(move |_req| {
            let calls = counter.fetch_add(1, Ordering::Relaxed);
            let n = calls % (TOOL_TURNS + 1);
            let message = if n < TOOL_TURNS {
                let name = tools[n % tools.len()];
                let args = match name {
                    "ls" => json!({"path": "/outputs"}),
                    "grep" => json!({"pattern": "follow-up", "path": "/", "output_mode": "content"}),
                    _ => json!({"file_path": file_path(calls).to_string(), "offset": 0, "limit": 200}),
                };
                let mut message = AiMessage::tool_calls([ToolCall::new(format!("call_{calls}"), name, args)]);
                message.content.insert(
                    0,
                    ContentBlock::text(format!(
                        "Step {n}: I will use {name} to check what the files say before I answer."
                    )),
                );
                message
            } else {
                AiMessage::text(
                    "Here is the summary: the quarterly figures are reviewed, the notes are up to date, and \
                     three follow-up items remain open for the team. I wrote the details to /outputs.",
                )
            };
            Ok(ModelResponse::new(message).with_usage(Usage {
                input_tokens: 1_200 + 400 * calls as u64,
                output_tokens: 60,
                ..Usage::default()
            }))
        })
        .without_recording(),
    )
}

fn tool(name: &'static str) -> FnTool {
    let turn = Arc::new(AtomicUsize::new(0));
    FnTool::new(
        name,
        "A file tool stand-in that answers with a realistic amount of text.",
        json!({"type": "object"}),
        move |_| {
            let turn = turn.fetch_add(1, Ordering::Relaxed);
            async move { Ok(ToolOutput::text(tool_result(turn))) }
        },
    )
}

/// Write the thread (two runs of the agent loop) and its 100 files to `store`; returns the stored
/// size of its checkpoints (its file of steps, or head and step log), how many objects that is,
/// and its message count.
async fn setup(store: &Store) -> (u64, u64, usize) {
    let backend = store.open();
    let checkpointer = Arc::new(BackendCheckpointer::new(backend.clone(), root()).unwrap());
    let agent = Agent::builder(model())
        .system_prompt("You are a careful assistant that works with the user's files.")
        .tool(tool("ls"))
        .tool(tool("read_file"))
        .tool(tool("grep"))
        .middleware(TodoListMiddleware::new())
        .middleware(PatchToolCallsMiddleware::new())
        .middleware(ModelRetryMiddleware::default())
        .middleware(TokenUsageMiddleware::new())
        .middleware(PromptCachingMiddleware::new())
        .checkpointer(checkpointer.clone())
        .build()
        .unwrap();
    for turn in 0..USER_TURNS {
        agent
            .run(
                RunInput::human(format!(
                    "Turn {turn}: please go through my files and summarize the quarterly figures and the open \
                     follow-up items."
                ))
                .thread(thread()),
            )
            .await
            .unwrap();
    }
    let files = agent
        .thread_files(&thread())
        .expect("BackendCheckpointer keeps thread files");
    futures::stream::iter(0..FILES)
        .map(|i| {
            let files = files.clone();
            async move {
                files
                    .write(&file_path(i), file_body(i).into(), WriteMode::Overwrite)
                    .await
                    .unwrap();
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    let stored = checkpointer.load(&thread()).await.unwrap().unwrap();
    let messages = stored.checkpoint.state.messages.len();
    // On a store that appends the thread is one file of steps; elsewhere a head and a step log.
    let one_file = VirtualPath::parse(&format!("/threads/{}/steps.log", thread())).unwrap();
    if let Ok(entry) = backend.stat(&one_file).await {
        return (entry.size, 1, messages);
    }
    let head = backend
        .stat(&checkpointer.path(&thread()).unwrap())
        .await
        .unwrap()
        .size;
    let log = VirtualPath::parse(&format!("/threads/{}/log", thread())).unwrap();
    let steps = backend.list_files(&log, 100_000).await.unwrap().files;
    let size = head + steps.iter().map(|e| e.size).sum::<u64>();
    (size, 1 + steps.len() as u64, messages)
}

/// One iteration of `case` with a fresh backend and checkpointer: (time, bytes read, files read,
/// requests).
async fn one(store: &Store, case: &str, messages: usize) -> (Duration, u64, u64, u64) {
    let counting = Counting::new(store.open());
    let checkpointer = BackendCheckpointer::new(counting.clone(), root()).unwrap();
    let max = Limits::default().max_file_bytes;
    let started = Instant::now();
    let stored = checkpointer
        .load(&thread())
        .await
        .unwrap()
        .expect("the thread exists");
    let files = checkpointer.thread_files(&thread()).expect("thread files");
    match case {
        "resume" => {}
        "resume_read_one" => {
            let out = files
                .read(&file_path(42), Some(ByteRange::prefix(max)))
                .await
                .unwrap();
            assert_eq!(out.bytes.len(), FILE_BYTES);
        }
        _ => {
            let listing = files
                .list_files(&VirtualPath::root(), Limits::default().max_list_entries)
                .await
                .unwrap();
            let paths: Vec<VirtualPath> = listing.files.into_iter().map(|f| f.path).collect();
            let reads = files.read_many(&paths, Some(ByteRange::prefix(max))).await;
            assert_eq!(reads.len(), FILES);
            assert!(
                reads
                    .iter()
                    .all(|r| r.as_ref().is_ok_and(|o| o.bytes.len() == FILE_BYTES))
            );
        }
    }
    let elapsed = started.elapsed();
    assert_eq!(stored.checkpoint.state.messages.len(), messages);
    let (bytes, read, requests) = counting.totals();
    (elapsed, bytes, read, requests)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

async fn measure(store: Store, runs: usize) {
    let started = Instant::now();
    let (checkpoint_bytes, objects, messages) = setup(&store).await;
    eprintln!(
        "thread_resume: wrote the thread ({messages} messages, {checkpoint_bytes} B checkpoint) and {FILES} files to {} in {:.1} s",
        store.name(),
        started.elapsed().as_secs_f64()
    );
    let warmup = if smoke() { 1 } else { 2 };
    for _ in 0..warmup {
        for case in CASES {
            one(&store, case, messages).await;
        }
    }
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); CASES.len()];
    let mut counts = [(0, 0, 0); CASES.len()];
    for run in 0..runs {
        for (i, case) in CASES.iter().enumerate() {
            let (time, bytes, read, requests) = one(&store, case, messages).await;
            samples[i].push(time);
            if run > 0 {
                assert_eq!(
                    counts[i],
                    (bytes, read, requests),
                    "{case}: every iteration reads the same"
                );
            }
            counts[i] = (bytes, read, requests);
        }
    }
    // Resuming looks for both layouts at once (a `stat` of the file of steps, a read of the
    // head: one finds nothing), then reads the file's end, or the steps since the last snapshot
    // (at most 32), one read each: no listing, and no thread file.
    let (bytes, read, requests) = counts[0];
    assert!(
        requests <= read + 2,
        "resume lists nothing: {requests} requests for {read} reads"
    );
    assert!(
        read <= 34 && bytes <= checkpoint_bytes,
        "resume reads the checkpoints only: {read} objects, {bytes} of {checkpoint_bytes} bytes"
    );
    for s in &mut samples {
        s.sort();
    }
    let resume_median = percentile(&samples[0], 0.5);
    for (i, case) in CASES.iter().enumerate() {
        let median = percentile(&samples[i], 0.5);
        let (bytes, read, requests) = counts[i];
        println!(
            "{}",
            json!({
                "bench": "thread_resume",
                "store": store.name(),
                "case": case,
                "files": FILES,
                "file_bytes": FILE_BYTES,
                "messages": messages,
                "checkpoint_bytes": checkpoint_bytes,
                "checkpoint_objects": objects,
                "median_ms": ms(median),
                "p90_ms": ms(percentile(&samples[i], 0.9)),
                "bytes_read": bytes,
                "files_read": read,
                "requests": requests,
                "ratio_to_resume": (median.as_secs_f64() / resume_median.as_secs_f64() * 100.0).round() / 100.0,
                "runs": runs,
            })
        );
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        measure(Store::Local(dir.path().to_owned()), if smoke() { 3 } else { 50 }).await;

        let Ok(endpoint) = std::env::var("TRELLIS_S3_ENDPOINT") else {
            if std::env::var("TRELLIS_EMULATORS").as_deref() == Ok("required") {
                panic!("TRELLIS_S3_ENDPOINT is not set but emulators are required");
            }
            eprintln!("skipped: S3 thread resume bench (set TRELLIS_S3_ENDPOINT or run `cargo xtask bench`)");
            println!(
                "{}",
                json!({
                    "bench": "thread_resume",
                    "store": "s3-emulator",
                    "skipped": "TRELLIS_S3_ENDPOINT is not set",
                })
            );
            return;
        };
        // Unique even when a later run gets the same pid from a long-lived emulator.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let prefix = format!("bench-thread-resume-{}-{nanos}", std::process::id());
        measure(Store::S3 { endpoint, prefix }, if smoke() { 3 } else { 20 }).await;
    });
}
