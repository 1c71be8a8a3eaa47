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

use std::collections::BTreeMap;
use std::fmt;

use serde::de::DeserializeOwned;
use serde::ser::Error as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::tools::{Slot, SlotValue, Slots, StateError, StateUpdates};

use crate::runtime::message_list::Messages;

/// The state of one thread: its messages and its slots.
#[derive(Clone, Default)]
pub struct State {
    /// The conversation, oldest first.
    pub messages: Messages,
    slots: Slots,
}

impl fmt::Debug for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("State")
            .field("messages", &self.messages.len())
            .field("slots", &self.slots)
            .finish()
    }
}

impl State {
    /// A state holding `messages` and no slots.
    pub fn with_messages(messages: impl Into<Messages>) -> Self {
        Self {
            messages: messages.into(),
            slots: Slots::new(),
        }
    }

    /// The slots: what tools see of the state (see [`ToolContext::slot`](crate::ToolContext::slot)).
    pub fn slots(&self) -> &Slots {
        &self.slots
    }

    /// The slot's value, or `None` when unset. Errors when the stored value has another type.
    pub fn get<T: SlotValue>(&self, slot: &Slot<T>) -> Result<Option<&T>, StateError> {
        self.slots.get(slot)
    }

    /// Store `value` in the slot, replacing what was there.
    pub fn set<T: SlotValue>(&mut self, slot: &Slot<T>, value: T) {
        self.slots.set(slot, value);
    }

    /// Change the slot's value in place, starting from `T::default()` when unset.
    pub fn update<T, R>(&mut self, slot: &Slot<T>, f: impl FnOnce(&mut T) -> R) -> Result<R, StateError>
    where
        T: SlotValue + Clone + Default,
    {
        self.slots.update(slot, f)
    }

    /// Clear the slot. True when it was set.
    pub fn remove<T>(&mut self, slot: &Slot<T>) -> bool {
        self.slots.remove(slot)
    }

    /// True when a slot of this name is set.
    pub fn contains(&self, name: &str) -> bool {
        self.slots.contains(name)
    }

    /// Names of the slots that are set.
    pub fn slot_names(&self) -> impl Iterator<Item = &str> {
        self.slots.slot_names()
    }

    /// The slot's value as JSON, private slots included.
    pub fn get_json(&self, name: &str) -> Result<Option<Value>, StateError> {
        self.slots.get_json(name)
    }

    /// Store a JSON value under `name` (e.g. a caller's run input); it is typed on first access.
    pub fn set_json(&mut self, name: impl Into<String>, private: bool, value: Value) {
        self.slots.set_json(name, private, value);
    }

    /// Apply deferred writes, in order.
    pub fn apply(&mut self, updates: StateUpdates) {
        self.slots.apply(updates);
    }

    /// What callers and parent agents may see: the messages and the public slots as JSON (keys
    /// sorted, [`crate::tools::canonical`]).
    pub fn public_view(&self) -> Result<PublicState, StateError> {
        let mut slots = BTreeMap::new();
        for entry in self.slots.iter_public_json() {
            let (name, json) = entry?;
            slots.insert(name.to_owned(), crate::tools::canonical::canonical(json));
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
        for entry in self.slots.iter_json() {
            let (name, private, json) = entry.map_err(S::Error::custom)?;
            // A slot's struct fields in sorted order, as in every build.
            let json = crate::tools::canonical::canonical(json);
            if private {
                repr.private_slots.insert(name.to_owned(), json);
            } else {
                repr.slots.insert(name.to_owned(), json);
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
        if slot.is_private() {
            return Ok(None);
        }
        self.slots
            .get(slot.name())
            .map(|v| {
                serde_json::from_value(v.clone()).map_err(|source| StateError::Deserialize {
                    slot: slot.name().to_owned(),
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
    use crate::runtime::message::Message;
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
