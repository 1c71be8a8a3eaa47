//! The `trellis` binary's heap: mimalloc is built without asking for transparent huge pages
//! (docs/server.md, "Speed", item 13). On a VM whose host backs memory on first touch, each fault
//! of a 2 MiB page stalled a server thread, and every task queued on it, for 4–9 ms.
//!
//! With the kernel's THP mode at `madvise` (or `never`) the build's choice is what keeps huge
//! pages out, so the test runs the server as it is. At `always` the kernel backs large regions
//! without being asked; there the documented remedy is `MIMALLOC_ALLOW_THP=0` in the server's
//! environment, and that is what the test checks instead.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;

use super::harness::{AGENT_FILE, Served, always_done, http};

/// `AnonHugePages` of process `pid`, in KiB.
fn anon_huge_pages_kib(pid: u32) -> u64 {
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap();
    rollup
        .lines()
        .find_map(|line| line.strip_prefix("AnonHugePages:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("smaps_rollup has AnonHugePages")
}

#[tokio::test]
async fn a_served_heap_holds_no_transparent_huge_pages() {
    let mode = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    let always = mode.contains("[always]");
    let dir = tempfile::tempdir().unwrap();
    let model = always_done().await;
    let mut command = Served::command(dir.path(), None, AGENT_FILE);
    command.env_remove("MIMALLOC_ALLOW_THP");
    if always {
        command.env("MIMALLOC_ALLOW_THP", "0");
    }
    let served = Served::spawn(command, dir.path(), &model);

    // Enough work for the heap to grow past its first pages: runs on threads of their own, at once.
    let client = http();
    let runs = (0..20).map(|i| {
        let client = client.clone();
        let url = served.url.clone();
        async move {
            let body = json!({"assistant_id": "agent",
                              "input": {"messages": [{"role": "user", "content": format!("run {i}")}]}});
            let response = client
                .post(format!("{url}/runs/wait"))
                .json(&body)
                .send()
                .await
                .unwrap();
            response.status().as_u16()
        }
    });
    let statuses = futures::future::join_all(runs).await;
    assert!(
        statuses.iter().all(|s| *s == 200),
        "{statuses:?}\n{}",
        served.stderr()
    );

    assert_eq!(
        anon_huge_pages_kib(served.pid()),
        0,
        "THP mode {}: the server's heap has transparent huge pages",
        mode.trim()
    );
}
