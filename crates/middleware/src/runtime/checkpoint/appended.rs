//! A thread's steps in one file, on stores that append ([`Backend::append`]: local disk).
//!
//! With one object per step, every save creates a file and changes two directories (the log's
//! and, to move the head, the thread's). On local disk that is what a save costs most: a journaled
//! ext4 logs every directory and inode-table block a save touched, and a save that touches one
//! while the journal writes it out waits for the write (on this project's 2-core machine, 1,000
//! runs in flight paid up to 9 ms at p99 per step for it); an ext4 without a journal makes each
//! new file scan past the inodes freed in the last minutes. Here a save is one append to
//! `{thread}/steps.log`: one file changed in place, no file created or freed, no directory touched
//! (measured in docs/server.md, "Speed").
//!
//! The file is the thread's step objects one after another, each followed by a trailer line:
//!
//! ```text
//! {header line of step 0}\n{body line of step 0}\n#step 0000000000000000 0000000000000000 1a2b3c4d\n
//! {header line of step 1}\n{body line of step 1}\n#step 00000000000001f4 0000000000000000 5e6f7a8b\n
//! ```
//!
//! The trailer gives where its record starts, where the record's chain starts (its latest base
//! step's record, where a load replays from), and a CRC-32 of the step object. JSON lines never
//! hold a raw line break, so `\n#step ` appears only in trailers. Step objects are the same as
//! in the per-object layout (`record.rs`), their header naming the step (`step`), so everything
//! that replays steps is shared.
//!
//! - **The head is the last whole record.** A load reads the file's tail, checks the last
//!   trailer and its CRC, and reads back to the record's base in one read; no listing, no head
//!   object. The version is the file's version tag.
//! - **A save appends, version-checked** ([`AppendMode::IfVersion`]): of two writers on one
//!   version exactly one appends; the other gets `Conflict`, and nothing of its step is written.
//!   Appends are serialized by a lock on the file (between processes too), so no lost race leaves
//!   a step behind, and there is nothing for garbage collection to remove but blobs.
//! - **A killed append** (kill -9, or a power loss) leaves part of a record after the last whole
//!   one. A load ignores it (its trailer is missing or its CRC wrong), and the next save cuts it
//!   off (`keep`) under the lock, after checking that the file is still the one it read, so a live
//!   writer's record is never cut.
//! - **History** walks the trailers back from the end, reading each record's header line and the
//!   trailer before it in one ranged read.
//!
//! Threads created before this layout (a `head.json` and a `log/` directory) keep theirs: a
//! thread's layout is the one its files have, and a thread never has both.

use bytes::Bytes;

use super::backend::BackendCheckpointer;
use super::log_read::checked_header;
use super::record::{Body, StepHeader, StepName, split_header};
use super::{CheckpointError, CheckpointVersion};
use std::sync::atomic::{AtomicU8, Ordering};

use crate::backend::{AppendMode, Backend, BackendError, ByteRange, Version, VirtualPath};
use crate::runtime::context::ThreadId;

/// The file under a thread's directory.
pub(super) const LOG_FILE: &str = "steps.log";

/// Versions of appended threads start with this, so they never equal a per-object head's.
pub(super) const LOG_VERSION: &str = "log:";

/// The checkpoint version of a thread whose file is at the store's `version`.
pub(super) fn log_version(version: &Version) -> CheckpointVersion {
    CheckpointVersion::new(format!("{LOG_VERSION}{}", version.as_str()))
}

/// `\n#step {start:016x} {base:016x} {crc:08x}\n`: the line break ending the body, then the
/// trailer line.
const TRAILER_LEN: usize = 1 + 6 + 16 + 1 + 16 + 1 + 8 + 1;
const TRAILER_TAG: &[u8] = b"\n#step ";

/// Bytes of the file's end read first by a load: most threads' chains since their base step.
const TAIL_WINDOW: u64 = 256 * 1024;

/// Bytes read from a record's start to find its header line (a header is a few hundred bytes).
const HEADER_PREFIX: u64 = 2048;

/// Tries at reading a tail that stays put (an append landing between the `stat` and the read).
const TAIL_TRIES: usize = 4;

/// Where an appended thread's head record ends and where its chain's base record starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct LogAt {
    /// The end of the last whole record: what a save keeps.
    pub end: u64,
    /// The start of the base record of the head's chain.
    pub base: u64,
}

/// A record as its trailer says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Trailer {
    start: u64,
    base: u64,
    crc: u32,
}

/// One record of a thread's file.
#[derive(Debug, Clone)]
pub(super) struct LogRecord {
    pub step: StepName,
    pub header: StepHeader,
    pub end: u64,
    pub base: u64,
}

/// The end of an appended thread's file, as a load reads it.
pub(super) struct Tail {
    /// The file's bytes from `window_start` to `at.end`.
    window: Bytes,
    window_start: u64,
    /// Where the head record ends, and its chain's base.
    pub at: LogAt,
    /// The head record's start.
    pub head_start: u64,
    /// The file's version when read (a half-written record after `at.end` included).
    pub version: Version,
}

impl Tail {
    /// The head record's step and header.
    pub fn head(&self, thread_id: &ThreadId) -> Result<(StepName, StepHeader), CheckpointError> {
        let Some((_, bytes)) = whole_record(&self.window, self.window_start, self.at.end) else {
            return Err(BackendCheckpointer::corrupt(
                thread_id,
                None,
                "the last step's trailer",
            ));
        };
        let (line, _) = split_header(bytes).unwrap_or((bytes, &[]));
        record_header(thread_id, line)
    }

    /// The thread's version as a checkpoint version.
    pub fn checkpoint_version(&self) -> CheckpointVersion {
        log_version(&self.version)
    }
}

/// Whether a checkpointer's store appends, asked once ([`StoreAppends::ask`]): what decides
/// whether a new thread is kept in one file. Reads never ask: a wrapper that does not forward
/// [`Backend::append`] still reads a one-file thread another checkpointer wrote (it cannot save
/// it: `Unsupported`).
#[derive(Debug, Default)]
pub(super) struct StoreAppends(AtomicU8);

// 0: not asked yet.
const APPENDS: u8 = 1;
const CANNOT: u8 = 2;

impl StoreAppends {
    /// Whether `backend` appends: asked the first time with an append that cannot change
    /// anything (version-checked, to a file under `root` that is not there: a store that appends
    /// answers `Conflict`, one that cannot answers `None`).
    pub async fn ask(&self, backend: &dyn Backend, root: &VirtualPath) -> bool {
        match self.0.load(Ordering::Relaxed) {
            APPENDS => return true,
            CANNOT => return false,
            _ => {}
        }
        let probe = root
            .join(".trellis-append-probe")
            .unwrap_or_else(|_| root.clone());
        let mode = AppendMode::IfVersion {
            version: Version::new("never"),
            keep: 0,
        };
        let appends = backend.append(&probe, Bytes::new(), mode).await.is_some();
        self.0
            .store(if appends { APPENDS } else { CANNOT }, Ordering::Relaxed);
        appends
    }

    /// The store said it cannot append, to an append that could have.
    pub fn cannot(&self) {
        self.0.store(CANNOT, Ordering::Relaxed);
    }
}

/// `step` as a record starting at `start` whose chain's base record starts at `base`.
pub(super) fn frame(step: &[u8], start: u64, base: u64) -> Vec<u8> {
    let crc = crc32fast::hash(step);
    let mut out = Vec::with_capacity(step.len() + TRAILER_LEN);
    out.extend_from_slice(step);
    out.extend_from_slice(format!("\n#step {start:016x} {base:016x} {crc:08x}\n").as_bytes());
    debug_assert_eq!(out.len(), step.len() + TRAILER_LEN);
    out
}

/// The trailer ending at `end` of `buf`, if the bytes there are one.
fn trailer_at(buf: &[u8], end: usize) -> Option<Trailer> {
    let t = buf.get(end.checked_sub(TRAILER_LEN)?..end)?;
    if !t.starts_with(TRAILER_TAG) || t[TRAILER_LEN - 1] != b'\n' {
        return None;
    }
    let field = |from: usize, len: usize| -> Option<u64> {
        let s = std::str::from_utf8(&t[from..from + len]).ok()?;
        u64::from_str_radix(s, 16).ok()
    };
    let (start, base, crc) = (field(7, 16)?, field(24, 16)?, field(41, 8)?);
    (t[23] == b' ' && t[40] == b' ' && base <= start).then_some(Trailer {
        start,
        base,
        crc: u32::try_from(crc).ok()?,
    })
}

/// The step object of the record ending at `end` (an offset of the file) in `buf` (the file's
/// bytes from `buf_start`), checked against its trailer's CRC.
fn whole_record(buf: &[u8], buf_start: u64, end: u64) -> Option<(Trailer, &[u8])> {
    let end_in = usize::try_from(end.checked_sub(buf_start)?).ok()?;
    let trailer = trailer_at(buf, end_in)?;
    let start_in = usize::try_from(trailer.start.checked_sub(buf_start)?).ok()?;
    let step = buf.get(start_in..end_in - TRAILER_LEN)?;
    (trailer.start + TRAILER_LEN as u64 <= end && crc32fast::hash(step) == trailer.crc)
        .then_some((trailer, step))
}

/// The end of the last whole record in `buf` (the file's bytes from `buf_start`): the end of
/// `buf` unless a killed append left part of a record there. `None` when no whole record ends in
/// `buf` (or one does but starts before it). A trailer's tag never occurs elsewhere (JSON lines
/// hold no raw line break), so only the places right after a tag are tried.
fn last_whole_end(buf: &[u8], buf_start: u64) -> Option<u64> {
    let mut search = buf.len();
    while let Some(tag) = buf[..search]
        .windows(TRAILER_TAG.len())
        .rposition(|w| w == TRAILER_TAG)
    {
        let end = buf_start + (tag + TRAILER_LEN) as u64;
        if tag + TRAILER_LEN <= buf.len() && whole_record(buf, buf_start, end).is_some() {
            return Some(end);
        }
        search = tag;
    }
    None
}

impl BackendCheckpointer {
    pub(super) fn log_path(
        &self,
        thread_id: &ThreadId,
    ) -> Result<crate::backend::VirtualPath, CheckpointError> {
        Self::join(thread_id, &self.thread_dir(thread_id)?, LOG_FILE)
    }

    /// The end of the thread's file, or `None` when the thread has none (a per-object thread, or
    /// no thread). `Unfinished` when the file holds no whole record (a power loss emptied it).
    pub(super) async fn read_tail(&self, thread_id: &ThreadId) -> Result<Option<Tail>, CheckpointError> {
        let path = self.log_path(thread_id)?;
        let mut window = TAIL_WINDOW;
        let mut tries = 0;
        while tries < TAIL_TRIES {
            let entry = match self.backend.stat(&path).await {
                Ok(entry) => entry,
                Err(BackendError::NotFound { .. }) => return Ok(None),
                Err(e) => return Err(Self::storage(thread_id, e)),
            };
            let Some(version) = entry.version else {
                return Err(CheckpointError::Unsupported(format!("{path} has no version tag")));
            };
            let size = entry.size;
            let from = size.saturating_sub(window);
            let out = match self
                .backend
                .read(&path, Some(ByteRange::bounded(from, size)))
                .await
            {
                Ok(out) => out,
                Err(BackendError::NotFound { .. }) => return Ok(None),
                Err(e) => return Err(Self::storage(thread_id, e)),
            };
            // An append between the stat and the read: the bytes and the version would not
            // agree. Read again.
            if out.size != size || out.version.as_ref() != Some(&version) {
                tries += 1;
                continue;
            }
            let Some(end) = last_whole_end(&out.bytes, from) else {
                if from == 0 {
                    return Err(CheckpointError::Unfinished {
                        thread_id: thread_id.clone(),
                        step: None,
                        what: format!("{LOG_FILE}: no whole step"),
                    });
                }
                // The last whole record starts before the window (it is larger): read more, up to
                // the whole file.
                window = window.saturating_mul(4);
                continue;
            };
            if end < size {
                tracing::warn!(
                    thread = %thread_id,
                    bytes = size - end,
                    "{LOG_FILE} ends in part of a step (a save cut short, or one in progress in \
                     another process); the thread loads at its last whole step"
                );
            }
            let used = usize::try_from(end - from).unwrap_or(usize::MAX);
            let bytes = out.bytes.slice(..used);
            let Some((trailer, _)) = whole_record(&bytes, from, end) else {
                return Err(Self::corrupt(thread_id, None, "the last step's trailer"));
            };
            return Ok(Some(Tail {
                window: bytes,
                window_start: from,
                at: LogAt {
                    end,
                    base: trailer.base,
                },
                head_start: trailer.start,
                version,
            }));
        }
        Err(Self::storage(
            thread_id,
            BackendError::from_io(
                &path,
                std::io::Error::other("the file kept changing while it was read"),
            ),
        ))
    }

    /// The file's bytes `[from, to)`, from `tail`'s window where it holds them.
    async fn log_bytes(
        &self,
        thread_id: &ThreadId,
        tail: &Tail,
        from: u64,
        to: u64,
    ) -> Result<Bytes, CheckpointError> {
        if from >= tail.window_start && to <= tail.at.end {
            let (a, b) = (
                (from - tail.window_start) as usize,
                (to - tail.window_start) as usize,
            );
            return Ok(tail.window.slice(a..b));
        }
        let path = self.log_path(thread_id)?;
        let out = self
            .backend
            .read(&path, Some(ByteRange::bounded(from, to)))
            .await
            .map_err(|e| Self::storage(thread_id, e))?;
        if (out.bytes.len() as u64) < to - from {
            return Err(Self::corrupt(
                thread_id,
                None,
                format!("{LOG_FILE} is shorter than its trailers say"),
            ));
        }
        Ok(out.bytes)
    }

    /// The records ending at `end` back to (and including) the one starting at `from` (a base
    /// step), oldest first, decoded and checked: CRC, header against thread and name, each step
    /// the parent of the next.
    pub(super) async fn read_records(
        &self,
        thread_id: &ThreadId,
        tail: &Tail,
        from: u64,
        end: u64,
    ) -> Result<Vec<(StepName, StepHeader, Body)>, CheckpointError> {
        let bytes = self.log_bytes(thread_id, tail, from, end).await?;
        let mut steps: Vec<&[u8]> = Vec::new();
        let mut at = end;
        while at > from {
            let Some((trailer, step)) = whole_record(&bytes, from, at) else {
                return Err(Self::corrupt(
                    thread_id,
                    None,
                    format!("the record ending at byte {at}"),
                ));
            };
            steps.push(step);
            at = trailer.start;
        }
        if at != from {
            return Err(Self::corrupt(
                thread_id,
                None,
                format!("no record starts at byte {from}"),
            ));
        }
        steps.reverse();
        let mut out: Vec<(StepName, StepHeader, Body)> = Vec::with_capacity(steps.len());
        for bytes in steps {
            let (step, header, body) = decode_record(thread_id, bytes)?;
            if let Some((previous, ..)) = out.last()
                && (step.seq != previous.seq + 1 || step.parent.as_ref() != Some(&previous.nonce))
            {
                return Err(Self::corrupt(
                    thread_id,
                    Some(step.seq),
                    "not the step after the one before it",
                ));
            }
            out.push((step, header, body));
        }
        if out.first().is_some_and(|(s, ..)| !s.base) {
            return Err(Self::corrupt(
                thread_id,
                None,
                format!("the record at byte {from} is no base step"),
            ));
        }
        Ok(out)
    }

    /// Every record of the thread's file, oldest first, headers only: one ranged read per record
    /// back from the end (its header line and the trailer before it).
    pub(super) async fn log_records(
        &self,
        thread_id: &ThreadId,
        tail: &Tail,
    ) -> Result<Vec<LogRecord>, CheckpointError> {
        let path = self.log_path(thread_id)?;
        let mut records = Vec::new();
        let (mut start, mut end, mut base) = (tail.head_start, tail.at.end, tail.at.base);
        loop {
            // The trailer before this record, then this record's first bytes.
            let from = start.saturating_sub(TRAILER_LEN as u64);
            let to = (start + HEADER_PREFIX).min(end - TRAILER_LEN as u64);
            let mut bytes = self.log_bytes(thread_id, tail, from, to).await?;
            let header_at = (start - from) as usize;
            if split_header(&bytes[header_at..]).is_none() && to < end - TRAILER_LEN as u64 {
                let out = self
                    .backend
                    .read(&path, Some(ByteRange::bounded(from, end - TRAILER_LEN as u64)))
                    .await
                    .map_err(|e| Self::storage(thread_id, e))?;
                bytes = out.bytes;
            }
            let (line, _) = split_header(&bytes[header_at..]).unwrap_or((&bytes[header_at..], &[]));
            let (step, header) = record_header(thread_id, line)?;
            records.push(LogRecord {
                step,
                header,
                end,
                base,
            });
            if start == 0 {
                break;
            }
            let Some(previous) = trailer_at(&bytes, header_at) else {
                return Err(Self::corrupt(
                    thread_id,
                    None,
                    format!("no trailer ends at byte {start}"),
                ));
            };
            if previous.start >= start {
                return Err(Self::corrupt(
                    thread_id,
                    None,
                    format!("the trailer at byte {start}"),
                ));
            }
            (end, start, base) = (start, previous.start, previous.base);
        }
        records.reverse();
        for pair in records.windows(2) {
            let (a, b) = (&pair[0].step, &pair[1].step);
            if b.seq != a.seq + 1 || b.parent.as_ref() != Some(&a.nonce) {
                return Err(Self::corrupt(
                    thread_id,
                    Some(b.seq),
                    "not the step after the one before it",
                ));
            }
        }
        Ok(records)
    }
}

/// A record's step object: its name (from its header), header and body.
fn decode_record(
    thread_id: &ThreadId,
    bytes: &[u8],
) -> Result<(StepName, StepHeader, Body), CheckpointError> {
    let (line, body) = split_header(bytes).unwrap_or((bytes, &[]));
    let (step, header) = record_header(thread_id, line)?;
    let body = serde_json::from_slice(body)
        .map_err(|e| BackendCheckpointer::undecodable(thread_id, Some(step.seq), "the step's body", &e))?;
    Ok((step, header, body))
}

/// A record's header line, and the step it names.
fn record_header(thread_id: &ThreadId, line: &[u8]) -> Result<(StepName, StepHeader), CheckpointError> {
    let header: StepHeader = serde_json::from_slice(line)
        .map_err(|e| BackendCheckpointer::undecodable(thread_id, None, "a step's header", &e))?;
    let step = header
        .step
        .as_deref()
        .and_then(StepName::parse)
        .filter(|s| s.seq == header.seq)
        .ok_or_else(|| BackendCheckpointer::corrupt(thread_id, Some(header.seq), "a record names no step"))?;
    let header = checked_header(thread_id, &step, header)?;
    Ok((step, header))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn trailers_round_trip_and_a_cut_tail_is_passed_over() {
        let a = frame(b"{\"a\":1}\n{}", 0, 0);
        let b = frame(b"{\"b\":2}\n{}", a.len() as u64, 0);
        let mut file = [a.clone(), b.clone()].concat();
        let whole = file.len() as u64;
        assert_eq!(last_whole_end(&file, 0), Some(whole));
        let (t, step) = whole_record(&file, 0, whole).unwrap();
        assert_eq!(
            (t.start, t.base, step),
            (a.len() as u64, 0, &b"{\"b\":2}\n{}"[..])
        );

        // Every cut of a third record leaves the second as the last whole one.
        let c = frame(b"{\"c\":3}\n{\"x\":\"\\n#step \"}", whole, whole);
        for cut in 0..c.len() {
            let mut cut_file = file.clone();
            cut_file.extend_from_slice(&c[..cut]);
            assert_eq!(last_whole_end(&cut_file, 0), Some(whole), "cut at {cut}");
        }
        file.extend_from_slice(&c);
        assert_eq!(last_whole_end(&file, 0), Some(file.len() as u64));

        // A changed byte fails the CRC; the record before is found instead.
        let mut garbled = file.clone();
        let at = whole as usize + 2;
        garbled[at] ^= 1;
        assert_eq!(last_whole_end(&garbled, 0), Some(whole));

        // A window starting inside the last record: no whole record in it.
        assert_eq!(last_whole_end(&file[(whole as usize + 1)..], whole + 1), None);
    }
}
