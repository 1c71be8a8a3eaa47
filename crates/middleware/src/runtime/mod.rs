//! The runtime every consumer is written against: the agent loop, what a run takes and returns,
//! messages, the model trait, thread state, checkpoints, events, errors, and the middleware
//! protocol. Nothing in here knows about skills, memory or any other consumer.

pub(crate) mod agent;
pub(crate) mod agent_builder;
pub(crate) mod call_ids;
pub(crate) mod checkpoint;
pub(crate) mod context;
pub(crate) mod error;
pub(crate) mod events;
pub mod interrupt;
pub(crate) mod message;
pub(crate) mod message_list;
pub(crate) mod middleware;
pub(crate) mod model;
pub(crate) mod model_error;
pub(crate) mod run;
pub(crate) mod scripted_model;
pub(crate) mod state;
pub(crate) mod stream;
pub mod telemetry;
pub(crate) mod tool_step;
pub(crate) mod tools;
pub(crate) mod truncation;
pub(crate) mod util;
