//! Content-addressed blobs beside a thread's log (`{thread}/blobs/{sha256}.json`), and the
//! blob references of format-2 checkpoint files (older builds), which are still read.
//!
//! Older builds wrote one `checkpoint.json` per thread; in format 2 its large slot values were
//! moved out to blobs and named by JSON pointer:
//!
//! ```json
//! {"format": 2, "blobs": {"/private_slots/_skills/catalog": "<sha256 hex>"}, "state": {...}, ...}
//! ```
//!
//! The thread log (format 3) references blobs from inside slot values instead (see
//! `checkpoint/shared.rs`). Either way a blob is written before anything that names it, and is
//! written once: a blob already there (same path, same bytes) is not written again.

use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;

use super::shared::is_sha256_hex;
use crate::backend::{Backend, BackendError, ConflictKind, VirtualPath, WriteMode};
use serde_json::{Map, Value};

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

/// RFC 6901 unescaping of one pointer segment.
fn unescape(segment: &str) -> String {
    segment.replace("~1", "/").replace("~0", "~")
}

/// Write `bytes` to `path` unless it is known to exist or already there (content-addressed: same
/// path, same bytes). A blob there with another length is one a power loss cut short (see
/// `recover.rs`) and is written again, whole.
pub(super) async fn ensure_blob(
    backend: &dyn Backend,
    known: &KnownBlobs,
    path: &VirtualPath,
    bytes: bytes::Bytes,
) -> Result<(), BackendError> {
    if known.contains(path) {
        return Ok(());
    }
    match backend.stat(path).await {
        Ok(entry) if entry.size == bytes.len() as u64 => {}
        Ok(_) => {
            backend.write(path, bytes, WriteMode::Overwrite).await?;
        }
        Err(BackendError::NotFound { .. }) => match backend.write(path, bytes, WriteMode::CreateNew).await {
            Ok(_)
            | Err(BackendError::Conflict {
                kind: ConflictKind::AlreadyExists,
                ..
            }) => {}
            Err(e) => return Err(e),
        },
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

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
    fn restore_puts_a_value_back() {
        let mut checkpoint = json!({"state": {"messages": [], "private_slots": {"_s": {"n": 1}}}});
        assert!(restore(
            &mut checkpoint,
            "/private_slots/_s/catalog~1x",
            json!([1])
        ));
        assert!(restore(&mut checkpoint, "/slots/new", json!(2)));
        assert_eq!(
            checkpoint["state"]["private_slots"]["_s"]["catalog/x"],
            json!([1])
        );
        assert_eq!(checkpoint["state"]["slots"]["new"], json!(2));
        assert!(!restore(&mut checkpoint, "/private_slots/_s/n/deeper", json!(3)));
    }
}
