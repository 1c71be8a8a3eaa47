//! Background jobs a command leaves behind never race the write-back (review F5): by the time the
//! copy is walked, every process of the command is gone, so what the walk sees is what it reads.
//! Bubblewrap waits for its PID namespace's init to exit (the kernel empties the namespace before
//! that); the unsandboxed shell kills the command's process group (a job that leaves the group
//! survives it: that shell isolates nothing).

use std::sync::Arc;
use std::time::Duration;

use trellis_backend::Backend;
use trellis_backend::sandbox::{ExecFiles, ExecRequest, Sandbox};

use super::{bwrap, state, text};

/// Part of the conformance suite: a job that writes after the command ended is gone before then,
/// so its write is never written back (deterministically "fully out"), and the command's own
/// writes are.
pub async fn a_late_background_write_is_never_written_back(s: &dyn Sandbox, b: Arc<dyn Backend>) {
    let request = ExecRequest::new("(sleep 0.3; echo late > late.txt) & echo early > early.txt");
    let out = s
        .execute(&ExecFiles::new(b.clone()), &request)
        .await
        .unwrap_or_else(|e| panic!("{}: {e}", s.name()));
    assert!(out.succeeded(), "{}: {out:?}", s.name());
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(text(b.as_ref(), "/late.txt").await, None, "{}: {out:?}", s.name());
    assert_eq!(text(b.as_ref(), "/early.txt").await.as_deref(), Some("early\n"));
}

/// A job that rewrites files as fast as it can, with its output closed (so the output pipe does
/// not tell when it ends): when the write-back walks the copy it is already dead, so no file the
/// walk saw changes under it ("changed after the command ended", or a vanished file, would show in
/// `not_written`), and what comes back is one of the states the job left whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_background_job_is_gone_before_the_walk() {
    let Some(sandbox) = bwrap("a_busy_background_job_is_gone_before_the_walk") else {
        return;
    };
    let command = "(exec >/dev/null 2>&1; while :; do echo aaaa > f; echo bb > f; \
                   mkdir -p d && echo x > d/y && rm -r d; done) & sleep 0.1";
    for round in 0..10 {
        let b = state();
        let out = sandbox
            .execute(&ExecFiles::new(b.clone()), &ExecRequest::new(command))
            .await
            .unwrap();
        assert_eq!(out.exit_code, Some(0), "round {round}: {out:?}");
        assert!(out.not_written.is_empty(), "round {round}: {out:?}");
        let f = text(b.as_ref(), "/f").await;
        assert!(
            matches!(f.as_deref(), Some("aaaa\n" | "bb\n" | "")),
            "round {round}: {f:?}"
        );
    }
}
