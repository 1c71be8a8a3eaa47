//! The fence for thread-file writes: a worker that may have lost a run's lease writes none of the
//! thread's files.
//!
//! A checkpoint is fenced by its thread head's version (the worker that took the run over moved
//! it), but a thread's files are written one by one, by tools, with no such check: a worker frozen
//! (SIGSTOP, a long GC-like stall, a VM pause) inside a tool call past its lease would, once
//! resumed, write the call's files before its next heartbeat found the lease gone. So each run a
//! worker holds puts a [`Fence`] on its thread ([`ThreadFences::hold`]) that knows until when the
//! lease is surely held: the time the last successful heartbeat (or the claim) was *sent*, plus the
//! lease. The thread's file space is handed to the run through [`ThreadFences`] (a
//! [`ThreadFilesGuard`] on the checkpointer), and every write, delete and link first checks the
//! fence: past that time, or once a heartbeat found the lease lost, it is refused
//! (`PermissionDenied`, naming the lease) and nothing is written.
//!
//! The clock is this process's monotonic clock, which keeps counting while the process is stopped,
//! so a worker that wakes past its lease refuses before it could learn so from the database. What
//! it does not cover: a stall between the check and the write itself (microseconds, against a lease
//! of seconds), and a worker whose clock runs slower than the database's by more than the margin
//! between its heartbeats (a third of the lease) and the lease. Threads no run of this worker holds
//! (a run of a single `trellis serve` without `--database`, reads of the API) pass unfenced.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use trellis_middleware::ThreadId;
use trellis_middleware::backend::{
    AppendMode, Backend, BackendError, ByteRange, Capabilities, Entry, FileListing, GlobOutput, GrepOutput,
    GrepQuery, LocalDir, ReadOutput, VirtualPath, WriteMode, WriteOutcome, WriteSource,
};
use trellis_middleware::runtime::checkpoint::ThreadFilesGuard;

/// The lease of one run, as this worker knows it.
#[derive(Debug)]
pub struct Fence {
    /// Writes are allowed until then.
    until: Mutex<Instant>,
    /// A heartbeat found the lease gone.
    lost: AtomicBool,
}

impl Fence {
    fn new(until: Instant) -> Self {
        Self {
            until: Mutex::new(until),
            lost: AtomicBool::new(false),
        }
    }

    /// A heartbeat sent at `sent` renewed the lease for `lease`.
    pub fn renewed(&self, sent: Instant, lease: Duration) {
        let mut until = self.until.lock().unwrap_or_else(PoisonError::into_inner);
        *until = (*until).max(sent + lease);
    }

    /// A heartbeat found the lease gone: nothing more is written.
    pub fn lose(&self) {
        self.lost.store(true, Ordering::SeqCst);
    }

    /// Whether writes are allowed now.
    fn holds(&self) -> bool {
        !self.lost.load(Ordering::SeqCst)
            && Instant::now() < *self.until.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The fences of the runs this worker holds, by thread. Cheap to clone (one map shared).
#[derive(Debug, Clone, Default)]
pub struct ThreadFences {
    fences: Arc<Mutex<HashMap<ThreadId, Arc<Fence>>>>,
}

impl ThreadFences {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<ThreadId, Arc<Fence>>> {
        self.fences.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A run of `thread` was claimed at `claimed` with a lease of `lease`: its fence, in place
    /// until [`release`](Self::release).
    pub fn hold(&self, thread: ThreadId, claimed: Instant, lease: Duration) -> Arc<Fence> {
        let fence = Arc::new(Fence::new(claimed + lease));
        self.map().insert(thread, fence.clone());
        fence
    }

    /// The run that put `fence` on `thread` ended (a later run's fence stays).
    pub fn release(&self, thread: &ThreadId, fence: &Arc<Fence>) {
        let mut map = self.map();
        if map.get(thread).is_some_and(|f| Arc::ptr_eq(f, fence)) {
            map.remove(thread);
        }
    }

    /// `Ok` when `thread`'s files may be written now.
    fn check(&self, thread: &ThreadId, path: &VirtualPath) -> Result<(), BackendError> {
        let fence = self.map().get(thread).cloned();
        match fence {
            Some(fence) if !fence.holds() => Err(BackendError::PermissionDenied {
                path: path.to_string(),
                source: Some(
                    format!(
                        "this worker may have lost the lease of thread {thread}'s run: its files are not written"
                    )
                    .into(),
                ),
            }),
            _ => Ok(()),
        }
    }
}

impl ThreadFilesGuard for ThreadFences {
    fn guard(&self, thread_id: &ThreadId, files: Arc<dyn Backend>) -> Arc<dyn Backend> {
        Arc::new(FencedFiles {
            files,
            thread: thread_id.clone(),
            fences: self.clone(),
        })
    }
}

/// A thread's file space whose writes pass its fence first; reads pass through.
#[derive(Debug)]
struct FencedFiles {
    files: Arc<dyn Backend>,
    thread: ThreadId,
    fences: ThreadFences,
}

#[async_trait]
impl Backend for FencedFiles {
    fn capabilities(&self) -> Capabilities {
        self.files.capabilities()
    }

    fn sandbox(&self, cwd: &VirtualPath) -> Option<Arc<dyn trellis_middleware::backend::Sandbox>> {
        self.files.sandbox(cwd)
    }

    fn local_dirs(&self) -> Vec<LocalDir> {
        self.files.local_dirs()
    }

    async fn ls(&self, dir: &VirtualPath) -> Result<Vec<Entry>, BackendError> {
        self.files.ls(dir).await
    }

    async fn stat(&self, path: &VirtualPath) -> Result<Entry, BackendError> {
        self.files.stat(path).await
    }

    async fn stat_many(&self, paths: &[VirtualPath]) -> Vec<Result<Entry, BackendError>> {
        self.files.stat_many(paths).await
    }

    async fn read(&self, path: &VirtualPath, range: Option<ByteRange>) -> Result<ReadOutput, BackendError> {
        self.files.read(path, range).await
    }

    async fn read_many(
        &self,
        paths: &[VirtualPath],
        range: Option<ByteRange>,
    ) -> Vec<Result<ReadOutput, BackendError>> {
        self.files.read_many(paths, range).await
    }

    async fn write(
        &self,
        path: &VirtualPath,
        data: Bytes,
        mode: WriteMode,
    ) -> Result<WriteOutcome, BackendError> {
        self.fences.check(&self.thread, path)?;
        self.files.write(path, data, mode).await
    }

    async fn write_stream(
        &self,
        path: &VirtualPath,
        source: WriteSource,
        len: u64,
        mode: WriteMode,
    ) -> Result<WriteOutcome, BackendError> {
        self.fences.check(&self.thread, path)?;
        self.files.write_stream(path, source, len, mode).await
    }

    async fn delete(&self, path: &VirtualPath) -> Result<(), BackendError> {
        self.fences.check(&self.thread, path)?;
        self.files.delete(path).await
    }

    async fn append(
        &self,
        path: &VirtualPath,
        data: Bytes,
        mode: AppendMode,
    ) -> Option<Result<WriteOutcome, BackendError>> {
        if let Err(e) = self.fences.check(&self.thread, path) {
            return Some(Err(e));
        }
        self.files.append(path, data, mode).await
    }

    async fn link(
        &self,
        from: &VirtualPath,
        to: &VirtualPath,
        mode: WriteMode,
    ) -> Option<Result<WriteOutcome, BackendError>> {
        if let Err(e) = self.fences.check(&self.thread, to) {
            return Some(Err(e));
        }
        self.files.link(from, to, mode).await
    }

    async fn list_files_between(
        &self,
        base: &VirtualPath,
        after: Option<&VirtualPath>,
        until: Option<&VirtualPath>,
        limit: usize,
    ) -> Option<Result<FileListing, BackendError>> {
        self.files.list_files_between(base, after, until, limit).await
    }

    async fn list_files(&self, base: &VirtualPath, limit: usize) -> Result<FileListing, BackendError> {
        self.files.list_files(base, limit).await
    }

    async fn glob(&self, pattern: &str, base: &VirtualPath) -> Result<GlobOutput, BackendError> {
        self.files.glob(pattern, base).await
    }

    async fn grep(&self, query: &GrepQuery) -> Result<GrepOutput, BackendError> {
        self.files.grep(query).await
    }
}

#[cfg(test)]
mod tests {
    use trellis_middleware::backend::StateBackend;

    use super::*;

    fn path(p: &str) -> VirtualPath {
        VirtualPath::parse(p).unwrap_or_else(|e| panic!("{p}: {e}"))
    }

    #[tokio::test]
    async fn writes_pass_while_the_lease_holds_and_are_refused_after() {
        let fences = ThreadFences::default();
        let thread = ThreadId::new("t-1").unwrap_or_else(|e| panic!("{e}"));
        let other = ThreadId::new("t-2").unwrap_or_else(|e| panic!("{e}"));
        let store: Arc<dyn Backend> = Arc::new(StateBackend::new());
        let files = fences.guard(&thread, store.clone());
        let others = fences.guard(&other, store.clone());
        // No run held: unfenced.
        assert!(
            files
                .write(&path("/a"), Bytes::from_static(b"1"), WriteMode::Overwrite)
                .await
                .is_ok()
        );
        let lease = Duration::from_millis(200);
        let fence = fences.hold(thread.clone(), Instant::now(), lease);
        assert!(
            files
                .write(&path("/b"), Bytes::from_static(b"2"), WriteMode::Overwrite)
                .await
                .is_ok()
        );
        std::thread::sleep(lease + Duration::from_millis(20));
        let late = files
            .write(&path("/c"), Bytes::from_static(b"3"), WriteMode::Overwrite)
            .await;
        assert!(
            matches!(late, Err(BackendError::PermissionDenied { .. })),
            "{late:?}"
        );
        assert!(matches!(
            files.delete(&path("/a")).await,
            Err(BackendError::PermissionDenied { .. })
        ));
        let streamed = files
            .write_stream(&path("/c"), Box::new(&b"3"[..]), 1, WriteMode::Overwrite)
            .await;
        assert!(
            matches!(streamed, Err(BackendError::PermissionDenied { .. })),
            "a streamed write is fenced too: {streamed:?}"
        );
        assert!(
            store.stat(&path("/c")).await.is_err(),
            "nothing written past the lease"
        );
        assert!(files.read(&path("/a"), None).await.is_ok(), "reads pass");
        // Another thread is not fenced by this run.
        assert!(
            others
                .write(&path("/d"), Bytes::from_static(b"4"), WriteMode::Overwrite)
                .await
                .is_ok()
        );
        // A heartbeat renews it; a lost lease refuses at once.
        fence.renewed(Instant::now(), lease);
        assert!(
            files
                .write(&path("/c"), Bytes::from_static(b"3"), WriteMode::Overwrite)
                .await
                .is_ok()
        );
        fence.lose();
        assert!(
            files
                .write(&path("/e"), Bytes::from_static(b"5"), WriteMode::Overwrite)
                .await
                .is_err()
        );
        // Released: unfenced again; a later run's fence is not removed by an earlier run's release.
        let next = fences.hold(thread.clone(), Instant::now(), lease);
        fences.release(&thread, &fence);
        next.lose();
        assert!(
            files
                .write(&path("/f"), Bytes::from_static(b"6"), WriteMode::Overwrite)
                .await
                .is_err()
        );
        fences.release(&thread, &next);
        assert!(
            files
                .write(&path("/f"), Bytes::from_static(b"6"), WriteMode::Overwrite)
                .await
                .is_ok()
        );
    }
}
