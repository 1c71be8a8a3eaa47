//! The database goes away mid-run: PostgreSQL restarted (a throwaway cluster of the test's own,
//! `cluster.rs`, stopped as a crash would stop it), and a worker's database connection cut and
//! restored through a TCP proxy (`cut_proxy.rs`). The workers do not crash on their broken
//! pools; the run finishes on the worker that had it when the outage is shorter than the lease,
//! or is taken over when it is longer; either way its stream, replayed on any worker and followed
//! by a client joined before the outage, has every event once, numbered with no gap.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use serde_json::json;
use wiremock::MockServer;

use super::super::cut_proxy::CutProxy;
use super::super::harness::{Served, first_then, http};
use super::cluster::Cluster;
use super::support::{
    Sse, assert_numbered, begin, follow, model_called, parse_sse, replay, settled, setup, texts, worker,
};
use crate::cli::harness::reply;
use crate::queue::postgres::{fresh_database, test_database};

/// A model that calls `ls` (one step), then answers `answer` after `delay` to every later call.
async fn ls_then_slow_answer(delay: Duration) -> MockServer {
    let ls = json!([{"type": "tool_use", "id": "toolu_ls", "name": "ls", "input": {"path": "/"}}]);
    let answer = reply(json!([{"type": "text", "text": "answer"}]), "end_turn").set_delay(delay);
    first_then(reply(ls, "tool_use"), answer).await
}

/// The event names of `events`.
fn names(events: &[Sse]) -> Vec<&str> {
    events.iter().map(|(_, name, _)| name.as_str()).collect()
}

/// `served` still answers.
async fn alive(served: &Served) {
    let response = http().get(format!("{}/ok", served.url)).send().await.unwrap();
    assert_eq!(response.status(), 200, "{}", served.stderr());
}

/// The events of the same run (a model, a database and a worker of its own, on the cluster
/// `admin` names) with nothing going wrong: what an outage must not change.
async fn undisturbed(dir: &Path, admin: &str) -> Vec<Sse> {
    let (_db, url) = fresh_database(admin).await;
    let model = ls_then_slow_answer(Duration::ZERO).await;
    let reference = worker(dir, &model, &url, false, 10.0);
    let (thread, run) = begin(&reference).await;
    let client = http();
    let ended = settled(&client, &reference, &thread, &run, Duration::from_secs(60)).await;
    assert_eq!(ended["status"], "success");
    parse_sse(&replay(&client, &reference, &thread, &run).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_restarted_mid_run_loses_and_repeats_no_event() {
    // Only to know that PostgreSQL tests are wanted here (skip without, as the others do).
    let Some(_shared) = test_database().await else {
        return;
    };
    let Some(cluster) = Cluster::start() else {
        return;
    };
    let (_db, url) = fresh_database(&cluster.url()).await;
    let model = ls_then_slow_answer(Duration::from_secs(2)).await;
    let dir = setup(None);
    let a = worker(dir.path(), &model, &url, false, 20.0);
    let (thread, run) = begin(&a).await;
    let b = worker(dir.path(), &model, &url, false, 20.0);
    let followed = follow(&b, &thread, &run).await;
    model_called(&model, 2).await;

    // Down while the model answers (its events come during the outage), up 5 s later: longer than
    // a worker's retries of one batch of events, shorter than the lease.
    cluster.down();
    tokio::time::sleep(Duration::from_secs(5)).await;
    cluster.up();

    let client = http();
    let ended = settled(&client, &b, &thread, &run, Duration::from_secs(60)).await;
    assert_eq!(
        (ended["status"].as_str(), ended["attempt"].as_u64()),
        (Some("success"), Some(1)),
        "A finished it: {}",
        a.stderr()
    );
    alive(&a).await;
    alive(&b).await;
    let events = parse_sse(&replay(&client, &b, &thread, &run).await);
    assert_numbered(&events);
    let followed = parse_sse(&followed.await.unwrap());
    assert_eq!(
        followed, events,
        "the client joined before the outage saw every event once"
    );
    let texts = texts(&client, &a, &thread).await;
    assert_eq!(texts.iter().filter(|t| *t == "answer").count(), 1, "{texts:?}");
    let reference = undisturbed(dir.path(), &cluster.url()).await;
    assert_eq!(names(&events), names(&reference), "no event lost or repeated");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_cut_off_from_the_database_past_its_lease_is_taken_over() {
    let Some((_db, url)) = test_database().await else {
        return;
    };
    let (base, name) = url.rsplit_once('/').unwrap();
    let host = base.rsplit_once('@').unwrap().1;
    let proxy = CutProxy::start(host).await;
    let through_proxy = format!("{}@{}/{name}", base.rsplit_once('@').unwrap().0, proxy.addr);
    let model = ls_then_slow_answer(Duration::from_secs(2)).await;
    let dir = setup(None);
    // A reaches the database through the proxy, B directly; leases of 2 s.
    let a = worker(dir.path(), &model, &through_proxy, false, 2.0);
    let (thread, run) = begin(&a).await;
    model_called(&model, 2).await;
    let b = worker(dir.path(), &model, &url, false, 2.0);
    let followed = follow(&b, &thread, &run).await;

    proxy.down();
    let attempt_two = format!("running run {run} of thread {thread} (attempt 2)");
    for _ in 0..400 {
        if b.stderr().contains(&attempt_two) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        b.stderr().contains(&attempt_two),
        "B took it over: {}",
        b.stderr()
    );
    proxy.up();

    let client = http();
    let ended = settled(&client, &b, &thread, &run, Duration::from_secs(60)).await;
    assert_eq!(
        (ended["status"].as_str(), ended["attempt"].as_u64()),
        (Some("success"), Some(2)),
        "{}",
        b.stderr()
    );
    for _ in 0..200 {
        if a.stderr().contains(&format!("lost the lease of run {run}")) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        a.stderr().contains(&format!("lost the lease of run {run}")),
        "A learned it lost the run once connected again: {}",
        a.stderr()
    );
    alive(&a).await;
    let events = parse_sse(&replay(&client, &a, &thread, &run).await);
    assert_numbered(&events);
    let followed = parse_sse(&followed.await.unwrap());
    assert_eq!(followed, events, "the client joined on B saw every event once");
    let last = events.iter().rev().find(|(_, e, _)| e == "values").unwrap();
    assert!(last.2.contains("answer"), "{last:?}");
    let texts = texts(&client, &a, &thread).await;
    assert_eq!(texts.iter().filter(|t| *t == "answer").count(), 1, "{texts:?}");
}
