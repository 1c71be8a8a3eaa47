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
use super::appended::{LogAt, Tail};
use super::backend::BackendCheckpointer;
use super::log_read::Loaded;
use super::record::{StepName, chain};
use crate::backend::Version;
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
        let steps = self.list_versioned_steps(thread_id).await?;
        let mut found = steps
            .into_iter()
            .filter(|(_, v)| v.as_ref() == Some(version))
            .map(|(step, _)| step);
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
        // The committed chain up to `step`, found once; each candidate is a prefix of it.
        let Ok(committed) = chain(&names, step) else {
            return Err(cut);
        };
        let mut cut = cut;
        let oldest = committed.len().saturating_sub(MOST_STEPS_BACK + 1);
        for end in (oldest..committed.len().saturating_sub(1)).rev() {
            let parent = &committed[end];
            match self.replay_chain(thread_id, committed[..=end].to_vec()).await {
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
        }
        Err(cut)
    }
}

impl BackendCheckpointer {
    /// [`load_before`](Self::load_before) for a thread kept in one file (`appended.rs`): the
    /// newest record before the head whose chain loads whole, and where it ends, so the next save
    /// cuts the records after it (their steps attach to another parent). `cut`, or the first
    /// other error met, when there is none within [`MOST_STEPS_BACK`].
    pub(super) async fn load_log_before(
        &self,
        thread_id: &ThreadId,
        tail: &Tail,
        cut: CheckpointError,
    ) -> Result<(Loaded, LogAt), CheckpointError> {
        let records = self.log_records(thread_id, tail).await?;
        let mut cut = cut;
        let oldest = records.len().saturating_sub(MOST_STEPS_BACK + 1);
        let head_seq = records.last().map_or(0, |r| r.step.seq);
        for record in records[oldest..records.len().saturating_sub(1)].iter().rev() {
            match self
                .replay_records(thread_id, tail, record.base, record.end)
                .await
            {
                Ok(loaded) => {
                    tracing::warn!(
                        thread = %thread_id,
                        lost = head_seq - record.step.seq,
                        from = record.step.seq,
                        "{cut}; loading the thread at its newest whole step instead"
                    );
                    let at = LogAt {
                        end: record.end,
                        base: record.base,
                    };
                    return Ok((loaded, at));
                }
                Err(e @ CheckpointError::Unfinished { .. }) => cut = e,
                Err(e) => return Err(e),
            }
        }
        Err(cut)
    }
}
