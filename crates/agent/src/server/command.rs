//! The `command` of a run-create: `resume` (decisions for the calls a thread waits on,
//! [`crate::server::resume`]), `update` (a state update applied before the run) and `goto`.
//!
//! * `update` takes the values `threads.update_state` takes (`messages`, `todos`, `files`; see
//!   [`crate::server::update`]), checked for their shape when the run is created (422) and
//!   applied when the run starts, as a checkpoint of its own (`"source": "update"`, written by
//!   `__start__`) before the run's first step; the run then goes on from there. With `resume` it
//!   may not hold `messages` (the thread waits for decisions first, 422). An update the thread
//!   refuses when the run starts (a removed message it does not have, a file changed since the
//!   version given) fails the run before it changed anything.
//! * `goto`: a Trellis agent's loop has one entry, the model, and a run always starts there (or
//!   with the waiting tool calls, for a resume). `goto` `"model"` (or `["model"]`) is accepted
//!   without a `resume` and changes nothing; any other node, a `Send`, or `goto` with `resume` is a
//!   422 (docs/differences.md).
//!
//! A command with none of the three set is a 422.

use serde_json::{Map, Value};

use crate::server::error::{ApiError, ApiResult};
use crate::server::update::check_values;

/// The node `goto` may name.
pub const ENTRY_NODE: &str = "model";

/// The shape of `command` in the OpenAPI document.
#[derive(Debug, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CommandShape {
    /// The answer to the interrupt the thread waits on: `{"decisions": [...]}`, or a map from the
    /// interrupt's id to it.
    pub resume: Option<Value>,
    /// A state update applied before the run: `messages`, `todos`, `files`, as
    /// `threads.update_state` takes them.
    pub update: Option<Map<String, Value>>,
    /// Only `"model"` (or `["model"]`), without `resume`.
    pub goto: Option<Value>,
}

/// A run-create's `command`, checked.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct RunCommand {
    /// `command.resume`, when set.
    pub resume: Option<Value>,
    /// `command.update`'s values, when set.
    pub update: Option<Map<String, Value>>,
}

/// Check `command` (see the module docs).
pub(crate) fn parse(command: &Value) -> ApiResult<RunCommand> {
    let Value::Object(fields) = command else {
        return Err(ApiError::unprocessable("command must be an object"));
    };
    if let Some(other) = fields
        .keys()
        .find(|k| !["resume", "update", "goto"].contains(&k.as_str()))
    {
        return Err(ApiError::unprocessable(format!(
            "unknown command field {other:?}"
        )));
    }
    let set = |key: &str| fields.get(key).filter(|v| !v.is_null());
    let resume = set("resume").cloned();
    let update = set("update")
        .map(|u| check_values(Some(u), "command.update"))
        .transpose()?;
    if let Some(goto) = set("goto") {
        let to_entry = match goto {
            Value::String(node) => node == ENTRY_NODE,
            Value::Array(nodes) => nodes.len() == 1 && nodes[0] == ENTRY_NODE,
            _ => false,
        };
        if !to_entry {
            return Err(ApiError::unprocessable(format!(
                "command.goto can only name {ENTRY_NODE:?}, where every Trellis run starts (got {goto})"
            )));
        }
        if resume.is_some() {
            return Err(ApiError::unprocessable(
                "command.goto cannot go with command.resume: a resume goes on with the calls waiting for decisions",
            ));
        }
    }
    if resume.is_some() && update.as_ref().is_some_and(|u| u.contains_key("messages")) {
        return Err(ApiError::unprocessable(
            "command.update cannot change messages with command.resume: the thread waits for decisions first",
        ));
    }
    if resume.is_none() && update.is_none() && set("goto").is_none() {
        return Err(ApiError::unprocessable("command needs resume, update or goto"));
    }
    Ok(RunCommand { resume, update })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn commands_trellis_can_run_and_the_refused_ones() {
        let ok = parse(&json!({"update": {"todos": []}, "goto": "model"})).unwrap();
        assert_eq!(ok.update.unwrap().len(), 1);
        assert!(ok.resume.is_none());
        let resume =
            parse(&json!({"resume": {"decisions": []}, "update": {"todos": null}, "goto": null})).unwrap();
        assert!(resume.resume.is_some());
        assert!(parse(&json!({"goto": ["model"]})).is_ok());
        for bad in [
            json!({"goto": "tools"}),
            json!({"goto": "__end__"}),
            json!({"goto": {"node": "model", "arg": {}}}),
            json!({"goto": "model", "resume": "yes"}),
            json!({"resume": "yes", "update": {"messages": []}}),
            json!({"update": {"secret": 1}}),
            json!({"update": [["messages", []]]}),
            json!({"update": {"messages": [{"type": "robot"}]}}),
            json!({"update": {"todos": "no"}}),
            json!({"update": {"files": []}}),
            json!({"resume": null, "update": null, "goto": null}),
            json!({"jump": 1}),
            json!("resume"),
        ] {
            assert_eq!(parse(&bad).unwrap_err().status, 422, "{bad}");
        }
    }
}
