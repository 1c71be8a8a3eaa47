//! One agent serving many threads at once, checkpoints and thread files on the S3 emulator, a
//! scripted model on a loopback port: every thread completes, every message is stored, and no
//! thread sees another's messages or files (the thread store's state belongs to its thread). The
//! `load` bench runs the same code at 200 threads over 5,000 skills.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../benches/bench_util/scripted.rs"]
mod scripted;

#[path = "../../benches/bench_util/load.rs"]
mod bench_load;

#[path = "../../../middleware/benches/bench_util/library.rs"]
mod library;

#[path = "../../../middleware/benches/bench_util/mod.rs"]
mod bench_util;

use std::sync::Arc;

use trellis_agent::backend::{Backend, ObjectStoreBackend, StoreOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_threads_on_s3_each_store_all_their_messages_and_see_only_their_own() {
    let [endpoint, bucket] = crate::support::require_env!("TRELLIS_S3_ENDPOINT", "TRELLIS_TEST_BUCKET");
    let skills = tempfile::tempdir().unwrap();
    library::generate_local(skills.path(), 50);
    let (_server, url, scripted) = scripted::start().await;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let tag = format!("load-{}-{nanos}", std::process::id());
    let options = StoreOptions::s3_compatible(&endpoint, "test", "test");
    let store: Arc<dyn Backend> =
        Arc::new(ObjectStoreBackend::from_url(&format!("s3://{bucket}/{tag}"), &options).unwrap());
    let (threads, steps) = (16, 10);
    let out = bench_load::serve(
        &url,
        &scripted,
        &skills.path().join("skills"),
        store,
        &tag,
        threads,
        steps,
    )
    .await;
    assert_eq!(out.failed, Vec::new(), "every run completes");
    assert_eq!(
        out.wrong,
        Vec::new(),
        "every thread stored its own messages, and only those"
    );
    assert_eq!(out.crossed, 0, "no request of one thread named another");
    assert_eq!(
        out.model_calls,
        threads * (steps + 1),
        "each thread made its steps and its answer"
    );
    assert_eq!(out.gaps.len(), threads * steps, "one latency per step");
}
