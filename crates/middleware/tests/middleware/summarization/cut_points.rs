//! SummarizationMiddleware never separates a tool call from its result: every cut point the
//! summarizer may choose, and every summarized request, over generated conversations (proptest).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::sync::Arc;

use proptest::prelude::*;
use serde_json::json;
use trellis_middleware::backend::StateBackend;
use trellis_middleware::runtime::message::{AiMessage, ToolMessage};
use trellis_middleware::runtime::message_list::Messages;
use trellis_middleware::runtime::scripted_model::ScriptedModel;
use trellis_middleware::summarization::{SUMMARY_SOURCE, safe_cutoff, safe_cuts};
use trellis_middleware::summarization::{SummarizationConfig, Threshold};
use trellis_middleware::*;

use crate::common::*;

/// One turn of a generated conversation.
#[derive(Debug, Clone)]
enum Turn {
    Human,
    AiText,
    /// An AI message with this many calls, then their results in this order.
    Calls(Vec<usize>),
}

fn turn() -> impl Strategy<Value = Turn> {
    prop_oneof![
        2 => Just(Turn::Human),
        1 => Just(Turn::AiText),
        3 => (1_usize..4).prop_flat_map(|k| Just((0..k).collect::<Vec<_>>()).prop_shuffle()).prop_map(Turn::Calls),
    ]
}

fn build(turns: &[Turn]) -> Vec<Message> {
    let mut out = vec![Message::human("start")];
    let mut next_id = 0;
    for t in turns {
        match t {
            Turn::Human => out.push(Message::human("more")),
            Turn::AiText => out.push(Message::ai("thinking")),
            Turn::Calls(order) => {
                let ids: Vec<String> = order.iter().map(|i| format!("k{}", next_id + i)).collect();
                next_id += order.len();
                let mut sorted = ids.clone();
                sorted.sort();
                out.push(Message::Ai(AiMessage::tool_calls(
                    sorted
                        .iter()
                        .map(|id| call(id, "echo", json!({"text": "x".repeat(200)}))),
                )));
                for id in ids {
                    out.push(Message::Tool(ToolMessage::text(&id, "echo", "y".repeat(600))));
                }
            }
        }
    }
    out
}

/// Every tool result follows the AI message that called it, and every call has its result.
fn assert_paired(messages: &Messages) {
    let mut called = HashSet::new();
    let answered: HashSet<&str> = messages
        .iter()
        .filter_map(Message::as_tool)
        .map(|t| t.call_id.as_str())
        .collect();
    for m in messages.iter() {
        match m {
            Message::Ai(ai) => {
                for c in ai.calls() {
                    assert!(answered.contains(c.id.as_str()), "call {} lost its result", c.id);
                    called.insert(c.id.clone());
                }
            }
            Message::Tool(t) => assert!(called.contains(&t.call_id), "result {} lost its call", t.call_id),
            _ => {}
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_cut_point_keeps_calls_with_results(turns in prop::collection::vec(turn(), 0..14)) {
        let messages: Messages = build(&turns).into();
        let n = messages.len();
        let safe = safe_cuts(&messages);
        for from in 0..=n {
            for target in from..=n {
                for forward in [false, true] {
                    let Some(c) = safe_cutoff(&messages, from, target, forward) else {
                        prop_assert!(!forward || from == n);
                        continue;
                    };
                    prop_assert!(c > from && c <= n && safe[c]);
                    prop_assert!(forward || c <= target);
                    if c < n {
                        prop_assert!(messages[c].as_tool().is_none());
                    }
                    assert_paired(&messages.slice(c..));
                    assert_paired(&messages.slice(..c));
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn summarized_requests_keep_calls_with_results(
        turns in prop::collection::vec(turn(), 1..12),
        keep in 0_usize..8,
    ) {
        let history = build(&turns);
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let (request, stored) = rt.block_on(async {
            let checkpointer = Arc::new(InMemoryCheckpointer::new());
            let thread = ThreadId::new("p").unwrap();
            seed_thread(&checkpointer, &thread, history.clone()).await;
            let model = Arc::new(ScriptedModel::from_fn(|_| Ok(ModelResponse::new(AiMessage::text("ok")))));
            let summarizer = Arc::new(ScriptedModel::from_fn(|_| Ok(ModelResponse::new(AiMessage::text("S")))));
            let agent = Agent::builder(model.clone())
                .checkpointer(checkpointer)
                .middleware(
                    SummarizationMiddleware::new(Arc::new(StateBackend::new()))
                        .with_summary_model(summarizer)
                        .with_config(SummarizationConfig {
                            keep_messages: keep,
                            l2_trigger_ratio: 0.0,
                            tool_result_token_limit: 50,
                            threshold: Threshold::Tokens(1),
                            ..SummarizationConfig::default()
                        }),
                )
                .build()
                .unwrap();
            let out = agent.run(RunInput::human("go").thread(thread)).await.unwrap();
            (model.requests().remove(0), out.state.messages)
        });
        assert_paired(&request.messages);
        let body = if request.messages[0].source() == Some(SUMMARY_SOURCE) { 1 } else { 0 };
        prop_assert!(request.messages.get(body).is_none_or(|m| m.as_tool().is_none()));
        // Stored messages are never rewritten.
        prop_assert_eq!(stored.slice(..history.len()).to_vec(), history);
    }
}
