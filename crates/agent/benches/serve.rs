//! Serve: `trellis serve` and the reference Agent Server side by side, in one run, under
//! concurrent streaming runs. The reference is `langgraph dev` (the in-memory Agent Server)
//! serving a Deep Agents 0.7.32 graph, from `TRELLIS_REFERENCE_PYTHON`'s venv (installed by `cargo
//! xtask`); without it the reference's rows say `skipped`. Both servers' model is the same
//! scripted OpenAI-compatible server on a loopback port (`bench_util/scripted.rs`), answering at
//! once: each run makes `STEPS` tool calls (write its notes, `ls`, read, read its notes back) and
//! answers.
//!
//! For each concurrency (1, 100 and 1,000 runs at once), each run is a client creating a thread and
//! streaming one run on it (`values` + `messages-tuple`) to its end, as deep-agents-ui does, all
//! clients of a wave at once. Reported per server and concurrency:
//! - runs per second (runs over the wall time of the wave);
//! - the step latency p50/p99: from the model's reply to the same run's next model request, i.e.
//!   the server's tools, checkpoints and streaming for one step under that load. With every run
//!   of a wave stepping at once on an instant model, at 100 and 1,000 runs this is mostly waiting
//!   for one of the machine's cores;
//! - the server's CPU time per step (user + system of its process group over the wave, divided by
//!   the steps; `/proc` counts in 10 ms ticks, so small waves read coarse). For Trellis each wave
//!   is preceded by one of as many runs that call no tool, which gives the CPU of a run's own work
//!   (thread, run, stream, answer: `server_cpu_ms_per_run_without_steps`) and so what a step adds
//!   (`server_cpu_ms_per_added_step`: a model call, its tools, two checkpoints, their stream
//!   parts);
//! - failed runs, and each server's peak RSS (`VmHWM` of its process after its last wave; target
//!   ≤ 300 MB for Trellis at 1,000 runs);
//! - `state_fs`: the file system each Trellis server keeps its state on, and for ext4 whether it
//!   has a journal.
//!
//! `ratios` give Trellis over the reference: throughput (target ≥ 10×) and step p50.
//!
//! Trellis keeps checkpoints on local disk (`--state-dir`), the durable configuration of a single
//! `trellis serve`; the reference keeps them in memory. The same Trellis waves run a second time
//! with the state dir on a tmpfs (`/dev/shm`, when it exists), reported as `trellis_tmpfs`: what a
//! step costs when creating a file is cheap. The two differ most on an ext4 without a journal (as
//! on the machine this project is measured on), where every inode allocation skips inodes deleted
//! in the last few seconds by reading each one, so a busy server's file creations grow costly.
//! `langgraph dev` runs at most `--n-jobs-per-worker` runs at once: it is set to the concurrency of
//! the largest wave.
//!
//! `trellis_paced`: the largest wave's number of runs in flight at once on a model that answers
//! as a served one does, in 2 to 3 s (a scripted model with that latency, varied per reply), with
//! the runs' starts spread over the first 2 s. The server is then busy but not saturated, and the
//! step latency is what it adds to each step: the issue's targets (≤ 1 ms p50, ≤ 5 ms p99 at
//! 1,000 runs) read here. Trellis only, on local disk: the reference needs more cores than the
//! machine has for that load (its CPU per step, above).
//!
//! Under `cargo test --all-targets` (no `--bench`): waves of 1 and 4 runs of 2 steps, the paced one
//! on a 20–30 ms model. `TRELLIS_BENCH_SERVE_CONCURRENCY` (comma-separated) sets the waves,
//! `TRELLIS_BENCH_SERVE_STEPS` the tool calls per run, and `TRELLIS_BENCH_SERVE_SIDES`
//! (comma-separated, of `trellis`, `paced`, `tmpfs` and `reference`; all by default) which rows
//! run, so that two builds can be compared on one row back to back. A row left out is reported as
//! `{"skipped": "not in TRELLIS_BENCH_SERVE_SIDES"}`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "bench_util/scripted.rs"]
mod scripted;

#[path = "bench_util/paced.rs"]
mod paced;

#[path = "../../middleware/benches/bench_util/mod.rs"]
mod bench_util;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bench_util::ms;
use paced::PacedModel;
use serde_json::{Value, json};

const TRELLIS: &str = env!("CARGO_BIN_EXE_trellis");

/// The reference graph: Deep Agents' default agent on the scripted model, which answers whole
/// (not streamed) replies, so the client must not ask for a stream.
const REFERENCE_GRAPH: &str = r#"
import os
from deepagents import create_deep_agent
from langchain_openai import ChatOpenAI

model = ChatOpenAI(model="bench", base_url=os.environ["SCRIPTED_URL"], api_key="bench",
                   disable_streaming=True, max_retries=0)
graph = create_deep_agent(model=model)
"#;

fn smoke() -> bool {
    !std::env::args().any(|a| a == "--bench")
}

/// A server process in a process group of its own, killed with the group when dropped.
struct Server {
    child: Child,
    url: String,
}

impl Server {
    /// Its peak resident set size (`VmHWM`) so far, in MB.
    fn peak_rss_mb(&self) -> f64 {
        bench_util::peak_rss_mb_of(self.child.id())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.wait();
    }
}

fn in_own_group(command: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    command.process_group(0)
}

/// `trellis serve` with an agent on the scripted model, no sandbox, no approvals.
fn start_trellis(dir: &Path, model: &str) -> Server {
    let agent = dir.join("trellis.toml");
    std::fs::write(
        &agent,
        format!(
            "model = \"openai-compatible:bench@{model}\"\n[sandbox]\nkind = \"none\"\n\
             [approvals]\nask = [\"none\"]\n"
        ),
    )
    .unwrap();
    let mut child = in_own_group(
        Command::new(TRELLIS)
            .args(["serve", "--listen", "127.0.0.1:0", "--agent"])
            .arg(&agent)
            .arg("--state-dir")
            .arg(dir.join("state"))
            .env("TRELLIS_CONFIG_HOME", dir.join("config"))
            .env("OPENAI_API_KEY", "bench")
            .env("RUST_LOG", "error")
            // One process with its runs in memory, whatever database the environment names.
            .env_remove("TRELLIS_DATABASE_URL")
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped()),
    )
    .spawn()
    .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(url) = line.strip_prefix("trellis serve: listening on ") {
                let _ = tx.send(url.to_owned());
            }
        }
    });
    let url = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("trellis serve started");
    Server { child, url }
}

/// `langgraph dev` serving [`REFERENCE_GRAPH`], up to `jobs` runs at once; `None` without
/// `TRELLIS_REFERENCE_PYTHON`.
async fn start_reference(dir: &Path, model: &str, jobs: usize) -> Option<Server> {
    let python = std::env::var("TRELLIS_REFERENCE_PYTHON")
        .ok()
        .filter(|p| !p.is_empty())?;
    std::fs::write(dir.join("graph.py"), REFERENCE_GRAPH).unwrap();
    std::fs::write(
        dir.join("langgraph.json"),
        json!({"dependencies": ["."], "graphs": {"agent": "./graph.py:graph"}}).to_string(),
    )
    .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let log = std::fs::File::create(dir.join("langgraph-dev.log")).unwrap();
    let child = in_own_group(
        Command::new(Path::new(&python).with_file_name("langgraph"))
            .args(["dev", "--no-browser", "--no-reload", "--host", "127.0.0.1"])
            .args([
                "--port",
                &port.to_string(),
                "--n-jobs-per-worker",
                &jobs.to_string(),
            ])
            .args(["--config", "langgraph.json"])
            .current_dir(dir)
            .env("SCRIPTED_URL", model)
            .env("LANGGRAPH_CLI_NO_ANALYTICS", "1")
            .env("LANGSMITH_TRACING", "false")
            .env_remove("LANGSMITH_API_KEY")
            .env_remove("OPENAI_API_KEY")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log),
    )
    .spawn()
    .unwrap();
    let server = Server {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    let client = client();
    let start = Instant::now();
    while !client
        .get(format!("{}/ok", server.url))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
    {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "langgraph dev did not answer /ok: see {}",
            dir.join("langgraph-dev.log").display()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Some(server)
}

fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .timeout(Duration::from_secs(600))
        .build()
        .unwrap()
}

/// One client's run: a new thread, one streamed run on it, read to its end. `Err` says why it
/// failed (an HTTP error or an `error` event).
async fn one_run(client: &reqwest::Client, url: &str, token: &str, steps: usize) -> Result<(), String> {
    let thread: Value = client
        .post(format!("{url}/threads"))
        .json(&json!({}))
        .send()
        .await
        .map_err(|e| e.to_string())?
        .json()
        .await
        .map_err(|e| e.to_string())?;
    let thread = thread["thread_id"].as_str().ok_or("no thread_id")?.to_owned();
    let response = client
        .post(format!("{url}/threads/{thread}/runs/stream"))
        .json(&json!({
            "assistant_id": "agent",
            "input": {"messages": [{"role": "user", "content": format!("thread={token} steps={steps}")}]},
            "stream_mode": ["values", "messages-tuple"],
        }))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if !response.status().is_success() {
        return Err(format!("HTTP {}", response.status()));
    }
    let body = response.text().await.map_err(|e| e.to_string())?;
    if body.contains("event: error") {
        return Err(body.lines().rev().take(3).collect::<Vec<_>>().join(" | "));
    }
    if !body.contains(&format!("done thread={token} after {steps} steps")) {
        return Err("the stream ended without the final answer".into());
    }
    Ok(())
}

/// The CPU time (user + system) the processes of process group `pgid` have used so far: the
/// server and any process it started, as `/proc/<pid>/stat` counts it (in clock ticks of 10 ms).
fn group_cpu(pgid: u32) -> Duration {
    let mut ticks = 0u64;
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // The fields after the command name (which may hold spaces) in parentheses.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let field = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
        if fields.len() > 14 && field(2) == u64::from(pgid) {
            // utime, stime, and what its waited-for children used.
            ticks += field(11) + field(12) + field(13) + field(14);
        }
    }
    Duration::from_millis(ticks * 10)
}

/// `concurrency` clients against `server`, client `i` starting `i × stagger` after the first;
/// the wave's row.
async fn wave(
    name: &str,
    server: &Server,
    gaps: &Mutex<Vec<Duration>>,
    concurrency: usize,
    steps: usize,
    stagger: Duration,
) -> Value {
    let client = client();
    let gaps_before = gaps.lock().unwrap().len();
    let cpu_before = group_cpu(server.child.id());
    let start = Instant::now();
    let runs = (0..concurrency).map(|i| {
        let client = client.clone();
        let url = server.url.clone();
        let token = format!("{name}{concurrency}s{steps}x{i}");
        let starts_at = start + stagger * i as u32;
        tokio::spawn(async move {
            tokio::time::sleep_until(starts_at.into()).await;
            one_run(&client, &url, &token, steps).await
        })
    });
    let results = futures::future::join_all(runs).await;
    let elapsed = start.elapsed();
    let cpu = group_cpu(server.child.id()).saturating_sub(cpu_before);
    let failed: Vec<String> = results
        .into_iter()
        .filter_map(|r| match r {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e),
            Err(e) => Some(e.to_string()),
        })
        .collect();
    let mut gaps = gaps.lock().unwrap()[gaps_before..].to_vec();
    gaps.sort();
    let quantile = |q: f64| {
        gaps.get(((gaps.len() as f64 * q) as usize).min(gaps.len().saturating_sub(1)))
            .copied()
            .map_or(Value::Null, |d| json!(ms(d)))
    };
    json!({
        "concurrency": concurrency,
        "runs": concurrency,
        "steps_per_run": steps,
        "failed": failed.len(),
        "first_failure": failed.first(),
        "elapsed_ms": ms(elapsed),
        "runs_per_s": ((concurrency - failed.len()) as f64 / elapsed.as_secs_f64() * 10.0).round() / 10.0,
        "steps": gaps.len(),
        "step_p50_ms": quantile(0.5),
        "step_p99_ms": quantile(0.99),
        "server_cpu_ms": ms(cpu),
        "server_cpu_ms_per_step": if gaps.is_empty() { Value::Null } else { json!(ms(cpu) / gaps.len() as f64) },
    })
}

/// One [`wave`] per concurrency in `waves`, in order, on `server`. With `baseline`, each is
/// preceded by a wave of as many runs that call no tool (one model call, the answer): the row then
/// also gives the server's CPU per run of those (`server_cpu_ms_per_run_without_steps`: creating
/// the thread, starting and streaming the run, its answer) and what each step adds to it
/// (`server_cpu_ms_per_added_step`: one model call, its tools, two checkpoints and their stream
/// parts), the per-run work no longer spread over the steps.
async fn waves_on(
    name: &str,
    server: &Server,
    scripted: &scripted::Scripted,
    waves: &[usize],
    steps: usize,
    baseline: bool,
) -> Vec<Value> {
    let mut rows = Vec::with_capacity(waves.len());
    for &n in waves {
        let without = match baseline {
            true => Some(wave(name, server, &scripted.seen.gaps, n, 0, Duration::ZERO).await),
            false => None,
        };
        let mut row = wave(name, server, &scripted.seen.gaps, n, steps, Duration::ZERO).await;
        if let Some(without) = without {
            let per_run = |w: &Value| w["server_cpu_ms"].as_f64().unwrap_or(0.0) / n as f64;
            let base = per_run(&without);
            row["server_cpu_ms_per_run_without_steps"] = json!(base);
            row["server_cpu_ms_per_added_step"] = json!((per_run(&row) - base) / steps.max(1) as f64);
        }
        rows.push(row);
    }
    rows
}

/// The paced wave: `concurrency` runs in flight at once on `model`, the runs' starts spread over
/// one model latency so they do not all wait for a core at the same instant. Its step latency is
/// what the server adds to a step while it is busy but not saturated.
async fn paced(name: &str, server: &Server, model: &PacedModel, concurrency: usize, steps: usize) -> Value {
    let stagger = model.latency / concurrency.max(1) as u32;
    let mut row = wave(name, server, &model.seen.gaps, concurrency, steps, stagger).await;
    row["model_latency_ms"] = json!(ms(model.latency));
    row["model_jitter_ms"] = json!(ms(model.jitter));
    row
}

/// The file system a server keeps its state on: its name as the local backend knows it (`other`
/// for one it does not treat as local), and for ext4 whether it has a journal (`null` when the
/// kernel does not say). Without a journal, ext4 checks each inode deleted in the
/// last minutes on every file creation, so disk rows depend on what was deleted before the wave
/// (docs/server.md, "Speed").
fn state_fs(dir: &Path) -> Value {
    let kind = trellis_agent::backend::FilesystemBackend::new(dir)
        .ok()
        .and_then(|b| b.local_file_system())
        .unwrap_or("other");
    let journal = (kind == "ext4")
        .then(|| {
            let dev = rustix::fs::stat(dir).ok()?.st_dev;
            let block = format!(
                "/sys/dev/block/{}:{}",
                rustix::fs::major(dev),
                rustix::fs::minor(dev)
            );
            let device = std::fs::read_link(block).ok()?;
            let name = device.file_name()?.to_str()?.to_owned();
            let task = std::fs::read_to_string(format!("/sys/fs/ext4/{name}/journal_task")).ok()?;
            Some(task.trim() != "<none>")
        })
        .flatten();
    json!({"type": kind, "ext4_journal": journal})
}

/// The rows `TRELLIS_BENCH_SERVE_SIDES` asks for (all of them when it is not set).
struct Sides(Option<Vec<String>>);

impl Sides {
    /// The names the variable may hold.
    const NAMES: [&str; 4] = ["trellis", "paced", "tmpfs", "reference"];

    /// Read from the environment; a name that is not one of [`Self::NAMES`] stops the bench, so a
    /// misspelt row is not silently left out.
    fn from_env() -> Self {
        Self(std::env::var("TRELLIS_BENCH_SERVE_SIDES").ok().map(|v| {
            let sides: Vec<String> = v
                .split(',')
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect();
            if let Some(unknown) = sides.iter().find(|s| !Self::NAMES.contains(&s.as_str())) {
                panic!(
                    "TRELLIS_BENCH_SERVE_SIDES: unknown row {unknown:?} (expected some of {})",
                    Self::NAMES.join(", ")
                );
            }
            sides
        }))
    }

    fn runs(&self, side: &str) -> bool {
        self.0
            .as_ref()
            .is_none_or(|sides| sides.iter().any(|s| s == side))
    }
}

fn main() {
    let waves: Vec<usize> = std::env::var("TRELLIS_BENCH_SERVE_CONCURRENCY")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| if smoke() { vec![1, 4] } else { vec![1, 100, 1000] });
    let steps = std::env::var("TRELLIS_BENCH_SERVE_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if smoke() { 2 } else { 4 });
    let sides = Sides::from_env();
    let rt = bench_util::runtime();
    rt.block_on(async {
        let (_model, model_url, scripted) = scripted::start().await;
        let dir = tempfile::tempdir().unwrap();
        let mut rows = serde_json::Map::new();
        for side in ["trellis", "trellis_paced", "trellis_tmpfs", "reference"] {
            rows.insert(side.into(), json!({"skipped": "not in TRELLIS_BENCH_SERVE_SIDES"}));
        }

        let mut ours = Vec::new();
        if sides.runs("trellis") {
            std::fs::create_dir_all(dir.path().join("trellis")).unwrap();
            let trellis = start_trellis(&dir.path().join("trellis"), &model_url);
            ours = waves_on("tr", &trellis, &scripted, &waves, steps, true).await;
            rows.insert(
                "trellis".into(),
                json!({"waves": ours, "peak_rss_mb": trellis.peak_rss_mb(),
                       "state_fs": state_fs(&dir.path().join("trellis"))}),
            );
        }

        if sides.runs("paced") {
            // The paced wave, on a model with a served model's latency.
            let (latency, jitter) = match smoke() {
                true => (Duration::from_millis(20), Duration::from_millis(10)),
                false => (Duration::from_secs(2), Duration::from_secs(1)),
            };
            let (paced_url, paced_model) = PacedModel::start(latency, jitter).await;
            std::fs::create_dir_all(dir.path().join("paced")).unwrap();
            let trellis = start_trellis(&dir.path().join("paced"), &paced_url);
            let largest = waves.iter().copied().max().unwrap_or(1);
            let row = paced("tp", &trellis, &paced_model, largest, steps).await;
            rows.insert(
                "trellis_paced".into(),
                json!({"waves": [row], "peak_rss_mb": trellis.peak_rss_mb(),
                       "state_fs": state_fs(&dir.path().join("paced"))}),
            );
        }

        if sides.runs("tmpfs") {
            let shm = Path::new("/dev/shm");
            match shm.is_dir().then(|| tempfile::tempdir_in(shm).ok()).flatten() {
                Some(memory) => {
                    let trellis = start_trellis(memory.path(), &model_url);
                    let waves_in_memory = waves_on("tm", &trellis, &scripted, &waves, steps, true).await;
                    rows.insert(
                        "trellis_tmpfs".into(),
                        json!({"waves": waves_in_memory, "peak_rss_mb": trellis.peak_rss_mb(),
                               "state_fs": state_fs(memory.path())}),
                    );
                }
                None => {
                    rows.insert("trellis_tmpfs".into(), json!({"skipped": "no /dev/shm"}));
                }
            }
        }

        let mut theirs = Vec::new();
        if sides.runs("reference") {
            let jobs = waves.iter().copied().max().unwrap_or(1);
            std::fs::create_dir_all(dir.path().join("reference")).unwrap();
            match start_reference(&dir.path().join("reference"), &model_url, jobs).await {
                Some(reference) => {
                    theirs = waves_on("lg", &reference, &scripted, &waves, steps, false).await;
                    rows.insert(
                        "reference".into(),
                        json!({"server": "langgraph dev (langgraph-api 0.16.7, in-memory) + deepagents 0.7.32",
                               "waves": theirs, "peak_rss_mb": reference.peak_rss_mb()}),
                    );
                }
                None => {
                    rows.insert(
                        "reference".into(),
                        json!({"skipped": "TRELLIS_REFERENCE_PYTHON is not set"}),
                    );
                }
            }
        }
        let ratios: Vec<Value> = ours
            .iter()
            .zip(&theirs)
            .map(|(a, b)| {
                let ratio = |key: &str| match (a[key].as_f64(), b[key].as_f64()) {
                    (Some(x), Some(y)) if y > 0.0 => json!((x / y * 100.0).round() / 100.0),
                    _ => Value::Null,
                };
                json!({
                    "concurrency": a["concurrency"],
                    "throughput_trellis_over_reference": ratio("runs_per_s"),
                    "step_p50_trellis_over_reference": ratio("step_p50_ms"),
                    "cpu_per_step_trellis_over_reference": ratio("server_cpu_ms_per_step"),
                })
            })
            .collect();
        rows.insert("ratios".into(), json!(ratios));
        rows.insert("bench".into(), json!("serve"));
        rows.insert("steps_per_run".into(), json!(steps));
        let out = Value::Object(rows);
        println!("{out}");
        let failures: u64 = ["trellis", "trellis_tmpfs", "trellis_paced", "reference"]
            .iter()
            .flat_map(|side| out[side]["waves"].as_array().cloned().unwrap_or_default())
            .map(|w| w["failed"].as_u64().unwrap_or(0))
            .sum();
        assert_eq!(failures, 0, "runs failed: {out}");
    });
}
