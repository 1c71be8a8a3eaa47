//! Where a conversation may be cut, and how the stored conversation maps onto a request.
//!
//! A cut at index `c` splits messages into `[..c]` (summarized) and `[c..]` (kept). A cut is *safe*
//! when it separates no tool call from its result: no result in `[c..]` answers a call made in
//! `[..c]`, the kept part does not start with a tool result, and no call in `[..c]` is still waiting
//! for its result. [`safe_cutoff`] only ever returns safe cuts.

use std::collections::HashMap;
use std::sync::Arc;

use crate::runtime::message::Message;
use crate::runtime::message_list::Messages;

/// For every index `c` in `0..=messages.len()`, whether cutting at `c` is safe (see the module
/// docs). `0` and `len` are safe unless a call is left unanswered.
pub fn safe_cuts(messages: &Messages) -> Vec<bool> {
    let n = messages.len();
    // diff[i] > 0 marks cuts in a range as unsafe (a difference array over cut indices).
    let mut diff = vec![0_i64; n + 2];
    let mut open: HashMap<&str, usize> = HashMap::new();
    // Cuts in from..=to are unsafe.
    fn mark(from: usize, to: usize, diff: &mut [i64]) {
        if from <= to {
            diff[from] += 1;
            diff[to + 1] -= 1;
        }
    }
    for (i, message) in messages.iter().enumerate() {
        match message {
            Message::Ai(ai) => {
                for call in ai.calls() {
                    open.insert(call.id.as_str(), i);
                }
            }
            Message::Tool(tool) => {
                // A cut between the call (at q) and its result (at i) splits them: cuts q+1..=i.
                if let Some(q) = open.remove(tool.call_id.as_str()) {
                    mark(q + 1, i, &mut diff);
                }
                // The kept part must not start with a tool result.
                mark(i, i, &mut diff);
            }
            Message::Human(_) | Message::System(_) => {}
        }
    }
    // A call never answered: every cut after it would strand it in the summarized part while a
    // result may still be appended after the cut.
    for &q in open.values() {
        mark(q + 1, n, &mut diff);
    }
    let mut safe = Vec::with_capacity(n + 1);
    let mut level = 0;
    for d in diff.iter().take(n + 1) {
        level += d;
        safe.push(level == 0);
    }
    safe
}

/// A safe cut in `from + 1 ..= messages.len()` that keeps at least the messages from `target` on:
/// the largest safe cut `<= target`. When there is none and `allow_forward` is set, the smallest safe
/// cut above `target` instead (keeping fewer messages). `None` when no cut summarizes anything.
pub fn safe_cutoff(messages: &Messages, from: usize, target: usize, allow_forward: bool) -> Option<usize> {
    let n = messages.len();
    if from >= n {
        return None;
    }
    let safe = safe_cuts(messages);
    let target = target.clamp(from, n);
    if let Some(c) = (from + 1..=target).rev().find(|&c| safe[c]) {
        return Some(c);
    }
    if allow_forward {
        return (target + 1..=n).find(|&c| safe[c]);
    }
    None
}

/// The request's messages with, for each one, the index of the stored message it shows (`None` for
/// a message a middleware outside this one inserted into the request, such as the skills
/// middleware's tool disclosures).
///
/// Middlewares outside may edit messages in place (a cache breakpoint, say) or insert messages; they
/// must not remove or reorder stored ones. When the request has as many messages as the thread, they
/// are matched by position; otherwise stored messages are matched in order, by identity or equal
/// content.
#[derive(Debug, Clone)]
pub(crate) struct Aligned {
    pub(crate) messages: Messages,
    stored_index: Vec<Option<usize>>,
}

impl Aligned {
    pub(crate) fn new(request: Messages, stored: &Messages) -> Self {
        let stored_index = if request.len() == stored.len() {
            (0..request.len()).map(Some).collect()
        } else {
            let mut j = 0;
            let mut out = Vec::with_capacity(request.len());
            for (i, shared) in request.shared().iter().enumerate() {
                let matches = stored
                    .shared()
                    .get(j)
                    .is_some_and(|s| Arc::ptr_eq(s, shared) || same_message(s, &request[i]));
                if matches {
                    out.push(Some(j));
                    j += 1;
                } else {
                    out.push(None);
                }
            }
            out
        };
        Self {
            messages: request,
            stored_index,
        }
    }

    /// Index of the first request message at or after stored message `cutoff` (the request's length
    /// when there is none).
    pub(crate) fn position(&self, cutoff: usize) -> usize {
        self.stored_index
            .iter()
            .position(|s| s.is_some_and(|j| j >= cutoff))
            .unwrap_or(self.messages.len())
    }
}

/// Equal, ignoring the cache breakpoint a middleware may have placed on the request copy.
fn same_message(a: &Message, b: &Message) -> bool {
    if a.meta().cache_breakpoint == b.meta().cache_breakpoint {
        return a == b;
    }
    let mut b = b.clone();
    b.meta_mut().cache_breakpoint = a.meta().cache_breakpoint;
    *a == b
}

/// The messages the model sees once stored messages before `position` (a request index) are
/// replaced by `summary`: the summary, then the mid-conversation system messages from the replaced
/// part (they carry tool definitions that must stay available), then the rest.
pub(crate) fn view_after(messages: &Messages, position: usize, summary: Message) -> Messages {
    let mut view = Messages::new();
    view.push(summary);
    for shared in messages.shared().iter().take(position) {
        if matches!(**shared, Message::System(_)) {
            view.push_shared(shared.clone());
        }
    }
    for shared in messages.shared().iter().skip(position) {
        view.push_shared(shared.clone());
    }
    view
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::runtime::message::{AiMessage, SystemMessage, ToolCall, ToolMessage};
    use serde_json::json;

    fn ai_calls(ids: &[&str]) -> Message {
        Message::Ai(AiMessage::tool_calls(
            ids.iter().map(|id| ToolCall::new(*id, "t", json!({}))),
        ))
    }

    fn result(id: &str) -> Message {
        Message::Tool(ToolMessage::text(id, "t", "r"))
    }

    #[test]
    fn cuts_never_split_a_call_from_its_results() {
        let msgs: Messages = vec![
            Message::human("h"),     // 0
            ai_calls(&["a", "b"]),   // 1
            result("a"),             // 2
            result("b"),             // 3
            Message::ai("done"),     // 4
            Message::human("again"), // 5
        ]
        .into();
        let safe = safe_cuts(&msgs);
        assert_eq!(safe, [true, true, false, false, true, true, true]);
        assert_eq!(safe_cutoff(&msgs, 0, 3, false), Some(1));
        assert_eq!(safe_cutoff(&msgs, 1, 3, false), None);
        assert_eq!(safe_cutoff(&msgs, 1, 3, true), Some(4));
        assert_eq!(safe_cutoff(&msgs, 6, 6, true), None);
    }

    #[test]
    fn an_unanswered_call_blocks_later_cuts() {
        let msgs: Messages = vec![Message::human("h"), ai_calls(&["x"]), Message::human("next")].into();
        assert_eq!(safe_cuts(&msgs), [true, true, false, false]);
    }

    #[test]
    fn alignment_skips_inserted_messages() {
        let stored: Messages = vec![Message::human("a"), Message::ai("b"), Message::human("c")].into();
        let mut request = stored.clone();
        request.insert(1, Message::System(SystemMessage::default()));
        request.last_mut().unwrap().meta_mut().cache_breakpoint =
            Some(crate::runtime::message::CacheTtl::FiveMinutes);
        let aligned = Aligned::new(request, &stored);
        assert_eq!(aligned.stored_index, [Some(0), None, Some(1), Some(2)]);
        assert_eq!(aligned.position(1), 2);
        assert_eq!(aligned.position(3), 4);
        let view = view_after(&aligned.messages, 2, Message::human("summary"));
        assert_eq!(view.len(), 4, "summary, the carried system message, b, c");
        assert!(matches!(view[1], Message::System(_)));
    }
}
