//! What a load does with a thread that a power loss cut short.
//!
//! On local disk nothing is written out before a save returns (no `fsync`, and moving the head
//! no longer makes ext4 start writing the step out: see `replace` in the local backend). A power
//! loss can then leave the newest files of a thread with their names but without all their bytes:
//! empty, or their JSON stopping short ([`CheckpointError::Unfinished`]). The names are what the
//! file system's journal kept, so the committed chain is still known; only its newest steps'
//! contents are gone.
//!
//! A load that meets such a file goes back along the committed chain to the newest step whose
//! own chain (from its base step, blobs included) is whole, says so in a warning, and returns
//! that step at the head's version, so the next save carries the thread on from there. Only
//! that kind of damage is passed over: anything else (a file that is there but wrong, a missing
//! one) stays [`CheckpointError::Corrupt`], and the steps passed over stay in the log for a look.
//!
//! Known limits, all after a power loss only:
//! - History, which reads only each step's first line, ends at the same step when the cut reached
//!   a header. A step that kept its header but lost some of its body is still listed until the
//!   next save moves the head past it, and
//!   [`Checkpointer::load_at`](super::Checkpointer::load_at) of it is `Unfinished`.
//! - History reads every step from the first. A cut step older than the base step the load went
//!   back to (a thread that saved more than 32 steps in the lost seconds) makes it `Unfinished`.
//! - A save with nothing cached for the thread (the thread cache dropped it after the load)
//!   attaches to the head's step even when that step was cut. What it saves is whole (such a save
//!   writes a base step), but the cut step is then on the thread's chain, so history is
//!   `Unfinished` as above.

use super::CheckpointError;
use super::backend::BackendCheckpointer;
use super::log_read::Loaded;
use super::record::{StepName, chain};
use crate::backend::{BackendError, Version};
use crate::runtime::context::ThreadId;

/// Most committed steps a load goes back past. A power loss takes the seconds of writes the
/// kernel had not written out yet (ext4 writes dirty data out after 30 s at most, by default);
/// a run saves a step per model call or tool batch, so this is far more than such a loss holds.
const MOST_STEPS_BACK: usize = 256;

impl BackendCheckpointer {
    /// The step object whose version tag is `version`: on local disk, the step a head was linked
    /// to when its bytes are gone (the two names are one file, so their tags agree). `None`
    /// when no step, or more than one, has it.
    pub(super) async fn step_with_version(
        &self,
        thread_id: &ThreadId,
        version: &Version,
    ) -> Result<Option<StepName>, CheckpointError> {
        let entries = match self.backend.ls(&self.log_dir(thread_id)?).await {
            Ok(entries) => entries,
            Err(BackendError::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(Self::storage(thread_id, e)),
        };
        let mut found = entries
            .iter()
            .filter(|e| e.version.as_ref() == Some(version))
            .filter_map(|e| e.path.file_name().and_then(StepName::parse));
        Ok(match (found.next(), found.next()) {
            (Some(step), None) => Some(step),
            _ => None,
        })
    }

    /// The newest committed step before `step` whose chain loads whole, given that `step`'s
    /// did not (`cut`, an `Unfinished` error); `cut`, or the first other error met, when there is
    /// none within [`MOST_STEPS_BACK`].
    pub(super) async fn load_before(
        &self,
        thread_id: &ThreadId,
        step: &StepName,
        cut: CheckpointError,
    ) -> Result<Loaded, CheckpointError> {
        let names = self.list_steps(thread_id).await?;
        let mut cut = cut;
        let mut current = step.clone();
        for _ in 0..MOST_STEPS_BACK {
            let parent = current.parent.as_ref().and_then(|nonce| {
                names
                    .iter()
                    .find(|n| n.seq + 1 == current.seq && &n.nonce == nonce)
            });
            let Some(parent) = parent.cloned() else {
                return Err(cut);
            };
            let Ok(steps) = chain(&names, &parent) else {
                return Err(cut);
            };
            match self.replay_chain(thread_id, steps).await {
                Ok(loaded) => {
                    tracing::warn!(
                        thread = %thread_id,
                        lost = step.seq - parent.seq,
                        from = parent.seq,
                        "{cut}; loading the thread at its newest whole step instead"
                    );
                    return Ok(loaded);
                }
                Err(e @ CheckpointError::Unfinished { .. }) => cut = e,
                Err(e) => return Err(e),
            }
            current = parent;
        }
        Err(cut)
    }
}
