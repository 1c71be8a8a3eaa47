//! [`BackendCheckpointer`]: threads stored as an append-only log of steps through a storage
//! [`Backend`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use bytes::Bytes;

use super::ThreadFilesGuard;
use super::appended::{LogAt, StoreAppends};
use super::blobs::{KnownBlobs, ensure_blob};
use super::delta::{Previous, message_delta, slot_delta, slots_unchanged};
use super::record::{
    BodyOut, CHUNK_MESSAGES, LOG_FORMAT, SNAPSHOT_STEPS, SinceBase, StepHeader, StepName, chunk_messages,
    encode_step, summarize,
};
use super::shared::ContentMemo;
use super::thread_cache::{Known, ThreadCache};
use super::{Checkpoint, CheckpointError, CheckpointInfo, CheckpointVersion, Checkpointer, StoredCheckpoint};
use crate::backend::{Backend, BackendError, ScopedBackend, VirtualPath};
use crate::runtime::context::ThreadId;
use crate::runtime::message::Message;
use crate::runtime::random;

/// Threads stored through any [`Backend`] as an append-only log, one object per step:
///
/// ```text
/// {root}/{thread}/head.json              the latest step: its name and the steps since the last
///                                        snapshot; on local disk a hard link to the step object
/// {root}/{thread}/log/{seq}-{nonce}-{parent}.json   what each step changed (see `checkpoint/record.rs`)
/// {root}/{thread}/blobs/{sha256}.json    large shared values and message chunks, once each, by content
/// {root}/{thread}/files/                 the thread's own files (Checkpointer::thread_files)
/// {root}/{thread}/calls/{sha256}.json    the current step's tool-call journal (`journal.rs`)
/// ```
///
/// A save writes the step's new messages and changed slots (found by identity against the state
/// this process last saved or loaded, so nothing unchanged is serialized; a save that changes
/// nothing writes nothing and returns the version it was given), then moves the head
/// with a version-checked write or link ([`WriteMode::CreateNew`](crate::backend::WriteMode::CreateNew) for a new thread,
/// [`WriteMode::IfVersion`](crate::backend::WriteMode::IfVersion) after; [`Backend::link`] where the store links, so moving the head
/// creates and frees no file). Of two workers racing on one step exactly one moves the head;
/// the other gets [`CheckpointError::Conflict`], its step object is left unreferenced, and it can
/// reload and re-apply. A process that dies between writing its step and moving the head leaves
/// the thread at its previous step. Every 32nd step is a base step (a snapshot) whose messages
/// are chunks by content, so loading reads the head, at most 32 steps (one batch) and the
/// snapshot's chunks, and lists nothing; heads of older builds are loaded by listing the log once.
/// Durability: see "Thread store" in docs/architecture.md (atomic writes everywhere; no `fsync`
/// on local disk, so a killed process loses nothing but a power loss may lose the last seconds).
///
/// Threads written by older builds (`{root}/{thread}/checkpoint.json`, formats 1 and 2) are still
/// read; their next save starts the log with a base step and removes the old file.
#[derive(Debug, Clone)]
pub struct BackendCheckpointer {
    pub(super) backend: Arc<dyn Backend>,
    pub(super) root: VirtualPath,
    pub(super) known_blobs: Arc<KnownBlobs>,
    pub(super) memo: Arc<ContentMemo>,
    pub(super) cache: Arc<ThreadCache>,
    /// The store may link (see [`Backend::link`]); cleared the first time it says it cannot.
    pub(super) links: Arc<AtomicBool>,
    /// Whether the store appends (`appended.rs`), once asked: [`StoreAppends`].
    pub(super) appends: Arc<StoreAppends>,
    /// New threads keep their steps in one file where the store appends; cleared by
    /// [`one_object_per_step`](Self::one_object_per_step).
    one_file: bool,
    /// Wraps each thread's file space ([`Checkpointer::thread_files`]); see
    /// [`with_files_guard`](Self::with_files_guard).
    files_guard: Option<Arc<dyn ThreadFilesGuard>>,
}

const HEAD: &str = "head.json";
pub(super) const LEGACY: &str = "checkpoint.json";
const LOG_DIR: &str = "log";
const BLOB_DIR: &str = "blobs";
const FILES_DIR: &str = "files";
/// Versions of old-format threads carry this prefix, so they never equal a head's version.
pub(super) const LEGACY_VERSION: &str = "v1:";
/// A save appending more messages than this encodes them on a blocking thread.
const INLINE_MESSAGES: usize = 16;
/// Where the step being saved attaches.
pub(super) enum Parent {
    /// A new thread.
    None,
    /// After this step of the log; `Some` where the thread's steps are one file, ending there.
    Step(StepName, Option<LogAt>),
    /// After an old-format checkpoint file.
    Legacy,
}

impl BackendCheckpointer {
    /// Checkpoints under `root` of `backend`. Fails when the backend cannot do version-checked writes.
    pub fn new(backend: Arc<dyn Backend>, root: VirtualPath) -> Result<Self, CheckpointError> {
        if !backend.capabilities().versioned_writes {
            return Err(CheckpointError::Unsupported(format!(
                "backend {backend:?} has no version-checked writes"
            )));
        }
        Ok(Self {
            backend,
            root,
            known_blobs: Arc::default(),
            memo: Arc::default(),
            cache: Arc::default(),
            links: Arc::new(AtomicBool::new(true)),
            appends: Arc::default(),
            one_file: true,
            files_guard: None,
        })
    }

    /// The same checkpointer, keeping each new thread's steps as one object per step even on a
    /// store that appends, as builds before the one-file layout did (see "Thread store" in
    /// docs/architecture.md). Threads are read whichever layout they have; this only decides
    /// what a new thread gets.
    pub fn one_object_per_step(mut self) -> Self {
        self.one_file = false;
        self
    }

    /// Whether a new thread keeps its steps in one file.
    pub(super) async fn new_threads_in_one_file(&self) -> bool {
        self.one_file && self.appends.ask(self.backend.as_ref(), &self.root).await
    }

    /// The same checkpointer, each thread's file space ([`Checkpointer::thread_files`]) handed
    /// out through `guard`. Checkpoints themselves are not guarded: their head's version check is
    /// their fence.
    pub fn with_files_guard(mut self, guard: Arc<dyn ThreadFilesGuard>) -> Self {
        self.files_guard = Some(guard);
        self
    }

    pub(super) fn storage(thread_id: &ThreadId, source: BackendError) -> CheckpointError {
        CheckpointError::Storage {
            thread_id: thread_id.clone(),
            source,
        }
    }

    pub(super) fn corrupt(
        thread_id: &ThreadId,
        step: Option<u64>,
        reason: impl Into<String>,
    ) -> CheckpointError {
        CheckpointError::Corrupt {
            thread_id: thread_id.clone(),
            step,
            reason: reason.into(),
        }
    }

    /// The error for `what` (a step, its header, a blob, …) that did not decode: `Unfinished`
    /// when its JSON stops short (an empty file included), `Corrupt` otherwise.
    pub(super) fn undecodable(
        thread_id: &ThreadId,
        step: Option<u64>,
        what: impl std::fmt::Display,
        error: &serde_json::Error,
    ) -> CheckpointError {
        if error.is_eof() {
            CheckpointError::Unfinished {
                thread_id: thread_id.clone(),
                step,
                what: what.to_string(),
            }
        } else {
            Self::corrupt(thread_id, step, format!("{what}: {error}"))
        }
    }

    pub(super) fn conflict(thread_id: &ThreadId) -> CheckpointError {
        CheckpointError::Conflict {
            thread_id: thread_id.clone(),
        }
    }

    pub(super) fn join(
        thread_id: &ThreadId,
        dir: &VirtualPath,
        name: &str,
    ) -> Result<VirtualPath, CheckpointError> {
        dir.join(name)
            .map_err(|e| Self::storage(thread_id, BackendError::invalid_path(name, e)))
    }

    pub(super) fn thread_dir(&self, thread_id: &ThreadId) -> Result<VirtualPath, CheckpointError> {
        Self::join(thread_id, &self.root, thread_id.as_str())
    }

    /// Where the thread's head lives: the one object of a thread that is overwritten (version-checked).
    pub fn path(&self, thread_id: &ThreadId) -> Result<VirtualPath, CheckpointError> {
        Self::join(thread_id, &self.thread_dir(thread_id)?, HEAD)
    }

    /// Where an older build kept the thread's only checkpoint.
    pub(super) fn legacy_path(&self, thread_id: &ThreadId) -> Result<VirtualPath, CheckpointError> {
        Self::join(thread_id, &self.thread_dir(thread_id)?, LEGACY)
    }

    pub(super) fn log_dir(&self, thread_id: &ThreadId) -> Result<VirtualPath, CheckpointError> {
        Self::join(thread_id, &self.thread_dir(thread_id)?, LOG_DIR)
    }

    pub(super) fn step_path(
        &self,
        thread_id: &ThreadId,
        step: &StepName,
    ) -> Result<VirtualPath, CheckpointError> {
        Self::join(thread_id, &self.log_dir(thread_id)?, &step.file_name())
    }

    pub(super) fn blob_dir(&self, thread_id: &ThreadId) -> Result<VirtualPath, CheckpointError> {
        Self::join(thread_id, &self.thread_dir(thread_id)?, BLOB_DIR)
    }

    /// Where the blob with content hash `hash` (64 hex digits) of the thread lives.
    pub(super) fn blob_path(&self, thread_id: &ThreadId, hash: &str) -> Result<VirtualPath, CheckpointError> {
        Self::join(thread_id, &self.blob_dir(thread_id)?, &format!("{hash}.json"))
    }

    /// `{root}/{thread_id}/files`: the thread's own files.
    pub(super) fn files_dir(&self, thread_id: &ThreadId) -> Result<VirtualPath, CheckpointError> {
        Self::join(thread_id, &self.thread_dir(thread_id)?, FILES_DIR)
    }

    /// Write blobs the thread may not have yet.
    pub(super) async fn write_blobs(
        &self,
        thread_id: &ThreadId,
        blobs: impl IntoIterator<Item = (String, Bytes)>,
    ) -> Result<(), CheckpointError> {
        for (hash, bytes) in blobs {
            let path = self.blob_path(thread_id, &hash)?;
            ensure_blob(self.backend.as_ref(), &self.known_blobs, &path, bytes)
                .await
                .map_err(|e| Self::storage(thread_id, e))?;
        }
        Ok(())
    }

    /// Remember the thread at `version`: the steps from its latest base (the last is the head's),
    /// its message chunks and state; `saved` by this process or loaded, and the blob bytes the
    /// state decoded on its own (its weight in the thread cache).
    pub(super) fn remember(
        &self,
        thread_id: &ThreadId,
        (version, log): (CheckpointVersion, Option<LogAt>),
        since_base: Vec<StepName>,
        chunks: Vec<String>,
        previous: Previous,
        (saved, weight): (bool, usize),
    ) {
        let Some(step) = since_base.last().cloned() else {
            return;
        };
        self.cache.put(
            thread_id.clone(),
            Known {
                version,
                step,
                since_base,
                chunks,
                previous,
                saved,
                weight,
                log,
            },
        );
    }

    pub(super) fn forget(&self, thread_id: &ThreadId) {
        self.cache.forget(thread_id);
    }
}

/// Run `job` on a blocking thread when `heavy` (and a runtime is there), inline otherwise.
pub(super) async fn off_executor<R: Send + 'static>(
    heavy: bool,
    job: impl FnOnce() -> R + Send + 'static,
) -> Result<R, CheckpointError> {
    if heavy && tokio::runtime::Handle::try_current().is_ok() {
        tokio::task::spawn_blocking(job)
            .await
            .map_err(|e| CheckpointError::Unsupported(format!("checkpoint encoding failed: {e}")))
    } else {
        Ok(job())
    }
}

/// A fresh step nonce: 16 hex digits.
pub(super) fn nonce() -> String {
    let id = random::unique_id("n");
    id.trim_start_matches("n-").chars().take(16).collect()
}

#[async_trait]
impl Checkpointer for BackendCheckpointer {
    async fn load(&self, thread_id: &ThreadId) -> Result<Option<StoredCheckpoint>, CheckpointError> {
        self.load_latest(thread_id, true).await
    }

    async fn peek(&self, thread_id: &ThreadId) -> Result<Option<StoredCheckpoint>, CheckpointError> {
        self.load_latest(thread_id, false).await
    }

    async fn save(
        &self,
        checkpoint: Checkpoint,
        expected: Option<&CheckpointVersion>,
    ) -> Result<CheckpointVersion, CheckpointError> {
        let thread_id = checkpoint.thread_id.clone();
        let known = expected.and_then(|v| self.cache.get(&thread_id, v));
        let parent = match (expected, &known) {
            (None, _) => Parent::None,
            (Some(_), Some(k)) => Parent::Step(k.step.clone(), k.log),
            (Some(v), None) => self.parent_from_store(&thread_id, v).await?,
        };
        let (seq, parent_nonce) = match &parent {
            Parent::Step(step, _) => (step.seq + 1, Some(step.nonce.clone())),
            Parent::None | Parent::Legacy => (checkpoint.seq, None),
        };
        let snapshot = known
            .as_ref()
            .is_none_or(|k| k.since_base.len() >= SNAPSHOT_STEPS);
        let step = StepName {
            seq,
            nonce: nonce(),
            parent: parent_nonce,
            base: snapshot,
        };
        let previous = known.as_ref().map(|k| k.previous.clone());
        let messages = message_delta(&checkpoint.state, previous.as_ref().map(|p| &p.state));
        if let (Some(k), Some(v)) = (&known, expected) {
            let before = &k.previous;
            if messages.append.is_empty()
                && messages.keep == before.state.messages.len()
                && slots_unchanged(&checkpoint.state, before)
            {
                // Nothing changed: no step, the same version (a racing writer's step still wins
                // the next save that changes something).
                return Ok(v.clone());
            }
        }
        // Chunks that still hold the first messages (a rewrite below one drops it).
        let mut chunks: Vec<String> = known.as_ref().map_or_else(Vec::new, |k| k.chunks.clone());
        chunks.truncate(messages.keep / CHUNK_MESSAGES);
        let heavy =
            snapshot || known.as_ref().is_none_or(|k| !k.saved) || messages.append.len() > INLINE_MESSAGES;
        let mut since_base = match (&known, snapshot) {
            (Some(k), false) => k.since_base.clone(),
            _ => Vec::new(),
        };
        let since = SinceBase::of(&since_base);
        let memo = self.memo.clone();
        let (state, saved_at_ms) = (checkpoint.state, checkpoint.saved_at_ms);
        // Where the step goes: after the end of the thread's file, a new file, or (`None`) an
        // object of its own.
        let into_log: Option<Option<LogAt>> = match &parent {
            Parent::Step(_, Some(at)) => Some(Some(*at)),
            Parent::None if self.new_threads_in_one_file().await => Some(None),
            Parent::Step(_, None) | Parent::None | Parent::Legacy => None,
        };
        // A record names its step; a step that may become the head itself (a store that links)
        // also carries its chain.
        let linking = into_log.is_none() && self.links.load(Ordering::Relaxed);
        let named = linking || into_log.is_some();
        let (thread, name, header_since) = (thread_id.clone(), step.file_name(), since.clone());
        let encoded = off_executor(heavy, move || {
            let slots = slot_delta(&state, previous.as_ref(), &memo)?;
            let mut written = slots.blobs;
            let (keep, append): (usize, &[Arc<Message>]) = if snapshot {
                let all = state.messages.shared();
                written.extend(chunk_messages(all, &mut chunks)?);
                let keep = chunks.len() * CHUNK_MESSAGES;
                (keep, &all[keep..])
            } else {
                (messages.keep, &messages.append)
            };
            let set: Vec<&str> = slots.set.keys().map(String::as_str).collect();
            let header = StepHeader {
                format: LOG_FORMAT,
                thread_id: thread,
                seq,
                saved_at_ms,
                summary: summarize(&messages.append, &set, &slots.unset),
                messages: state.messages.len(),
                forked_from: None,
                step: named.then_some(name),
                since_base: linking.then_some(header_since),
            };
            let empty: &[String] = &[];
            let body = BodyOut {
                base: snapshot,
                chunks: if snapshot { &chunks } else { empty },
                keep,
                append,
                set: if snapshot { &slots.all } else { &slots.set },
                unset: if snapshot { empty } else { &slots.unset },
            };
            let bytes = encode_step(&header, &body)?;
            Ok::<_, serde_json::Error>((bytes, slots.all, written, chunks, state))
        })
        .await?;
        let (bytes, all, blobs, chunks, state) = encoded.map_err(|source| CheckpointError::Encode {
            thread_id: thread_id.clone(),
            source,
        })?;
        // Blobs first: a committed step never names a missing blob.
        self.write_blobs(&thread_id, blobs.into_iter().map(|b| (b.hash, b.bytes)))
            .await?;
        let head_expected = match parent {
            Parent::Step(..) => expected,
            Parent::None | Parent::Legacy => None,
        };
        let appended = match into_log {
            Some(at) => {
                self.append_step(&thread_id, &step, &bytes, at, head_expected)
                    .await?
            }
            None => None,
        };
        let (version, log) = match appended {
            Some((version, at)) => (version, Some(at)),
            // Not one file (or the store turned out not to append): one object for the step.
            None => {
                let version = self
                    .commit(&thread_id, &step, &since, bytes, saved_at_ms, head_expected)
                    .await?;
                (version, None)
            }
        };
        since_base.push(step.clone());
        if matches!(parent, Parent::Legacy) {
            // Superseded by the log; a failure leaves a file nothing reads while the head exists.
            let _ = self.backend.delete(&self.legacy_path(&thread_id)?).await;
        }
        let previous = Previous { state, slots: all };
        // A state loaded from the store still holds what it decoded then; one built here shares.
        let weight = known.as_ref().map_or(0, |k| k.weight);
        self.remember(
            &thread_id,
            (version.clone(), log),
            since_base,
            chunks,
            previous,
            (true, weight),
        );
        Ok(version)
    }

    async fn delete(&self, thread_id: &ThreadId) -> Result<(), CheckpointError> {
        self.forget(thread_id);
        // The head first, so no reader finds a thread whose steps are going.
        for path in [
            self.log_path(thread_id)?,
            self.path(thread_id)?,
            self.legacy_path(thread_id)?,
        ] {
            match self.backend.delete(&path).await {
                Ok(()) | Err(BackendError::NotFound { .. }) => {}
                Err(e) => return Err(Self::storage(thread_id, e)),
            }
        }
        let blob_dir = self.blob_dir(thread_id)?;
        self.known_blobs.forget_below(&blob_dir);
        let dirs = [
            self.log_dir(thread_id)?,
            blob_dir,
            self.files_dir(thread_id)?,
            self.calls_dir(thread_id)?,
        ];
        for dir in dirs {
            ScopedBackend::new(self.backend.clone(), dir)
                .delete_all()
                .await
                .map_err(|e| Self::storage(thread_id, e))?;
        }
        Ok(())
    }

    fn keeps_call_journal(&self) -> bool {
        true
    }

    async fn record_call(
        &self,
        thread_id: &ThreadId,
        record: &super::CallRecord,
    ) -> Result<(), CheckpointError> {
        self.write_call(thread_id, record).await
    }

    async fn recorded_calls(
        &self,
        thread_id: &ThreadId,
        ids: &[String],
    ) -> Result<Vec<super::CallRecord>, CheckpointError> {
        self.read_calls(thread_id, ids).await
    }

    async fn forget_calls(&self, thread_id: &ThreadId, ids: &[String]) -> Result<(), CheckpointError> {
        self.delete_calls(thread_id, ids).await
    }

    fn thread_files(&self, thread_id: &ThreadId) -> Option<Arc<dyn Backend>> {
        let dir = self.files_dir(thread_id).ok()?;
        let files: Arc<dyn Backend> = Arc::new(ScopedBackend::new(self.backend.clone(), dir));
        Some(match &self.files_guard {
            Some(guard) => guard.guard(thread_id, files),
            None => files,
        })
    }

    async fn history(&self, thread_id: &ThreadId) -> Result<Vec<CheckpointInfo>, CheckpointError> {
        self.history_of(thread_id).await
    }

    async fn load_at(&self, thread_id: &ThreadId, seq: u64) -> Result<Option<Checkpoint>, CheckpointError> {
        self.load_step(thread_id, seq).await
    }

    async fn fork(
        &self,
        from: &ThreadId,
        seq: u64,
        to: &ThreadId,
    ) -> Result<CheckpointVersion, CheckpointError> {
        self.fork_thread(from, seq, to).await
    }
}
