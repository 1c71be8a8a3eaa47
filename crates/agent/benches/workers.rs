//! Workers: the load test of many `trellis serve --database` processes sharing one PostgreSQL
//! database and one state dir, beside one worker alone, in one run.
//!
//! Each configuration (3 workers, then 1) gets a fresh database on the cluster
//! `TRELLIS_DATABASE_URL` names (without it the bench prints `skipped`, and fails under
//! `TRELLIS_EMULATORS=required`) and runs `RUNS` runs of `STEPS` tool calls each against the
//! scripted OpenAI-compatible model (`bench_util/scripted.rs`), which answers every request after
//! `LATENCY`. Each run is one client: it creates a thread on a random worker, creates a background
//! run (`stream_resumable`) on another random worker, and joins the run's stream from the start
//! (`Last-Event-ID: -1`) on a third random worker, reading it to its end. At most `CLIENTS` clients
//! run at once; every worker runs up to 16 runs at once (`--worker-runs`).
//!
//! Checked (any failure fails the bench, so also `cargo test`): every run is `success` on its
//! first attempt, the model was asked exactly `RUNS × (STEPS + 1)` times (no step ran twice), and
//! every client saw ids 0, 1, …, N with no gap and no duplicate, where N is the number of events
//! the database stored for its run, ending with the run's final answer.
//!
//! Reported per configuration: runs per second (runs over the wall time), p50/p99 of the time from
//! the run's create request to its first event (id 1) on the joined stream (queueing included),
//! and the database's work per run: transactions (`xact_commit + xact_rollback` of the database in
//! `pg_stat_database`, read after the workers exited so their backends flushed their counters;
//! most queue operations are one statement in its own transaction, an enqueue is one transaction
//! of a few statements; `pg_stat_statements` is not preloaded on the test cluster) and rows read
//! and written (`tup_returned + tup_fetched`, `tup_inserted + tup_updated + tup_deleted`).
//!
//! Under `cargo test --all-targets` (no `--bench`): 24 runs of 3 steps, 12 clients at once.
//! `TRELLIS_BENCH_WORKERS_RUNS`, `TRELLIS_BENCH_WORKERS_STEPS` and `TRELLIS_BENCH_WORKERS_CLIENTS`
//! set the runs, the steps of each and the clients at once.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "bench_util/scripted.rs"]
mod scripted;

#[path = "../../middleware/benches/bench_util/mod.rs"]
mod bench_util;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bench_util::ms;
use serde_json::{Value, json};
use sqlx::Connection;

const TRELLIS: &str = env!("CARGO_BIN_EXE_trellis");
const LATENCY: Duration = Duration::from_millis(50);

fn smoke() -> bool {
    !std::env::args().any(|a| a == "--bench")
}

/// A worker process in a process group of its own, killed with the group when dropped.
struct Worker {
    child: Child,
    url: String,
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.wait();
    }
}

/// `trellis serve --database URL` in `dir` (agent file and state dir shared by every worker).
fn start_worker(dir: &Path, database: &str) -> Worker {
    use std::os::unix::process::CommandExt;
    let mut child = Command::new(TRELLIS)
        .process_group(0)
        .args(["serve", "--listen", "127.0.0.1:0", "--no-ui", "--agent"])
        .arg(dir.join("trellis.toml"))
        .arg("--state-dir")
        .arg(dir.join("state"))
        .args(["--database", database, "--worker-runs", "16"])
        .env("TRELLIS_CONFIG_HOME", dir.join("config"))
        .env("OPENAI_API_KEY", "bench")
        .env("RUST_LOG", "error")
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(url) = line.strip_prefix("trellis serve: listening on ") {
                let _ = tx.send(url.to_owned());
            } else if line.contains("ERROR") || line.contains("panicked") {
                eprintln!("worker: {line}");
            }
        }
    });
    let url = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("trellis serve --database started");
    Worker { child, url }
}

/// Drops its database when dropped (a failed check included), from a thread of its own.
struct Database {
    admin: String,
    name: String,
}

impl Drop for Database {
    fn drop(&mut self) {
        let (admin, name) = (self.admin.clone(), self.name.clone());
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(drop_database(&admin, &name));
        })
        .join();
    }
}

/// A fresh database on the cluster `admin` names; its name and URL.
async fn fresh_database(admin: &str) -> (String, String) {
    let name = format!("trellis_bench_{}", uuid::Uuid::new_v4().simple());
    let mut conn = sqlx::PgConnection::connect(admin).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut conn)
        .await
        .unwrap();
    let (base, _) = admin
        .rsplit_once('/')
        .expect("a database URL ends with /DATABASE");
    (name.clone(), format!("{base}/{name}"))
}

async fn drop_database(admin: &str, name: &str) {
    if let Ok(mut conn) = sqlx::PgConnection::connect(admin).await {
        let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
        )))
        .execute(&mut conn)
        .await;
    }
}

/// The database's counters: transactions, rows read, rows written.
async fn counters(admin: &str, name: &str) -> (i64, i64, i64) {
    let mut conn = sqlx::PgConnection::connect(admin).await.unwrap();
    let _ = sqlx::query("SELECT pg_stat_clear_snapshot()")
        .execute(&mut conn)
        .await;
    sqlx::query_as(
        "SELECT (xact_commit + xact_rollback)::int8, (tup_returned + tup_fetched)::int8,
                (tup_inserted + tup_updated + tup_deleted)::int8
         FROM pg_stat_database WHERE datname = $1",
    )
    .bind(name)
    .fetch_one(&mut conn)
    .await
    .unwrap()
}

/// A small deterministic pseudo-random sequence (xorshift), so worker choices vary per run.
fn pick(seed: &mut u64, n: usize) -> usize {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    usize::try_from(*seed % n as u64).unwrap_or(0)
}

/// What one client saw.
struct Seen {
    run_id: String,
    first_event: Duration,
    last_id: usize,
}

/// The ids and data of an SSE body's events.
fn events(body: &str) -> Vec<(Option<usize>, String)> {
    body.split("\n\n")
        .filter_map(|block| {
            let (mut id, mut event, mut data) = (None, false, String::new());
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("id:") {
                    id = v.trim().parse().ok();
                } else if line.starts_with("event:") {
                    event = true;
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push_str(v.trim_start());
                }
            }
            event.then_some((id, data))
        })
        .collect()
}

/// One client's run (see the module docs).
async fn one_run(client: &reqwest::Client, urls: &[String], i: usize, steps: usize) -> Result<Seen, String> {
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64 ^ (i as u64 + 1).wrapping_mul(0x2545_f491_4f6c_dd1d);
    let err = |e: reqwest::Error| e.to_string();
    let on = urls[pick(&mut seed, urls.len())].clone();
    let thread: Value = client
        .post(format!("{on}/threads"))
        .json(&json!({}))
        .send()
        .await
        .map_err(err)?
        .json()
        .await
        .map_err(err)?;
    let thread = thread["thread_id"].as_str().ok_or("no thread_id")?.to_owned();
    let token = format!("r{i}");
    let on = urls[pick(&mut seed, urls.len())].clone();
    let start = Instant::now();
    let run: Value = client
        .post(format!("{on}/threads/{thread}/runs"))
        .json(&json!({
            "assistant_id": "agent", "stream_resumable": true,
            "input": {"messages": [{"role": "user", "content": format!("thread={token} steps={steps}")}]},
            "stream_mode": ["values", "updates", "messages-tuple"],
        }))
        .send()
        .await
        .map_err(err)?
        .json()
        .await
        .map_err(err)?;
    let run_id = run["run_id"]
        .as_str()
        .ok_or_else(|| format!("no run_id: {run}"))?
        .to_owned();
    let on = urls[pick(&mut seed, urls.len())].clone();
    let mut response = client
        .get(format!("{on}/threads/{thread}/runs/{run_id}/stream"))
        .header("last-event-id", "-1")
        .send()
        .await
        .map_err(err)?;
    if !response.status().is_success() {
        return Err(format!("join: HTTP {}", response.status()));
    }
    let mut body = String::new();
    let mut first_event = None;
    while let Some(chunk) = response.chunk().await.map_err(err)? {
        body.push_str(&String::from_utf8_lossy(&chunk));
        if first_event.is_none() && events(&body).iter().any(|(id, _)| id.is_some_and(|id| id >= 1)) {
            first_event = Some(start.elapsed());
        }
    }
    let seen = events(&body);
    let ids: Vec<Option<usize>> = seen.iter().map(|(id, _)| *id).collect();
    let want: Vec<Option<usize>> = (0..seen.len()).map(Some).collect();
    if ids != want {
        return Err(format!("run {run_id}: ids with a gap or duplicate: {ids:?}"));
    }
    let done = format!("done thread={token} after {steps} steps");
    if !seen.last().is_some_and(|(_, data)| data.contains(&done)) {
        return Err(format!(
            "run {run_id}: the stream did not end with the final answer"
        ));
    }
    Ok(Seen {
        run_id,
        first_event: first_event.ok_or("no event")?,
        last_id: seen.len() - 1,
    })
}

/// `workers` workers on a fresh database, `runs` runs; the configuration's row.
async fn configuration(
    admin: &str,
    model_url: &str,
    scripted: &scripted::Scripted,
    workers: usize,
    load: Load,
) -> Value {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("trellis.toml"),
        format!(
            "model = \"openai-compatible:bench@{model_url}\"\n[sandbox]\nkind = \"none\"\n\
             [approvals]\nask = [\"none\"]\n"
        ),
    )
    .unwrap();
    let (name, url) = fresh_database(admin).await;
    let _database = Database {
        admin: admin.to_owned(),
        name: name.clone(),
    };
    let procs: Vec<Worker> = (0..workers).map(|_| start_worker(dir.path(), &url)).collect();
    let urls: Arc<Vec<String>> = Arc::new(procs.iter().map(|w| w.url.clone()).collect());
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = counters(admin, &name).await;
    let requests_before = scripted.requests();

    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(600))
        .pool_max_idle_per_host(load.clients)
        .build()
        .unwrap();
    let gate = Arc::new(tokio::sync::Semaphore::new(load.clients));
    let start = Instant::now();
    let tasks = (0..load.runs).map(|i| {
        let (client, urls, gate) = (client.clone(), urls.clone(), gate.clone());
        tokio::spawn(async move {
            let _slot = gate.acquire_owned().await.unwrap();
            one_run(&client, &urls, i, load.steps).await
        })
    });
    let results = futures::future::join_all(tasks).await;
    let elapsed = start.elapsed();
    let requests = scripted.requests() - requests_before;
    drop(procs);
    // Let the workers' backends exit and flush their counters.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = counters(admin, &name).await;

    let mut failed: Vec<String> = Vec::new();
    let mut seen = Vec::new();
    for result in results {
        match result {
            Ok(Ok(s)) => seen.push(s),
            Ok(Err(e)) => failed.push(e),
            Err(e) => failed.push(e.to_string()),
        }
    }
    // Against the database: every run succeeded on its first attempt, and each client saw every
    // event stored for its run.
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    let rows: Vec<(String, String, i32, i64)> = sqlx::query_as(
        "SELECT r.run_id::text, r.status, r.attempt, coalesce(max(e.seq), 0)
         FROM trellis_runs r LEFT JOIN trellis_run_events e USING (run_id) GROUP BY r.run_id",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    drop(conn);
    let stored: HashMap<String, (String, i32, i64)> = rows
        .into_iter()
        .map(|(id, status, attempt, last)| (id, (status, attempt, last)))
        .collect();
    if stored.len() != load.runs {
        failed.push(format!(
            "{} runs in the database, {} created",
            stored.len(),
            load.runs
        ));
    }
    for (id, (status, attempt, _)) in &stored {
        if status != "success" || *attempt != 1 {
            failed.push(format!("run {id}: {status} after {attempt} attempts"));
        }
    }
    for s in &seen {
        let last = stored.get(&s.run_id).map_or(-1, |r| r.2);
        if i64::try_from(s.last_id).unwrap_or(-1) != last {
            failed.push(format!(
                "run {}: the client saw up to id {}, the database stored {last}",
                s.run_id, s.last_id
            ));
        }
    }
    if requests != load.runs * (load.steps + 1) {
        failed.push(format!(
            "{requests} model requests for {} runs of {} steps",
            load.runs, load.steps
        ));
    }
    let mut firsts: Vec<Duration> = seen.iter().map(|s| s.first_event).collect();
    firsts.sort();
    let quantile = |q: f64| {
        firsts
            .get(((firsts.len() as f64 * q) as usize).min(firsts.len().saturating_sub(1)))
            .map_or(Value::Null, |d| json!(ms(*d)))
    };
    let per_run = |x: i64| json!(((x as f64 / load.runs as f64) * 10.0).round() / 10.0);
    json!({
        "workers": workers,
        "runs": load.runs,
        "failed": failed.len(),
        "first_failure": failed.first(),
        "elapsed_ms": ms(elapsed),
        "runs_per_s": ((seen.len() as f64 / elapsed.as_secs_f64()) * 10.0).round() / 10.0,
        "first_event_p50_ms": quantile(0.5),
        "first_event_p99_ms": quantile(0.99),
        "events_per_run": if seen.is_empty() { Value::Null } else { json!(seen.iter().map(|s| s.last_id).sum::<usize>() / seen.len()) },
        "transactions_per_run": per_run(after.0 - before.0),
        "rows_read_per_run": per_run(after.1 - before.1),
        "rows_written_per_run": per_run(after.2 - before.2),
    })
}

/// The load of one configuration.
#[derive(Debug, Clone, Copy)]
struct Load {
    runs: usize,
    steps: usize,
    clients: usize,
}

fn main() {
    let Some(admin) = std::env::var("TRELLIS_DATABASE_URL")
        .ok()
        .filter(|v| !v.is_empty())
    else {
        assert_ne!(
            std::env::var("TRELLIS_EMULATORS").as_deref(),
            Ok("required"),
            "TRELLIS_DATABASE_URL is not set but TRELLIS_EMULATORS=required"
        );
        println!(
            "{}",
            json!({"bench": "workers", "skipped": "TRELLIS_DATABASE_URL is not set"})
        );
        return;
    };
    let setting = |name: &str, smoke_value: usize, bench_value: usize| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(if smoke() { smoke_value } else { bench_value })
    };
    let load = Load {
        runs: setting("TRELLIS_BENCH_WORKERS_RUNS", 24, 600),
        steps: setting("TRELLIS_BENCH_WORKERS_STEPS", 3, 10),
        clients: setting("TRELLIS_BENCH_WORKERS_CLIENTS", 12, 64).max(1),
    };
    let rt = bench_util::runtime();
    rt.block_on(async {
        let (_model, model_url, scripted) = scripted::start_with_latency(LATENCY).await;
        let mut configurations = Vec::new();
        for workers in [3, 1] {
            configurations.push(configuration(&admin, &model_url, &scripted, workers, load).await);
        }
        let out = json!({
            "bench": "workers",
            "runs": load.runs,
            "steps_per_run": load.steps,
            "clients_at_once": load.clients,
            "runs_per_worker": 16,
            "model_latency_ms": ms(LATENCY),
            "queries": "pg_stat_database (xact_commit + xact_rollback; tup_* counters): pg_stat_statements is not preloaded",
            "configurations": configurations,
        });
        println!("{out}");
        let failures: u64 = configurations.iter().map(|c| c["failed"].as_u64().unwrap_or(0)).sum();
        assert_eq!(failures, 0, "runs failed: {out}");
    });
}
