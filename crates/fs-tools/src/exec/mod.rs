//! The `execute` tool: shell commands in a [`Sandbox`](trellis_backend::Sandbox), over the same
//! files the file tools see, and the [`CommandPolicy`] that restricts them.

mod policy;
mod report;
mod tool;

pub use policy::{CommandPolicy, CommandRule};
pub use tool::{DEFAULT_EXEC_TIMEOUT, ExecuteTool};
