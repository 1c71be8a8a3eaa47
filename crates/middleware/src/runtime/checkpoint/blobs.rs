//! Large slot values stored once, by content, beside a thread's checkpoint file.
//!
//! A checkpoint is written after every step. A value that rarely changes but is large (the skills
//! catalog: about 1 MB at 5,000 skills) would be uploaded again with every step. Instead, each
//! large value is written to `{thread}/blobs/{sha256}.json` — once: a blob already there is not
//! written again — and the checkpoint file names it by its JSON pointer within the state:
//!
//! ```json
//! {"format": 2, "blobs": {"/private_slots/_skills/catalog": "<sha256 hex>"}, "state": {...}, ...}
//! ```
//!
//! Which values: a slot value of at least the threshold (serialized) is split where it can be. If
//! it is an object, its large fields are moved out on their own (recursively), so the parts that
//! change every step (the skills middleware's counters) stay in the checkpoint and the part that
//! does not (the catalog) keeps its hash; what is left is moved out too if it is still at least the
//! threshold. Arrays and strings move out whole.
//!
//! Format 2 is format 1 with some slots moved out; a file without blobs is still written as format
//! 1, so older readers keep reading small checkpoints. A blob is written before the checkpoint that
//! names it, so a saved checkpoint never points at a missing blob. Blobs are only removed with the
//! thread; a thread keeps one per distinct large value it ever saved.

use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;

use crate::backend::{Backend, BackendError, ConflictKind, VirtualPath, WriteMode};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// Default threshold: slot values of at least 64 KiB serialized are stored as blobs.
pub const DEFAULT_BLOB_THRESHOLD: usize = 64 * 1024;

/// File format of a checkpoint that names blobs.
pub(super) const FORMAT_WITH_BLOBS: u32 = 2;

/// The state's slot maps, as named in the serialized checkpoint.
const SECTIONS: [&str; 2] = ["slots", "private_slots"];

/// Most blob paths remembered as present; past that the memory starts over (and the next save of
/// each blob checks the store once).
const KNOWN_BLOBS: usize = 4096;

/// Blob paths this process knows exist, so a save does not even check the store for them.
#[derive(Debug, Default)]
pub(super) struct KnownBlobs(Mutex<HashSet<VirtualPath>>);

impl KnownBlobs {
    fn contains(&self, path: &VirtualPath) -> bool {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).contains(path)
    }

    fn insert(&self, path: VirtualPath) {
        let mut known = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if known.len() >= KNOWN_BLOBS {
            known.clear();
        }
        known.insert(path);
    }

    pub(super) fn forget_below(&self, dir: &VirtualPath) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|p| !p.starts_with(dir));
    }
}

/// A value moved out of the checkpoint: where it was, and its serialized bytes.
pub(super) struct Blob {
    /// JSON pointer of the value within the state (`/private_slots/_skills/catalog`), the key in
    /// the checkpoint's `blobs` map.
    pub key: String,
    /// Lowercase hex SHA-256 of `bytes`.
    pub hash: String,
    pub bytes: Vec<u8>,
}

/// Move the large values of every slot out of `checkpoint` (a serialized [`super::Checkpoint`]),
/// as described in the module docs; the caller writes the blobs and records their keys.
pub(super) fn take_large_slots(
    checkpoint: &mut Value,
    threshold: usize,
) -> Result<Vec<Blob>, serde_json::Error> {
    let mut blobs = Vec::new();
    let Some(state) = checkpoint.get_mut("state").and_then(Value::as_object_mut) else {
        return Ok(blobs);
    };
    for section in SECTIONS {
        let Some(slots) = state.get_mut(section).and_then(Value::as_object_mut) else {
            continue;
        };
        take_large_fields(slots, &format!("/{section}"), threshold, &mut blobs)?;
    }
    Ok(blobs)
}

/// Move out of `object` (at `pointer`) every field that is at least `threshold` bytes once its own
/// large parts are moved out (objects are split first, bottom-up, in one walk). Returns the
/// serialized size of what stays.
fn take_large_fields(
    object: &mut Map<String, Value>,
    pointer: &str,
    threshold: usize,
    blobs: &mut Vec<Blob>,
) -> Result<usize, serde_json::Error> {
    let mut kept = Vec::with_capacity(object.len());
    let mut large = Vec::new();
    for (name, value) in object.iter_mut() {
        let size = match value {
            Value::Object(fields) => {
                take_large_fields(fields, &format!("{pointer}/{}", escape(name)), threshold, blobs)?
            }
            other => json_size(other),
        };
        if size >= threshold {
            large.push(name.clone());
        } else {
            kept.push(string_size(name) + 1 + size);
        }
    }
    for name in large {
        if let Some(value) = object.remove(&name) {
            let bytes = serde_json::to_vec(&value)?;
            blobs.push(Blob {
                key: format!("{pointer}/{}", escape(&name)),
                hash: hex(&Sha256::digest(&bytes)),
                bytes,
            });
        }
    }
    Ok(2 + kept.len().saturating_sub(1) + kept.iter().sum::<usize>())
}

/// The length of `value` serialized compactly, computed without serializing it (exact for
/// `serde_json`'s output).
fn json_size(value: &Value) -> usize {
    match value {
        Value::Null => 4,
        Value::Bool(true) => 4,
        Value::Bool(false) => 5,
        Value::Number(n) => n.to_string().len(),
        Value::String(s) => string_size(s),
        Value::Array(items) => 2 + items.len().saturating_sub(1) + items.iter().map(json_size).sum::<usize>(),
        Value::Object(fields) => {
            2 + fields.len().saturating_sub(1)
                + fields
                    .iter()
                    .map(|(k, v)| string_size(k) + 1 + json_size(v))
                    .sum::<usize>()
        }
    }
}

/// A JSON string literal's length: quotes, `\"`-style escapes, `\u00XX` for other control bytes.
fn string_size(s: &str) -> usize {
    2 + s
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
            0x00..=0x1f => 6,
            _ => 1,
        })
        .sum::<usize>()
}

/// RFC 6901 escaping of one pointer segment.
fn escape(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

fn unescape(segment: &str) -> String {
    segment.replace("~1", "/").replace("~0", "~")
}

/// Write `bytes` to `path` unless it is known to exist or already there (content-addressed: same
/// path, same bytes).
pub(super) async fn ensure_blob(
    backend: &dyn Backend,
    known: &KnownBlobs,
    path: &VirtualPath,
    bytes: Vec<u8>,
) -> Result<(), BackendError> {
    if known.contains(path) {
        return Ok(());
    }
    match backend.stat(path).await {
        Ok(_) => {}
        Err(BackendError::NotFound { .. }) => {
            match backend.write(path, bytes.into(), WriteMode::CreateNew).await {
                Ok(_)
                | Err(BackendError::Conflict {
                    kind: ConflictKind::AlreadyExists,
                    ..
                }) => {}
                Err(e) => return Err(e),
            }
        }
        Err(e) => return Err(e),
    }
    known.insert(path.clone());
    Ok(())
}

/// The `blobs` map of a serialized checkpoint (pointer → hash), in the order to restore them
/// (a value before the values moved out of it); empty when it has none. A pointer outside the slot
/// maps, or a hash that is not 64 hex digits (it becomes part of a path), is an error.
pub(super) fn blob_refs(checkpoint: &Value) -> Result<BTreeMap<String, String>, String> {
    let Some(blobs) = checkpoint.get("blobs") else {
        return Ok(BTreeMap::new());
    };
    let Some(map) = blobs.as_object() else {
        return Err("`blobs` is not an object".to_owned());
    };
    let mut refs = BTreeMap::new();
    for (key, hash) in map {
        let hash = hash.as_str().filter(|h| is_sha256_hex(h));
        let in_slots = SECTIONS.iter().any(|section| {
            key.strip_prefix('/')
                .and_then(|k| k.strip_prefix(section))
                .and_then(|rest| rest.strip_prefix('/'))
                .is_some_and(|name| !name.is_empty())
        });
        let Some(hash) = hash.filter(|_| in_slots) else {
            return Err(format!("bad blob reference {key:?}"));
        };
        refs.insert(key.clone(), hash.to_owned());
    }
    // A pointer sorts before every pointer below it ("/a/b" < "/a/b/c"): parents are restored first.
    Ok(refs)
}

/// Put a blob's value back at `pointer` within the state. False when its parent is not an object.
pub(super) fn restore(checkpoint: &mut Value, pointer: &str, value: Value) -> bool {
    let Some((parent, name)) = pointer.rsplit_once('/') else {
        return false;
    };
    let Some(state) = checkpoint.get_mut("state") else {
        return false;
    };
    if parent.matches('/').count() == 1 && state.pointer(parent).is_none() {
        // A slot map the file left out entirely.
        if let Some(state) = state.as_object_mut() {
            state.insert(unescape(&parent[1..]), Value::Object(Map::new()));
        }
    }
    match state.pointer_mut(parent) {
        Some(Value::Object(fields)) => {
            fields.insert(unescape(name), value);
            true
        }
        _ => false,
    }
}

fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn large_slots_move_out_and_back() {
        let big = "x".repeat(100);
        let mut checkpoint = json!({
            "format": 1,
            "state": {"messages": [], "slots": {"small": 1}, "private_slots": {"_big": big}}
        });
        let original = checkpoint.clone();
        let blobs = take_large_slots(&mut checkpoint, 50).unwrap();
        assert_eq!(blobs.len(), 1);
        assert_eq!(blobs[0].key, "/private_slots/_big");
        assert!(is_sha256_hex(&blobs[0].hash));
        assert!(checkpoint["state"]["private_slots"].get("_big").is_none());
        assert_eq!(checkpoint["state"]["slots"]["small"], 1);

        checkpoint["blobs"] = json!({"/private_slots/_big": blobs[0].hash});
        let refs = blob_refs(&checkpoint).unwrap();
        assert_eq!(refs["/private_slots/_big"], blobs[0].hash);
        let value: Value = serde_json::from_slice(&blobs[0].bytes).unwrap();
        assert!(restore(&mut checkpoint, "/private_slots/_big", value));
        checkpoint.as_object_mut().unwrap().remove("blobs");
        assert_eq!(checkpoint, original);
    }

    #[test]
    fn objects_are_split_so_changing_fields_stay_inline() {
        let catalog = "c".repeat(200);
        let mut checkpoint = json!({
            "state": {"private_slots": {"_skills": {
                "catalog": {"skills": catalog, "a/b~c": "d".repeat(120)},
                "scanned": 7,
                "section": "s".repeat(60)
            }}}
        });
        let original = checkpoint.clone();
        let blobs = take_large_slots(&mut checkpoint, 100).unwrap();
        let keys: Vec<&str> = blobs.iter().map(|b| b.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "/private_slots/_skills/catalog/a~1b~0c",
                "/private_slots/_skills/catalog/skills"
            ]
        );
        assert_eq!(checkpoint["state"]["private_slots"]["_skills"]["scanned"], 7);
        assert!(
            checkpoint["state"]["private_slots"]["_skills"]["catalog"]
                .as_object()
                .unwrap()
                .is_empty()
        );

        // Changing the counter leaves the large parts' hashes alone.
        let mut next = original.clone();
        next["state"]["private_slots"]["_skills"]["scanned"] = json!(8);
        let again = take_large_slots(&mut next, 100).unwrap();
        let hashes = |b: &[Blob]| b.iter().map(|b| b.hash.clone()).collect::<Vec<_>>();
        assert_eq!(hashes(&again), hashes(&blobs));

        let refs: BTreeMap<String, String> = blobs.iter().map(|b| (b.key.clone(), b.hash.clone())).collect();
        checkpoint["blobs"] = serde_json::to_value(&refs).unwrap();
        assert_eq!(blob_refs(&checkpoint).unwrap(), refs);
        for blob in &blobs {
            assert!(restore(
                &mut checkpoint,
                &blob.key,
                serde_json::from_slice(&blob.bytes).unwrap()
            ));
        }
        checkpoint.as_object_mut().unwrap().remove("blobs");
        assert_eq!(checkpoint, original);
    }

    #[test]
    fn blob_references_are_checked() {
        for bad in [
            json!({"blobs": []}),
            json!({"blobs": {"/private_slots/_x": "../../etc/passwd"}}),
            json!({"blobs": {"/private_slots/_x": "ABC"}}),
            json!({"blobs": {"/elsewhere/_x": "0".repeat(64)}}),
            json!({"blobs": {"/private_slots/": "0".repeat(64)}}),
            json!({"blobs": {"private_slots/_x": "0".repeat(64)}}),
            json!({"blobs": {"no-section": "0".repeat(64)}}),
        ] {
            assert!(blob_refs(&bad).is_err(), "{bad}");
        }
        assert!(blob_refs(&json!({})).unwrap().is_empty());
    }

    #[test]
    fn json_size_is_the_serialized_length() {
        for value in [
            json!(null),
            json!(true),
            json!(false),
            json!(-12.5),
            json!(12345678901234u64),
            json!("plain"),
            json!("quote \" backslash \\ nl \n tab \t bell \u{7} del \u{7f} é 日本"),
            json!([]),
            json!({}),
            json!([1, "two", {"three": [3, null]}]),
            json!({"a\"b": {"c": [true, false, "\u{1}"]}, "d": 1.0e-7}),
        ] {
            assert_eq!(
                json_size(&value),
                serde_json::to_vec(&value).unwrap().len(),
                "{value}"
            );
        }
    }

    #[test]
    fn hex_is_lowercase_and_padded() {
        assert_eq!(hex(&[0x00, 0x0f, 0xa0, 0xff]), "000fa0ff");
    }
}
