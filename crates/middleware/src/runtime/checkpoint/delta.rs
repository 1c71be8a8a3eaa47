//! What a save writes: the difference between the state being saved and the state of the step
//! before it, found by identity (shared messages and slot values), never by comparing contents.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use super::record::EncodedSlot;
use super::shared::{ContentBlob, ContentMemo, collecting};
use crate::runtime::message::Message;
use crate::runtime::state::State;

/// The state of the previous step, as this process knows it.
#[derive(Debug, Clone)]
pub(super) struct Previous {
    /// Kept alive so addresses compared against it are never reused.
    pub state: State,
    /// Its slots as the log stores them.
    pub slots: BTreeMap<String, EncodedSlot>,
}

/// The messages part of a delta: how many of the previous messages stay, and what follows.
pub(super) struct MessageDelta {
    pub keep: usize,
    pub append: Vec<Arc<Message>>,
}

/// How `state`'s messages differ from `previous`'s: the longest shared prefix (by identity) is
/// kept. Costs one pointer comparison per message.
pub(super) fn message_delta(state: &State, previous: Option<&State>) -> MessageDelta {
    let now = state.messages.shared();
    let keep = previous.map_or(0, |p| {
        let before = p.messages.shared();
        before
            .iter()
            .zip(now)
            .take_while(|(a, b)| Arc::ptr_eq(a, b))
            .count()
    });
    MessageDelta {
        keep,
        append: now[keep..].to_vec(),
    }
}

/// True when `state` holds exactly the slots of `previous`, each the very same value.
pub(super) fn slots_unchanged(state: &State, previous: &Previous) -> bool {
    let (now, before) = (state.slots(), previous.state.slots());
    now.slot_names().count() == before.slot_names().count()
        && now.slot_names().all(|name| before.same_value(now, name))
}

/// The slots part of a delta.
pub(super) struct SlotDelta {
    /// Slots written since the previous step, encoded.
    pub set: BTreeMap<String, EncodedSlot>,
    /// Slots removed since the previous step.
    pub unset: Vec<String>,
    /// Every slot after this step, encoded (unchanged ones reused from the previous step).
    pub all: BTreeMap<String, EncodedSlot>,
    /// Blobs the newly encoded slots reference.
    pub blobs: Vec<ContentBlob>,
}

/// Encode the slots of `state` that changed since `previous` (all of them without one). Large
/// shared parts become blob references through `memo` (see `checkpoint/shared.rs`).
pub(super) fn slot_delta(
    state: &State,
    previous: Option<&Previous>,
    memo: &Arc<ContentMemo>,
) -> Result<SlotDelta, serde_json::Error> {
    let slots = state.slots();
    let mut delta = SlotDelta {
        set: BTreeMap::new(),
        unset: Vec::new(),
        all: BTreeMap::new(),
        blobs: Vec::new(),
    };
    for name in slots.slot_names() {
        let unchanged = previous.and_then(|p| {
            p.state
                .slots()
                .same_value(slots, name)
                .then(|| p.slots.get(name))
                .flatten()
        });
        if let Some(encoded) = unchanged {
            delta.all.insert(name.to_owned(), encoded.clone());
            continue;
        }
        let (json, blobs) = collecting(memo, || slots.get_json(name));
        let json: Value = json
            .map_err(|e| <serde_json::Error as serde::ser::Error>::custom(e.to_string()))?
            .unwrap_or(Value::Null);
        let encoded = EncodedSlot {
            private: slots.is_private(name).unwrap_or(false),
            value: Arc::new(json),
            blobs: blobs.iter().map(|b| b.hash.clone()).collect(),
        };
        delta.blobs.extend(blobs);
        delta.set.insert(name.to_owned(), encoded.clone());
        delta.all.insert(name.to_owned(), encoded);
    }
    if let Some(previous) = previous {
        delta.unset = previous
            .slots
            .keys()
            .filter(|name| !slots.contains(name))
            .cloned()
            .collect();
    }
    Ok(delta)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::tools::Slot;

    static COUNT: Slot<u32> = Slot::public("count");
    static FIXED: Slot<String> = Slot::private("_fixed");
    static GONE: Slot<bool> = Slot::public("gone");

    #[test]
    fn only_what_changed_is_encoded() {
        let memo = Arc::new(ContentMemo::default());
        let mut state = State::with_messages(vec![Message::human("a")]);
        state.set(&COUNT, 1);
        state.set(&FIXED, "same".into());
        state.set(&GONE, true);
        let first = slot_delta(&state, None, &memo).unwrap();
        assert_eq!(first.set.len(), 3);
        let previous = Previous {
            state: state.clone(),
            slots: first.all,
        };

        state.messages.push(Message::ai("b"));
        state.set(&COUNT, 2);
        state.remove(&GONE);
        let messages = message_delta(&state, Some(&previous.state));
        assert_eq!(messages.keep, 1);
        assert_eq!(messages.append.len(), 1);
        let slots = slot_delta(&state, Some(&previous), &memo).unwrap();
        assert_eq!(slots.set.keys().collect::<Vec<_>>(), ["count"]);
        assert_eq!(slots.unset, ["gone"]);
        assert_eq!(slots.all.keys().collect::<Vec<_>>(), ["_fixed", "count"]);
        assert_eq!(*slots.all["count"].value, serde_json::json!(2));

        // An edited message is a rewrite from that message on.
        state.messages.get_mut(0).unwrap();
        assert_eq!(message_delta(&state, Some(&previous.state)).keep, 0);
    }
}
