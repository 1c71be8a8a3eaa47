//! Canonical JSON: objects with their keys in sorted order, whatever serde_json's map is.
//!
//! serde_json keeps object keys sorted unless its `preserve_order` feature is on, and Cargo turns
//! that feature on for the whole build as soon as one crate in it asks (the ACP crate does). JSON
//! Trellis renders for a model (tool schemas, the arguments of earlier calls), for a person (an
//! approval prompt) or for a snapshot must not depend on which crates share the build, so it goes
//! through [`canonical`] (a value sorted once, where it is made) or [`Sorted`] (sorted as it is
//! written, for values that arrive in any order, such as a model's arguments). Both give the bytes
//! serde_json gives without `preserve_order`; arrays keep their order.

use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::Value;

/// `value` with the keys of every object in it sorted.
pub fn canonical(mut value: Value) -> Value {
    value.sort_all_objects();
    value
}

/// Writes a value with every object's keys in sorted order, without copying it.
#[derive(Debug, Clone, Copy)]
pub struct Sorted<'a>(pub &'a Value);

impl Serialize for Sorted<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Object(map) => {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
                let mut out = serializer.serialize_map(Some(entries.len()))?;
                for (key, value) in entries {
                    out.serialize_entry(key, &Sorted(value))?;
                }
                out.end()
            }
            Value::Array(items) => {
                let mut out = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    out.serialize_element(&Sorted(item))?;
                }
                out.end()
            }
            other => other.serialize(serializer),
        }
    }
}

impl std::fmt::Display for Sorted<'_> {
    /// Compact JSON, as `Value`'s own `Display` writes it, with sorted keys.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = serde_json::to_string(self).map_err(|_| std::fmt::Error)?;
        f.write_str(&text)
    }
}

/// `#[serde(serialize_with = "…")]` for a `Value` field: written with sorted keys ([`Sorted`]).
pub fn serialize_sorted<S: Serializer>(value: &Value, serializer: S) -> Result<S::Ok, S::Error> {
    Sorted(value).serialize(serializer)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Built key by key in reverse order: under `preserve_order` the map keeps that order.
    fn reversed() -> Value {
        let mut inner = serde_json::Map::new();
        inner.insert("z".into(), Value::from(1));
        inner.insert("a".into(), Value::from(2));
        let mut outer = serde_json::Map::new();
        outer.insert("y".into(), Value::Array(vec![Value::Object(inner.clone())]));
        outer.insert("b".into(), Value::Object(inner));
        Value::Object(outer)
    }

    const SORTED: &str = r#"{"b":{"a":2,"z":1},"y":[{"a":2,"z":1}]}"#;

    #[test]
    fn keys_come_out_sorted_at_every_depth() {
        assert_eq!(Sorted(&reversed()).to_string(), SORTED);
        assert_eq!(canonical(reversed()).to_string(), SORTED);
        assert_eq!(
            serde_json::to_string_pretty(&Sorted(&reversed())).unwrap(),
            serde_json::to_string_pretty(&canonical(reversed())).unwrap()
        );
    }
}
