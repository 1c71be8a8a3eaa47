//! Helpers shared by the benches of this crate (included with `#[path]`; not a bench target).
#![allow(dead_code, clippy::unwrap_used)]

use std::time::Duration;

/// The median of `xs` (the upper one of an even count).
pub fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

/// Milliseconds, rounded to the microsecond.
pub fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

/// This process's peak resident set size (`VmHWM`), in MB to one decimal; 0 where unknown.
pub fn peak_rss_mb() -> f64 {
    peak_rss_mb_in("/proc/self/status")
}

/// The peak resident set size (`VmHWM`) of the running process `pid`, as [`peak_rss_mb`].
pub fn peak_rss_mb_of(pid: u32) -> f64 {
    peak_rss_mb_in(&format!("/proc/{pid}/status"))
}

/// `VmHWM` from a `/proc/<pid>/status` file, in MB to one decimal; 0 where unknown.
fn peak_rss_mb_in(status_file: &str) -> f64 {
    let status = std::fs::read_to_string(status_file).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(0.0, |kb| (kb / 1024.0 * 10.0).round() / 10.0)
}

/// The multi-threaded runtime the benches run on.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// What this process was started to do, when it is a child of [`peak_rss_of_child`].
pub fn child_spec() -> Option<String> {
    std::env::var("TRELLIS_BENCH_CHILD").ok()
}

/// The peak RSS a fresh child of this bench prints: the bench binary run again with
/// `TRELLIS_BENCH_CHILD=spec` (so earlier work of the parent does not count).
pub fn peak_rss_of_child(spec: &str) -> f64 {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .env("TRELLIS_BENCH_CHILD", spec)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "child failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or(0.0)
}
