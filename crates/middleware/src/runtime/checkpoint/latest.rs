//! Where a thread's latest step is, in either layout (one file of steps, or a head object and
//! one object per step; docs/architecture.md, "Thread store"): a load, and the parent of a save
//! when this process does not know the thread.

use super::backend::{BackendCheckpointer, LEGACY_VERSION, Parent};
use super::delta::Previous;
use super::log_read::Loaded;
use super::{CHECKPOINT_FORMAT, Checkpoint, CheckpointError, CheckpointVersion, StoredCheckpoint};
use crate::backend::{BackendError, Version};
use crate::runtime::context::ThreadId;

impl BackendCheckpointer {
    /// The latest checkpoint; remembered for the next save's delta when `remember`.
    pub(super) async fn load_latest(
        &self,
        thread_id: &ThreadId,
        remember: bool,
    ) -> Result<Option<StoredCheckpoint>, CheckpointError> {
        // Either layout, looked for at once: on an object store each is a request.
        let (tail, head) = futures::join!(self.read_tail(thread_id), self.read_head(thread_id));
        let (loaded, version, log) = match tail? {
            Some(tail) => {
                if head.is_ok_and(|h| h.is_some()) {
                    return Err(Self::corrupt(
                        thread_id,
                        None,
                        "the thread has a head and a file of steps",
                    ));
                }
                let (loaded, at) = match self
                    .replay_records(thread_id, &tail, tail.at.base, tail.at.end)
                    .await
                {
                    Ok(loaded) => (loaded, tail.at),
                    // A power loss cut a blob short: go back to the newest whole step.
                    Err(cut @ CheckpointError::Unfinished { .. }) => {
                        self.load_log_before(thread_id, &tail, cut).await?
                    }
                    Err(e) => return Err(e),
                };
                (loaded, tail.checkpoint_version(), Some(at))
            }
            None => {
                let Some((head, step, version)) = head? else {
                    return self.load_legacy(thread_id).await;
                };
                let chain = self.recent_chain(thread_id, &head, &step).await?;
                let loaded = match self.replay_chain(thread_id, chain).await {
                    Ok(loaded) => loaded,
                    // Only local disk (a linked head) has writes a power loss can cut short.
                    Err(cut @ CheckpointError::Unfinished { .. }) if head.linked => {
                        self.load_before(thread_id, &step, cut).await?
                    }
                    Err(e) => return Err(e),
                };
                (loaded, version, None)
            }
        };
        let Loaded {
            chain,
            replayed,
            header,
            state,
            weight,
        } = loaded;
        if remember {
            let previous = Previous {
                state: state.clone(),
                slots: replayed.slots,
            };
            let from = chain.iter().rposition(|s| s.base).unwrap_or(0);
            let since_base = chain[from..].to_vec();
            self.remember(
                thread_id,
                (version.clone(), log),
                since_base,
                replayed.chunks,
                previous,
                (false, weight),
            );
        }
        Ok(Some(StoredCheckpoint {
            checkpoint: Checkpoint {
                format: CHECKPOINT_FORMAT,
                thread_id: thread_id.clone(),
                seq: header.seq,
                saved_at_ms: header.saved_at_ms,
                state,
            },
            version,
        }))
    }

    /// Where the next step of `thread_id` attaches, when this process does not know its state.
    pub(super) async fn parent_from_store(
        &self,
        thread_id: &ThreadId,
        expected: &CheckpointVersion,
    ) -> Result<Parent, CheckpointError> {
        // Either layout, looked for at once, as a load does.
        let (tail, head) = futures::join!(self.read_tail(thread_id), self.read_head(thread_id));
        if let Some(tail) = tail? {
            if &tail.checkpoint_version() != expected {
                return Err(Self::conflict(thread_id));
            }
            let (step, _) = tail.head(thread_id)?;
            return Ok(Parent::Step(step, Some(tail.at)));
        }
        if let Some((_, step, version)) = head? {
            return if &version == expected {
                Ok(Parent::Step(step, None))
            } else {
                Err(Self::conflict(thread_id))
            };
        }
        let legacy = expected.as_str().strip_prefix(LEGACY_VERSION);
        match self.backend.stat(&self.legacy_path(thread_id)?).await {
            Ok(entry) if legacy.is_some() && entry.version.as_ref().map(Version::as_str) == legacy => {
                Ok(Parent::Legacy)
            }
            Ok(_) | Err(BackendError::NotFound { .. }) => Err(Self::conflict(thread_id)),
            Err(e) => Err(Self::storage(thread_id, e)),
        }
    }
}
