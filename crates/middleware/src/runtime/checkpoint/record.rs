//! The thread log's records: step objects, their names, the head, and how a chain of steps replays
//! into a state.
//!
//! A step object is two JSON lines: a small header (what `history` reads, a prefix of the file)
//! and a body (what changed):
//!
//! ```text
//! {"format":3,"thread_id":"t","seq":4,"saved_at_ms":1700000000000,"summary":"assistant: calls ls","messages":9}
//! {"base":false,"keep":8,"append":[{"role":"ai",...}],"set":{"_skills":{"private":true,"value":{...},"blobs":["<sha256>"]}},"unset":[]}
//! ```
//!
//! `keep` is how many messages of the previous step stay (a pure append keeps them all; a rewrite
//! such as a summarization keeps fewer), `append` the messages after them, `set` the slots written
//! since the previous step (encoded, with blob references), `unset` the slots removed. A `base`
//! step starts from an empty state and carries everything (a thread's first step, a fork, a save
//! whose previous state this process does not know, and every [`SNAPSHOT_STEPS`]th step, so a load
//! reads a bounded number of steps). Its messages are `chunks` (blob hashes of complete runs of
//! [`CHUNK_MESSAGES`] messages, written once by content and shared by later snapshots), then
//! `append`; its `keep` counts the chunked messages.
//!
//! Its name, `{seq:012}-{nonce}-{parent nonce or "root"}[.base].json`, says where it belongs in the
//! chain, so one listing of the log finds the chain without reading a step.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::runtime::context::ThreadId;
use crate::runtime::message::Message;

/// The format of the step log (formats 1 and 2 are the single `checkpoint.json` of older builds).
pub(super) const LOG_FORMAT: u32 = 3;

/// Most characters of a step summary.
const SUMMARY_CHARS: usize = 80;

/// Where a step object sits in its thread's chain, as its file name says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct StepName {
    /// Its checkpoint number.
    pub seq: u64,
    /// Random, unique per written step.
    pub nonce: String,
    /// The nonce of the step before it (`seq - 1`), `None` for a thread's first step.
    pub parent: Option<String>,
    /// A base step: replay starts here.
    pub base: bool,
}

impl StepName {
    /// The file name under the log directory.
    pub fn file_name(&self) -> String {
        format!(
            "{:012}-{}-{}{}.json",
            self.seq,
            self.nonce,
            self.parent.as_deref().unwrap_or("root"),
            if self.base { ".base" } else { "" }
        )
    }

    /// Parse a file name; `None` for anything that is not a step object's name.
    pub fn parse(name: &str) -> Option<Self> {
        let stem = name.strip_suffix(".json")?;
        let (stem, base) = match stem.strip_suffix(".base") {
            Some(stem) => (stem, true),
            None => (stem, false),
        };
        let mut parts = stem.split('-');
        let (seq, nonce, parent) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || seq.len() != 12 || !is_nonce(nonce) {
            return None;
        }
        let seq: u64 = seq.parse().ok()?;
        let parent = match parent {
            "root" if seq == 0 || base => None,
            "root" => return None,
            p if is_nonce(p) && seq > 0 => Some(p.to_owned()),
            _ => return None,
        };
        Some(Self {
            seq,
            nonce: nonce.to_owned(),
            parent,
            base,
        })
    }
}

fn is_nonce(s: &str) -> bool {
    s.len() == 16
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The thread's head: the one object written version-checked, naming the latest step.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Head {
    pub format: u32,
    pub thread_id: ThreadId,
    pub seq: u64,
    /// The latest step's file name.
    pub step: String,
    pub saved_at_ms: u64,
    /// The steps from the latest base step to `step`: what a load reads, so it needs no listing
    /// of the log. `None` in heads of older builds, whose loads list the log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_base: Option<SinceBase>,
    /// Read as a second name of its step object (local disk), not as a head object.
    #[serde(skip)]
    pub linked: bool,
}

impl Head {
    /// A head naming `step` and nothing more (no time, no chain), for a head whose own bytes
    /// were lost: a load lists the log for the chain and takes the time from the step.
    pub fn of_step(thread_id: &ThreadId, step: &StepName) -> Self {
        Self {
            format: LOG_FORMAT,
            thread_id: thread_id.clone(),
            seq: step.seq,
            step: step.file_name(),
            saved_at_ms: 0,
            since_base: None,
            linked: true,
        }
    }
}

/// The committed steps from the latest base step up to (not including) a step, compactly: the
/// base step's parent and the nonces of the steps, oldest first; numbers and parents follow.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct SinceBase {
    /// The base step's parent nonce (`None` for a first step or a fork).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// The nonces of the base step and of each step after it, before the one this describes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nonces: Vec<String>,
}

impl SinceBase {
    /// Describe `chain` (a base step, then the steps after it) as seen from the step after it.
    pub fn of(chain: &[StepName]) -> Self {
        Self {
            parent: chain.first().and_then(|s| s.parent.clone()),
            nonces: chain.iter().map(|s| s.nonce.clone()).collect(),
        }
    }

    /// The chain ending at `step`, oldest first; `None` when the two do not fit together (a base
    /// step must come first, each step's parent is the step before it).
    pub fn chain_to(&self, step: &StepName) -> Option<Vec<StepName>> {
        if self.nonces.is_empty() {
            return step.base.then(|| vec![step.clone()]);
        }
        let first = step.seq.checked_sub(self.nonces.len() as u64)?;
        let mut chain = Vec::with_capacity(self.nonces.len() + 1);
        for (i, nonce) in self.nonces.iter().enumerate() {
            let parent = if i == 0 {
                self.parent.clone()
            } else {
                Some(self.nonces[i - 1].clone())
            };
            let name = StepName {
                seq: first + i as u64,
                nonce: nonce.clone(),
                parent,
                base: i == 0,
            };
            // Only names a file could have.
            if StepName::parse(&name.file_name()).as_ref() != Some(&name) {
                return None;
            }
            chain.push(name);
        }
        if step.base || step.parent.as_ref() != self.nonces.last() {
            return None;
        }
        chain.push(step.clone());
        Some(chain)
    }
}

/// A save writes a base step (a snapshot) when the chain since the last one is this long, so a load
/// reads at most this many step objects however long the thread is.
pub(super) const SNAPSHOT_STEPS: usize = 32;

/// Messages per chunk: a base step carries the thread's messages as references to chunks of this
/// many (blobs, written once by content) and the rest inline, so a snapshot costs the messages
/// since the last complete chunk, not the whole conversation.
pub(super) const CHUNK_MESSAGES: usize = 64;

/// Where a forked thread came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkOrigin {
    /// The thread it was forked from.
    pub thread_id: ThreadId,
    /// The checkpoint it was forked at.
    pub seq: u64,
}

/// A step object's first line.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct StepHeader {
    pub format: u32,
    pub thread_id: ThreadId,
    pub seq: u64,
    pub saved_at_ms: u64,
    pub summary: String,
    /// Messages in the state after this step.
    pub messages: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ForkOrigin>,
    /// The step's own file name and the steps before it since the latest base step: what a load
    /// needs when this step object is the head itself (local disk links the head to it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_base: Option<SinceBase>,
}

/// One slot as the log stores it: its JSON with large shared parts as blob references.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct EncodedSlot {
    pub private: bool,
    pub value: Arc<Value>,
    /// Hashes of the blobs `value` references.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blobs: Vec<String>,
}

/// A step object's second line, as written (borrowing the state's messages).
#[derive(Serialize)]
pub(super) struct BodyOut<'a> {
    pub base: bool,
    /// A base step's message chunks (blob hashes), whose messages come before `append`.
    #[serde(skip_serializing_if = "no_chunks")]
    pub chunks: &'a [String],
    pub keep: usize,
    pub append: &'a [Arc<Message>],
    pub set: &'a BTreeMap<String, EncodedSlot>,
    pub unset: &'a [String],
}

fn no_chunks(chunks: &&[String]) -> bool {
    chunks.is_empty()
}

/// A step object's second line, as read.
#[derive(Debug, Deserialize)]
pub(super) struct Body {
    #[serde(default)]
    pub base: bool,
    /// A base step's message chunks; `keep` counts their messages.
    #[serde(default)]
    pub chunks: Vec<String>,
    pub keep: usize,
    #[serde(default)]
    pub append: Vec<Arc<Message>>,
    #[serde(default)]
    pub set: BTreeMap<String, EncodedSlot>,
    #[serde(default)]
    pub unset: Vec<String>,
}

/// Serialize a step object: header line, newline, body line.
pub(super) fn encode_step(header: &StepHeader, body: &BodyOut<'_>) -> Result<Vec<u8>, serde_json::Error> {
    let mut out = serde_json::to_vec(header)?;
    out.push(b'\n');
    serde_json::to_writer(&mut out, body)?;
    Ok(out)
}

/// The header line of a step object (or of a prefix of one); `None` when `bytes` holds no
/// complete first line.
pub(super) fn split_header(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let at = bytes.iter().position(|b| *b == b'\n')?;
    Some((&bytes[..at], &bytes[at + 1..]))
}

/// A state being rebuilt from its steps: messages and encoded slots.
#[derive(Debug, Default, Clone)]
pub(super) struct Replayed {
    pub messages: Vec<Arc<Message>>,
    pub slots: BTreeMap<String, EncodedSlot>,
    /// Hashes of the message chunks that still hold `messages`' first `chunks.len() *
    /// CHUNK_MESSAGES` messages (a later snapshot reuses them instead of writing them again).
    pub chunks: Vec<String>,
}

impl Replayed {
    /// Apply one step's changes; `chunked` are the messages of a base step's chunks, in order.
    /// Errors (with a reason) when the step keeps more messages than there are.
    pub fn apply(&mut self, body: Body, chunked: Vec<Arc<Message>>) -> Result<(), String> {
        if body.base {
            self.messages = chunked;
            self.slots.clear();
            self.chunks = body.chunks;
        } else {
            self.chunks.truncate(body.keep / CHUNK_MESSAGES);
        }
        if body.keep > self.messages.len() {
            return Err(format!("keeps {} messages of {}", body.keep, self.messages.len()));
        }
        self.messages.truncate(body.keep);
        self.messages.extend(body.append);
        for name in body.unset {
            self.slots.remove(&name);
        }
        self.slots.extend(body.set);
        Ok(())
    }
}

/// The committed chain ending at `head`, oldest first, from the file names in the log directory.
/// Errors with the number of the first step that is missing.
pub(super) fn chain(names: &[StepName], head: &StepName) -> Result<Vec<StepName>, u64> {
    let by_key: std::collections::HashMap<(u64, &str), &StepName> =
        names.iter().map(|n| ((n.seq, n.nonce.as_str()), n)).collect();
    let mut out = vec![head.clone()];
    let mut current = head;
    while let Some(parent) = &current.parent {
        let seq = current.seq.checked_sub(1).ok_or(current.seq)?;
        let Some(step) = by_key.get(&(seq, parent.as_str())) else {
            return Err(seq);
        };
        out.push((*step).clone());
        current = step;
    }
    out.reverse();
    Ok(out)
}

/// One line about what a step added: its last new message, or the slots it wrote.
pub(super) fn summarize(append: &[Arc<Message>], set: &[&str], unset: &[String]) -> String {
    let tools = append.iter().filter(|m| matches!(***m, Message::Tool(_))).count();
    let line = match append.last().map(|m| &**m) {
        Some(Message::Tool(_)) => format!("tool results: {tools}"),
        Some(Message::Ai(ai)) if ai.has_tool_calls() => {
            let names: Vec<&str> = ai.calls().map(|c| c.name.as_str()).collect();
            format!("assistant: calls {}", names.join(", "))
        }
        Some(Message::Ai(ai)) => format!("assistant: {}", ai.text_content()),
        Some(message @ Message::Human(_)) => format!("user: {}", message.text()),
        Some(message @ Message::System(_)) => format!("system: {}", message.text()),
        None if !set.is_empty() || !unset.is_empty() => {
            let mut names: Vec<&str> = set.to_vec();
            names.extend(unset.iter().map(String::as_str));
            format!("slots: {}", names.join(", "))
        }
        None => "no change".to_owned(),
    };
    one_line(&line)
}

/// `text` on one line, at most [`SUMMARY_CHARS`] characters.
fn one_line(text: &str) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let flat = flat.trim();
    if flat.chars().count() <= SUMMARY_CHARS {
        return flat.to_owned();
    }
    let mut cut: String = flat.chars().take(SUMMARY_CHARS - 1).collect();
    cut.push('…');
    cut
}

/// Extend `chunks` (the hashes of `messages`' first complete chunks) to every complete chunk of
/// [`CHUNK_MESSAGES`] messages, encoding only the new ones. Returns the new chunks' blobs.
pub(super) fn chunk_messages(
    messages: &[std::sync::Arc<crate::runtime::message::Message>],
    chunks: &mut Vec<String>,
) -> Result<Vec<super::shared::ContentBlob>, serde_json::Error> {
    let mut blobs = Vec::new();
    for part in messages.chunks_exact(CHUNK_MESSAGES).skip(chunks.len()) {
        let blob = super::shared::blob_of(serde_json::to_vec(part)?);
        chunks.push(blob.hash.clone());
        blobs.push(blob);
    }
    Ok(blobs)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn name(seq: u64, nonce: &str, parent: Option<&str>) -> StepName {
        StepName {
            seq,
            nonce: nonce.repeat(16),
            parent: parent.map(|p| p.repeat(16)),
            base: false,
        }
    }

    #[test]
    fn names_round_trip_and_bad_names_are_refused() {
        for step in [
            name(0, "a", None),
            name(7, "b", Some("c")),
            StepName {
                base: true,
                ..name(9, "d", None)
            },
        ] {
            assert_eq!(StepName::parse(&step.file_name()), Some(step.clone()));
        }
        for bad in [
            "000000000001-aaaaaaaaaaaaaaaa-root.json", // only a first or base step has no parent
            "000000000000-aaaaaaaaaaaaaaaa-bbbbbbbbbbbbbbbb.json",
            "1-aaaaaaaaaaaaaaaa-root.json",
            "000000000000-AAAAAAAAAAAAAAAA-root.json",
            "000000000000-aaaaaaaaaaaaaaaa-root.txt",
            "000000000000-aaaaaaaaaaaaaaaa-root-x.json",
            "head.json",
        ] {
            assert_eq!(StepName::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn since_base_round_trips_and_refuses_what_does_not_fit() {
        let base = StepName {
            base: true,
            ..name(4, "a", Some("f"))
        };
        let chain = vec![base.clone(), name(5, "b", Some("a")), name(6, "c", Some("b"))];
        let head = name(7, "d", Some("c"));
        let since = SinceBase::of(&chain);
        let mut whole = chain.clone();
        whole.push(head.clone());
        assert_eq!(since.chain_to(&head), Some(whole));
        assert_eq!(SinceBase::default().chain_to(&base), Some(vec![base.clone()]));
        assert_eq!(
            SinceBase::default().chain_to(&head),
            None,
            "a delta needs its base"
        );
        assert_eq!(since.chain_to(&name(7, "d", Some("x"))), None, "wrong parent");
        assert_eq!(since.chain_to(&name(2, "d", Some("c"))), None, "before its base");
        let bad = SinceBase {
            parent: None,
            nonces: vec!["NOT-A-NONCE".into()],
        };
        assert_eq!(bad.chain_to(&name(1, "d", Some("c"))), None);
    }

    #[test]
    fn the_chain_follows_parents_and_skips_orphans() {
        let names = vec![
            name(0, "a", None),
            name(1, "b", Some("a")),
            name(1, "c", Some("a")), // lost a race
            name(2, "d", Some("b")),
            name(3, "e", Some("d")), // written, head never moved
        ];
        let got = chain(&names, &names[3]).unwrap();
        let nonces: Vec<char> = got.iter().map(|n| n.nonce.chars().next().unwrap()).collect();
        assert_eq!(nonces, ['a', 'b', 'd']);
        assert_eq!(chain(&names[1..], &names[3]), Err(0));
    }

    #[test]
    fn replay_keeps_appends_and_rewrites() {
        let msg = |t: &str| Arc::new(Message::human(t));
        let mut r = Replayed::default();
        let body = |base, keep, append: Vec<Arc<Message>>| Body {
            base,
            chunks: Vec::new(),
            keep,
            append,
            set: BTreeMap::new(),
            unset: Vec::new(),
        };
        r.apply(body(true, 0, vec![msg("a"), msg("b")]), Vec::new())
            .unwrap();
        r.apply(body(false, 2, vec![msg("c")]), Vec::new()).unwrap();
        r.apply(body(false, 1, vec![msg("s")]), Vec::new()).unwrap();
        let texts: Vec<String> = r.messages.iter().map(|m| m.text()).collect();
        assert_eq!(texts, ["a", "s"]);
        assert!(r.apply(body(false, 5, Vec::new()), Vec::new()).is_err());
        // A base step's chunked messages come first; a rewrite below a chunk drops it.
        let chunked: Vec<Arc<Message>> = (0..CHUNK_MESSAGES).map(|i| msg(&i.to_string())).collect();
        let mut base = body(true, CHUNK_MESSAGES, vec![msg("tail")]);
        base.chunks = vec!["c0".to_owned()];
        r.apply(base, chunked).unwrap();
        assert_eq!(r.messages.len(), CHUNK_MESSAGES + 1);
        assert_eq!(r.chunks, ["c0"]);
        r.apply(body(false, CHUNK_MESSAGES + 1, vec![msg("more")]), Vec::new())
            .unwrap();
        assert_eq!(r.chunks, ["c0"]);
        r.apply(body(false, 3, Vec::new()), Vec::new()).unwrap();
        assert!(r.chunks.is_empty());
    }

    #[test]
    fn summaries_are_one_short_line() {
        let long = Arc::new(Message::human(format!("line one\nline two {}", "x".repeat(200))));
        let s = summarize(&[long], &[], &[]);
        assert!(s.starts_with("user: line one line two"), "{s}");
        assert_eq!(s.chars().count(), SUMMARY_CHARS);
        assert_eq!(summarize(&[], &["todos"], &[]), "slots: todos");
        assert_eq!(summarize(&[], &[], &[]), "no change");
    }
}
