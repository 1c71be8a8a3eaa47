//! `command.resume`: the human-in-the-loop answer a client sends to continue a thread that stopped
//! for approvals, turned into Trellis [`Decisions`] before the run starts.
//!
//! A thread that stopped for approvals has one interrupt (see
//! [`interrupt_json`](crate::server::stream::interrupt_json)) whose value lists one
//! `action_requests` entry per call waiting — a subagent's calls included, in the place of the
//! `task` call that started it. The answer is LangChain's `HumanInTheLoopMiddleware` resume value,
//! given as the resume itself or in a map keyed by the interrupt's id:
//!
//! ```json
//! {"command": {"resume": {"decisions": [{"type": "approve"}, {"type": "reject", "message": "no"}]}}}
//! {"command": {"resume": {"<interrupt id>": {"decisions": [...]}}}}
//! ```
//!
//! one decision per action request, in the same order:
//!
//! | decision | Trellis |
//! |---|---|
//! | `{"type": "approve"}` | [`Decision::Approve`] |
//! | `{"type": "edit", "edited_action": {"name": TOOL, "args": {...}}}` | [`Decision::Edit`] (the name must stay the tool's) |
//! | `{"type": "reject", "message"?: "why"}` | [`Decision::Reject`] (the model gets the message) |
//! | `{"type": "respond", "message": "answer"}` | [`Decision::Respond`] (the answer is the call's result) |
//!
//! Everything is checked before the run is registered: no pending interrupt is a 409; an unknown
//! interrupt id, a count that does not match, an unknown or disallowed decision or a malformed one
//! is a 422. The thread is then left exactly as it was.

use serde_json::Value;
use trellis_middleware::runtime::interrupt::{ApprovalRequest, Decision, DecisionKind, Decisions, Interrupt};
use uuid::Uuid;

use crate::server::error::{ApiError, ApiResult};
use crate::server::stream::interrupt_id;

/// The decisions `command` (the run-create's `command` object) gives for `pending`, the
/// interrupt thread `thread` waits on (`None`: it waits on nothing, a 409).
pub fn decisions(thread: &Uuid, command: &Value, pending: Option<&Interrupt>) -> ApiResult<Decisions> {
    let resume = crate::server::command::parse(command)?
        .resume
        .ok_or_else(|| ApiError::unprocessable("command.resume is required"))?;
    let resume = &resume;
    let Some(pending) = pending else {
        return Err(ApiError::conflict(format!(
            "thread {thread} has no pending interrupt to resume"
        )));
    };
    let id = interrupt_id(thread, pending);
    let answer = match resume {
        Value::Object(map) if map.contains_key("decisions") => resume,
        Value::Object(map) => {
            let unknown: Vec<&String> = map.keys().filter(|k| **k != id).collect();
            if !unknown.is_empty() {
                return Err(ApiError::unprocessable(format!(
                    "no pending interrupt has id {unknown:?}; thread {thread} waits on {id:?}"
                )));
            }
            map.get(&id).ok_or_else(|| {
                ApiError::unprocessable(format!("command.resume names no interrupt: give {id:?}"))
            })?
        }
        _ => {
            return Err(ApiError::unprocessable(
                "command.resume must be {\"decisions\": [...]} or a map from interrupt id to it",
            ));
        }
    };
    let list = answer
        .get("decisions")
        .and_then(Value::as_array)
        .ok_or_else(|| ApiError::unprocessable("the resume value must be {\"decisions\": [...]}"))?;
    if list.len() != pending.requests.len() {
        return Err(ApiError::unprocessable(format!(
            "{} decisions for {} action requests: give one per request, in order",
            list.len(),
            pending.requests.len()
        )));
    }
    let mut decisions = Decisions::new();
    for (i, (request, given)) in pending.requests.iter().zip(list).enumerate() {
        let decision =
            decision(request, given).map_err(|e| ApiError::unprocessable(format!("decisions[{i}]: {e}")))?;
        decisions.insert(request.id.clone(), decision);
    }
    Ok(decisions)
}

/// One decision about `request`, checked against what it allows.
fn decision(request: &ApprovalRequest, given: &Value) -> Result<Decision, String> {
    let kind = given
        .get("type")
        .and_then(Value::as_str)
        .ok_or("a decision needs a \"type\": approve, edit, reject or respond")?;
    let message = || given.get("message").filter(|m| !m.is_null());
    let decision = match kind {
        "approve" => Decision::Approve,
        "edit" => {
            let action = given
                .get("edited_action")
                .ok_or("an edit needs \"edited_action\": {\"name\", \"args\"}")?;
            if let Some(name) = action.get("name").filter(|n| !n.is_null())
                && name.as_str() != Some(request.tool.as_str())
            {
                return Err(format!("an edit keeps the tool: {:?}, not {name}", request.tool));
            }
            match action.get("args") {
                Some(args @ Value::Object(_)) => Decision::edit(args.clone()),
                _ => return Err("edited_action.args must be an object".into()),
            }
        }
        "reject" => match message() {
            None => Decision::Reject { message: None },
            Some(Value::String(m)) => Decision::reject(m.clone()),
            Some(_) => return Err("a reject's message must be a string".into()),
        },
        "respond" => match message() {
            Some(Value::String(m)) => Decision::respond(m.clone()),
            _ => return Err("a respond needs a \"message\" string".into()),
        },
        other => return Err(format!("unknown decision type {other:?}")),
    };
    let allowed: &[DecisionKind] = &request.allowed;
    if !allowed.contains(&decision.kind()) {
        let names: Vec<&str> = allowed.iter().map(|k| k.as_str()).collect();
        return Err(format!(
            "the {} call accepts {names:?}, not {kind:?}",
            request.tool
        ));
    }
    Ok(decision)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pending() -> Interrupt {
        let request = |id: &str, allowed: Vec<DecisionKind>| ApprovalRequest {
            id: id.into(),
            tool: "write_file".into(),
            call_id: id.into(),
            args: json!({"path": "/a"}),
            description: None,
            allowed,
            agents: Vec::new(),
        };
        Interrupt {
            thread_id: "t".into(),
            step: 1,
            requests: vec![
                request("c1", DecisionKind::ALL.to_vec()),
                request("task/c2", vec![DecisionKind::Approve, DecisionKind::Reject]),
            ],
        }
    }

    fn resume(value: Value) -> Value {
        json!({ "resume": value })
    }

    #[test]
    fn a_list_or_a_map_by_id_maps_onto_the_requests_in_order() {
        let thread = Uuid::new_v4();
        let p = pending();
        let answer = json!({"decisions": [
            {"type": "edit", "edited_action": {"name": "write_file", "args": {"path": "/b"}}},
            {"type": "reject", "message": "no"},
        ]});
        let plain = decisions(&thread, &resume(answer.clone()), Some(&p)).unwrap();
        assert_eq!(plain.get("c1"), Some(&Decision::edit(json!({"path": "/b"}))));
        assert_eq!(plain.get("task/c2"), Some(&Decision::reject("no")));
        let id = interrupt_id(&thread, &p);
        let keyed = decisions(&thread, &resume(json!({ id: answer })), Some(&p)).unwrap();
        assert_eq!(keyed, plain);
    }

    #[test]
    fn every_bad_answer_is_a_4xx() {
        let thread = Uuid::new_v4();
        let p = pending();
        let two = |a: Value, b: Value| resume(json!({"decisions": [a, b]}));
        let ok = json!({"type": "approve"});
        let cases = [
            (resume(json!({"decisions": [ok.clone()]})), 422),
            (
                resume(json!({"0123": {"decisions": [ok.clone(), ok.clone()]}})),
                422,
            ),
            (resume(json!([ok.clone()])), 422),
            (resume(json!("yes")), 422),
            (two(ok.clone(), json!({"type": "respond", "message": "x"})), 422),
            (two(json!({"type": "maybe"}), ok.clone()), 422),
            (two(json!({"type": "respond"}), ok.clone()), 422),
            (
                two(
                    json!({"type": "edit", "edited_action": {"args": [1]}}),
                    ok.clone(),
                ),
                422,
            ),
            (
                two(
                    json!({"type": "edit", "edited_action": {"name": "rm", "args": {}}}),
                    ok.clone(),
                ),
                422,
            ),
            (two(json!({"type": "reject", "message": 3}), ok.clone()), 422),
            (json!({"goto": "__end__"}), 422),
            (json!({"resume": null}), 422),
            (json!([1]), 422),
        ];
        for (command, status) in cases {
            let error = decisions(&thread, &command, Some(&p)).unwrap_err();
            assert_eq!(error.status.as_u16(), status, "{command}: {error}");
        }
        let nothing = decisions(&thread, &two(ok.clone(), ok), None).unwrap_err();
        assert_eq!(nothing.status.as_u16(), 409);
    }
}
