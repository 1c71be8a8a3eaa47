//! A [`BackendCheckpointer`]'s threads and their past: listing the threads, a thread's
//! checkpoints, reading the state at one, forking a new thread from one, and collecting what no
//! checkpoint refers to.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, SystemTime};

use super::backend::{BackendCheckpointer, nonce};
use super::log_read::{parse_header, step_bytes};
use super::record::{
    BodyOut, EncodedSlot, ForkOrigin, LOG_FORMAT, Replayed, SinceBase, StepHeader, StepName, encode_step,
    split_header,
};
use super::{
    CHECKPOINT_FORMAT, Checkpoint, CheckpointError, CheckpointInfo, CheckpointVersion, Checkpointer,
    copy_files,
};
use crate::backend::{BackendError, ByteRange};
use crate::runtime::context::ThreadId;

/// Bytes of a step object read to find its header (a header is a few hundred bytes).
const HEADER_PREFIX: u64 = 2048;

/// What [`BackendCheckpointer::collect_garbage`] removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GarbageReport {
    /// Step objects that no head reaches (lost races, a process killed before moving the head).
    pub steps: usize,
    /// Blobs that no committed step refers to.
    pub blobs: usize,
}

impl From<StepHeader> for CheckpointInfo {
    fn from(h: StepHeader) -> Self {
        CheckpointInfo {
            seq: h.seq,
            saved_at_ms: h.saved_at_ms,
            summary: h.summary,
            messages: h.messages,
            forked_from: h.forked_from,
        }
    }
}

impl BackendCheckpointer {
    pub(super) async fn history_of(
        &self,
        thread_id: &ThreadId,
    ) -> Result<Vec<CheckpointInfo>, CheckpointError> {
        if let Some(tail) = self.read_tail(thread_id).await? {
            let records = self.log_records(thread_id, &tail).await?;
            return Ok(records
                .into_iter()
                .map(|r| CheckpointInfo::from(r.header))
                .collect());
        }
        let Some((record, head, _)) = self.read_head(thread_id).await? else {
            let legacy = self.load_legacy(thread_id).await?;
            return Ok(legacy
                .map(|s| CheckpointInfo::latest(&s.checkpoint))
                .into_iter()
                .collect());
        };
        let mut chain = self.chain(thread_id, &head).await?;
        let headers = match self.read_headers(thread_id, &chain).await {
            Err(CheckpointError::Unfinished { .. }) if record.linked => {
                // Cut short by a power loss: the history ends where a load goes back to.
                let Some(loaded) = self.peek(thread_id).await? else {
                    return Ok(Vec::new());
                };
                chain.retain(|s| s.seq <= loaded.checkpoint.seq);
                self.read_headers(thread_id, &chain).await?
            }
            headers => headers?,
        };
        Ok(headers.into_iter().map(CheckpointInfo::from).collect())
    }

    /// The header of each of `steps`: a prefix read where the store reads ranges.
    async fn read_headers(
        &self,
        thread_id: &ThreadId,
        steps: &[StepName],
    ) -> Result<Vec<StepHeader>, CheckpointError> {
        let paths = steps
            .iter()
            .map(|s| self.step_path(thread_id, s))
            .collect::<Result<Vec<_>, _>>()?;
        let range = self
            .backend
            .capabilities()
            .ranged_reads
            .then(|| ByteRange::prefix(HEADER_PREFIX));
        let reads = self.backend.read_many(&paths, range).await;
        let mut headers = Vec::with_capacity(steps.len());
        for ((step, path), read) in steps.iter().zip(&paths).zip(reads) {
            let mut bytes = step_bytes(thread_id, step, read)?;
            if split_header(&bytes).is_none() && range.is_some() {
                bytes = self
                    .backend
                    .read(path, None)
                    .await
                    .map_err(|e| Self::storage(thread_id, e))?
                    .bytes;
            }
            // No line break: cut short within (or right after) the header line.
            let (line, _) = split_header(&bytes).unwrap_or((&bytes, &[]));
            let header = parse_header(thread_id, step, line)?;
            headers.push(header);
        }
        Ok(headers)
    }

    /// The committed chain of `thread_id` up to and including checkpoint `seq`; `None` when the
    /// thread or that checkpoint does not exist.
    async fn chain_to(
        &self,
        thread_id: &ThreadId,
        seq: u64,
    ) -> Result<Option<Vec<StepName>>, CheckpointError> {
        let Some((_, head, _)) = self.read_head(thread_id).await? else {
            return Ok(None);
        };
        let mut chain = self.chain(thread_id, &head).await?;
        let Some(at) = chain.iter().position(|s| s.seq == seq) else {
            return Ok(None);
        };
        chain.truncate(at + 1);
        Ok(Some(chain))
    }

    /// The thread's steps replayed up to its checkpoint `seq`, in either layout (one file, or one
    /// object per step), blobs not put back.
    async fn replayed_at(&self, thread_id: &ThreadId, seq: u64) -> Result<Found, CheckpointError> {
        if let Some(tail) = self.read_tail(thread_id).await? {
            let records = self.log_records(thread_id, &tail).await?;
            let Some(record) = records.iter().find(|r| r.step.seq == seq) else {
                return Ok(Found::Missing);
            };
            let read = self
                .read_records(thread_id, &tail, record.base, record.end)
                .await?
                .into_iter()
                .map(|(_, header, body)| (header, body))
                .collect();
            let (replayed, header) = self.replay_read(thread_id, read).await?;
            return Ok(Found::Replayed(Box::new((replayed, header))));
        }
        let Some(chain) = self.chain_to(thread_id, seq).await? else {
            return Ok(Found::NoLog);
        };
        let (replayed, header) = self.replay(thread_id, &chain).await?;
        Ok(Found::Replayed(Box::new((replayed, header))))
    }

    pub(super) async fn load_step(
        &self,
        thread_id: &ThreadId,
        seq: u64,
    ) -> Result<Option<Checkpoint>, CheckpointError> {
        let (replayed, header) = match self.replayed_at(thread_id, seq).await? {
            Found::Replayed(found) => *found,
            Found::Missing => return Ok(None),
            Found::NoLog => {
                let legacy = self.load_legacy(thread_id).await?;
                return Ok(legacy.map(|s| s.checkpoint).filter(|c| c.seq == seq));
            }
        };
        let (state, _) = self.materialize(thread_id, &replayed, seq).await?;
        Ok(Some(Checkpoint {
            format: CHECKPOINT_FORMAT,
            thread_id: thread_id.clone(),
            seq,
            saved_at_ms: header.saved_at_ms,
            state,
        }))
    }

    /// Fork: a base step in `to` holding `from`'s state at `seq` (slots as stored, blobs copied, no
    /// value decoded), then `to`'s head, created.
    pub(super) async fn fork_thread(
        &self,
        from: &ThreadId,
        seq: u64,
        to: &ThreadId,
    ) -> Result<CheckpointVersion, CheckpointError> {
        let replayed = match self.replayed_at(from, seq).await? {
            Found::Replayed(found) => found.0,
            // An old-format thread (or none, or no such checkpoint): the generic fork.
            Found::Missing | Found::NoLog => return super::fork_by_copy(self, from, seq, to).await,
        };
        if self.read_tail(to).await?.is_some()
            || self.read_head(to).await?.is_some()
            || self.load_legacy(to).await?.is_some()
        {
            return Err(CheckpointError::Conflict {
                thread_id: to.clone(),
            });
        }
        let mut hashes: Vec<&String> = replayed.slots.values().flat_map(|s| &s.blobs).collect();
        hashes.sort_unstable();
        hashes.dedup();
        for hash in hashes {
            let source = self.blob_path(from, hash)?;
            let bytes = self
                .backend
                .read(&source, None)
                .await
                .map_err(|e| Self::storage(from, e))?
                .bytes;
            self.write_blobs(to, [(hash.clone(), bytes)]).await?;
        }
        if let (Some(src), Some(dst)) = (self.thread_files(from), self.thread_files(to)) {
            copy_files(src.as_ref(), dst.as_ref())
                .await
                .map_err(|e| Self::storage(to, e))?;
        }
        let step = StepName {
            seq,
            nonce: nonce(),
            parent: None,
            base: true,
        };
        let origin = ForkOrigin {
            thread_id: from.clone(),
            seq,
        };
        let saved_at_ms = Checkpoint::now_ms();
        let bytes = base_step(to, &step, seq, &replayed, origin, saved_at_ms).map_err(|source| {
            CheckpointError::Encode {
                thread_id: to.clone(),
                source,
            }
        })?;
        if self.new_threads_in_one_file().await
            && let Some((version, _)) = self.append_step(to, &step, &bytes, None, None).await?
        {
            return Ok(version);
        }
        self.commit(to, &step, &SinceBase::default(), bytes, saved_at_ms, None)
            .await
    }

    /// Remove what no committed step of `thread_id` refers to: step objects off the chain (a
    /// lost race, a process killed between writing its step and moving the head) and blobs no
    /// committed step names. Only objects last modified at least `grace` ago are removed, so a
    /// save in flight in another process (its blob or step written, its head not yet moved) is
    /// left alone; `Duration::ZERO` removes everything unreferenced (only when nothing else
    /// writes the thread). Off-chain steps at or below the head's number can never be committed
    /// and are removed whatever their age.
    pub async fn collect_garbage(
        &self,
        thread_id: &ThreadId,
        grace: Duration,
    ) -> Result<GarbageReport, CheckpointError> {
        let mut report = GarbageReport::default();
        let old_enough = |modified: Option<SystemTime>| {
            grace.is_zero()
                || modified.is_some_and(|m| SystemTime::now().duration_since(m).is_ok_and(|age| age >= grace))
        };
        if let Some(tail) = self.read_tail(thread_id).await? {
            // One file: appends are version-checked, so no step is ever off the chain.
            let mut referenced = HashSet::new();
            for (_, _, body) in self.read_records(thread_id, &tail, 0, tail.at.end).await? {
                referenced.extend(body.chunks);
                referenced.extend(body.set.into_values().flat_map(|s| s.blobs));
            }
            report.blobs = self.collect_blobs(thread_id, &referenced, &old_enough).await?;
            return Ok(report);
        }
        let Some((_, head, _)) = self.read_head(thread_id).await? else {
            return Ok(report);
        };
        let chain = self.chain(thread_id, &head).await?;
        let on_chain: HashSet<String> = chain.iter().map(StepName::file_name).collect();
        let entries = match self.backend.ls(&self.log_dir(thread_id)?).await {
            Ok(entries) => entries,
            Err(BackendError::NotFound { .. }) => Vec::new(),
            Err(e) => return Err(Self::storage(thread_id, e)),
        };
        for entry in entries {
            let Some(step) = entry.path.file_name().and_then(StepName::parse) else {
                continue;
            };
            if on_chain.contains(&step.file_name())
                || (step.seq > head.seq && !old_enough(entry.modified.map(SystemTime::from)))
            {
                continue;
            }
            match self.backend.delete(&entry.path).await {
                Ok(()) => report.steps += 1,
                Err(BackendError::NotFound { .. }) => {}
                Err(e) => return Err(Self::storage(thread_id, e)),
            }
        }
        let mut referenced = HashSet::new();
        for (_, body) in self.read_steps(thread_id, &chain).await? {
            referenced.extend(body.chunks);
            referenced.extend(body.set.into_values().flat_map(|s| s.blobs));
        }
        report.blobs = self.collect_blobs(thread_id, &referenced, &old_enough).await?;
        Ok(report)
    }

    /// Remove the thread's blobs not in `referenced` that are `old_enough`; how many went.
    async fn collect_blobs(
        &self,
        thread_id: &ThreadId,
        referenced: &HashSet<String>,
        old_enough: &impl Fn(Option<SystemTime>) -> bool,
    ) -> Result<usize, CheckpointError> {
        let mut removed = 0;
        let blob_dir = self.blob_dir(thread_id)?;
        let blobs = match self.backend.ls(&blob_dir).await {
            Ok(entries) => entries,
            Err(BackendError::NotFound { .. }) => Vec::new(),
            Err(e) => return Err(Self::storage(thread_id, e)),
        };
        for entry in blobs {
            let Some(hash) = entry.path.file_name().and_then(|n| n.strip_suffix(".json")) else {
                continue;
            };
            if referenced.contains(hash) || !old_enough(entry.modified.map(SystemTime::from)) {
                continue;
            }
            match self.backend.delete(&entry.path).await {
                Ok(()) => removed += 1,
                Err(BackendError::NotFound { .. }) => {}
                Err(e) => return Err(Self::storage(thread_id, e)),
            }
        }
        self.known_blobs.forget_below(&blob_dir);
        Ok(removed)
    }
}

/// What [`BackendCheckpointer::replayed_at`] found.
enum Found {
    /// The state at the checkpoint asked for, and its step's header.
    Replayed(Box<(Replayed, StepHeader)>),
    /// The thread has steps, none of them that checkpoint.
    Missing,
    /// The thread has no steps (an old-format thread, or none).
    NoLog,
}

/// The slots and fork origin of a base step written from a replayed log (a fork).
fn base_step(
    thread_id: &ThreadId,
    step: &StepName,
    seq: u64,
    replayed: &Replayed,
    forked_from: ForkOrigin,
    saved_at_ms: u64,
) -> Result<Vec<u8>, serde_json::Error> {
    let header = StepHeader {
        format: LOG_FORMAT,
        thread_id: thread_id.clone(),
        seq,
        saved_at_ms,
        summary: format!("forked from {}@{}", forked_from.thread_id, forked_from.seq),
        messages: replayed.messages.len(),
        forked_from: Some(forked_from),
        step: Some(step.file_name()),
        since_base: Some(SinceBase::default()),
    };
    let set: &BTreeMap<String, EncodedSlot> = &replayed.slots;
    encode_step(
        &header,
        &BodyOut {
            base: true,
            chunks: &[],
            keep: 0,
            append: &replayed.messages,
            set,
            unset: &[],
        },
    )
}

impl BackendCheckpointer {
    /// The ids of the stored threads, sorted: the directories under the root that hold a head (or
    /// an old-format checkpoint). Directories whose names are not thread ids are left out.
    pub async fn threads(&self) -> Result<Vec<ThreadId>, CheckpointError> {
        let entries = match self.backend.ls(&self.root).await {
            Ok(entries) => entries,
            Err(BackendError::NotFound { .. }) => return Ok(Vec::new()),
            Err(source) => return Err(CheckpointError::Listing { source }),
        };
        let candidates: Vec<ThreadId> = entries
            .iter()
            .filter_map(|e| e.path.file_name())
            .filter_map(|name| ThreadId::new(name).ok())
            .collect();
        let heads = candidates
            .iter()
            .map(|id| self.path(id))
            .collect::<Result<Vec<_>, _>>()?;
        let legacy = candidates
            .iter()
            .map(|id| self.legacy_path(id))
            .collect::<Result<Vec<_>, _>>()?;
        let logs = candidates
            .iter()
            .map(|id| self.log_path(id))
            .collect::<Result<Vec<_>, _>>()?;
        let (heads, legacy, logs) = futures::join!(
            self.backend.stat_many(&heads),
            self.backend.stat_many(&legacy),
            self.backend.stat_many(&logs)
        );
        let mut ids: Vec<ThreadId> = candidates
            .into_iter()
            .zip(heads.into_iter().zip(legacy).zip(logs))
            .filter_map(|(id, ((head, old), log))| (head.is_ok() || old.is_ok() || log.is_ok()).then_some(id))
            .collect();
        ids.sort();
        Ok(ids)
    }
}
