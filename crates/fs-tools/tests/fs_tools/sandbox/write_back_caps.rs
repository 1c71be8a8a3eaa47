//! The write-back's bounds (review F3), part of the conformance suite: a command can leave far more
//! than Trellis should read back and store (`truncate -s 1000M` costs it nothing, `seq | xargs
//! touch` little). Over a bound, what is not written is named as
//! [`NotWrittenReason::TooLarge`], nothing already in the store is lost, nothing is deleted for a
//! part the walk did not reach, and what fits still comes back.

use std::sync::Arc;
use std::time::Duration;

use trellis_backend::sandbox::{
    ExecFiles, ExecOutput, ExecRequest, FileChangeKind, NotWrittenReason, Sandbox, WriteBackLimits,
};
use trellis_backend::{Backend, PathFilter, VirtualPath};

use super::{p, seed, text};

async fn exec(s: &dyn Sandbox, files: &ExecFiles, command: &str) -> ExecOutput {
    s.execute(files, &ExecRequest::new(command))
        .await
        .unwrap_or_else(|e| panic!("{}: {command:?} failed: {e}", s.name()))
}

fn caps(max_files: usize, max_bytes: u64, max_time: Duration) -> WriteBackLimits {
    WriteBackLimits {
        max_files,
        max_bytes,
        max_time,
    }
}

/// The `TooLarge` messages of `out`, by path.
fn too_large(out: &ExecOutput) -> Vec<(&str, &str)> {
    out.not_written
        .iter()
        .filter_map(|n| match &n.reason {
            NotWrittenReason::TooLarge(why) => Some((n.path.as_str(), why.as_str())),
            _ => None,
        })
        .collect()
}

async fn files_below(b: &dyn Backend, dir: &str) -> usize {
    b.list_files(&p(dir), 10_000).await.map_or(0, |l| l.files.len())
}

/// More new files than the entry bound: the walk stops there, at most the bound's worth is
/// written, the stop is named, and a file the command removed is not deleted (the walk did not
/// reach everything, so a removed file cannot be told from one it did not see).
pub async fn many_small_files_stop_at_the_entry_bound(s: &dyn Sandbox, b: Arc<dyn Backend>) {
    seed(b.as_ref(), &[("/keep/a.txt", "keep me")]).await;
    let files = ExecFiles::new(b.clone()).write_back_limits(caps(50, 1 << 30, Duration::from_secs(60)));
    let out = exec(
        s,
        &files,
        "mkdir many && cd many && seq 200 | xargs touch && cd .. && rm keep/a.txt",
    )
    .await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    let created = out
        .changes
        .iter()
        .filter(|c| c.kind == FileChangeKind::Created)
        .count();
    assert!(created < 50, "{}: {created} files written back", s.name());
    assert!(files_below(b.as_ref(), "/many").await < 50);
    let over = too_large(&out);
    assert!(
        over.iter()
            .any(|(_, why)| why.contains("more than 50 new or changed entries")),
        "{}: {over:?}",
        s.name()
    );
    assert_eq!(
        text(b.as_ref(), "/keep/a.txt").await.as_deref(),
        Some("keep me"),
        "{}: {out:?}",
        s.name()
    );
    assert!(over.iter().any(|(path, _)| *path == "/keep/a.txt"), "{over:?}");
    assert!(!out.succeeded());
}

/// Bytes read so far by this process (`rchar` of `/proc/self/io`), when the kernel counts them.
fn bytes_read() -> Option<u64> {
    let io = std::fs::read_to_string("/proc/self/io").ok()?;
    io.lines()
        .find_map(|l| l.strip_prefix("rchar: "))
        .and_then(|n| n.trim().parse().ok())
}

/// Sparse files over the byte bound cost the command nothing; they are counted by their apparent
/// size before anything is read, named, and never read or written. Smaller files still come back.
/// (Each is kept under the sandbox's 1 GiB file-size limit; together they are 2000 MiB.)
pub async fn sparse_files_over_the_byte_bound_are_not_read(s: &dyn Sandbox, b: Arc<dyn Backend>) {
    let files = ExecFiles::new(b.clone()).write_back_limits(caps(1000, 100 << 20, Duration::from_secs(60)));
    let before = bytes_read();
    let out = exec(
        s,
        &files,
        "truncate -s 1000M huge1 huge2 && truncate -s 1M sparse_small && echo hi > small.txt",
    )
    .await;
    let read = bytes_read().zip(before).map(|(after, before)| after - before);
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    if let Some(read) = read {
        // Other tests of this process read too (one prints 200 MB); reading either big file would
        // take 1000 MiB.
        assert!(read < 900 << 20, "{}: the write-back read {read} bytes", s.name());
    }
    let over = too_large(&out);
    for huge in ["/huge1", "/huge2"] {
        assert!(
            over.iter()
                .any(|(path, why)| *path == huge && why.contains("104857600")),
            "{}: {huge} not named: {out:?}",
            s.name()
        );
        assert_eq!(b.stat(&p(huge)).await.ok(), None, "{huge} reached the store");
    }
    assert_eq!(text(b.as_ref(), "/small.txt").await.as_deref(), Some("hi\n"));
    assert_eq!(
        b.stat(&p("/sparse_small")).await.map(|e| e.size).ok(),
        Some(1 << 20)
    );
}

/// A write-back past its time bound stops: nothing more is written and nothing is deleted.
pub async fn the_time_bound_stops_the_write_back(s: &dyn Sandbox, b: Arc<dyn Backend>) {
    seed(b.as_ref(), &[("/old.txt", "old")]).await;
    let files = ExecFiles::new(b.clone()).write_back_limits(caps(1000, 1 << 30, Duration::ZERO));
    let out = exec(s, &files, "echo x > new.txt && rm old.txt").await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert_eq!(text(b.as_ref(), "/new.txt").await, None, "{out:?}");
    assert_eq!(text(b.as_ref(), "/old.txt").await.as_deref(), Some("old"));
    assert!(
        too_large(&out)
            .iter()
            .any(|(_, why)| why.contains("took longer than its limit")),
        "{}: {out:?}",
        s.name()
    );
    assert!(out.changes.is_empty(), "{out:?}");
}

/// Files left as they were count toward no bound: a view larger than the bounds still works, and
/// what the command changed within them comes back. That holds for files the rules do not let the
/// agent write too: left as they were, they are not listed at all (they used to be listed as
/// denied on every call).
pub async fn unchanged_files_count_toward_no_bound(s: &dyn Sandbox, b: Arc<dyn Backend>) {
    let seeded: Vec<(String, String)> = (0..30)
        .map(|i| (format!("/big/f{i}.txt"), format!("file {i:03}")))
        .collect();
    let pairs: Vec<(&str, &str)> = seeded.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    seed(b.as_ref(), &pairs).await;
    let files = ExecFiles::new(b.clone())
        .write_back_limits(caps(5, 16, Duration::from_secs(60)))
        .writable(PathFilter::new(|path| !path.as_str().starts_with("/big/f2")));
    for round in 0..2 {
        let command = format!("echo r{round} > big/f1.txt && echo n{round} > new{round}.txt");
        let out = exec(s, &files, &command).await;
        assert!(out.succeeded(), "{}: round {round}: {out:?}", s.name());
        assert_eq!(out.changes.len(), 2, "{out:?}");
        assert_eq!(text(b.as_ref(), "/big/f1.txt").await, Some(format!("r{round}\n")));
    }
    assert_eq!(files_below(b.as_ref(), "/big").await, 30);
}

/// The write-back never grows the view past what a command may be given, so the next command
/// still runs.
pub async fn the_view_never_outgrows_materialization(s: &dyn Sandbox, b: Arc<dyn Backend>) {
    seed(b.as_ref(), &[("/a.txt", "a"), ("/b.txt", "b")]).await;
    let mut files = ExecFiles::new(b.clone());
    files.max_files = 3;
    let out = exec(s, &files, "echo 1 > n1.txt && echo 2 > n2.txt").await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    let created: Vec<&VirtualPath> = out.changes.iter().map(|c| &c.path).collect();
    assert_eq!(created.len(), 1, "{}: {out:?}", s.name());
    let over = too_large(&out);
    assert_eq!(over.len(), 1, "{over:?}");
    assert!(over[0].1.contains("more than 3 files"), "{}: {over:?}", s.name());
    let next = exec(s, &files, "ls").await;
    assert!(
        next.succeeded(),
        "{}: the next command failed: {next:?}",
        s.name()
    );
}
