//! What running a command costs: one `execute` of `true` under bubblewrap against a plain
//! `sh -c true` spawn, in one run (target: under 20 ms per call, absolute, on the development
//! machine), the same through the unsandboxed shell, and materializing a 50-file skill folder from
//! a skill library of 300 skills on S3 (moto), as `execute` does when a command names the skill,
//! copied and from a warm [`FolderCache`]; and an `execute` of `true` over a thread space of 2,000
//! files on S3 the second time against the first, when the thread's cached base has it already
//! (`ThreadCache`).
//!
//! Prints one JSON object per measurement. Under `cargo test --all-targets` (no `--bench`) it does a
//! quick smoke run with a few iterations. Bubblewrap and S3 measurements say `skipped` with the
//! reason when they are not available (`cargo xtask bench` installs and starts both).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use trellis_backend::sandbox::{ExecFiles, ExecRequest};
use trellis_backend::{
    Backend, ObjectStoreBackend, Sandbox, StateBackend, StoreOptions, VirtualPath, WriteMode,
};
use trellis_fs_tools::sandbox::workdir::Workdir;
use trellis_fs_tools::sandbox::{BubblewrapConfig, BubblewrapSandbox, FolderCache, UnsandboxedShell};

fn smoke() -> bool {
    !std::env::args().any(|a| a == "--bench")
}

fn stats(mut xs: Vec<Duration>) -> (f64, f64) {
    xs.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    (
        ms(xs[xs.len() / 2]),
        ms(xs[(xs.len() * 9 / 10).min(xs.len() - 1)]),
    )
}

async fn time_exec(
    sandbox: &dyn Sandbox,
    files: &ExecFiles,
    request: &ExecRequest,
    runs: usize,
) -> Vec<Duration> {
    let mut xs = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        let out = sandbox.execute(files, request).await.unwrap();
        assert_eq!(out.exit_code, Some(0), "{out:?}");
        xs.push(t.elapsed());
    }
    xs
}

fn p(s: &str) -> VirtualPath {
    VirtualPath::parse(s).unwrap()
}

#[tokio::main]
async fn main() {
    let runs = if smoke() { 3 } else { 50 };

    let mut plain = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        let status = tokio::process::Command::new("sh")
            .args(["-c", "true"])
            .status()
            .await
            .unwrap();
        assert!(status.success());
        plain.push(t.elapsed());
    }
    let (plain_ms, plain_p90) = stats(plain);
    println!(
        "{}",
        json!({"case": "spawn sh -c true", "runs": runs, "median_ms": plain_ms, "p90_ms": plain_p90})
    );

    let files = ExecFiles::new(Arc::new(StateBackend::new()));
    let request = ExecRequest::new("true");
    let shell = UnsandboxedShell::default();
    let (shell_ms, shell_p90) = stats(time_exec(&shell, &files, &request, runs).await);
    println!(
        "{}",
        json!({"case": "execute true, unsandboxed", "runs": runs, "median_ms": shell_ms, "p90_ms": shell_p90,
               "ratio_to_spawn": shell_ms / plain_ms})
    );

    let bwrap = match BubblewrapSandbox::new(BubblewrapConfig::default()) {
        Ok(b) => b,
        Err(e) => {
            println!(
                "{}",
                json!({"case": "execute true, bubblewrap", "skipped": e.to_string()})
            );
            return;
        }
    };
    let (bwrap_ms, bwrap_p90) = stats(time_exec(&bwrap, &files, &request, runs).await);
    println!(
        "{}",
        json!({"case": "execute true, bubblewrap", "runs": runs, "median_ms": bwrap_ms, "p90_ms": bwrap_p90,
               "ratio_to_spawn": bwrap_ms / plain_ms, "overhead_ms": bwrap_ms - plain_ms, "target_ms": 20.0})
    );

    let Some(endpoint) = std::env::var("TRELLIS_S3_ENDPOINT")
        .ok()
        .filter(|e| !e.is_empty())
    else {
        println!(
            "{}",
            json!({"case": "materialize a 50-file skill from S3", "skipped": "TRELLIS_S3_ENDPOINT is not set"})
        );
        return;
    };
    let bucket = std::env::var("TRELLIS_TEST_BUCKET").unwrap_or_else(|_| "trellis-test".into());
    let prefix = format!("bench-sandbox-{}-{}", std::process::id(), chrono_free_nanos());
    let store: Arc<dyn Backend> = Arc::new(
        ObjectStoreBackend::from_url(
            &format!("s3://{bucket}/{prefix}"),
            &StoreOptions::s3_compatible(&endpoint, "test", "test"),
        )
        .unwrap(),
    );
    let (skills, per_skill) = if smoke() { (5, 3) } else { (300, 3) };
    let body = "x".repeat(2_000);
    let mut paths = Vec::new();
    for i in 0..50 {
        paths.push(format!("/big/scripts/part{i:02}.py"));
    }
    for s in 0..skills {
        for f in 0..per_skill {
            paths.push(format!("/skill-{s:03}/file{f}.md"));
        }
    }
    let uploads = futures::future::join_all(paths.iter().map(|path| {
        let store = store.clone();
        let body = body.clone();
        async move {
            store
                .write(&p(path), body.into(), WriteMode::Overwrite)
                .await
                .unwrap()
        }
    }));
    uploads.await;
    let view: Arc<dyn Backend> = Arc::new(
        trellis_backend::CompositeBackend::new(Arc::new(StateBackend::new()))
            .mount("/skills/lib", store)
            .unwrap(),
    );
    let files = ExecFiles::new(view).read_only_on_reach(p("/skills/lib"));
    let parent = std::env::temp_dir();
    let named_request = ExecRequest::new("python3 /skills/lib/big/scripts/part00.py");
    let cache = FolderCache::new(&parent, None).unwrap();
    let mut copied = Vec::new();
    let mut cached = Vec::new();
    let mut unnamed = Vec::new();
    for i in 0..(if smoke() { 2 } else { 10 }) {
        let t = Instant::now();
        let w = Workdir::materialize(&files, &named_request, &parent, None, None, None, &[])
            .await
            .unwrap();
        copied.push(t.elapsed());
        assert!(w.host_path(&p("/skills/lib/big/scripts/part49.py")).is_file());
        assert!(!w.host_path(&p("/skills/lib/skill-000")).exists());
        let t = Instant::now();
        let w = Workdir::materialize(&files, &named_request, &parent, None, Some(&cache), None, &[])
            .await
            .unwrap();
        // The first round fills the cache; the later ones measure a warm cache.
        if i > 0 {
            cached.push(t.elapsed());
        }
        assert_eq!(w.bound().len(), 1);
        let t = Instant::now();
        let _w = Workdir::materialize(&files, &ExecRequest::new("true"), &parent, None, None, None, &[])
            .await
            .unwrap();
        unnamed.push(t.elapsed());
    }
    let (copied_ms, copied_p90) = stats(copied);
    let (cached_ms, cached_p90) = stats(cached);
    let (unnamed_ms, _) = stats(unnamed);
    println!(
        "{}",
        json!({"case": "materialize a 50-file skill from S3", "library_skills": skills + 1,
               "skill_files": 50, "file_bytes": 2_000, "median_ms": copied_ms, "p90_ms": copied_p90,
               "median_ms_naming_no_skill": unnamed_ms})
    );
    println!(
        "{}",
        json!({"case": "the same skill from the folder cache (warm)", "library_skills": skills + 1,
               "skill_files": 50, "median_ms": cached_ms, "p90_ms": cached_p90,
               "ratio_to_uncached": cached_ms / copied_ms})
    );
    thread_space(&bwrap, &endpoint, &bucket).await;
}

/// `execute true` over a thread space of many files on S3, keyed by its thread: the first command
/// fetches every file into the thread's base, later ones only list (the ratio is within one run).
async fn thread_space(bwrap: &BubblewrapSandbox, endpoint: &str, bucket: &str) {
    let prefix = format!("bench-thread-{}-{}", std::process::id(), chrono_free_nanos());
    let store: Arc<dyn Backend> = Arc::new(
        ObjectStoreBackend::from_url(
            &format!("s3://{bucket}/{prefix}"),
            &StoreOptions::s3_compatible(endpoint, "test", "test"),
        )
        .unwrap(),
    );
    let (count, bytes) = if smoke() { (100, 4_096) } else { (2_000, 4_096) };
    let body = "y".repeat(bytes);
    futures::future::join_all((0..count).map(|i| {
        let (store, body) = (store.clone(), body.clone());
        async move {
            let path = p(&format!("/src/dir{:02}/file{i:04}.txt", i % 20));
            store
                .write(&path, body.into(), WriteMode::Overwrite)
                .await
                .unwrap();
        }
    }))
    .await;
    let request = ExecRequest::new("true");
    let files = ExecFiles::new(store.clone()).cache_key(prefix.clone());
    let t = Instant::now();
    let first = bwrap.execute(&files, &request).await.unwrap();
    let first_ms = t.elapsed().as_secs_f64() * 1000.0;
    assert_eq!(first.exit_code, Some(0), "{first:?}");
    let runs = if smoke() { 2 } else { 10 };
    let (warm_ms, warm_p90) = stats(time_exec(bwrap, &files, &request, runs).await);
    println!(
        "{}",
        json!({"case": format!("execute true over a {count}-file S3 thread space, again (cached base)"),
               "files": count, "file_bytes": bytes, "first_ms": first_ms,
               "median_ms": warm_ms, "p90_ms": warm_p90, "ratio_to_first": warm_ms / first_ms})
    );
}

/// Nanoseconds since the epoch, for unique prefixes.
fn chrono_free_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}
