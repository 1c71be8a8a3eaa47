//! A worker killed with SIGKILL at each named point of a run, with three `trellis serve`
//! processes sharing one database and keeping their threads on S3 (moto, `--store`; every worker
//! has a state dir of its own): after the claim, mid model call, between two tool calls of one
//! step, and after the run's last checkpoint before its end is stored. Another worker finishes
//! the run; every tool call that finished ran exactly once (it appends to a thread file, counted
//! after); no step is checkpointed twice (the thread's history); a client joined on another worker
//! before the kill reads the run's stream to its end with ids 0, 1, 2, … (no gap, no duplicate).
//! The claim and the end are reached with the test-only fault points (`TRELLIS_FAULT_PAUSE`,
//! `server/workers/fault.rs`), the model call with a reply that never comes in time, the tool
//! step with the tool-call journal on the store. Real bubblewrap for the tools.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wiremock::{MockServer, ResponseTemplate};

use super::super::harness::{Served, http};
use super::super::store::s3_env;
use super::support::{assert_numbered, begin, follow, model_called, parse_sse, post, settled};
use crate::cli::crash::a_finished_b_started;
use crate::cli::harness::{messages, reply, trellis};
use crate::cli::sandbox::bwrap_or_skip;
use crate::queue::postgres::Database;
use crate::support::env_or_skip;

/// The served agent: the mock's model, bubblewrap, no approvals.
const AGENT_FILE: &str = "model = \"anthropic:claude-sonnet-4-5\"\n\
[sandbox]\nkind = \"bwrap\"\n\
[approvals]\nask = [\"none\"]\n";

/// Leases of the fault tests, in seconds.
const LEASE: f64 = 2.0;

/// `execute` call `id` appending `line` to `/outputs/count-ID.txt` (a thread file), then running
/// `then`.
fn append(id: &str, then: &str) -> Value {
    json!({"type": "tool_use", "id": format!("toolu_{id}"), "name": "execute", "input": {
        "command": format!("mkdir -p /outputs && echo {id} >> /outputs/count-{id}.txt{then}")}})
}

/// A mock model answering `replies` in order, one request each, then `done` to every later one.
async fn script(replies: Vec<ResponseTemplate>) -> MockServer {
    let server = MockServer::start().await;
    for (i, r) in replies.into_iter().enumerate() {
        messages()
            .respond_with(r)
            .up_to_n_times(1)
            .with_priority(u8::try_from(i + 1).unwrap())
            .mount(&server)
            .await;
    }
    messages()
        .respond_with(reply(json!([{"type": "text", "text": "done"}]), "end_turn"))
        .with_priority(u8::MAX)
        .mount(&server)
        .await;
    server
}

/// One test's workers: one database, one S3 prefix, one model.
struct Fleet {
    dir: tempfile::TempDir,
    database: String,
    endpoint: String,
    store: String,
    model: MockServer,
}

impl Fleet {
    fn new((database, [endpoint, bucket]): (String, [String; 2]), model: MockServer) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let prefix = format!("kill-{}-{nanos}", std::process::id());
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("trellis.toml"), AGENT_FILE).unwrap();
        Self {
            dir,
            database,
            store: format!("s3://{bucket}/{prefix}"),
            endpoint,
            model,
        }
    }

    /// Worker `name` (its own state dir), parked at fault point `pause` when given.
    fn worker(&self, name: &str, pause: Option<&str>) -> Served {
        let dir = self.dir.path();
        let mut command = trellis();
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--agent"])
            .arg(dir.join("trellis.toml"))
            .arg("--state-dir")
            .arg(dir.join(format!("state-{name}")))
            .args(["--database", &self.database])
            .args(["--lease-seconds", &LEASE.to_string()])
            .args(["--store", &self.store])
            .env("RUST_LOG", "warn,trellis_agent::server::workers=info");
        s3_env(&mut command, &self.endpoint);
        if let Some(point) = pause {
            command.env("TRELLIS_FAULT_PAUSE", point);
        }
        Served::spawn(command, dir, &self.model)
    }

    /// The journal records of `thread`'s current step, read from the store.
    async fn journal(&self, thread: &str) -> Vec<Value> {
        let (bucket, prefix) = self.store["s3://".len()..].split_once('/').unwrap();
        let client = http();
        // moto checks no signature, but refuses a request with none at all.
        let auth = "AWS4-HMAC-SHA256 Credential=test/20261206/us-east-1/s3/aws4_request, \
                    SignedHeaders=host, Signature=00";
        let listing = client
            .get(format!("{}/{bucket}?list-type=2&prefix={prefix}/", self.endpoint))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let mut records = Vec::new();
        for key in listing.split("<Key>").skip(1) {
            let key = key.split("</Key>").next().unwrap();
            if !(key.contains(thread) && key.contains("/calls/")) {
                continue;
            }
            let body = client
                .get(format!("{}/{bucket}/{key}", self.endpoint))
                .header("authorization", auth)
                .send()
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap();
            if let Ok(record) = serde_json::from_slice(&body) {
                records.push(record);
            }
        }
        records
    }
}

/// What a fault test needs — PostgreSQL, bubblewrap, the S3 emulator — or `None` (skipped, or a
/// panic under `TRELLIS_EMULATORS=required`): the database (dropped after the test), its URL and
/// the S3 endpoint and bucket.
async fn prerequisites(test: &str) -> Option<(Database, (String, [String; 2]))> {
    let s3 = env_or_skip(test, ["TRELLIS_S3_ENDPOINT", "TRELLIS_TEST_BUCKET"])?;
    if !bwrap_or_skip(test) {
        return None;
    }
    let (database, url) = crate::queue::postgres::test_database().await?;
    Some((database, (url, s3)))
}

/// Wait until `served` logs `line`.
async fn logged(served: &Served, line: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !served.stderr().contains(line) {
        assert!(
            Instant::now() < deadline,
            "never logged {line:?}: {}",
            served.stderr()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What a finished takeover must show, asked of `on`: the run succeeded on its second attempt;
/// each `count-ID.txt` of `counts` holds its line once (`None`: the file is not there); the
/// model was asked `calls` times; no step was checkpointed twice; the joined client's `stream`
/// is numbered with no gap or duplicate and ends with the run's answer.
async fn assert_taken_over(
    on: &Served,
    (thread, run): (&str, &str),
    model: &MockServer,
    (counts, calls): (&[(&str, Option<&str>)], usize),
    stream: String,
) -> Value {
    let client = http();
    let ended = settled(&client, on, thread, run, Duration::from_secs(60)).await;
    assert_eq!(
        (ended["status"].as_str(), ended["attempt"].as_u64()),
        (Some("success"), Some(2)),
        "{}",
        on.stderr()
    );
    let state: Value = client
        .get(format!("{}/threads/{thread}/state", on.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let files = &state["values"]["files"];
    for (id, want) in counts {
        let got = files[format!("/outputs/count-{id}.txt")]["content"].as_str();
        assert_eq!(
            got, *want,
            "count-{id}.txt: every finished call ran once; {files}"
        );
    }
    assert_eq!(
        model.received_requests().await.unwrap().len(),
        calls,
        "model calls"
    );
    let messages = state["values"]["messages"].as_array().unwrap();
    let answers = messages.iter().filter(|m| m["content"] == "done").count();
    assert_eq!(answers, 1, "one answer: {messages:?}");
    let history: Value = post(
        &client,
        format!("{}/threads/{thread}/history", on.url),
        None,
        json!({"limit": 100}),
    )
    .await
    .json()
    .await
    .unwrap();
    let steps: Vec<Value> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["metadata"]["step"].clone())
        .collect();
    let mut unique = steps.clone();
    unique.dedup();
    assert_eq!(steps, unique, "each step checkpointed once: {steps:?}");

    let events = parse_sse(&stream);
    assert_numbered(&events);
    let last = events.iter().rev().find(|(_, e, _)| e == "values").unwrap();
    assert!(
        last.2.contains("done"),
        "the stream ends with the answer: {last:?}"
    );
    state
}

/// Kill `a` (holding the run) once `b` and `c` are up and a client follows the run on `b`; the
/// followed stream once the run ended.
async fn kill_and_follow(a: Served, b: &Served, (thread, run): (&str, &str)) -> String {
    let stream = follow(b, thread, run).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    a.kill();
    tokio::time::timeout(Duration::from_secs(60), stream)
        .await
        .expect("the followed stream ended")
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_the_claim_the_run_is_run_whole_elsewhere() {
    let Some((_db, needs)) = prerequisites("worker killed after the claim").await else {
        return;
    };
    let model = script(vec![reply(json!([append("a", "")]), "tool_use")]).await;
    let fleet = Fleet::new(needs, model);
    let a = fleet.worker("a", Some("claimed"));
    let (thread, run) = begin(&a).await;
    logged(&a, &format!("fault point claimed: run {run} parked")).await;
    let (b, c) = (fleet.worker("b", None), fleet.worker("c", None));
    let stream = kill_and_follow(a, &b, (&thread, &run)).await;
    let state = assert_taken_over(
        &c,
        (&thread, &run),
        &fleet.model,
        (&[("a", Some("a\n"))], 2),
        stream,
    )
    .await;
    let texts: Vec<&Value> = state["values"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["type"] == "human")
        .collect();
    assert_eq!(texts.len(), 1, "the input once: {texts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_model_call_the_run_goes_on_from_its_last_step() {
    let Some((_db, needs)) = prerequisites("worker killed mid model call").await else {
        return;
    };
    // A tool step, then a model call that never answers in time, then `done`.
    let never =
        reply(json!([{"type": "text", "text": "never"}]), "end_turn").set_delay(Duration::from_secs(120));
    let model = script(vec![reply(json!([append("a", "")]), "tool_use"), never]).await;
    let fleet = Fleet::new(needs, model);
    let a = fleet.worker("a", None);
    let (thread, run) = begin(&a).await;
    model_called(&fleet.model, 2).await;
    let (b, c) = (fleet.worker("b", None), fleet.worker("c", None));
    let stream = kill_and_follow(a, &b, (&thread, &run)).await;
    assert!(!stream.contains("never"), "A's unanswered call left nothing");
    assert_taken_over(
        &c,
        (&thread, &run),
        &fleet.model,
        (&[("a", Some("a\n"))], 3),
        stream,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_between_two_tool_calls_the_finished_one_is_not_run_again() {
    let Some((_db, needs)) = prerequisites("worker killed between tool calls").await else {
        return;
    };
    // One step of two calls: `a` finishes, `b` is cut by the kill (its files are saved only at
    // its end, so its line is lost with it).
    let step = reply(json!([append("a", ""), append("b", " && sleep 60")]), "tool_use");
    let fleet = Fleet::new(needs, script(vec![step]).await);
    let a = fleet.worker("a", None);
    let (thread, run) = begin(&a).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !a_finished_b_started(&fleet.journal(&thread).await) {
        assert!(
            Instant::now() < deadline,
            "the step never got under way: {}",
            a.stderr()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (b, c) = (fleet.worker("b", None), fleet.worker("c", None));
    let stream = kill_and_follow(a, &b, (&thread, &run)).await;
    let state = assert_taken_over(
        &c,
        (&thread, &run),
        &fleet.model,
        (&[("a", Some("a\n")), ("b", None)], 2),
        stream,
    )
    .await;
    let messages = state["values"]["messages"].as_array().unwrap();
    let b_result = messages
        .iter()
        .find(|m| m["type"] == "tool" && m["tool_call_id"] == "toolu_b")
        .unwrap_or_else(|| panic!("no result for toolu_b: {messages:?}"));
    assert_eq!(b_result["status"], "error", "{b_result}");
    assert!(b_result["content"].to_string().contains("unknown"), "{b_result}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_the_last_checkpoint_the_run_is_not_run_again() {
    let Some((_db, needs)) = prerequisites("worker killed before storing the end").await else {
        return;
    };
    let model = script(vec![reply(json!([append("a", "")]), "tool_use")]).await;
    let fleet = Fleet::new(needs, model);
    let a = fleet.worker("a", Some("finished"));
    let (thread, run) = begin(&a).await;
    logged(&a, &format!("fault point finished: run {run} parked")).await;
    let (b, c) = (fleet.worker("b", None), fleet.worker("c", None));
    let stream = kill_and_follow(a, &b, (&thread, &run)).await;
    assert_taken_over(
        &c,
        (&thread, &run),
        &fleet.model,
        (&[("a", Some("a\n"))], 2),
        stream,
    )
    .await;
}
