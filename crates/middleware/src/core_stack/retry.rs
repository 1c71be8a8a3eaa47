//! [`ModelRetryMiddleware`]: retry transient model errors with exponential backoff and jitter.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;

use crate::runtime::context::RunContext;
use crate::runtime::error::AgentError;
use crate::runtime::middleware::{Middleware, Next};
use crate::runtime::model::{ModelError, ModelRequest, ModelResponse};
use crate::runtime::random::{SplitMix, random_seed};
use crate::runtime::state::State;

/// Retry settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryConfig {
    /// Retries after the first attempt (0 disables retrying).
    pub max_retries: u32,
    /// Delay before the first retry.
    pub initial_delay: Duration,
    /// Each retry waits this many times longer than the previous one.
    pub multiplier: f64,
    /// Cap on the backoff delay (a provider's retry-after is honoured even when longer).
    pub max_delay: Duration,
    /// Random reduction of each delay, as a fraction in `[0, 1]`: the delay is multiplied by a factor
    /// drawn uniformly from `[1 - jitter, 1]`, so concurrent clients spread out. 0 gives exact delays.
    pub jitter: f64,
    /// Wait at least as long as the provider's retry-after, when it sends one.
    pub respect_retry_after: bool,
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self {
            max_retries: 3,
            initial_delay: Duration::from_secs(1),
            multiplier: 2.0,
            max_delay: Duration::from_secs(60),
            jitter: 0.25,
            respect_retry_after: true,
        }
    }
}

/// Retries model calls that fail with a transient error ([`ModelError::is_transient`]: rate limits,
/// overload, transport failures); every other error surfaces at once. Each retry is reported as a
/// middleware event of kind `retry`. When the retries run out, the last error surfaces.
///
/// Sleeps with `tokio::time`, so tests can run it on a paused clock.
#[derive(Debug)]
pub struct ModelRetryMiddleware {
    config: RetryConfig,
    rng: SplitMix,
}

impl Default for ModelRetryMiddleware {
    fn default() -> Self {
        Self::new(RetryConfig::default())
    }
}

impl ModelRetryMiddleware {
    /// Retry with `config`.
    pub fn new(config: RetryConfig) -> Self {
        Self {
            config,
            rng: SplitMix::new(random_seed()),
        }
    }

    /// Draw jitter from a fixed seed (reproducible delays).
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.rng = SplitMix::new(seed);
        self
    }

    /// The settings.
    pub fn config(&self) -> &RetryConfig {
        &self.config
    }

    /// The delay before retry number `retry` (0-based) after `error`.
    pub fn delay(&self, retry: u32, error: &ModelError) -> Duration {
        let c = &self.config;
        let exp = c.multiplier.max(1.0).powi(retry.min(64) as i32);
        let base = c.initial_delay.as_secs_f64() * exp;
        let capped = base.min(c.max_delay.as_secs_f64());
        let jitter = c.jitter.clamp(0.0, 1.0);
        let factor = 1.0 - jitter * self.rng.next_f64();
        let mut delay = Duration::from_secs_f64((capped * factor).max(0.0));
        if c.respect_retry_after
            && let Some(after) = error.retry_after()
        {
            delay = delay.max(after);
        }
        delay
    }
}

#[async_trait]
impl Middleware for ModelRetryMiddleware {
    fn name(&self) -> &str {
        "model_retry"
    }

    async fn wrap_model_call(
        &self,
        request: ModelRequest,
        state: &mut State,
        cx: &RunContext,
        next: Next<'_>,
    ) -> Result<ModelResponse, AgentError> {
        if self.config.max_retries == 0 {
            return next.run(request, state, cx).await;
        }
        let mut retry = 0;
        loop {
            let error = match next.run(request.clone(), state, cx).await {
                Err(AgentError::Model(error)) if error.is_transient() && retry < self.config.max_retries => {
                    error
                }
                other => return other,
            };
            let delay = self.delay(retry, &error);
            retry += 1;
            tracing::warn!(retry, delay_ms = delay.as_millis() as u64, %error, "retrying model call");
            cx.emit_middleware(self.name(), "retry", || {
                json!({
                    "retry": retry,
                    "max_retries": self.config.max_retries,
                    "delay_ms": delay.as_millis() as u64,
                    "error": error.to_string(),
                })
            });
            tokio::time::sleep(delay).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_cap_and_jitter_within_bounds() {
        let m = ModelRetryMiddleware::new(RetryConfig {
            jitter: 0.0,
            ..RetryConfig::default()
        });
        let err = ModelError::Transport {
            message: "x".into(),
            http: None,
        };
        let secs: Vec<f64> = (0..8).map(|i| m.delay(i, &err).as_secs_f64()).collect();
        assert_eq!(secs, [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]);

        let m = ModelRetryMiddleware::new(RetryConfig {
            jitter: 0.5,
            ..RetryConfig::default()
        })
        .with_seed(7);
        for _ in 0..200 {
            let d = m.delay(1, &err).as_secs_f64();
            assert!((1.0..=2.0).contains(&d), "{d}");
        }

        let limited = ModelError::RateLimited {
            message: "slow down".into(),
            retry_after: Some(Duration::from_secs(90)),
            http: None,
        };
        assert_eq!(m.delay(0, &limited), Duration::from_secs(90));
    }
}
