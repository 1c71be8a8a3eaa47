//! Subagent progress under the `task` call that started it ([`Progress`]): every step of the
//! subagent (each of its tool calls, with the same title the parent's calls get, and its status)
//! is a line of the `task` call's content, resent as a `tool_call_update` whenever a step starts or
//! finishes. The client shows it inside the `task` card, so a long task is not silent.
//!
//! * Only the subagent's tool calls are listed, not its text (the parent gets the answer).
//! * A subagent's own subagents are not listed (their events reach the child's `task` line only
//!   as that line's status).
//! * Bounds: the last [`MAX_LINES`] steps per `task` call, with a count of the earlier ones; titles
//!   are cut as the parent's are.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;

use agent_client_protocol::v1::schema::{
    ContentBlock, SessionUpdate, ToolCallContent, ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields,
};
use trellis_middleware::runtime::events::RunEvent;

use crate::acp::updates::Updates;

/// Steps kept per `task` call.
pub const MAX_LINES: usize = 50;

/// One step of a subagent.
#[derive(Debug)]
struct Step {
    call_id: String,
    title: String,
    status: ToolCallStatus,
}

/// The steps of one `task` call.
#[derive(Debug, Default)]
struct Steps {
    subagent_type: String,
    steps: VecDeque<Step>,
    dropped: usize,
}

impl Steps {
    fn text(&self) -> String {
        let mut text = format!("{} subagent:", self.subagent_type);
        if self.dropped > 0 {
            text.push_str(&format!("\n… {} earlier steps", self.dropped));
        }
        for step in &self.steps {
            let status = match step.status {
                ToolCallStatus::InProgress => "running",
                ToolCallStatus::Completed => "done",
                ToolCallStatus::Failed => "failed",
                _ => "waiting",
            };
            text.push_str(&format!("\n- {} ({status})", step.title));
        }
        text
    }
}

/// The subagents' progress in one turn, by the `task` call that started each.
#[derive(Debug)]
pub struct Progress {
    cwd: PathBuf,
    /// Each subagent run's own event translation, by task id.
    children: HashMap<String, Updates>,
    /// The steps shown under each `task` call, by its call id.
    shown: HashMap<String, Steps>,
}

impl Progress {
    /// The progress of a turn of the session rooted at `cwd`.
    pub fn new(cwd: PathBuf) -> Self {
        Self {
            cwd,
            children: HashMap::new(),
            shown: HashMap::new(),
        }
    }

    /// The update of the `task` call `call_id` that `inner` (an event of its subagent) makes, if any.
    pub fn of(
        &mut self,
        call_id: &str,
        task_id: &str,
        subagent_type: &str,
        inner: &RunEvent,
    ) -> Vec<SessionUpdate> {
        let child = self
            .children
            .entry(task_id.to_owned())
            .or_insert_with(|| Updates::new(self.cwd.clone(), task_id.to_owned()));
        let steps = self.shown.entry(call_id.to_owned()).or_default();
        subagent_type.clone_into(&mut steps.subagent_type);
        let mut changed = false;
        for update in child.of(inner) {
            match update {
                SessionUpdate::ToolCall(call) => {
                    if steps.steps.len() >= MAX_LINES {
                        steps.steps.pop_front();
                        steps.dropped += 1;
                    }
                    steps.steps.push_back(Step {
                        call_id: call.tool_call_id.0.to_string(),
                        title: call.title,
                        status: ToolCallStatus::Pending,
                    });
                    changed = true;
                }
                SessionUpdate::ToolCallUpdate(update) => {
                    if let Some(status) = update.fields.status
                        && let Some(step) = steps
                            .steps
                            .iter_mut()
                            .find(|s| s.call_id == update.tool_call_id.0.as_ref())
                    {
                        step.status = status;
                        changed = true;
                    }
                }
                _ => {}
            }
        }
        if !changed {
            return Vec::new();
        }
        let content = ToolCallContent::from(ContentBlock::from(steps.text()));
        vec![SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
            call_id.to_owned(),
            ToolCallUpdateFields::new().content(vec![content]),
        ))]
    }
}
