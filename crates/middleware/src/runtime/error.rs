//! [`AgentError`]: why a run stopped.

use crate::runtime::checkpoint::CheckpointError;
use crate::runtime::context::ThreadId;
use crate::runtime::interrupt::DecisionError;
use crate::runtime::model::ModelError;
use crate::runtime::state::StateError;

/// Boxed error source.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a run stopped without finishing. Tool failures are never here: they become error results
/// the model reads.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// The model call failed (after any retries).
    #[error("model call failed: {0}")]
    Model(#[from] ModelError),
    /// The run made its maximum number of model calls without finishing. The thread's checkpoint
    /// holds everything up to the last step, so the run can be continued.
    #[error("step limit reached: {limit} model calls in one run of thread {thread_id} without finishing")]
    StepLimit {
        /// The limit.
        limit: u32,
        /// The thread.
        thread_id: ThreadId,
    },
    /// The model's replies kept stopping at the output token limit in the middle of a tool call
    /// (the loop asked it again, a bounded number of times): none of those calls was run. The thread's
    /// checkpoint holds the replies (calls replaced by notes) and the notices the model was sent.
    #[error(
        "the model's reply was cut off at the output token limit while calling {} ({attempts} times in a row in thread {thread_id}); no cut-off call was run: raise max_output_tokens or ask for smaller steps",
        .tools.join(", ")
    )]
    TruncatedToolCall {
        /// The tools the last truncated reply was calling.
        tools: Vec<String>,
        /// Truncated replies in a row.
        attempts: u32,
        /// The thread.
        thread_id: ThreadId,
    },
    /// Loading or saving the thread's checkpoint failed (including a conflict with another writer).
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// A state slot could not be read or written.
    #[error(transparent)]
    State(#[from] StateError),
    /// A middleware stopped the run.
    #[error("middleware {middleware} failed: {source}")]
    Middleware {
        /// The middleware's name.
        middleware: String,
        /// Why.
        #[source]
        source: BoxError,
    },
    /// Decisions for a waiting step were refused (nothing changed), or a waiting thread got new
    /// messages instead of decisions.
    #[error(transparent)]
    Decision(#[from] DecisionError),
    /// The run was cancelled by its caller ([`Agent::run_until`](crate::Agent::run_until)) before
    /// it finished. The thread keeps its last checkpoint: every step saved before the cancellation
    /// is there whole, the step in progress is not there at all (a model reply being streamed is
    /// dropped; tool calls that had not answered get cancellation results on the next run).
    #[error("the run of thread {thread_id} was cancelled; the thread keeps its last checkpoint")]
    Cancelled {
        /// The thread.
        thread_id: ThreadId,
    },
    /// The agent is configured inconsistently (e.g. two tools share a name).
    #[error("invalid agent configuration: {0}")]
    Config(String),
}

impl AgentError {
    /// A [`AgentError::Middleware`].
    pub fn middleware(middleware: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Self::Middleware {
            middleware: middleware.into(),
            source: source.into(),
        }
    }

    /// True when the caller cancelled the run ([`AgentError::Cancelled`]).
    pub fn is_cancelled(&self) -> bool {
        matches!(self, Self::Cancelled { .. })
    }

    /// True when another writer updated the thread's checkpoint first.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::Checkpoint(CheckpointError::Conflict { .. }))
    }
}
