//! `read_many` against one-by-one reads of 1,000 small files.
//!
//! Runs on an in-memory store always, and on the S3 emulator when `TRELLIS_S3_ENDPOINT` is set (as
//! `cargo xtask bench` does): once straight at the emulator, and once through a loopback proxy that
//! adds a fixed delay to every request (`TRELLIS_BENCH_LATENCY_MS`, default 50 ms; AWS quotes 100–200 ms
//! first-byte latency for small S3 objects). The bare emulator (moto) spends ~3 ms of one Python
//! thread per request, so there both sides are bound by the server's CPU and concurrency cannot help
//! much; the proxied run shows what `read_many` exists for, hiding round trips. Prints one JSON object
//! per run; `ratio` = read_many time / sequential time (target on S3: at most 0.1).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use trellis_backend::{Backend, ObjectStoreBackend, StateBackend, StoreOptions, VirtualPath, WriteMode};

#[path = "bench_util/latency_proxy.rs"]
mod latency_proxy;
use latency_proxy::latency_proxy;

const FILES: usize = 1_000;

/// `cargo bench` passes `--bench`; under `cargo test --all-targets` this binary runs without it and
/// only does a quick smoke run (fewer files, no added-latency run).
fn smoke() -> bool {
    !std::env::args().any(|a| a == "--bench")
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

fn s3(endpoint: &str, prefix: &str) -> Arc<dyn Backend> {
    let bucket = std::env::var("TRELLIS_TEST_BUCKET").unwrap_or_else(|_| "trellis-test".into());
    let options = StoreOptions::s3_compatible(endpoint, "test", "test");
    Arc::new(ObjectStoreBackend::from_url(&format!("s3://{bucket}/{prefix}"), &options).unwrap())
}

async fn measure(name: &str, backend: Arc<dyn Backend>, runs: usize, extra: serde_json::Value) {
    let files = if smoke() { 50 } else { FILES };
    let paths: Vec<VirtualPath> = (0..files)
        .map(|i| VirtualPath::parse(&format!("/skills/s{i:04}/SKILL.md")).unwrap())
        .collect();
    futures::stream::iter(paths.iter().cloned())
        .map(|p| {
            let backend = backend.clone();
            async move {
                let body = format!("---\nname: s\ndescription: skill {p}\n---\nbody\n");
                backend
                    .write(&p, body.into(), WriteMode::Overwrite)
                    .await
                    .unwrap();
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<()>>()
        .await;
    let mut sequential = Vec::new();
    let mut batched = Vec::new();
    for _ in 0..runs {
        let started = Instant::now();
        for p in &paths {
            backend.read(p, None).await.unwrap();
        }
        sequential.push(started.elapsed());
        let started = Instant::now();
        let results = backend.read_many(&paths, None).await;
        batched.push(started.elapsed());
        assert!(results.iter().all(Result::is_ok));
    }
    let (seq, many) = (median(sequential), median(batched));
    println!(
        "{}",
        serde_json::json!({
            "bench": "read_many",
            "store": name,
            "files": files,
            "sequential_ms": seq.as_secs_f64() * 1e3,
            "read_many_ms": many.as_secs_f64() * 1e3,
            "ratio": many.as_secs_f64() / seq.as_secs_f64(),
            "runs": runs,
            "setup": extra,
        })
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        measure("state", Arc::new(StateBackend::new()), 5, serde_json::json!({})).await;
        let Ok(endpoint) = std::env::var("TRELLIS_S3_ENDPOINT") else {
            if std::env::var("TRELLIS_EMULATORS").as_deref() == Ok("required") {
                panic!("TRELLIS_S3_ENDPOINT is not set but emulators are required");
            }
            eprintln!("skipped: S3 read_many bench (set TRELLIS_S3_ENDPOINT or run `cargo xtask bench`)");
            return;
        };
        let prefix = format!("bench-read-many-{}", std::process::id());
        measure(
            "s3-emulator",
            s3(&endpoint, &prefix),
            3,
            serde_json::json!({"added_latency_ms": 0}),
        )
        .await;
        let delay_ms: u64 = if smoke() {
            5
        } else {
            std::env::var("TRELLIS_BENCH_LATENCY_MS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(50)
        };
        let host = endpoint.trim_start_matches("http://").to_owned();
        let proxied = latency_proxy(host, Duration::from_millis(delay_ms)).await;
        measure(
            "s3-emulator+latency",
            s3(&proxied, &format!("{prefix}-latency")),
            1,
            serde_json::json!({"added_latency_ms": delay_ms}),
        )
        .await;
    });
}
