//! The `execute` tool: shell commands in a [`Sandbox`](trellis_backend::Sandbox), over the same
//! files the file tools see, the [`CommandPolicy`] that restricts them, and the sandboxes that ship
//! ([`sandbox`]).

mod policy;
mod report;
pub mod sandbox;
mod tool;

pub use policy::{CommandPolicy, CommandRule};
pub use tool::{DEFAULT_EXEC_TIMEOUT, ExecuteTool, IDEMPOTENCY_KEY_VAR};
