//! [`ModelSettings`]: the typed request settings an agent's model calls carry (`trellis run
//! --temperature …`, `[model_settings]` in the agent file), and [`ModelSettingsMiddleware`], which
//! puts them on every model call of the agent and of its general-purpose subagent.
//!
//! A setting a middleware already put on the request (the summarizer's own output cap, for
//! example) is kept; the settings fill only what the request leaves unset. Whether a provider
//! supports a setting is the provider's decision: Anthropic refuses `reasoning_effort` and the
//! Chat Completions providers refuse `thinking_budget` with a `BadRequest` naming the field, which
//! reaches the user as the run's error rather than being silently dropped.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use trellis_middleware::runtime::context::RunContext;
use trellis_middleware::runtime::model::ReasoningEffort;
use trellis_middleware::{AgentError, Middleware, ModelRequest, ModelResponse, Next, State};

/// Typed settings for every model call; `None` (or empty) leaves the provider's default.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelSettings {
    /// Sampling temperature, 0 to 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 2.0))]
    pub temperature: Option<f32>,
    /// Nucleus sampling, above 0 and at most 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub top_p: Option<f32>,
    /// Cap on output tokens per call (at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_tokens: Option<u32>,
    /// Texts that end the reply when the model writes them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    /// Extended thinking budget in tokens (Anthropic; at least 1024 and below `max_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking_budget: Option<u32>,
    /// Reasoning effort (OpenAI): minimal, low, medium or high.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Effort>")]
    pub reasoning_effort: Option<ReasoningEffort>,
}

/// [`ReasoningEffort`] for the command line and the schema (the middleware crate's type has
/// neither).
#[derive(Debug, Clone, Copy, PartialEq, Eq, JsonSchema)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum Effort {
    Minimal,
    Low,
    Medium,
    High,
}

impl From<Effort> for ReasoningEffort {
    fn from(e: Effort) -> Self {
        match e {
            Effort::Minimal => Self::Minimal,
            Effort::Low => Self::Low,
            Effort::Medium => Self::Medium,
            Effort::High => Self::High,
        }
    }
}

impl ModelSettings {
    /// True when no setting is given.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Check the ranges (the provider checks what is provider-specific); the error names the
    /// setting.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(t) = self.temperature
            && !(0.0..=2.0).contains(&t)
        {
            return Err(format!("temperature must be between 0 and 2, not {t}"));
        }
        if let Some(p) = self.top_p
            && !(p > 0.0 && p <= 1.0)
        {
            return Err(format!("top_p must be above 0 and at most 1, not {p}"));
        }
        if self.max_tokens == Some(0) {
            return Err("max_tokens must be at least 1".to_owned());
        }
        if self.thinking_budget == Some(0) {
            return Err("thinking_budget must be at least 1".to_owned());
        }
        if let Some(i) = self.stop.iter().position(String::is_empty) {
            return Err(format!("stop sequence {} is empty", i + 1));
        }
        Ok(())
    }

    /// These settings with every setting `over` gives replacing this one's (flags over the file).
    pub fn overridden_by(mut self, over: &ModelSettings) -> Self {
        let over = over.clone();
        self.temperature = over.temperature.or(self.temperature);
        self.top_p = over.top_p.or(self.top_p);
        self.max_tokens = over.max_tokens.or(self.max_tokens);
        if !over.stop.is_empty() {
            self.stop = over.stop;
        }
        self.thinking_budget = over.thinking_budget.or(self.thinking_budget);
        self.reasoning_effort = over.reasoning_effort.or(self.reasoning_effort);
        self
    }

    /// Fill what `request` leaves unset.
    pub fn apply(&self, request: &mut ModelRequest) {
        request.temperature = request.temperature.or(self.temperature);
        request.top_p = request.top_p.or(self.top_p);
        request.max_output_tokens = request.max_output_tokens.or(self.max_tokens);
        if request.stop_sequences.is_empty() {
            request.stop_sequences.clone_from(&self.stop);
        }
        request.thinking_budget = request.thinking_budget.or(self.thinking_budget);
        request.reasoning_effort = request.reasoning_effort.or(self.reasoning_effort);
    }
}

/// Puts [`ModelSettings`] on every model call that passes through it.
#[derive(Debug, Clone)]
pub struct ModelSettingsMiddleware(pub ModelSettings);

#[async_trait]
impl Middleware for ModelSettingsMiddleware {
    fn name(&self) -> &str {
        "model_settings"
    }

    async fn wrap_model_call(
        &self,
        mut request: ModelRequest,
        state: &mut State,
        cx: &RunContext,
        next: Next<'_>,
    ) -> Result<ModelResponse, AgentError> {
        self.0.apply(&mut request);
        next.run(request, state, cx).await
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn settings_fill_only_what_the_request_leaves_unset() {
        let settings = ModelSettings {
            temperature: Some(0.3),
            max_tokens: Some(900),
            stop: vec!["END".into()],
            ..ModelSettings::default()
        };
        let mut request = ModelRequest {
            max_output_tokens: Some(4000),
            ..ModelRequest::default()
        };
        settings.apply(&mut request);
        assert_eq!(request.temperature, Some(0.3));
        assert_eq!(
            request.max_output_tokens,
            Some(4000),
            "a middleware's own cap stays"
        );
        assert_eq!(request.stop_sequences, ["END"]);
    }

    #[test]
    fn flags_override_the_file_setting_by_setting() {
        let file = ModelSettings {
            temperature: Some(0.3),
            top_p: Some(0.5),
            stop: vec!["A".into()],
            ..ModelSettings::default()
        };
        let flags = ModelSettings {
            temperature: Some(1.0),
            ..ModelSettings::default()
        };
        let merged = file.overridden_by(&flags);
        assert_eq!(merged.temperature, Some(1.0));
        assert_eq!(merged.top_p, Some(0.5));
        assert_eq!(merged.stop, ["A"]);
    }

    #[test]
    fn out_of_range_settings_are_named() {
        for (settings, needle) in [
            (
                ModelSettings {
                    temperature: Some(2.5),
                    ..Default::default()
                },
                "temperature",
            ),
            (
                ModelSettings {
                    top_p: Some(0.0),
                    ..Default::default()
                },
                "top_p",
            ),
            (
                ModelSettings {
                    max_tokens: Some(0),
                    ..Default::default()
                },
                "max_tokens",
            ),
            (
                ModelSettings {
                    thinking_budget: Some(0),
                    ..Default::default()
                },
                "thinking_budget",
            ),
            (
                ModelSettings {
                    stop: vec![String::new()],
                    ..Default::default()
                },
                "stop",
            ),
        ] {
            let err = settings.validate().unwrap_err();
            assert!(err.contains(needle), "{err}");
        }
        assert!(ModelSettings::default().validate().is_ok());
    }
}
