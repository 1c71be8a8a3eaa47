//! Helpers shared by the rubric tests (`rubric_*.rs`): scripted grader verdicts, an agent with the
//! rubric middleware, its events, and readers for the grader's payload.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use trellis_middleware::rubric::RUBRIC_SOURCE;
use trellis_middleware::rubric::{RUBRIC_RESULT, RubricEvaluation};
use trellis_middleware::runtime::events::{EventSink, RunEvent};
use trellis_middleware::runtime::message::AiMessage;
use trellis_middleware::runtime::scripted_model::ScriptedModel;
use trellis_middleware::runtime::state::PublicState;
use trellis_middleware::*;

/// A grader reply carrying `verdict` as its structured output.
pub fn verdict(verdict: Value) -> ModelResponse {
    let mut response = ModelResponse::new(AiMessage::text(verdict.to_string()));
    response.structured_output = Some(verdict);
    response
}

pub fn satisfied(names: &[&str]) -> ModelResponse {
    let criteria: Vec<Value> = names
        .iter()
        .map(|n| json!({"status": "passed", "name": n}))
        .collect();
    verdict(json!({"result": "satisfied", "explanation": "All criteria are met.", "criteria": criteria}))
}

pub fn needs_revision(failed: &[(&str, &str)], passed: &[&str]) -> ModelResponse {
    let mut criteria: Vec<Value> = failed
        .iter()
        .map(|(n, g)| json!({"status": "failed", "name": n, "gap": g}))
        .collect();
    criteria.extend(passed.iter().map(|n| json!({"status": "passed", "name": n})));
    verdict(json!({"result": "needs_revision", "explanation": "Not there yet.", "criteria": criteria}))
}

pub fn max(rounds: u32) -> NonZeroU32 {
    NonZeroU32::new(rounds).unwrap()
}

pub fn agent_with(model: &Arc<ScriptedModel>, rubric: RubricMiddleware) -> Agent {
    Agent::builder(model.clone())
        .system_prompt("You are a careful assistant.")
        .middleware(rubric)
        .build()
        .unwrap()
}

/// The rubric middleware's events, as (kind, data).
#[derive(Clone, Default)]
pub struct Events(Arc<Mutex<Vec<(String, Value)>>>);

impl Events {
    pub fn sink(&self) -> EventSink {
        let log = self.0.clone();
        EventSink::from_fn(move |event| {
            if let RunEvent::Middleware {
                middleware,
                kind,
                data,
            } = event
                && middleware == RUBRIC_SOURCE
            {
                log.lock().unwrap().push((kind, data));
            }
        })
    }

    pub fn all(&self) -> Vec<(String, Value)> {
        self.0.lock().unwrap().clone()
    }
}

/// The text the grader received (its one user message).
pub fn payload(request: &ModelRequest) -> String {
    request.messages.first().unwrap().text()
}

/// The nonce of a payload's tags.
pub fn nonce(payload: &str) -> String {
    let start = payload.find("<rubric-").unwrap() + "<rubric-".len();
    let end = start + payload[start..].find('>').unwrap();
    payload[start..end].to_owned()
}

/// The content of the block `<tag-nonce>…</tag-nonce>`.
pub fn block<'a>(payload: &'a str, tag: &str, nonce: &str) -> &'a str {
    let open = format!("\n<{tag}-{nonce}>\n");
    let close = format!("\n</{tag}-{nonce}>");
    let start = payload.find(&open).unwrap() + open.len();
    let end = start + payload[start..].find(&close).unwrap();
    &payload[start..end]
}

pub fn result_of(out: &RunOutput) -> RubricEvaluation {
    out.state.get(&RUBRIC_RESULT).unwrap().expect("a rubric result")
}

pub fn feedback_messages(state: &PublicState) -> Vec<&Message> {
    state
        .messages
        .iter()
        .filter(|m| m.source() == Some(RUBRIC_SOURCE))
        .collect()
}
