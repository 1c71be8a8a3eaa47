//! [`RunInput`] and [`RunOutput`]: what a caller hands to a run and gets back.

use serde_json::Value;

use crate::runtime::checkpoint::CheckpointVersion;
use crate::runtime::context::{Extensions, ThreadId};
use crate::runtime::events::EventSink;
use crate::runtime::interrupt::{Decisions, Interrupt};
use crate::runtime::message::Message;
use crate::runtime::message_list::Messages;
use crate::runtime::model::{StopReason, Usage};
use crate::runtime::state::{PublicState, Slot, SlotValue, State, StateUpdates};

/// One run's input: which thread, new messages, slot values, run context and event sink.
#[derive(Debug, Default)]
pub struct RunInput {
    pub(crate) thread_id: Option<ThreadId>,
    pub(crate) messages: Vec<Message>,
    pub(crate) updates: StateUpdates,
    pub(crate) json_slots: Vec<(String, Value)>,
    pub(crate) extensions: Extensions,
    pub(crate) events: EventSink,
    pub(crate) max_steps: Option<u32>,
    pub(crate) decisions: Option<Decisions>,
}

impl RunInput {
    /// No messages, a new thread.
    pub fn new() -> Self {
        Self::default()
    }

    /// A new thread starting with one user message.
    pub fn human(text: impl Into<String>) -> Self {
        Self::new().message(Message::human(text))
    }

    /// Continue a thread that stopped for decisions ([`RunOutput::interrupt`]) with these; name
    /// the thread with [`thread`](Self::thread). The run refuses decisions that do not answer
    /// exactly the waiting requests, and a waiting thread refuses input without decisions.
    pub fn resume(decisions: Decisions) -> Self {
        Self {
            decisions: Some(decisions),
            ..Self::default()
        }
    }

    /// Continue this thread (or start it under this id when it does not exist).
    pub fn thread(mut self, thread_id: ThreadId) -> Self {
        self.thread_id = Some(thread_id);
        self
    }

    /// Append a message to the thread before the run starts.
    pub fn message(mut self, message: Message) -> Self {
        self.messages.push(message);
        self
    }

    /// Set a slot before the run starts (e.g. a rubric, pinned skills).
    pub fn slot<T: SlotValue>(mut self, slot: &Slot<T>, value: T) -> Self {
        self.updates.set(slot, value);
        self
    }

    /// Set a public slot from JSON (as a CLI or HTTP caller would); it is typed on first access.
    pub fn slot_json(mut self, name: impl Into<String>, value: Value) -> Self {
        self.json_slots.push((name.into(), value));
        self
    }

    /// Add a value of the run context (identity, roles, service handles); see [`Extensions`].
    pub fn extension<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.extensions.insert(value);
        self
    }

    /// Send the run's events here.
    pub fn events(mut self, sink: EventSink) -> Self {
        self.events = sink;
        self
    }

    /// Override the agent's step limit (model calls) for this run.
    pub fn max_steps(mut self, max_steps: u32) -> Self {
        self.max_steps = Some(max_steps);
        self
    }

    pub(crate) fn apply_slots(&mut self, state: &mut State) {
        state.apply(std::mem::take(&mut self.updates));
        for (name, value) in self.json_slots.drain(..) {
            state.set_json(name, false, value);
        }
    }
}

/// What a finished run returns. Private slots are never part of it.
#[derive(Debug, Clone)]
pub struct RunOutput {
    /// The thread (pass it to the next run to continue).
    pub thread_id: ThreadId,
    /// This run's id.
    pub run_id: String,
    /// The thread's messages and public slots after the run.
    pub state: PublicState,
    /// Index in `state.messages` of the first message this run added (its input included).
    pub first_new_message: usize,
    /// Model calls made.
    pub model_calls: u32,
    /// Token usage of this run.
    pub usage: Usage,
    /// The last structured answer, when the agent asked for one.
    pub structured_output: Option<Value>,
    /// Why the run's last model call stopped: [`StopReason::Refusal`] when the provider refused
    /// (Anthropic `stop_reason: "refusal"`, OpenAI `refusal` / `content_filter`), so a caller can
    /// tell a refusal from an answer.
    pub stop_reason: StopReason,
    /// The version of the thread's latest checkpoint, when the agent has a checkpointer.
    pub checkpoint: Option<CheckpointVersion>,
    /// Set when the run stopped before tool calls ran, to wait for decisions on them: resume the
    /// thread with [`RunInput::resume`]. The run has not finished then, and
    /// [`final_text`](Self::final_text) is not an answer.
    pub interrupt: Option<Interrupt>,
}

impl RunOutput {
    /// The messages this run added.
    pub fn new_messages(&self) -> Messages {
        self.state.messages.slice(self.first_new_message..)
    }

    /// True when the run stopped to wait for decisions.
    pub fn is_interrupted(&self) -> bool {
        self.interrupt.is_some()
    }

    /// The text of the last AI message.
    pub fn final_text(&self) -> Option<String> {
        self.state
            .messages
            .iter()
            .rev()
            .find_map(|m| m.as_ai().map(|ai| ai.text_content()))
    }
}
