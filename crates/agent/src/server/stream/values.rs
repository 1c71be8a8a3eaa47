//! The `values` part's data, built from message dicts serialized once per run.
//!
//! A run streams its whole state after every checkpoint, two per step. Without a cache, a run of
//! n steps turns each message into a LangChain dict and serializes it about 2n times. Profiled on
//! the serve bench (1,000 concurrent four-step runs, state dir on tmpfs, 2026-12-06), building
//! `values` parts took 8% of the server's CPU.
//!
//! A cached dict is reused while the message at its position is the same allocation. Messages are
//! shared (`Arc`) between a run's state and its checkpoints, and are copied before being changed
//! ([`Messages::get_mut`]). The cache holds its own reference to each message, so an edited
//! message is always a new allocation and is serialized again. A removed or inserted message
//! shifts the positions after it; those messages are serialized again too, with their new ids.
//!
//! The data is exactly what serializing [`super::values_of`] plus `files` gives: the same keys
//! in the same order (`messages`, `todos` when set, `files` when read), compact. A test holds the
//! two equal.

use std::sync::Arc;

use serde_json::Value;
use trellis_middleware::Message;
use trellis_middleware::runtime::message_list::Messages;
use trellis_middleware::runtime::state::PublicState;
use uuid::Uuid;

use crate::server::messages::to_dict;

/// Write `"messages":[dict,…]` and, with `todos`, `,"todos":…` to `out`, from JSON already made:
/// the keys a `values` part and an `updates` part's node share, as serializing them gives them.
pub(super) fn push_messages_and_todos<'a>(
    out: &mut String,
    dicts: impl IntoIterator<Item = &'a str>,
    todos: Option<&str>,
) {
    out.push_str("\"messages\":[");
    for (i, dict) in dicts.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(dict);
    }
    out.push(']');
    if let Some(todos) = todos {
        out.push_str(",\"todos\":");
        out.push_str(todos);
    }
}

/// The compact JSON of each message of one thread as a dict, by position, with the message it
/// was made from. Belongs to one run (its [`super::Translator`]).
#[derive(Debug, Default)]
pub(super) struct MessageDicts {
    dicts: Vec<(Arc<Message>, String)>,
}

impl MessageDicts {
    /// The `values` data of `state` of `thread`, with `files` (already serialized) when read.
    /// Brings the dicts up to date with `state`'s messages, for [`MessageDicts::json`].
    pub(super) fn values_data(&mut self, thread: &Uuid, state: &PublicState, files: Option<&str>) -> String {
        self.refresh(thread, &state.messages);
        let todos = state.slots.get("todos").map(Value::to_string);
        let len = self.dicts.iter().map(|(_, d)| d.len() + 1).sum::<usize>()
            + todos.as_ref().map_or(0, String::len)
            + files.map_or(0, str::len)
            + 32;
        let mut out = String::with_capacity(len);
        out.push('{');
        push_messages_and_todos(
            &mut out,
            self.dicts.iter().map(|(_, dict)| dict.as_str()),
            todos.as_deref(),
        );
        if let Some(files) = files {
            out.push_str(",\"files\":");
            out.push_str(files);
        }
        out.push('}');
        out
    }

    /// The JSON of message `index`'s dict as of the last [`MessageDicts::values_data`].
    ///
    /// # Panics
    /// When `index` is not a position of the messages last refreshed.
    pub(super) fn json(&self, index: usize) -> &str {
        &self.dicts[index].1
    }

    /// Keep the dicts still valid for `messages` (a prefix of the same allocations) and serialize
    /// the rest.
    fn refresh(&mut self, thread: &Uuid, messages: &Messages) {
        let shared = messages.shared();
        let valid = self
            .dicts
            .iter()
            .zip(shared)
            .take_while(|((cached, _), message)| Arc::ptr_eq(cached, message))
            .count();
        self.dicts.truncate(valid);
        for (i, message) in shared.iter().enumerate().skip(valid) {
            let dict = to_dict(thread, i, message).to_string();
            self.dicts.push((message.clone(), dict));
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;
    use trellis_middleware::runtime::message::{AiMessage, HumanMessage, ToolMessage};

    use super::*;
    use crate::server::stream::values_of;

    fn plain(thread: &Uuid, state: &PublicState, files: Option<&Value>) -> String {
        let mut values = values_of(thread, state);
        if let Some(files) = files {
            values["files"] = files.clone();
        }
        values.to_string()
    }

    /// The cache's data for `state` is the plain serialization, and holds every message.
    fn check(cache: &mut MessageDicts, thread: &Uuid, state: &PublicState, files: Option<&Value>) {
        let data = cache.values_data(thread, state, files.map(Value::to_string).as_deref());
        assert_eq!(data, plain(thread, state, files));
        let parsed: Value = serde_json::from_str(&data).unwrap();
        assert_eq!(parsed["messages"].as_array().unwrap().len(), state.messages.len());
    }

    #[test]
    fn the_data_is_what_serializing_the_values_gives_as_messages_are_added_edited_and_removed() {
        let thread = Uuid::new_v4();
        let files = json!({"/notes.md": {"content": ["a \"quoted\" line"], "created_at": "x"}});
        let mut cache = MessageDicts::default();
        let mut state = PublicState {
            messages: Messages::new(),
            slots: BTreeMap::new(),
        };
        check(&mut cache, &thread, &state, None);
        state.messages.push(HumanMessage::text("hello"));
        check(&mut cache, &thread, &state, None);
        state.messages.push(AiMessage::text("first answer"));
        state
            .slots
            .insert("todos".into(), json!([{"content": "x", "status": "pending"}]));
        check(&mut cache, &thread, &state, Some(&files));

        // An edit copies the shared message: the cache must not serve the old text.
        if let Some(Message::Ai(ai)) = state.messages.get_mut(1) {
            *ai = AiMessage::text("second answer");
        }
        check(&mut cache, &thread, &state, Some(&files));
        assert!(cache.dicts[1].1.contains("second answer"));

        // A removal shifts later positions: their ids change with them.
        state.messages.push(ToolMessage::text("c1", "ls", "a.txt"));
        check(&mut cache, &thread, &state, None);
        state.messages.remove(0);
        check(&mut cache, &thread, &state, None);
        state.slots.insert("todos".into(), Value::Null);
        check(&mut cache, &thread, &state, None);
    }
}
