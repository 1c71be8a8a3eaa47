//! The tool-call journal: each call of the thread's current tool step as it starts and as it
//! finishes ([`CallRecord`]), kept beside the thread's checkpoints (like LangGraph's pending
//! writes), so a run resumed after a crash re-runs only the calls without a recorded result.
//!
//! The journal belongs to the step whose reply is the thread's last message: a record names the
//! reply (its index in the thread's messages), the call's id and a fingerprint of the call (its
//! tool and arguments); records of any other reply or call are ignored. The agent loop forgets the step's records once the checkpoint holding its results is
//! saved. What a `kill -9` leaves, at each point of one call:
//!
//! | killed | the journal holds | a resumed run |
//! |---|---|---|
//! | before the call started | nothing for it | runs it |
//! | after it started (an external call's `Started` record), before its result was recorded | `Started` | reads the tool's [`SideEffects`](crate::tools::SideEffects): read-only and idempotent calls run again; an external one does not (its outcome is unknown: the model is told, or a person decides) |
//! | after its result was recorded | `Finished` | keeps the result (and its slot writes); the call does not run again |
//! | after the step's checkpoint | (forgotten) | starts at the next model call |
//!
//! Only external calls get a `Started` record: a read-only or idempotent call without a result
//! runs again whether it started or not. A step whose only call is read-only or idempotent keeps
//! no record at all: a crash before its checkpoint finds it unrecorded and runs it again, which is
//! what its record would have spared only the step's other calls, and it has none. A record over 64 MiB (a result of many images) is not
//! kept: the call then counts as not finished, the conservative side.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::runtime::message::ToolMessage;
use crate::runtime::state::{State, StateUpdates};

/// One call of a tool step, as the journal keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    /// The call's id (unique within the thread).
    pub call_id: String,
    /// Index, in the thread's messages, of the reply that made the call.
    pub reply: usize,
    /// The call itself ([`CallRecord::fingerprint`] of its tool and arguments): a record is
    /// used only for the very call that made it, never for a later call that reuses the id (a
    /// thread rolled back, a provider that repeats ids).
    #[serde(default)]
    pub fingerprint: String,
    /// How far it got.
    pub outcome: CallOutcome,
}

/// How far a journaled call got.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum CallOutcome {
    /// It was about to run (recorded before an external call starts).
    Started,
    /// It finished: its result and its slot writes, in order.
    Finished {
        /// What the model gets.
        message: ToolMessage,
        /// The slot writes the call returned.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        updates: Vec<SlotWrite>,
    },
}

/// One slot write of a finished call, as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SlotWrite {
    /// The slot's name.
    pub name: String,
    /// True for a private slot.
    #[serde(default)]
    pub private: bool,
    /// The value written.
    pub value: Value,
}

impl SlotWrite {
    /// `updates` as JSON, in order.
    pub fn all(updates: &StateUpdates) -> Result<Vec<Self>, crate::runtime::state::StateError> {
        Ok(updates
            .to_json()?
            .into_iter()
            .map(|(name, private, value)| Self { name, private, value })
            .collect())
    }

    /// Write these to `state`, in order.
    pub fn apply(writes: Vec<Self>, state: &mut State) {
        for w in writes {
            state.set_json(w.name, w.private, w.value);
        }
    }
}

impl CallRecord {
    /// The hex SHA-256 of the tool's name and the canonical (sorted-key) JSON of the arguments.
    pub fn fingerprint(tool: &str, args: &Value) -> String {
        use sha2::{Digest, Sha256};
        let args = crate::tools::canonical::canonical(args.clone());
        let mut hasher = Sha256::new();
        hasher.update(tool.as_bytes());
        hasher.update([0]);
        hasher.update(args.to_string().as_bytes());
        hex(&hasher.finalize())
    }

    /// The record's storage name: the hex SHA-256 of the call id (a call id may hold any
    /// character; a storage name may not).
    pub(crate) fn file_name(call_id: &str) -> String {
        use sha2::{Digest, Sha256};
        let mut name = hex(&Sha256::digest(call_id.as_bytes()));
        name.push_str(".json");
        name
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// How [`BackendCheckpointer`] keeps the journal: one object per call,
/// `{root}/{thread}/calls/{sha256 of the call id}.json`, overwritten when the call finishes and
/// deleted by `forget_calls` (or with the thread).
mod store {
    use bytes::Bytes;

    use super::CallRecord;
    use crate::backend::{BackendError, ByteRange, VirtualPath, WriteMode};
    use crate::runtime::checkpoint::{BackendCheckpointer, CheckpointError};
    use crate::runtime::context::ThreadId;

    /// Largest record read back (a tool result is far smaller: results over the eviction limit
    /// are files); a longer one is read only this far and reported as corrupt.
    const MAX_RECORD_BYTES: u64 = 64 << 20;

    /// Where the journal lives, beside the thread's log.
    const CALLS_DIR: &str = "calls";

    impl BackendCheckpointer {
        /// `{root}/{thread_id}/calls`: the current step's tool-call journal.
        pub(in crate::runtime::checkpoint) fn calls_dir(
            &self,
            thread_id: &ThreadId,
        ) -> Result<VirtualPath, CheckpointError> {
            Self::join(thread_id, &self.thread_dir(thread_id)?, CALLS_DIR)
        }

        fn call_path(&self, thread_id: &ThreadId, call_id: &str) -> Result<VirtualPath, CheckpointError> {
            let dir = self.calls_dir(thread_id)?;
            dir.join(&CallRecord::file_name(call_id))
                .map_err(|e| Self::storage(thread_id, BackendError::invalid_path(call_id, e)))
        }

        pub(in crate::runtime::checkpoint) async fn write_call(
            &self,
            thread_id: &ThreadId,
            record: &CallRecord,
        ) -> Result<(), CheckpointError> {
            let path = self.call_path(thread_id, &record.call_id)?;
            let bytes = serde_json::to_vec(record).map_err(|source| CheckpointError::Encode {
                thread_id: thread_id.clone(),
                source,
            })?;
            if bytes.len() as u64 > MAX_RECORD_BYTES {
                // Not kept: after a crash the call counts as started, never as finished wrongly.
                let error = BackendError::TooLarge {
                    path: path.to_string(),
                    size: bytes.len() as u64,
                    limit: MAX_RECORD_BYTES,
                };
                return Err(Self::storage(thread_id, error));
            }
            self.backend
                .write(&path, Bytes::from(bytes), WriteMode::Overwrite)
                .await
                .map_err(|e| Self::storage(thread_id, e))?;
            Ok(())
        }

        pub(in crate::runtime::checkpoint) async fn read_calls(
            &self,
            thread_id: &ThreadId,
            call_ids: &[String],
        ) -> Result<Vec<CallRecord>, CheckpointError> {
            let paths = call_ids
                .iter()
                .map(|id| self.call_path(thread_id, id))
                .collect::<Result<Vec<_>, _>>()?;
            let mut records = Vec::new();
            for ((id, path), read) in call_ids.iter().zip(&paths).zip(
                self.backend
                    .read_many(&paths, Some(ByteRange::prefix(MAX_RECORD_BYTES + 1)))
                    .await,
            ) {
                let read = match read {
                    Ok(read) => read,
                    Err(BackendError::NotFound { .. }) => continue,
                    Err(e) => return Err(Self::storage(thread_id, e)),
                };
                if read.bytes.len() as u64 > MAX_RECORD_BYTES {
                    return Err(Self::corrupt(
                        thread_id,
                        None,
                        format!("the record of call {id} at {path} is too large"),
                    ));
                }
                let record: CallRecord =
                    serde_json::from_slice(&read.bytes).map_err(|source| CheckpointError::Decode {
                        thread_id: thread_id.clone(),
                        source,
                    })?;
                // Another call id with the same digest cannot happen; a renamed file can.
                if record.call_id == *id {
                    records.push(record);
                }
            }
            Ok(records)
        }

        pub(in crate::runtime::checkpoint) async fn delete_calls(
            &self,
            thread_id: &ThreadId,
            call_ids: &[String],
        ) -> Result<(), CheckpointError> {
            let deletes = call_ids.iter().map(|id| async move {
                let path = self.call_path(thread_id, id)?;
                match self.backend.delete(&path).await {
                    Ok(()) | Err(BackendError::NotFound { .. }) => Ok(()),
                    Err(e) => Err(Self::storage(thread_id, e)),
                }
            });
            futures::future::try_join_all(deletes).await?;
            Ok(())
        }
    }
}
