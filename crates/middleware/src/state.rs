//! Thread state: the messages plus typed slots owned by middlewares.
//!
//! A slot is declared once as a constant, [`Slot<T>`], with a name and a visibility, and read and
//! written with that constant, so no code ever touches a slot by a misspelled string or with the wrong
//! type:
//!
//! ```
//! use trellis_middleware::{Slot, State};
//!
//! static COUNTER: Slot<u32> = Slot::public("example_counter");
//! static SECRET: Slot<String> = Slot::private("_example_secret");
//!
//! let mut state = State::default();
//! state.update(&COUNTER, |n| *n += 1).unwrap();
//! state.set(&SECRET, "cached".to_owned());
//! assert_eq!(state.get(&COUNTER).unwrap(), Some(&1));
//! // Private slots are checkpointed but never shown to callers or parent agents.
//! assert!(state.public_view().unwrap().slots.get("_example_secret").is_none());
//! ```
//!
//! Values are kept typed in memory (behind an `Arc`, so cloning a state is cheap) and converted to
//! JSON only when a checkpoint is written. A state restored from a checkpoint holds JSON, which is
//! deserialized into `T` on first access and cached.

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
use std::sync::{Arc, OnceLock};

use serde::de::DeserializeOwned;
use serde::ser::Error as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::messages::Messages;

/// Values a slot can hold.
pub trait SlotValue: Serialize + DeserializeOwned + Send + Sync + 'static {}
impl<T: Serialize + DeserializeOwned + Send + Sync + 'static> SlotValue for T {}

/// A typed key into [`State`]. Declare one `static` per slot; the name must be unique in an agent.
///
/// Private slots (by convention named with a leading `_`) are stored in checkpoints but left out of
/// [`State::public_view`], which is what callers and parent agents get.
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
    json: Option<Value>,
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
            (None, Some(json)) => Ok(json.clone()),
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
}

impl fmt::Debug for StateUpdates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.writes.iter().map(|(name, _, _)| name))
            .finish()
    }
}

/// The state of one thread: its messages and its slots.
#[derive(Clone, Default)]
pub struct State {
    /// The conversation, oldest first.
    pub messages: Messages,
    slots: BTreeMap<String, Cell>,
}

impl fmt::Debug for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("State")
            .field("messages", &self.messages.len())
            .field("slots", &self.slots.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl State {
    /// A state holding `messages` and no slots.
    pub fn with_messages(messages: impl Into<Messages>) -> Self {
        Self {
            messages: messages.into(),
            slots: BTreeMap::new(),
        }
    }

    /// The slot's value, or `None` when unset. Errors when the stored value has another type.
    pub fn get<T: SlotValue>(&self, slot: &Slot<T>) -> Result<Option<&T>, StateError> {
        let Some(cell) = self.slots.get(slot.name) else {
            return Ok(None);
        };
        if cell.typed.get().is_none() {
            let json = cell.json.clone().unwrap_or(Value::Null);
            let value: T = serde_json::from_value(json).map_err(|source| StateError::Deserialize {
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
        self.slots
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
        self.slots.remove(slot.name).is_some()
    }

    /// True when a slot of this name is set (whatever its type).
    pub fn contains(&self, name: &str) -> bool {
        self.slots.contains_key(name)
    }

    /// Names of the slots that are set.
    pub fn slot_names(&self) -> impl Iterator<Item = &str> {
        self.slots.keys().map(String::as_str)
    }

    /// The slot's value as JSON, private slots included.
    pub fn get_json(&self, name: &str) -> Result<Option<Value>, StateError> {
        self.slots.get(name).map(|cell| cell.to_json(name)).transpose()
    }

    /// Store a JSON value under `name` (e.g. a caller's run input); it is typed on first access.
    pub fn set_json(&mut self, name: impl Into<String>, private: bool, value: Value) {
        self.slots.insert(
            name.into(),
            Cell {
                private,
                json: Some(value),
                typed: OnceLock::new(),
            },
        );
    }

    /// Apply deferred writes, in order.
    pub fn apply(&mut self, updates: StateUpdates) {
        for (name, private, typed) in updates.writes {
            self.slots.insert(name.to_owned(), Cell::typed(private, typed));
        }
    }

    /// What callers and parent agents may see: the messages and the public slots as JSON.
    pub fn public_view(&self) -> Result<PublicState, StateError> {
        let mut slots = BTreeMap::new();
        for (name, cell) in &self.slots {
            if !cell.private {
                slots.insert(name.clone(), cell.to_json(name)?);
            }
        }
        Ok(PublicState {
            messages: self.messages.clone(),
            slots,
        })
    }
}

/// The serialized form of a [`State`].
#[derive(Serialize, Deserialize)]
struct StateRepr {
    messages: Messages,
    #[serde(default)]
    slots: BTreeMap<String, Value>,
    #[serde(default)]
    private_slots: BTreeMap<String, Value>,
}

impl Serialize for State {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut repr = StateRepr {
            messages: Messages::new(),
            slots: BTreeMap::new(),
            private_slots: BTreeMap::new(),
        };
        for (name, cell) in &self.slots {
            let json = cell.to_json(name).map_err(S::Error::custom)?;
            if cell.private {
                repr.private_slots.insert(name.clone(), json);
            } else {
                repr.slots.insert(name.clone(), json);
            }
        }
        // Serialize the messages by reference rather than cloning them into the repr.
        #[derive(Serialize)]
        struct Borrowed<'a> {
            messages: &'a Messages,
            slots: &'a BTreeMap<String, Value>,
            private_slots: &'a BTreeMap<String, Value>,
        }
        Borrowed {
            messages: &self.messages,
            slots: &repr.slots,
            private_slots: &repr.private_slots,
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for State {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let repr = StateRepr::deserialize(deserializer)?;
        let mut state = State::with_messages(repr.messages);
        for (name, value) in repr.slots {
            state.set_json(name, false, value);
        }
        for (name, value) in repr.private_slots {
            state.set_json(name, true, value);
        }
        Ok(state)
    }
}

/// The caller-visible part of a state: messages and public slots.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PublicState {
    /// The conversation.
    pub messages: Messages,
    /// Public slots, as JSON.
    pub slots: BTreeMap<String, Value>,
}

impl PublicState {
    /// A public slot's value, deserialized. Private slots always read as `None`.
    pub fn get<T: DeserializeOwned>(&self, slot: &Slot<T>) -> Result<Option<T>, StateError> {
        if slot.private {
            return Ok(None);
        }
        self.slots
            .get(slot.name)
            .map(|v| {
                serde_json::from_value(v.clone()).map_err(|source| StateError::Deserialize {
                    slot: slot.name.to_owned(),
                    expected: std::any::type_name::<T>(),
                    source,
                })
            })
            .transpose()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::message::Message;
    use serde_json::json;

    static NUMS: Slot<Vec<u32>> = Slot::public("nums");
    static HIDDEN: Slot<String> = Slot::private("_hidden");
    static NUMS_AS_TEXT: Slot<String> = Slot::public("nums");

    #[test]
    fn typed_round_trip_through_json() {
        let mut state = State::with_messages(vec![Message::human("hi")]);
        state.set(&NUMS, vec![1, 2]);
        state.set(&HIDDEN, "s".into());
        let json = serde_json::to_value(&state).unwrap();
        assert_eq!(json["slots"], json!({"nums": [1, 2]}));
        assert_eq!(json["private_slots"], json!({"_hidden": "s"}));

        let back: State = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(back.get(&NUMS).unwrap(), Some(&vec![1, 2]));
        assert_eq!(back.get(&HIDDEN).unwrap().map(String::as_str), Some("s"));
        assert_eq!(serde_json::to_value(&back).unwrap(), json);
    }

    #[test]
    fn private_slots_stay_out_of_the_public_view() {
        let mut state = State::default();
        state.set(&NUMS, vec![3]);
        state.set(&HIDDEN, "secret".into());
        let view = state.public_view().unwrap();
        assert_eq!(view.slots.keys().collect::<Vec<_>>(), ["nums"]);
        assert_eq!(view.get(&NUMS).unwrap(), Some(vec![3]));
        assert_eq!(view.get(&HIDDEN).unwrap(), None);
    }

    #[test]
    fn wrong_types_are_errors_not_panics() {
        let mut state = State::default();
        state.set(&NUMS, vec![1]);
        assert!(matches!(
            state.get(&NUMS_AS_TEXT),
            Err(StateError::TypeMismatch { .. })
        ));
        state.set_json("nums", false, json!("not a list"));
        assert!(matches!(state.get(&NUMS), Err(StateError::Deserialize { .. })));
    }

    #[test]
    fn update_starts_from_default_and_deferred_writes_apply_in_order() {
        let mut state = State::default();
        state.update(&NUMS, |v| v.push(7)).unwrap();
        state.update(&NUMS, |v| v.push(8)).unwrap();
        assert_eq!(state.get(&NUMS).unwrap(), Some(&vec![7, 8]));

        let mut updates = StateUpdates::new();
        updates.set(&NUMS, vec![1]);
        updates.set(&NUMS, vec![2]);
        state.apply(updates);
        assert_eq!(state.get(&NUMS).unwrap(), Some(&vec![2]));
        assert!(state.remove(&NUMS));
        assert!(!state.contains("nums"));
    }
}
