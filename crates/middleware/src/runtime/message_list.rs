//! [`Messages`]: a conversation whose messages are shared copy-on-write.

use std::fmt;
use std::ops::{Index, IndexMut, RangeBounds};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::runtime::message::Message;

/// A list of messages, each shared copy-on-write.
///
/// Every model call works on a copy of the conversation (the request) and every step writes a
/// checkpoint of it; with shared messages those copies cost one reference count per message instead
/// of a deep copy. Editing a message through [`Messages::get_mut`], indexing or
/// [`Messages::last_mut`] copies that one message first if it is shared, so editing a request never
/// changes the thread's stored messages.
///
/// Serializes as a plain JSON array of messages.
#[derive(Clone, Default, PartialEq)]
pub struct Messages(Vec<Arc<Message>>);

impl fmt::Debug for Messages {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Messages {
    /// No messages.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of messages.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Append a message.
    pub fn push(&mut self, message: impl Into<Message>) {
        self.0.push(Arc::new(message.into()));
    }

    /// Append a message shared with another list.
    pub fn push_shared(&mut self, message: Arc<Message>) {
        self.0.push(message);
    }

    /// Insert a message at `index` (panics when `index > len`, like `Vec::insert`).
    pub fn insert(&mut self, index: usize, message: impl Into<Message>) {
        self.0.insert(index, Arc::new(message.into()));
    }

    /// Remove and return the message at `index` (panics when out of bounds, like `Vec::remove`).
    pub fn remove(&mut self, index: usize) -> Message {
        Arc::unwrap_or_clone(self.0.remove(index))
    }

    /// Move all of `other`'s messages to the end of this list.
    pub fn append(&mut self, other: &mut Messages) {
        self.0.append(&mut other.0);
    }

    /// Keep the first `len` messages.
    pub fn truncate(&mut self, len: usize) {
        self.0.truncate(len);
    }

    /// Keep the messages for which `keep` returns true.
    pub fn retain(&mut self, mut keep: impl FnMut(&Message) -> bool) {
        self.0.retain(|m| keep(m));
    }

    /// The message at `index`.
    pub fn get(&self, index: usize) -> Option<&Message> {
        self.0.get(index).map(|m| &**m)
    }

    /// The message at `index`, copied first if shared.
    pub fn get_mut(&mut self, index: usize) -> Option<&mut Message> {
        self.0.get_mut(index).map(Arc::make_mut)
    }

    /// The first message.
    pub fn first(&self) -> Option<&Message> {
        self.0.first().map(|m| &**m)
    }

    /// The last message.
    pub fn last(&self) -> Option<&Message> {
        self.0.last().map(|m| &**m)
    }

    /// The last message, copied first if shared.
    pub fn last_mut(&mut self) -> Option<&mut Message> {
        self.0.last_mut().map(Arc::make_mut)
    }

    /// The messages, in order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &Message> + ExactSizeIterator + Clone {
        self.0.iter().map(|m| &**m)
    }

    /// The messages, mutably. Every message visited is copied first if shared; to edit a few messages
    /// of a long conversation, find them with [`Messages::iter`] and use [`Messages::get_mut`].
    pub fn iter_mut(&mut self) -> impl DoubleEndedIterator<Item = &mut Message> + ExactSizeIterator {
        self.0.iter_mut().map(Arc::make_mut)
    }

    /// The shared messages themselves (cheap to clone into another list).
    pub fn shared(&self) -> &[Arc<Message>] {
        &self.0
    }

    /// A list of the messages in `range`, sharing them.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Messages {
        let start = match range.start_bound() {
            std::ops::Bound::Included(&s) => s,
            std::ops::Bound::Excluded(&s) => s + 1,
            std::ops::Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            std::ops::Bound::Included(&e) => e + 1,
            std::ops::Bound::Excluded(&e) => e,
            std::ops::Bound::Unbounded => self.len(),
        };
        let end = end.min(self.len());
        Messages(self.0.get(start.min(end)..end).unwrap_or_default().to_vec())
    }

    /// Owned copies of the messages.
    pub fn to_vec(&self) -> Vec<Message> {
        self.iter().cloned().collect()
    }
}

impl Index<usize> for Messages {
    type Output = Message;
    fn index(&self, index: usize) -> &Message {
        &self.0[index]
    }
}

impl IndexMut<usize> for Messages {
    /// Copies the message first if it is shared.
    fn index_mut(&mut self, index: usize) -> &mut Message {
        Arc::make_mut(&mut self.0[index])
    }
}

impl From<Vec<Message>> for Messages {
    fn from(messages: Vec<Message>) -> Self {
        messages.into_iter().collect()
    }
}

impl FromIterator<Message> for Messages {
    fn from_iter<I: IntoIterator<Item = Message>>(iter: I) -> Self {
        Messages(iter.into_iter().map(Arc::new).collect())
    }
}

impl Extend<Message> for Messages {
    fn extend<I: IntoIterator<Item = Message>>(&mut self, iter: I) {
        self.0.extend(iter.into_iter().map(Arc::new));
    }
}

impl<'a> IntoIterator for &'a Messages {
    type Item = &'a Message;
    type IntoIter = std::iter::Map<std::slice::Iter<'a, Arc<Message>>, fn(&'a Arc<Message>) -> &'a Message>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|m| &**m)
    }
}

impl IntoIterator for Messages {
    type Item = Message;
    type IntoIter = std::iter::Map<std::vec::IntoIter<Arc<Message>>, fn(Arc<Message>) -> Message>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter().map(Arc::unwrap_or_clone)
    }
}

impl PartialEq<[Message]> for Messages {
    fn eq(&self, other: &[Message]) -> bool {
        self.len() == other.len() && self.iter().zip(other).all(|(a, b)| a == b)
    }
}

impl PartialEq<Vec<Message>> for Messages {
    fn eq(&self, other: &Vec<Message>) -> bool {
        self == other.as_slice()
    }
}

impl Serialize for Messages {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for Messages {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Vec::<Message>::deserialize(deserializer).map(Messages::from)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn copies_share_until_edited() {
        let mut stored: Messages = vec![Message::human("a"), Message::ai("b")].into();
        let mut request = stored.clone();
        assert!(Arc::ptr_eq(&stored.shared()[0], &request.shared()[0]));

        request[1] = Message::ai("edited");
        request.last_mut().unwrap().meta_mut().source = Some("x".into());
        assert_eq!(stored[1].text(), "b", "the stored message is untouched");
        assert!(
            Arc::ptr_eq(&stored.shared()[0], &request.shared()[0]),
            "unedited ones stay shared"
        );

        stored.push(Message::human("c"));
        assert_eq!(request.len(), 2);
        assert_eq!(
            stored.slice(1..).to_vec(),
            vec![Message::ai("b"), Message::human("c")]
        );
        assert_eq!(stored.slice(5..).len(), 0);
        assert_eq!(stored.remove(0), Message::human("a"));
    }

    #[test]
    fn serializes_as_a_plain_array() {
        let msgs: Messages = vec![Message::human("a")].into();
        let json = serde_json::to_value(&msgs).unwrap();
        assert_eq!(
            json,
            serde_json::json!([{"role": "human", "content": [{"type": "text", "text": "a"}]}])
        );
        let back: Messages = serde_json::from_value(json).unwrap();
        assert_eq!(back, msgs);
    }
}
