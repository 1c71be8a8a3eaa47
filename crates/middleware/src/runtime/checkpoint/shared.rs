//! Large shared values stored by content: [`serialize_by_content`].
//!
//! A slot value may hold a large part that is shared between steps and rarely replaced (the skills
//! catalog: about 1 MB at 5,000 skills, behind an `Arc`). Mark such a field with
//! `#[serde(serialize_with = "trellis_middleware::serialize_by_content")]`. Serialized anywhere
//! else (a public view, a test) it is its plain JSON. Serialized by a thread store that collects
//! blobs ([`BackendCheckpointer`](super::BackendCheckpointer)), it becomes a reference
//! `{"$trellis_blob": "<sha256 hex>"}`, and its bytes go to the store once, by content. The store
//! remembers the values it serialized by address (holding them alive, so an address is never
//! reused while remembered): a later step that holds the same `Arc` costs a lookup, not a
//! serialization and a hash.
//!
//! Loading puts the value back where the reference was, so deserialization needs nothing special.

use std::any::{Any, TypeId};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use serde::{Serialize, Serializer};
use sha2::{Digest, Sha256};

/// The key of a blob reference object.
pub(super) const BLOB_KEY: &str = "$trellis_blob";

/// Most values remembered; past that the memory starts over.
const MEMO_ENTRIES: usize = 64;

/// A value stored by content: its hash and serialized bytes.
#[derive(Debug, Clone)]
pub(super) struct ContentBlob {
    /// Lowercase hex SHA-256 of `bytes`.
    pub hash: String,
    /// The value's JSON.
    pub bytes: Bytes,
}

/// A remembered value: kept alive (so its address is not reused) with its blob.
type Remembered = (Arc<dyn Any + Send + Sync>, ContentBlob);

/// A remembered text: the text itself (compared on every hit) with its blob.
type RememberedText = (Arc<str>, ContentBlob);

/// Values serialized by content, shared by all threads of one store: shared values by address
/// (type and pointer), long texts by a hash of their text (checked against the text on a hit).
#[derive(Debug, Default)]
pub(super) struct ContentMemo {
    by_address: Mutex<HashMap<(TypeId, usize), Remembered>>,
    by_text: Mutex<HashMap<u64, RememberedText>>,
}

/// Insert into a bounded memo: past [`MEMO_ENTRIES`] it starts over.
fn remember<K: std::hash::Hash + Eq, V>(memo: &Mutex<HashMap<K, V>>, key: K, value: V) {
    let mut memo = memo.lock().unwrap_or_else(|p| p.into_inner());
    if memo.len() >= MEMO_ENTRIES {
        memo.clear();
    }
    memo.insert(key, value);
}

impl ContentMemo {
    fn get(&self, key: (TypeId, usize)) -> Option<ContentBlob> {
        let memo = self.by_address.lock().unwrap_or_else(|p| p.into_inner());
        memo.get(&key).map(|(_, blob)| blob.clone())
    }

    fn get_text(&self, key: u64, text: &str) -> Option<ContentBlob> {
        let memo = self.by_text.lock().unwrap_or_else(|p| p.into_inner());
        memo.get(&key)
            .filter(|(known, _)| &**known == text)
            .map(|(_, blob)| blob.clone())
    }
}

/// Texts shorter than this are serialized plainly by [`serialize_str_by_content`].
pub const TEXT_BY_CONTENT_BYTES: usize = 4096;

/// The blob of `bytes`: them and their hash.
pub(super) fn blob_of(bytes: Vec<u8>) -> ContentBlob {
    ContentBlob {
        hash: hex(&Sha256::digest(&bytes)),
        bytes: Bytes::from(bytes),
    }
}

/// With a store collecting blobs: find (or make) the value's blob with `find`, emit a reference to
/// it and record it. Without one: serialize plainly with `plain`. The sink is taken out while
/// `find` runs, so a shared value nested in this one encodes plainly.
fn by_content<S: Serializer>(
    serializer: S,
    plain: impl FnOnce(S) -> Result<S::Ok, S::Error>,
    find: impl FnOnce(&ContentMemo) -> Result<ContentBlob, serde_json::Error>,
) -> Result<S::Ok, S::Error> {
    let Some(mut sink) = SINK.with(|s| s.borrow_mut().take()) else {
        return plain(serializer);
    };
    let result = match find(&sink.memo) {
        Ok(blob) => {
            let hash = blob.hash.clone();
            sink.found.push(blob);
            let mut map = std::collections::BTreeMap::new();
            map.insert(BLOB_KEY, hash);
            map.serialize(serializer)
        }
        Err(e) => Err(serde::ser::Error::custom(e)),
    };
    SINK.with(|s| *s.borrow_mut() = Some(sink));
    result
}

/// [`serialize_by_content`] for a long text that is rebuilt (not shared) from step to step, such as
/// a rendered prompt section: texts of at least [`TEXT_BY_CONTENT_BYTES`] become a blob reference
/// when a thread store collects blobs, found again by a hash of the text (compared in full on a
/// hit), so an unchanged text costs a hash, not a serialization and a write. Use as
/// `#[serde(serialize_with = "...")]` on a `String` field.
pub fn serialize_str_by_content<S: Serializer>(value: &str, serializer: S) -> Result<S::Ok, S::Error> {
    if value.len() < TEXT_BY_CONTENT_BYTES {
        return serializer.serialize_str(value);
    }
    by_content(
        serializer,
        |serializer| serializer.serialize_str(value),
        |memo| {
            use std::hash::{BuildHasher, BuildHasherDefault};
            let key =
                BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default().hash_one(value);
            if let Some(blob) = memo.get_text(key, value) {
                return Ok(blob);
            }
            let blob = blob_of(serde_json::to_vec(value)?);
            remember(&memo.by_text, key, (Arc::from(value), blob.clone()));
            Ok(blob)
        },
    )
}

/// What one encoding collects: the store's memo and the blobs the serialized values referenced.
struct Sink {
    memo: Arc<ContentMemo>,
    found: Vec<ContentBlob>,
}

thread_local! {
    static SINK: RefCell<Option<Sink>> = const { RefCell::new(None) };
}

/// Run `encode` with blob collection on; returns its result and the blobs referenced, in order
/// (duplicates removed). Not reentrant: an inner call encodes plainly.
pub(super) fn collecting<R>(memo: &Arc<ContentMemo>, encode: impl FnOnce() -> R) -> (R, Vec<ContentBlob>) {
    let previous = SINK.with(|s| {
        s.borrow_mut().replace(Sink {
            memo: memo.clone(),
            found: Vec::new(),
        })
    });
    let out = encode();
    let sink = SINK.with(|s| std::mem::replace(&mut *s.borrow_mut(), previous));
    let mut found = sink.map(|s| s.found).unwrap_or_default();
    let mut seen = std::collections::HashSet::new();
    found.retain(|b| seen.insert(b.hash.clone()));
    (out, found)
}

/// Serialize a shared value by content when a thread store is collecting blobs (see the module
/// docs), plainly otherwise. Use as `#[serde(serialize_with = "...")]` on an `Arc<T>` field.
pub fn serialize_by_content<T, S>(value: &Arc<T>, serializer: S) -> Result<S::Ok, S::Error>
where
    T: Serialize + Send + Sync + 'static,
    S: Serializer,
{
    by_content(
        serializer,
        |serializer| value.as_ref().serialize(serializer),
        |memo| {
            let key = (TypeId::of::<T>(), Arc::as_ptr(value) as *const () as usize);
            if let Some(blob) = memo.get(key) {
                return Ok(blob);
            }
            let blob = blob_of(serde_json::to_vec(value.as_ref())?);
            let keep: Arc<dyn Any + Send + Sync> = value.clone();
            remember(&memo.by_address, key, (keep, blob.clone()));
            Ok(blob)
        },
    )
}

/// Lowercase hex of `bytes`.
pub(super) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    out
}

/// True for 64 lowercase hex digits (a hash that may become part of a path).
pub(super) fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The hash a blob reference object names, if `value` is one.
pub(super) fn blob_ref(value: &serde_json::Value) -> Option<&str> {
    let map = value.as_object()?;
    if map.len() != 1 {
        return None;
    }
    map.get(BLOB_KEY)?.as_str()
}

/// Replace every blob reference in `value` by `resolve(hash)`; stops at the first error.
pub(super) fn resolve_refs<E>(
    value: &mut serde_json::Value,
    resolve: &mut impl FnMut(&str) -> Result<serde_json::Value, E>,
) -> Result<(), E> {
    if let Some(hash) = blob_ref(value) {
        let hash = hash.to_owned();
        *value = resolve(&hash)?;
        return Ok(());
    }
    match value {
        serde_json::Value::Array(items) => items.iter_mut().try_for_each(|v| resolve_refs(v, resolve)),
        serde_json::Value::Object(fields) => fields.values_mut().try_for_each(|v| resolve_refs(v, resolve)),
        _ => Ok(()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Serialize)]
    struct Holder {
        #[serde(serialize_with = "serialize_by_content")]
        big: Arc<Vec<u32>>,
        small: u32,
    }

    #[test]
    fn plain_outside_a_store_and_a_reference_inside() {
        let holder = Holder {
            big: Arc::new(vec![1, 2, 3]),
            small: 7,
        };
        assert_eq!(
            serde_json::to_value(&holder).unwrap(),
            json!({"big": [1, 2, 3], "small": 7})
        );

        let memo = Arc::new(ContentMemo::default());
        let (value, blobs) = collecting(&memo, || serde_json::to_value(&holder).unwrap());
        assert_eq!(blobs.len(), 1);
        assert!(is_sha256_hex(&blobs[0].hash));
        assert_eq!(&blobs[0].bytes[..], b"[1,2,3]");
        assert_eq!(blob_ref(&value["big"]), Some(blobs[0].hash.as_str()));
        assert_eq!(value["small"], 7);

        // The same Arc again: served from the memo, same hash.
        let (again, blobs_again) = collecting(&memo, || serde_json::to_value(&holder).unwrap());
        assert_eq!(again, value);
        assert_eq!(blobs_again[0].hash, blobs[0].hash);

        let mut restored = value.clone();
        resolve_refs::<()>(&mut restored, &mut |h| {
            assert_eq!(h, blobs[0].hash);
            Ok(json!([1, 2, 3]))
        })
        .unwrap();
        assert_eq!(restored, json!({"big": [1, 2, 3], "small": 7}));
    }

    #[derive(Serialize)]
    struct Text {
        #[serde(serialize_with = "serialize_str_by_content")]
        text: String,
    }

    #[test]
    fn long_texts_are_found_again_by_content() {
        let memo = Arc::new(ContentMemo::default());
        let short = Text { text: "short".into() };
        let (value, blobs) = collecting(&memo, || serde_json::to_value(&short).unwrap());
        assert_eq!((value, blobs.len()), (json!({"text": "short"}), 0));

        let long = "x".repeat(TEXT_BY_CONTENT_BYTES);
        let (value, blobs) = collecting(&memo, || {
            serde_json::to_value(Text { text: long.clone() }).unwrap()
        });
        assert_eq!(blobs.len(), 1);
        assert_eq!(serde_json::from_slice::<String>(&blobs[0].bytes).unwrap(), long);
        // An equal text in a new String: the same reference, from the memo.
        let (again, _) = collecting(&memo, || {
            serde_json::to_value(Text { text: long.clone() }).unwrap()
        });
        assert_eq!(again, value);
        // Another text of the same length: another blob.
        let other = "y".repeat(TEXT_BY_CONTENT_BYTES);
        let (third, _) = collecting(&memo, || serde_json::to_value(Text { text: other }).unwrap());
        assert_ne!(third, value);
        // Outside a store: plain.
        assert_eq!(
            serde_json::to_value(Text { text: long.clone() }).unwrap(),
            json!({"text": long})
        );
    }

    #[test]
    fn only_single_key_objects_are_references() {
        assert!(blob_ref(&json!({"$trellis_blob": "x", "other": 1})).is_none());
        assert!(blob_ref(&json!({"$trellis_blob": 1})).is_none());
        assert_eq!(blob_ref(&json!({"$trellis_blob": "x"})), Some("x"));
        assert_eq!(hex(&[0x00, 0x0f, 0xa0, 0xff]), "000fa0ff");
    }
}
