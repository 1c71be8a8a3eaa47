//! Reading a [`BackendCheckpointer`] thread's log: its head, the committed chain of steps (one
//! listing), the steps themselves (one batch), and the state they replay into (blobs put back).
//! Every damage found is a typed error naming the thread and step: [`CheckpointError::Unfinished`]
//! for a file that ends early (what a power loss leaves; `recover.rs` goes back past it),
//! [`CheckpointError::Corrupt`] for anything else.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;

use super::appended::Tail;
use super::backend::{BackendCheckpointer, off_executor};
use super::record::{Body, Head, LOG_FORMAT, Replayed, StepHeader, StepName, split_header};
use super::shared::resolve_refs;
use super::{CheckpointError, CheckpointVersion};
use crate::backend::{BackendError, Version, VirtualPath};
use crate::runtime::context::ThreadId;
use crate::runtime::message::Message;
use crate::runtime::message_list::Messages;
use crate::runtime::state::State;

/// A chain of steps replayed into a state ([`BackendCheckpointer::replay_chain`]).
pub(super) struct Loaded {
    /// The steps, oldest first; the last is the one loaded.
    pub chain: Vec<StepName>,
    /// What they replay into, slots still encoded.
    pub replayed: Replayed,
    /// The last step's header.
    pub header: StepHeader,
    /// The state, blobs put back.
    pub state: State,
    /// The bytes of blobs the state decoded on its own (its weight in the thread cache).
    pub weight: usize,
}

impl BackendCheckpointer {
    /// The bytes at `path` and their version tag, or `None` when there is no such file.
    pub(super) async fn read_versioned(
        &self,
        thread_id: &ThreadId,
        path: &VirtualPath,
    ) -> Result<Option<(Bytes, Version)>, CheckpointError> {
        let out = match self.backend.read(path, None).await {
            Ok(out) => out,
            Err(BackendError::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(Self::storage(thread_id, e)),
        };
        match out.version {
            Some(version) => Ok(Some((out.bytes, version))),
            None => Err(CheckpointError::Unsupported(format!(
                "{path} was read without a version tag"
            ))),
        }
    }

    /// The thread's head and its version, or `None` when it has none.
    pub(super) async fn read_head(
        &self,
        thread_id: &ThreadId,
    ) -> Result<Option<(Head, StepName, CheckpointVersion)>, CheckpointError> {
        let Some((bytes, version)) = self.read_versioned(thread_id, &self.path(thread_id)?).await? else {
            return Ok(None);
        };
        let head = match parse_head(thread_id, &bytes) {
            Ok(head) => head,
            Err(unfinished @ CheckpointError::Unfinished { .. }) => {
                // Cut short by a power loss: on local disk the head is still a name of the step
                // it was linked to, which has the same version tag.
                return match self.step_with_version(thread_id, &version).await? {
                    Some(step) => Ok(Some((
                        Head::of_step(thread_id, &step),
                        step,
                        CheckpointVersion::new(version.as_str()),
                    ))),
                    None => Err(unfinished),
                };
            }
            Err(e) => return Err(e),
        };
        if &head.thread_id != thread_id {
            return Err(Self::corrupt(
                thread_id,
                None,
                format!("the head is thread {}'s", head.thread_id),
            ));
        }
        if head.format != LOG_FORMAT {
            return Err(CheckpointError::UnsupportedFormat {
                thread_id: thread_id.clone(),
                format: head.format,
            });
        }
        let step = StepName::parse(&head.step)
            .filter(|s| s.seq == head.seq)
            .ok_or_else(|| {
                Self::corrupt(
                    thread_id,
                    Some(head.seq),
                    format!("bad step name {:?}", head.step),
                )
            })?;
        Ok(Some((head, step, CheckpointVersion::new(version.as_str()))))
    }

    /// The committed steps a load replays, ending at `step`: the ones the head names (from the
    /// latest base step on), or, for heads of older builds that name none, the whole chain (one
    /// listing of the log).
    pub(super) async fn recent_chain(
        &self,
        thread_id: &ThreadId,
        head: &Head,
        step: &StepName,
    ) -> Result<Vec<StepName>, CheckpointError> {
        match &head.since_base {
            None => self.chain(thread_id, step).await,
            Some(since) => since.chain_to(step).ok_or_else(|| {
                Self::corrupt(
                    thread_id,
                    Some(step.seq),
                    "the head's chain is not a linked run from a base step",
                )
            }),
        }
    }

    /// The committed steps ending at `head`, oldest first (one listing of the log).
    pub(super) async fn chain(
        &self,
        thread_id: &ThreadId,
        head: &StepName,
    ) -> Result<Vec<StepName>, CheckpointError> {
        let names = self.list_steps(thread_id).await?;
        super::record::chain(&names, head)
            .map_err(|seq| Self::corrupt(thread_id, Some(seq), "the step object is missing"))
    }

    /// Every step object in the thread's log, committed or not.
    pub(super) async fn list_steps(&self, thread_id: &ThreadId) -> Result<Vec<StepName>, CheckpointError> {
        Ok(self
            .list_versioned_steps(thread_id)
            .await?
            .into_iter()
            .map(|(step, _)| step)
            .collect())
    }

    /// Every step object in the thread's log with its version tag, as one listing gives them.
    pub(super) async fn list_versioned_steps(
        &self,
        thread_id: &ThreadId,
    ) -> Result<Vec<(StepName, Option<Version>)>, CheckpointError> {
        let entries = match self.backend.ls(&self.log_dir(thread_id)?).await {
            Ok(entries) => entries,
            Err(BackendError::NotFound { .. }) => return Ok(Vec::new()),
            Err(e) => return Err(Self::storage(thread_id, e)),
        };
        Ok(entries
            .into_iter()
            .filter_map(|e| Some((StepName::parse(e.path.file_name()?)?, e.version)))
            .collect())
    }

    /// Read and check the step objects `steps`, in order.
    pub(super) async fn read_steps(
        &self,
        thread_id: &ThreadId,
        steps: &[StepName],
    ) -> Result<Vec<(StepHeader, Body)>, CheckpointError> {
        let paths = steps
            .iter()
            .map(|s| self.step_path(thread_id, s))
            .collect::<Result<Vec<_>, _>>()?;
        let reads = self.backend.read_many(&paths, None).await;
        let mut raw = Vec::with_capacity(reads.len());
        for (step, read) in steps.iter().zip(reads) {
            raw.push(step_bytes(thread_id, step, read)?);
        }
        let heavy = raw.iter().map(|b| b.len()).sum::<usize>() > 256 * 1024;
        let (thread, steps) = (thread_id.clone(), steps.to_vec());
        off_executor(heavy, move || decode_steps(&thread, &steps, &raw)).await?
    }

    /// Replay the chain `steps` (oldest first) from its last base step.
    pub(super) async fn replay(
        &self,
        thread_id: &ThreadId,
        steps: &[StepName],
    ) -> Result<(Replayed, StepHeader), CheckpointError> {
        let Some(from) = steps.iter().rposition(|s| s.base) else {
            let first = steps.first().map(|s| s.seq);
            return Err(Self::corrupt(thread_id, first, "the log has no base step"));
        };
        let read = self.read_steps(thread_id, &steps[from..]).await?;
        self.replay_read(thread_id, read).await
    }

    /// Replay steps already read (a base step, then the steps after it).
    pub(super) async fn replay_read(
        &self,
        thread_id: &ThreadId,
        read: Vec<(StepHeader, Body)>,
    ) -> Result<(Replayed, StepHeader), CheckpointError> {
        let mut replayed = Replayed::default();
        let mut last = None;
        for (header, body) in read {
            let seq = header.seq;
            let chunked = self.read_chunks(thread_id, seq, &body.chunks).await?;
            replayed
                .apply(body, chunked)
                .map_err(|reason| Self::corrupt(thread_id, Some(seq), reason))?;
            last = Some(header);
        }
        let last = last.ok_or_else(|| Self::corrupt(thread_id, None, "no steps"))?;
        Ok((replayed, last))
    }

    /// Replay the chain `chain` (oldest first) and put its blobs back: the state at its last step.
    pub(super) async fn replay_chain(
        &self,
        thread_id: &ThreadId,
        chain: Vec<StepName>,
    ) -> Result<Loaded, CheckpointError> {
        let replayed = self.replay(thread_id, &chain).await?;
        self.loaded(thread_id, chain, replayed).await
    }

    /// The state `chain` replayed into, blobs put back.
    async fn loaded(
        &self,
        thread_id: &ThreadId,
        chain: Vec<StepName>,
        (replayed, header): (Replayed, StepHeader),
    ) -> Result<Loaded, CheckpointError> {
        let (state, weight) = self.materialize(thread_id, &replayed, header.seq).await?;
        Ok(Loaded {
            chain,
            replayed,
            header,
            state,
            weight,
        })
    }

    /// Replay the records of an appended thread from the one starting at `from` (a base step)
    /// to the one ending at `end`, and put their blobs back (see `appended.rs`).
    pub(super) async fn replay_records(
        &self,
        thread_id: &ThreadId,
        tail: &Tail,
        from: u64,
        end: u64,
    ) -> Result<Loaded, CheckpointError> {
        let records = self.read_records(thread_id, tail, from, end).await?;
        let mut chain = Vec::with_capacity(records.len());
        let mut read = Vec::with_capacity(records.len());
        for (step, header, body) in records {
            chain.push(step);
            read.push((header, body));
        }
        let replayed = self.replay_read(thread_id, read).await?;
        self.loaded(thread_id, chain, replayed).await
    }

    /// The messages of a base step's chunks, in order (one batch of reads).
    async fn read_chunks(
        &self,
        thread_id: &ThreadId,
        seq: u64,
        chunks: &[String],
    ) -> Result<Vec<Arc<Message>>, CheckpointError> {
        if chunks.is_empty() {
            return Ok(Vec::new());
        }
        let paths = chunks
            .iter()
            .map(|h| self.blob_path(thread_id, h))
            .collect::<Result<Vec<_>, _>>()?;
        let mut raw = Vec::with_capacity(chunks.len());
        for (hash, read) in chunks.iter().zip(self.backend.read_many(&paths, None).await) {
            raw.push(match read {
                Ok(out) => out.bytes,
                Err(BackendError::NotFound { .. }) => {
                    return Err(Self::corrupt(
                        thread_id,
                        Some(seq),
                        format!("message chunk {hash} is missing"),
                    ));
                }
                Err(e) => return Err(Self::storage(thread_id, e)),
            });
        }
        let heavy = raw.iter().map(|b| b.len()).sum::<usize>() > 256 * 1024;
        let (thread, hashes) = (thread_id.clone(), chunks.to_vec());
        off_executor(heavy, move || {
            let mut messages = Vec::new();
            for (hash, bytes) in hashes.iter().zip(&raw) {
                let part: Vec<Arc<Message>> = serde_json::from_slice(bytes).map_err(|e| {
                    Self::undecodable(&thread, Some(seq), format_args!("message chunk {hash}"), &e)
                })?;
                messages.extend(part);
            }
            Ok(messages)
        })
        .await?
    }

    /// The state a replayed log describes, blobs put back in place.
    pub(super) async fn materialize(
        &self,
        thread_id: &ThreadId,
        replayed: &Replayed,
        seq: u64,
    ) -> Result<(State, usize), CheckpointError> {
        let mut blob_bytes = 0;
        let mut hashes: Vec<&str> = replayed
            .slots
            .values()
            .flat_map(|s| s.blobs.iter().map(String::as_str))
            .collect();
        hashes.sort_unstable();
        hashes.dedup();
        let mut blobs: HashMap<&str, Value> = HashMap::with_capacity(hashes.len());
        if !hashes.is_empty() {
            let paths = hashes
                .iter()
                .map(|h| self.blob_path(thread_id, h))
                .collect::<Result<Vec<_>, _>>()?;
            for (hash, read) in hashes.iter().zip(self.backend.read_many(&paths, None).await) {
                let bytes = match read {
                    Ok(out) => out.bytes,
                    Err(BackendError::NotFound { .. }) => {
                        return Err(Self::corrupt(
                            thread_id,
                            Some(seq),
                            format!("blob {hash} is missing"),
                        ));
                    }
                    Err(e) => return Err(Self::storage(thread_id, e)),
                };
                blob_bytes += bytes.len();
                let value = serde_json::from_slice(&bytes)
                    .map_err(|e| Self::undecodable(thread_id, Some(seq), format_args!("blob {hash}"), &e))?;
                blobs.insert(hash, value);
            }
        }
        let mut messages = Messages::new();
        for m in &replayed.messages {
            messages.push_shared(m.clone());
        }
        let mut state = State::with_messages(messages);
        for (name, slot) in &replayed.slots {
            let mut value = Value::clone(&slot.value);
            if !slot.blobs.is_empty() {
                resolve_refs(&mut value, &mut |hash| {
                    blobs.get(hash).cloned().ok_or_else(|| {
                        Self::corrupt(
                            thread_id,
                            Some(seq),
                            format!("slot {name} names unknown blob {hash}"),
                        )
                    })
                })?;
            }
            state.set_json(name.clone(), slot.private, value);
        }
        Ok((state, blob_bytes))
    }
}

/// The head as read: a step's first line where the head is linked to its step object (local
/// disk), or a head object naming the step.
fn parse_head(thread_id: &ThreadId, bytes: &[u8]) -> Result<Head, CheckpointError> {
    let unreadable = |e: serde_json::Error| BackendCheckpointer::undecodable(thread_id, None, "the head", &e);
    Ok(match split_header(bytes) {
        // Linked to its step object (local disk): the step's header says what the head would.
        Some((line, _)) => {
            let header: StepHeader = serde_json::from_slice(line).map_err(unreadable)?;
            Head {
                format: header.format,
                thread_id: header.thread_id,
                seq: header.seq,
                step: header.step.unwrap_or_default(),
                saved_at_ms: header.saved_at_ms,
                since_base: header.since_base,
                linked: true,
            }
        }
        None => serde_json::from_slice(bytes).map_err(unreadable)?,
    })
}

/// Decode step objects read from the store, checking each against its name.
fn decode_steps(
    thread_id: &ThreadId,
    steps: &[StepName],
    raw: &[Bytes],
) -> Result<Vec<(StepHeader, Body)>, CheckpointError> {
    steps
        .iter()
        .zip(raw)
        .map(|(step, bytes)| {
            // No line break: cut short within (or right after) the header line.
            let (header, body) = split_header(bytes).unwrap_or((bytes, &[]));
            let header = parse_header(thread_id, step, header)?;
            let body = serde_json::from_slice(body).map_err(|e| {
                BackendCheckpointer::undecodable(thread_id, Some(step.seq), "the step's body", &e)
            })?;
            Ok((header, body))
        })
        .collect()
}

/// The bytes a read of step object `step` returned; a missing object is corruption.
pub(super) fn step_bytes(
    thread_id: &ThreadId,
    step: &StepName,
    read: Result<crate::backend::ReadOutput, BackendError>,
) -> Result<Bytes, CheckpointError> {
    match read {
        Ok(out) => Ok(out.bytes),
        Err(BackendError::NotFound { .. }) => Err(BackendCheckpointer::corrupt(
            thread_id,
            Some(step.seq),
            "the step object is missing",
        )),
        Err(e) => Err(BackendCheckpointer::storage(thread_id, e)),
    }
}

/// A step object's header line, checked against the step's name and thread.
pub(super) fn parse_header(
    thread_id: &ThreadId,
    step: &StepName,
    line: &[u8],
) -> Result<StepHeader, CheckpointError> {
    let header: StepHeader = serde_json::from_slice(line)
        .map_err(|e| BackendCheckpointer::undecodable(thread_id, Some(step.seq), "the step's header", &e))?;
    checked_header(thread_id, step, header)
}

/// A step object's header, checked against the step's name and thread.
pub(super) fn checked_header(
    thread_id: &ThreadId,
    step: &StepName,
    header: StepHeader,
) -> Result<StepHeader, CheckpointError> {
    let corrupt = |reason: String| BackendCheckpointer::corrupt(thread_id, Some(step.seq), reason);
    if header.format != LOG_FORMAT || header.seq != step.seq || &header.thread_id != thread_id {
        return Err(corrupt(format!(
            "header says format {}, thread {}, step {}",
            header.format, header.thread_id, header.seq
        )));
    }
    Ok(header)
}
