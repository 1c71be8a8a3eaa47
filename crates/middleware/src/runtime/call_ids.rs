//! Tool-call ids that are unique within a thread.
//!
//! A tool result answers its call by id, and derived files are named after it (an evicted result is
//! saved as `/large_tool_results/<call id>`). Providers do not all keep ids unique: an
//! OpenAI-compatible server that sends none gets `call_0`, `call_1`, … from the parser, every turn
//! again. Before a reply is used, the loop gives every call whose id is empty, already used earlier
//! in the thread, or repeated in the same reply a fresh one, so a result or a saved file can never
//! be taken for another call's. Ids that are already unique are left exactly as the provider sent
//! them (providers that check ids, such as Anthropic, see their own ids back).
//!
//! Cost: one pass over the calls already in the thread per model reply that calls tools, comparing
//! each with the reply's few ids; nothing for replies without tool calls.

use std::collections::HashSet;

use crate::runtime::message::{AiMessage, Message};
use crate::runtime::message_list::Messages;
use crate::runtime::random;

/// Give every call in `reply` that needs one a fresh id (see the module docs). Returns how many
/// ids were replaced.
pub(crate) fn make_unique(reply: &mut AiMessage, history: &Messages) -> usize {
    let ids: Vec<&str> = reply.calls().map(|c| c.id.as_str()).collect();
    if ids.is_empty() {
        return 0;
    }
    // Only this reply's ids are looked up: the scan of the thread compares strings, nothing else
    // is collected or hashed.
    let mut taken = vec![false; ids.len()];
    for call in history
        .iter()
        .filter_map(Message::as_ai)
        .flat_map(AiMessage::calls)
    {
        for (i, id) in ids.iter().enumerate() {
            taken[i] |= call.id == *id;
        }
    }
    let mut seen: HashSet<String> = HashSet::new();
    let mut replaced = 0;
    for (call, taken) in reply.calls_mut().zip(taken) {
        if call.id.is_empty() || taken || seen.contains(&call.id) {
            let fresh = loop {
                let id = random::unique_id("call");
                if !seen.contains(&id) {
                    break id;
                }
            };
            tracing::debug!(old = %call.id, new = %fresh, "tool call id was not unique in the thread; replaced");
            call.id = fresh;
            replaced += 1;
        }
        seen.insert(call.id.clone());
    }
    replaced
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::runtime::message::{ContentBlock, ToolCall};

    fn reply(ids: &[&str]) -> AiMessage {
        let mut ai = AiMessage::default();
        for id in ids {
            ai.content
                .push(ContentBlock::ToolUse(ToolCall::new(*id, "t", json!({}))));
        }
        ai
    }

    fn ids(ai: &AiMessage) -> Vec<String> {
        ai.calls().map(|c| c.id.clone()).collect()
    }

    #[test]
    fn unique_ids_are_kept_and_repeats_replaced() {
        let history = Messages::from(vec![Message::Ai(reply(&["call_0", "toolu_1"]))]);
        let mut next = reply(&["call_0", "fresh", "fresh", ""]);
        assert_eq!(make_unique(&mut next, &history), 3);
        let got = ids(&next);
        assert_eq!(got[1], "fresh");
        assert!(got[0].starts_with("call-") && got[2].starts_with("call-") && got[3].starts_with("call-"));
        let earlier = ["call_0".to_owned(), "toolu_1".to_owned()];
        let distinct: HashSet<&String> = got.iter().chain(earlier.iter()).collect();
        assert_eq!(distinct.len(), 6, "{got:?}");
    }

    #[test]
    fn replies_without_calls_or_with_new_ids_are_untouched() {
        let history = Messages::from(vec![Message::Ai(reply(&["a"]))]);
        let mut next = reply(&["b", "c"]);
        assert_eq!(make_unique(&mut next, &history), 0);
        assert_eq!(ids(&next), ["b", "c"]);
        let mut text = AiMessage::default();
        assert_eq!(make_unique(&mut text, &history), 0);
    }
}
