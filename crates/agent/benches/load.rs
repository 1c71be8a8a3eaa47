//! Load: one agent serving 200 concurrent threads (10 tool-calling steps each) over a 5,000-skill
//! library on local disk, checkpoints and thread files on the S3 emulator, a scripted model on a
//! loopback port (`bench_util/load.rs` says what each thread does and what is checked after).
//! Reports steps per second (model calls over the wall time), p50/p99 step latency (from a
//! thread's model reply to its next request: its tools and checkpoint under the load) and this
//! process's peak RSS (`VmHWM`, which includes the loopback model server; target ≤ 200 MB), both
//! while serving (`serving_peak_rss_mb`) and after every thread was loaded back for checking.
//! Needs `TRELLIS_S3_ENDPOINT` (as `cargo xtask bench` sets it); prints a `skipped` row without.
//! Under `cargo test --all-targets` (no `--bench`): 4 threads of 3 steps over 20 skills.
//! `TRELLIS_BENCH_THREADS` sets the thread count.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "bench_util/scripted.rs"]
mod scripted;

#[path = "bench_util/load.rs"]
mod load;

#[path = "../../middleware/benches/bench_util/library.rs"]
mod library;

#[path = "../../middleware/benches/bench_util/mod.rs"]
mod bench_util;

use bench_util::{ms, peak_rss_mb};

use std::sync::Arc;

use serde_json::json;
use trellis_agent::backend::{Backend, ObjectStoreBackend, StoreOptions};

fn main() {
    let smoke = !std::env::args().any(|a| a == "--bench");
    let Ok(endpoint) = std::env::var("TRELLIS_S3_ENDPOINT") else {
        println!(
            "{}",
            json!({"bench": "load", "skipped": "TRELLIS_S3_ENDPOINT is not set"})
        );
        return;
    };
    let (threads, steps, skills) = if smoke {
        (4, 3, 20)
    } else {
        let threads = std::env::var("TRELLIS_BENCH_THREADS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(200);
        (threads, 10, 5_000)
    };
    let root = tempfile::tempdir().unwrap();
    library::generate_local(root.path(), skills);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (_server, url, scripted) = scripted::start().await;
        let bucket = std::env::var("TRELLIS_TEST_BUCKET").unwrap_or_else(|_| "trellis-test".into());
        let tag = format!("bench-load-{}", std::process::id());
        let options = StoreOptions::s3_compatible(&endpoint, "test", "test");
        let store: Arc<dyn Backend> =
            Arc::new(ObjectStoreBackend::from_url(&format!("s3://{bucket}/{tag}"), &options).unwrap());
        let out = load::serve(
            &url,
            &scripted,
            &root.path().join("skills"),
            store,
            &tag,
            threads,
            steps,
        )
        .await;
        assert!(
            out.failed.is_empty(),
            "runs failed: {:?}",
            &out.failed[..out.failed.len().min(3)]
        );
        assert!(
            out.wrong.is_empty(),
            "threads stored wrong: {:?}",
            &out.wrong[..out.wrong.len().min(3)]
        );
        assert_eq!(out.crossed, 0, "a request named another thread");
        let pct = |p: f64| {
            out.gaps
                .get(((out.gaps.len() as f64 * p) as usize).min(out.gaps.len().saturating_sub(1)))
        };
        println!(
            "{}",
            json!({
                "bench": "load", "threads": threads, "steps_per_thread": steps, "skills": skills,
                "store": "s3-emulator",
                "model_calls": out.model_calls,
                "elapsed_ms": ms(out.elapsed),
                "steps_per_s": ((out.model_calls as f64 / out.elapsed.as_secs_f64()) * 10.0).round() / 10.0,
                "step_p50_ms": pct(0.5).map(|d| ms(*d)),
                "step_p99_ms": pct(0.99).map(|d| ms(*d)),
                "serving_peak_rss_mb": out.serving_peak_rss_mb,
                "peak_rss_mb": peak_rss_mb(),
                "threads_checked": threads - out.wrong.len(),
                "target_peak_rss_mb": 200,
            })
        );
    });
}
