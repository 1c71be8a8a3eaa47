//! [`PromptCachingMiddleware`]: cache breakpoints after the stable system prompt and the conversation.

use async_trait::async_trait;

use crate::runtime::context::RunContext;
use crate::runtime::error::AgentError;
use crate::runtime::message::CacheTtl;
use crate::runtime::middleware::{Middleware, Next};
use crate::runtime::model::{ModelRequest, ModelResponse};
use crate::runtime::state::State;

/// Places cache breakpoints for models that declare prompt caching; does nothing for others.
///
/// * On the last system block present when it runs — so put it after the middlewares whose blocks
///   are stable (instructions, skills) and before those whose blocks change (memory): everything up
///   to the breakpoint is then byte-identical from call to call and served from the cache.
/// * Optionally on the last message, so each call reads the previous call's conversation prefix from
///   the cache.
///
/// It never exceeds the model's breakpoint limit (counting those already in the request), and the
/// loop trims any request that does to the earliest breakpoints.
#[derive(Debug, Clone, Copy)]
pub struct PromptCachingMiddleware {
    ttl: CacheTtl,
    cache_conversation: bool,
}

impl Default for PromptCachingMiddleware {
    fn default() -> Self {
        Self {
            ttl: CacheTtl::FiveMinutes,
            cache_conversation: true,
        }
    }
}

impl PromptCachingMiddleware {
    /// Five-minute breakpoints on the system prompt and the conversation.
    pub fn new() -> Self {
        Self::default()
    }

    /// Use this lifetime for the breakpoints it places.
    pub fn with_ttl(mut self, ttl: CacheTtl) -> Self {
        self.ttl = ttl;
        self
    }

    /// Also mark the last message (default true).
    pub fn cache_conversation(mut self, on: bool) -> Self {
        self.cache_conversation = on;
        self
    }
}

#[async_trait]
impl Middleware for PromptCachingMiddleware {
    fn name(&self) -> &str {
        "prompt_caching"
    }

    async fn wrap_model_call(
        &self,
        mut request: ModelRequest,
        state: &mut State,
        cx: &RunContext,
        next: Next<'_>,
    ) -> Result<ModelResponse, AgentError> {
        let caps = next.model().capabilities();
        if caps.prompt_caching {
            let max = caps.max_cache_breakpoints as usize;
            if request.cache_breakpoints() < max {
                request.mark_system_breakpoint(self.ttl);
            }
            if self.cache_conversation
                && request.cache_breakpoints() < max
                && let Some(last) = request.messages.last_mut()
            {
                last.meta_mut().cache_breakpoint.get_or_insert(self.ttl);
            }
        }
        next.run(request, state, cx).await
    }
}
