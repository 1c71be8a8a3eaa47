//! The core middlewares.

mod filesystem;
pub(crate) mod patch_tool_calls;
mod prompt_caching;
mod retry;
mod todo;
mod token_usage;

pub use filesystem::{EXECUTE_LINE, FILESYSTEM_SECTION, FilesystemMiddleware};
pub use patch_tool_calls::PatchToolCallsMiddleware;
pub use prompt_caching::PromptCachingMiddleware;
pub use retry::{ModelRetryMiddleware, RetryConfig};
pub use todo::{TODOS, Todo, TodoListMiddleware, TodoStatus, WriteTodosTool};
pub use token_usage::{TOKEN_USAGE, TokenUsage, TokenUsageMiddleware};
