//! The workers of a fault test: three `trellis serve` processes sharing one database and keeping
//! their threads on S3 (moto, `--store`), each with a state dir of its own, on one scripted model
//! (`kill_points.rs`, `fence.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wiremock::{MockServer, ResponseTemplate};

use super::super::harness::{Served, http};
use super::super::store::s3_env;
use crate::cli::harness::{messages, reply, trellis};
use crate::cli::sandbox::bwrap_or_skip;
use crate::queue::postgres::Database;
use crate::support::env_or_skip;

/// The served agent: the mock's model, bubblewrap, no approvals.
const AGENT_FILE: &str = "model = \"anthropic:claude-sonnet-4-5\"\n\
[sandbox]\nkind = \"bwrap\"\n\
[approvals]\nask = [\"none\"]\n";

/// Leases of the fault tests, in seconds.
pub(super) const LEASE: f64 = 2.0;

/// A mock model answering `replies` in order, one request each, then `done` to every later one.
pub(super) async fn script(replies: Vec<ResponseTemplate>) -> MockServer {
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
pub(super) struct Fleet {
    dir: tempfile::TempDir,
    database: String,
    endpoint: String,
    store: String,
    pub(super) model: MockServer,
}

impl Fleet {
    pub(super) fn new((database, [endpoint, bucket]): (String, [String; 2]), model: MockServer) -> Self {
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
    pub(super) fn worker(&self, name: &str, pause: Option<&str>) -> Served {
        self.worker_on(name, pause, &self.database)
    }

    /// [`worker`](Self::worker) reaching the database at `database` (through a proxy, say).
    pub(super) fn worker_on(&self, name: &str, pause: Option<&str>, database: &str) -> Served {
        let dir = self.dir.path();
        let mut command = trellis();
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--agent"])
            .arg(dir.join("trellis.toml"))
            .arg("--state-dir")
            .arg(dir.join(format!("state-{name}")))
            .args(["--database", database])
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
    pub(super) async fn journal(&self, thread: &str) -> Vec<Value> {
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
pub(super) async fn prerequisites(test: &str) -> Option<(Database, (String, [String; 2]))> {
    let s3 = env_or_skip(test, ["TRELLIS_S3_ENDPOINT", "TRELLIS_TEST_BUCKET"])?;
    if !bwrap_or_skip(test) {
        return None;
    }
    let (database, url) = crate::queue::postgres::test_database().await?;
    Some((database, (url, s3)))
}

/// Wait until `served` logs `line`.
pub(super) async fn logged(served: &Served, line: &str) {
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
