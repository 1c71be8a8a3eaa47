//! [`TokenUsageMiddleware`]: cumulative token usage per thread, in state.

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::runtime::context::RunContext;
use crate::runtime::error::AgentError;
use crate::runtime::middleware::Middleware;
use crate::runtime::model::{ModelResponse, Usage};
use crate::runtime::state::{Slot, State};

/// A thread's token usage, across all its runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenUsage {
    /// Sum over every model call of the thread.
    pub total: Usage,
    /// The last call's usage (what the provider reported for the latest prompt).
    pub last: Option<Usage>,
    /// Model calls counted.
    pub model_calls: u64,
    /// Sums per model id (several models can serve one thread).
    pub by_model: BTreeMap<String, Usage>,
}

/// The public slot the middleware keeps [`TokenUsage`] in.
pub static TOKEN_USAGE: Slot<TokenUsage> = Slot::public("token_usage");

/// Adds every model call's usage to the thread's [`TOKEN_USAGE`] slot.
#[derive(Debug, Clone, Copy, Default)]
pub struct TokenUsageMiddleware;

impl TokenUsageMiddleware {
    /// The middleware.
    pub fn new() -> Self {
        Self
    }
}

#[async_trait]
impl Middleware for TokenUsageMiddleware {
    fn name(&self) -> &str {
        "token_usage"
    }

    async fn after_model(
        &self,
        response: &mut ModelResponse,
        state: &mut State,
        cx: &RunContext,
    ) -> Result<(), AgentError> {
        let usage = response.usage;
        let model = response
            .model
            .clone()
            .unwrap_or_else(|| cx.model().id().to_owned());
        state.update(&TOKEN_USAGE, |t| {
            t.total += usage;
            t.last = Some(usage);
            t.model_calls += 1;
            *t.by_model.entry(model).or_default() += usage;
        })?;
        Ok(())
    }
}
