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
