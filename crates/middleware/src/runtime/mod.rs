//! The runtime every consumer is written against: the agent loop, what a run takes and returns,
//! messages, the model trait, thread state, checkpoints, events, errors, and the middleware
//! protocol. Nothing in here knows about skills, memory or any other consumer.
//!
//! The names a user builds agents with are re-exported at the crate root; the rest of the
//! vocabulary (message parts, model settings, checkpoint records and plumbing, events, interrupts,
//! streaming) is reached through these modules.

pub(crate) mod agent;
pub mod agent_builder;
pub(crate) mod call_ids;
pub mod checkpoint;
pub mod context;
pub mod error;
pub mod events;
pub mod interrupt;
pub mod message;
pub mod message_list;
pub mod middleware;
pub mod model;
pub(crate) mod model_error;
pub(crate) mod random;
pub mod run;
pub mod scripted_model;
pub mod state;
pub(crate) mod step_recovery;
pub mod stream;
pub mod telemetry;
pub(crate) mod tool_set;
pub(crate) mod tool_step;
pub mod tools;
pub mod truncation;
