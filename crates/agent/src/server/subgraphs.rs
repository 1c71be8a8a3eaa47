//! `stream_subgraphs`: a subagent's events as the stream parts of the Agent Server API, under the
//! namespace the clients group them by.
//!
//! A Deep Agents subagent runs inside the parent's `tools` node, so its parts are named
//! `<mode>|tools:<task id>` (`messages|tools:3f1c…`, `values|tools:3f1c…`), a nested subagent's
//! `<mode>|tools:<id>|tools:<id>`. The task id is the one the `tasks` mode gives the `task` call
//! that started it ([`crate::server::introspection`]), derived from the run and the call id. Each
//! subagent's events go through a [`Translator`] of its own over the subagent's thread: `values`
//! (its whole state after each of its checkpoints), `updates` and `messages` (its reply's deltas,
//! with `langgraph_checkpoint_ns` naming the namespace in the metadata).

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};
use trellis_middleware::runtime::events::RunEvent;
use uuid::Uuid;

use crate::server::stream::{Part, Translator};

/// The translators of one run's subagents, by namespace.
#[derive(Debug)]
pub struct Subgraphs {
    run: Uuid,
    metadata: Value,
    translators: HashMap<Arc<str>, Translator>,
    /// Whether a subagent past [`MAX_SUBAGENTS`] was met (warned once).
    capped: bool,
}

/// Most subagent translators one run keeps (a run's `task` calls are bounded by its steps; this
/// bounds what a runaway run can hold).
const MAX_SUBAGENTS: usize = 1024;

impl Subgraphs {
    /// For run `run`, whose `messages` parts carry `metadata`.
    pub fn new(run: Uuid, metadata: Value) -> Self {
        Self {
            run,
            metadata,
            translators: HashMap::new(),
            capped: false,
        }
    }

    /// The parts of `event`, an event of the run (`Subagent` wrappers are unwrapped; the run's own
    /// events give none here).
    pub fn event(&mut self, event: &RunEvent) -> Vec<Part> {
        let (inner, path) = event.innermost();
        let Some((_, task_thread, _)) = path.last() else {
            return Vec::new();
        };
        let namespace: Arc<str> = path
            .iter()
            .map(|(call, _, _)| {
                format!(
                    "tools:{}",
                    Uuid::new_v5(&self.run, format!("tools:{call}").as_bytes())
                )
            })
            .collect::<Vec<_>>()
            .join("|")
            .into();
        if !self.translators.contains_key(&namespace) && self.translators.len() >= MAX_SUBAGENTS {
            if !self.capped {
                self.capped = true;
                tracing::warn!(
                    "run {}: more than {MAX_SUBAGENTS} subagents; the events of the others are not streamed",
                    self.run
                );
            }
            return Vec::new();
        }
        let translator = self.translators.entry(namespace.clone()).or_insert_with(|| {
            let thread = Uuid::new_v5(&self.run, format!("thread:{task_thread}").as_bytes());
            let mut translator = Translator::new(thread, 0, self.metadata.clone());
            translator.metadata("langgraph_checkpoint_ns", json!(&*namespace));
            translator
        });
        let parts = match inner {
            RunEvent::ModelStarted { step, messages, .. } => {
                translator.reply_started(*step, *messages);
                Vec::new()
            }
            RunEvent::ModelDelta { delta, .. } => translator.delta(delta).into_iter().collect(),
            RunEvent::CheckpointSaved { state, .. } => match state.get().map(|s| s.public_view()) {
                Some(Ok(state)) => translator.checkpoint(&state),
                _ => Vec::new(),
            },
            _ => Vec::new(),
        };
        parts
            .into_iter()
            .map(|mut part| {
                part.namespace = Some(namespace.clone());
                part
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use trellis_middleware::runtime::stream::ModelDelta;

    use super::*;

    /// A text delta of the subagent started by call `call`.
    fn delta_of(call: usize) -> RunEvent {
        RunEvent::Subagent {
            call_id: format!("call-{call}"),
            task_id: format!("task-{call}"),
            subagent_type: "general-purpose".to_owned(),
            inner: Box::new(RunEvent::ModelDelta {
                step: 0,
                delta: ModelDelta::Text {
                    index: 0,
                    text: "hi".to_owned(),
                },
            }),
        }
    }

    #[test]
    fn past_the_cap_new_subagents_stream_nothing_and_known_ones_go_on() {
        let mut subgraphs = Subgraphs::new(Uuid::new_v4(), json!({}));
        for call in 0..MAX_SUBAGENTS {
            let parts = subgraphs.event(&delta_of(call));
            assert_eq!(parts.len(), 1, "subagent {call} streams");
        }
        assert!(subgraphs.event(&delta_of(MAX_SUBAGENTS)).is_empty());
        assert_eq!(subgraphs.translators.len(), MAX_SUBAGENTS);
        let again = subgraphs.event(&delta_of(7));
        assert_eq!(again.len(), 1, "a subagent met before the cap still streams");
        assert!(again[0].data.contains("\"hi\""), "{}", again[0].data);
        assert!(
            again[0]
                .namespace
                .as_deref()
                .is_some_and(|n| n.starts_with("tools:"))
        );
    }

    #[test]
    fn the_run_own_events_give_no_subgraph_parts() {
        let mut subgraphs = Subgraphs::new(Uuid::new_v4(), json!({}));
        let own = RunEvent::ModelDelta {
            step: 0,
            delta: ModelDelta::Text {
                index: 0,
                text: "hi".to_owned(),
            },
        };
        assert!(subgraphs.event(&own).is_empty());
        assert!(subgraphs.translators.is_empty());
    }
}
