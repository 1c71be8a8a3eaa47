//! Typed state slots: the part of a thread's state that middlewares and tools own.
//!
//! A slot is declared once as a constant, [`Slot<T>`], with a name and a visibility, and read and
//! written with that constant, so no code ever touches a slot by a misspelled string or with the
//! wrong type. [`Slots`] holds a thread's slot values; the runtime's `State` (in
//! `trellis-middleware`) is the messages plus a [`Slots`]. A tool reads slots through
//! [`ToolContext::slot`](crate::ToolContext::slot) and writes them by returning
//! [`StateUpdates`] in its [`ToolOutput`](crate::ToolOutput), since tool calls of one step run
//! concurrently against a shared view.
//!
//! ```
//! use trellis_fs_tools::{Slot, Slots, StateUpdates};
//!
//! static COUNTER: Slot<u32> = Slot::public("example_counter");
//!
//! let mut slots = Slots::new();
//! slots.update(&COUNTER, |n| *n += 1).unwrap();
//! let mut later = StateUpdates::new();
//! later.set(&COUNTER, 5);
//! slots.apply(later);
//! assert_eq!(slots.get(&COUNTER).unwrap(), Some(&5));
//! ```
//!
//! Values are kept typed in memory (behind an `Arc`, so cloning is cheap) and converted to JSON
//! only when a checkpoint is written. Slots restored from a checkpoint hold JSON, which is
//! deserialized into `T` on first access and cached.

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
use std::sync::{Arc, OnceLock};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde::ser::Error as _;
use serde_json::Value;

/// Values a slot can hold.
pub trait SlotValue: Serialize + DeserializeOwned + Send + Sync + 'static {}
impl<T: Serialize + DeserializeOwned + Send + Sync + 'static> SlotValue for T {}

/// A typed key into a thread's state ([`Slots`]). Declare one `static` per slot; the name must be unique in an agent.
///
/// Private slots (by convention named with a leading `_`) are stored in checkpoints but left out of
/// the public view of the state that callers and parent agents get.
pub struct Slot<T> {
    name: &'static str,
    private: bool,
    _type: PhantomData<fn() -> T>,
}

impl<T> Slot<T> {
    /// A slot returned to callers.
    pub const fn public(name: &'static str) -> Self {
        Self {
            name,
            private: false,
            _type: PhantomData,
        }
    }

    /// A slot kept in checkpoints but never returned to callers or parent agents.
    pub const fn private(name: &'static str) -> Self {
        Self {
            name,
            private: true,
            _type: PhantomData,
        }
    }

    /// The slot's name.
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// True for private slots.
    pub const fn is_private(&self) -> bool {
        self.private
    }
}

impl<T> fmt::Debug for Slot<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Slot")
            .field("name", &self.name)
            .field("private", &self.private)
            .field("type", &std::any::type_name::<T>())
            .finish()
    }
}

/// Why a slot could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// The slot holds a value of another type (two slots share a name).
    #[error("state slot {slot:?} holds a {found}, not a {expected}")]
    TypeMismatch {
        /// The slot.
        slot: String,
        /// The type asked for.
        expected: &'static str,
        /// The type stored.
        found: &'static str,
    },
    /// The slot's JSON (from a checkpoint or a caller) does not fit the slot's type.
    #[error("state slot {slot:?} cannot be read as {expected}: {source}")]
    Deserialize {
        /// The slot.
        slot: String,
        /// The type asked for.
        expected: &'static str,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// The slot's value could not be converted to JSON.
    #[error("state slot {slot:?} cannot be serialized: {source}")]
    Serialize {
        /// The slot.
        slot: String,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
}

type AnyValue = dyn Any + Send + Sync;
type ToJson = fn(&AnyValue) -> Result<Value, serde_json::Error>;

fn to_json_of<T: SlotValue>(value: &AnyValue) -> Result<Value, serde_json::Error> {
    match value.downcast_ref::<T>() {
        Some(v) => serde_json::to_value(v),
        None => Err(serde_json::Error::custom("slot value changed type")),
    }
}

#[derive(Clone)]
struct Typed {
    value: Arc<AnyValue>,
    to_json: ToJson,
    type_name: &'static str,
}

impl Typed {
    fn new<T: SlotValue>(value: T) -> Self {
        Self {
            value: Arc::new(value),
            to_json: to_json_of::<T>,
            type_name: std::any::type_name::<T>(),
        }
    }
}

/// One slot's value: typed, or JSON waiting to be typed on first access.
#[derive(Clone)]
struct Cell {
    private: bool,
    /// Shared, so cloning slots restored from a checkpoint copies no JSON.
    json: Option<Arc<Value>>,
    typed: OnceLock<Typed>,
}

impl Cell {
    fn typed(private: bool, typed: Typed) -> Self {
        Self {
            private,
            json: None,
            typed: OnceLock::from(typed),
        }
    }

    fn to_json(&self, name: &str) -> Result<Value, StateError> {
        match (self.typed.get(), &self.json) {
            (Some(t), _) => (t.to_json)(t.value.as_ref()).map_err(|source| StateError::Serialize {
                slot: name.to_owned(),
                source,
            }),
            (None, Some(json)) => Ok(Value::clone(json)),
            (None, None) => Ok(Value::Null),
        }
    }
}

/// Slot writes produced where the state cannot be borrowed mutably (tool calls run concurrently
/// against a shared `&State`); the loop applies them after the calls finish, in call order.
#[derive(Default, Clone)]
pub struct StateUpdates {
    writes: Vec<(&'static str, bool, Typed)>,
}

impl StateUpdates {
    /// No writes.
    pub fn new() -> Self {
        Self::default()
    }

    /// Record a write of `value` to `slot`.
    pub fn set<T: SlotValue>(&mut self, slot: &Slot<T>, value: T) {
        self.writes.push((slot.name, slot.private, Typed::new(value)));
    }

    /// True when nothing was written.
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }

    /// Append `other`'s writes after these.
    pub fn extend(&mut self, other: StateUpdates) {
        self.writes.extend(other.writes);
    }

    /// The writes as JSON, in order: each slot's name, whether it is private, and its value (what
    /// a record of the call that made them keeps; restore them with the runtime's JSON setter).
    pub fn to_json(&self) -> Result<Vec<(String, bool, Value)>, StateError> {
        self.writes
            .iter()
            .map(|(name, private, typed)| {
                (typed.to_json)(typed.value.as_ref())
                    .map(|value| ((*name).to_owned(), *private, value))
                    .map_err(|source| StateError::Serialize {
                        slot: (*name).to_owned(),
                        source,
                    })
            })
            .collect()
    }
}

impl fmt::Debug for StateUpdates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.writes.iter().map(|(name, _, _)| name))
            .finish()
    }
}

/// A thread's slot values, by slot name. Cheap to clone.
#[derive(Clone, Default)]
pub struct Slots {
    map: BTreeMap<String, Cell>,
}

impl fmt::Debug for Slots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.map.keys()).finish()
    }
}

impl Slots {
    /// No slots.
    pub const fn new() -> Self {
        Self { map: BTreeMap::new() }
    }

    /// The slot's value, or `None` when unset. Errors when the stored value has another type.
    pub fn get<T: SlotValue>(&self, slot: &Slot<T>) -> Result<Option<&T>, StateError> {
        let Some(cell) = self.map.get(slot.name) else {
            return Ok(None);
        };
        if cell.typed.get().is_none() {
            let value = match &cell.json {
                Some(json) => T::deserialize(json.as_ref()),
                None => T::deserialize(&Value::Null),
            };
            let value: T = value.map_err(|source| StateError::Deserialize {
                slot: slot.name.to_owned(),
                expected: std::any::type_name::<T>(),
                source,
            })?;
            // Another reader may have won the race; either value is the same.
            let _ = cell.typed.set(Typed::new(value));
        }
        let Some(typed) = cell.typed.get() else {
            return Ok(None);
        };
        match typed.value.downcast_ref::<T>() {
            Some(v) => Ok(Some(v)),
            None => Err(StateError::TypeMismatch {
                slot: slot.name.to_owned(),
                expected: std::any::type_name::<T>(),
                found: typed.type_name,
            }),
        }
    }

    /// Store `value` in the slot, replacing what was there.
    pub fn set<T: SlotValue>(&mut self, slot: &Slot<T>, value: T) {
        self.map
            .insert(slot.name.to_owned(), Cell::typed(slot.private, Typed::new(value)));
    }

    /// Change the slot's value in place, starting from `T::default()` when unset. Returns what `f`
    /// returns.
    pub fn update<T, R>(&mut self, slot: &Slot<T>, f: impl FnOnce(&mut T) -> R) -> Result<R, StateError>
    where
        T: SlotValue + Clone + Default,
    {
        let mut value = self.get(slot)?.cloned().unwrap_or_default();
        let out = f(&mut value);
        self.set(slot, value);
        Ok(out)
    }

    /// Remove the slot. Returns true when it was set.
    pub fn remove<T>(&mut self, slot: &Slot<T>) -> bool {
        self.map.remove(slot.name).is_some()
    }

    /// True when a slot of this name is set (whatever its type).
    pub fn contains(&self, name: &str) -> bool {
        self.map.contains_key(name)
    }

    /// Names of the slots that are set.
    pub fn slot_names(&self) -> impl Iterator<Item = &str> {
        self.map.keys().map(String::as_str)
    }

    /// The slot's value as JSON, private slots included.
    pub fn get_json(&self, name: &str) -> Result<Option<Value>, StateError> {
        self.map.get(name).map(|cell| cell.to_json(name)).transpose()
    }

    /// Store a JSON value under `name` (e.g. a caller's run input); it is typed on first access.
    pub fn set_json(&mut self, name: impl Into<String>, private: bool, value: Value) {
        self.map.insert(
            name.into(),
            Cell {
                private,
                json: Some(Arc::new(value)),
                typed: OnceLock::new(),
            },
        );
    }

    /// Apply deferred writes, in order.
    pub fn apply(&mut self, updates: StateUpdates) {
        for (name, private, typed) in updates.writes {
            self.map.insert(name.to_owned(), Cell::typed(private, typed));
        }
    }

    /// True when `other` holds the very same value in slot `name` as `self` does: the same shared
    /// value (one is a clone of the other and neither was written since), not merely an equal one.
    /// False when either lacks the slot or its visibility differs. Checkpointers use this to write
    /// only the slots that changed since the last save; a value that was replaced by an equal one
    /// counts as changed.
    ///
    /// Identity is compared by address, so a caller must keep `other` alive while it compares
    /// (an address is then never reused for another value).
    pub fn same_value(&self, other: &Slots, name: &str) -> bool {
        let (Some(a), Some(b)) = (self.map.get(name), other.map.get(name)) else {
            return false;
        };
        if a.private != b.private {
            return false;
        }
        match (&a.json, &b.json) {
            // Typed from the same JSON, or JSON not typed yet: the JSON decides.
            (Some(x), Some(y)) => Arc::ptr_eq(x, y),
            (None, None) => match (a.typed.get(), b.typed.get()) {
                (Some(x), Some(y)) => Arc::ptr_eq(&x.value, &y.value),
                _ => false,
            },
            _ => false,
        }
    }

    /// Whether slot `name` is private; `None` when it is not set.
    pub fn is_private(&self, name: &str) -> Option<bool> {
        self.map.get(name).map(|cell| cell.private)
    }

    /// Every set slot as `(name, private, JSON value)`, in name order.
    pub fn iter_json(&self) -> impl Iterator<Item = Result<(&str, bool, Value), StateError>> {
        self.map
            .iter()
            .map(|(name, cell)| cell.to_json(name).map(|json| (name.as_str(), cell.private, json)))
    }

    /// Every set public slot as `(name, JSON value)`, in name order. Private slots are skipped
    /// without being serialized (the skills catalog is one: about 1 MB of JSON at 5,000 skills).
    pub fn iter_public_json(&self) -> impl Iterator<Item = Result<(&str, Value), StateError>> {
        self.map
            .iter()
            .filter(|(_, cell)| !cell.private)
            .map(|(name, cell)| cell.to_json(name).map(|json| (name.as_str(), json)))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    static A: Slot<Vec<u32>> = Slot::public("a");
    static B: Slot<u32> = Slot::private("_b");

    /// A value that cannot be serialized, so a test sees whether it was.
    #[derive(Debug, serde::Deserialize)]
    struct Unserializable;

    impl Serialize for Unserializable {
        fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
            Err(S::Error::custom("serialized"))
        }
    }

    static SECRET: Slot<Unserializable> = Slot::private("_secret");

    #[test]
    fn public_slots_are_listed_without_serializing_private_ones() {
        let mut slots = Slots::new();
        slots.set(&A, vec![1, 2]);
        slots.set(&SECRET, Unserializable);
        let public: Vec<_> = slots.iter_public_json().collect::<Result<_, _>>().unwrap();
        assert_eq!(public, [("a", serde_json::json!([1, 2]))]);
        assert!(
            slots.iter_json().any(|e| e.is_err()),
            "every slot: the private one fails"
        );
    }

    #[test]
    fn same_value_is_identity_not_equality() {
        let mut slots = Slots::new();
        slots.set(&A, vec![1]);
        slots.set_json("_b", true, serde_json::json!(2));
        let earlier = slots.clone();
        assert!(slots.same_value(&earlier, "a"));
        assert!(slots.same_value(&earlier, "_b"));

        // Typing a JSON value on first access does not change it.
        assert_eq!(slots.get(&B).unwrap(), Some(&2));
        assert!(slots.same_value(&earlier, "_b"));

        // An equal value written again is a change; so is a removal.
        slots.set(&A, vec![1]);
        assert!(!slots.same_value(&earlier, "a"));
        slots.remove(&B);
        assert!(!slots.same_value(&earlier, "_b"));
        assert!(!slots.same_value(&earlier, "missing"));
        assert_eq!(earlier.is_private("_b"), Some(true));
        assert_eq!(earlier.is_private("a"), Some(false));
    }
}
