//! The thread-file fence (docs/server.md, "Many workers"; `server/workers/fence.rs`): a worker
//! that lost a run inside a tool call writes none of the thread's files when the call ends.
//!
//! * Cut off from the database (its connection through [`CutProxy`], taken down) while its
//!   command runs: its heartbeats cannot even learn the lease is gone, so only the fence — the
//!   worker's own clock past the lease — stops the write. Deterministic; without the fence (the
//!   checkpointer not guarded) it fails: `late.txt` is in the thread's files.
//! * Frozen (SIGSTOP) inside the call past its lease, the run taken over, then resumed: its
//!   overdue heartbeat and the call's write-back race when it wakes. Before the fence the write
//!   won at times (seen 2026-12-06: `late.txt` written in the ~30 ms before the heartbeat found
//!   the lease lost); with it, the write is refused whichever comes first.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wiremock::MockServer;

use super::super::cut_proxy::CutProxy;
use super::super::harness::{Served, http};
use super::fleet::{Fleet, prerequisites};
use super::support::{begin, settled, setup, signal, worker};
use crate::cli::crash::journal_of;
use crate::cli::harness::calls_then_done;
use crate::cli::sandbox::bwrap_or_skip;
use crate::queue::postgres::test_database as database;

/// A model whose first turn runs a sandboxed command that writes `/outputs/late.txt` after
/// `after` seconds, and an agent file that runs it under bubblewrap without asking.
async fn late_writer(after: u32) -> (MockServer, tempfile::TempDir) {
    let model = calls_then_done(vec![
        json!({"type": "tool_use", "id": "toolu_late", "name": "execute",
        "input": {"command": format!("sleep {after} && mkdir -p /outputs && echo late >> /outputs/late.txt")}}),
    ])
    .await;
    let dir = setup(None);
    std::fs::write(
        dir.path().join("trellis.toml"),
        "model = \"anthropic:claude-sonnet-4-5\"\n[sandbox]\nkind = \"bwrap\"\n[approvals]\nask = [\"none\"]\n",
    )
    .unwrap();
    (model, dir)
}

/// Wait until `on`'s run of `thread` journaled the command as started; the thread's folder.
async fn command_started(dir: &Path, on: &Served, thread: &str) -> PathBuf {
    let calls = dir.join("state/threads").join(thread);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !journal_of(&calls)
        .iter()
        .any(|r| r["call_id"] == "toolu_late" && r["outcome"]["status"] == "started")
    {
        assert!(
            Instant::now() < deadline,
            "the call never started: {}",
            on.stderr()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    calls
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_cut_off_from_the_database_in_a_tool_call_writes_no_thread_file() {
    let Some((_db, url)) = database().await else {
        return;
    };
    if !bwrap_or_skip("cut off in a tool call") {
        return;
    }
    let (base, name) = url.rsplit_once('/').unwrap();
    let (credentials, host) = base.rsplit_once('@').unwrap();
    let proxy = CutProxy::start(host).await;
    let through_proxy = format!("{credentials}@{}/{name}", proxy.addr);
    let (model, dir) = late_writer(3).await;
    let a = worker(dir.path(), &model, &through_proxy, false, 1.0);
    let (thread, run) = begin(&a).await;
    let calls = command_started(dir.path(), &a, &thread).await;
    proxy.down();
    let b = worker(dir.path(), &model, &url, false, 1.0);
    let client = http();
    let ended = settled(&client, &b, &thread, &run, Duration::from_secs(60)).await;
    assert_eq!(ended["attempt"], 2, "{}", b.stderr());
    // A's command ends 3 s after it started, while A still cannot reach the database.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        !calls.join("files/outputs/late.txt").exists(),
        "A wrote a thread file after its lease ran out: {}",
        a.stderr()
    );
    proxy.up();
}

/// The cut-off case with the threads on S3 and three workers: the file the command wrote is not
/// in the thread's store (asked of another worker, through the API).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_threads_on_s3_a_worker_cut_off_in_a_tool_call_writes_no_thread_file() {
    let Some((_db, needs)) = prerequisites("cut off in a tool call, S3").await else {
        return;
    };
    let url = needs.0.clone();
    let (base, name) = url.rsplit_once('/').unwrap();
    let (credentials, host) = base.rsplit_once('@').unwrap();
    let proxy = CutProxy::start(host).await;
    let through_proxy = format!("{credentials}@{}/{name}", proxy.addr);
    // Listing the journal on moto is slower than reading a local file: a longer command keeps
    // its end well past the lease (2 s) after the cut.
    let (model, _) = late_writer(8).await;
    let fleet = Fleet::new(needs, model);
    let a = fleet.worker_on("a", None, &through_proxy);
    let (thread, run) = begin(&a).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !fleet
        .journal(&thread)
        .await
        .iter()
        .any(|r| r["call_id"] == "toolu_late" && r["outcome"]["status"] == "started")
    {
        assert!(
            Instant::now() < deadline,
            "the call never started: {}",
            a.stderr()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    proxy.down();
    let (b, _c) = (fleet.worker("b", None), fleet.worker("c", None));
    let client = http();
    let ended = settled(&client, &b, &thread, &run, Duration::from_secs(60)).await;
    assert_eq!(ended["attempt"], 2, "{}", b.stderr());
    tokio::time::sleep(Duration::from_secs(8)).await;
    let download = client
        .get(format!("{}/threads/{thread}/files?path=/outputs/late.txt", b.url))
        .send()
        .await
        .unwrap();
    assert_eq!(
        download.status(),
        404,
        "A wrote a thread file after its lease ran out: {}",
        a.stderr()
    );
    proxy.up();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_frozen_in_a_tool_call_past_its_lease_writes_no_thread_file() {
    let Some((_db, url)) = database().await else {
        return;
    };
    if !bwrap_or_skip("frozen in a tool call") {
        return;
    }
    let (model, dir) = late_writer(3).await;
    let a = worker(dir.path(), &model, &url, false, 1.0);
    let (thread, run) = begin(&a).await;
    let calls = command_started(dir.path(), &a, &thread).await;
    signal(&a, "STOP");
    let b = worker(dir.path(), &model, &url, false, 1.0);
    let client = http();
    let ended = settled(&client, &b, &thread, &run, Duration::from_secs(60)).await;
    assert_eq!(ended["attempt"], 2, "{}", b.stderr());
    // The sandboxed command (not frozen) finishes meanwhile; A wakes after it.
    tokio::time::sleep(Duration::from_secs(4)).await;
    signal(&a, "CONT");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let state: Value = client
        .get(format!("{}/threads/{thread}/state", b.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        !calls.join("files/outputs/late.txt").exists(),
        "A wrote a thread file after losing the run"
    );
    assert!(
        state["values"]["files"].get("/outputs/late.txt").is_none(),
        "A wrote a thread file after losing the run: {}\n{}",
        state["values"]["files"],
        a.stderr()
    );
}
