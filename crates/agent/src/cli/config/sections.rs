//! The agent file's tables that are also saved with a run ([`RunConfig`](crate::cli::config::RunConfig)):
//! permissions, summarization, file-tool limits and subagents. Each says what it maps to in the
//! builder; nothing here adds behaviour the runtime lacks.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use trellis_middleware::summarization::{SummarizationConfig, Threshold};
use trellis_middleware::tools::{Access, Effect, Limits, PermissionRule};

/// One file-tool permission rule (`[[permissions]]`), evaluated after the built-in rule that keeps
/// skill sources read-only; the first matching rule decides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PermissionSpec {
    /// An absolute glob on the agent's paths, e.g. `/workspace/secrets/**`.
    pub pattern: String,
    /// The operations it covers: `read`, `write` or both.
    #[schemars(with = "Vec<Operation>")]
    pub operations: Vec<Access>,
    /// `allow` or `deny` (default `deny`).
    #[serde(default = "deny")]
    #[schemars(with = "EffectSchema")]
    pub effect: Effect,
}

fn deny() -> Effect {
    Effect::Deny
}

#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
enum Operation {
    Read,
    Write,
}

#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
enum EffectSchema {
    Allow,
    Deny,
}

impl PermissionSpec {
    /// The rule (a relative pattern, `..` or no operations is an error naming the pattern).
    pub fn rule(&self) -> Result<PermissionRule, String> {
        PermissionRule::new(&self.pattern, &self.operations, self.effect).map_err(|e| e.to_string())
    }
}

/// `[summarization]`: when old messages are condensed (on by default).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SummarizationSettings {
    /// Condense long threads (default true); false lets long runs fail at the context window.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Start at this many estimated tokens (instead of a fraction of the context window).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold_tokens: Option<u64>,
    /// Start at this fraction of the context window, above 0 and at most 1 (default 0.75).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold_fraction: Option<f64>,
    /// Messages kept after a summary (default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_messages: Option<usize>,
    /// Tool results above this many estimated tokens are offloaded to files (default 500).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_result_token_limit: Option<u64>,
}

fn yes() -> bool {
    true
}

impl Default for SummarizationSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            threshold_tokens: None,
            threshold_fraction: None,
            keep_messages: None,
            tool_result_token_limit: None,
        }
    }
}

impl SummarizationSettings {
    /// The middleware's configuration, or `None` when turned off; a bad value is an error naming
    /// its key.
    pub fn config(&self) -> Result<Option<SummarizationConfig>, (&'static str, String)> {
        if !self.enabled {
            return Ok(None);
        }
        let mut config = SummarizationConfig::default();
        match (self.threshold_tokens, self.threshold_fraction) {
            (Some(_), Some(_)) => {
                return Err((
                    "threshold_fraction",
                    "give threshold_tokens or threshold_fraction, not both".to_owned(),
                ));
            }
            (Some(0), None) => return Err(("threshold_tokens", "must be at least 1".to_owned())),
            (Some(n), None) => config.threshold = Threshold::Tokens(n),
            (None, Some(f)) if !(f > 0.0 && f <= 1.0) => {
                return Err((
                    "threshold_fraction",
                    format!("must be above 0 and at most 1, not {f}"),
                ));
            }
            (None, Some(f)) => config.threshold = Threshold::Fraction(f),
            (None, None) => {}
        }
        if let Some(n) = self.keep_messages {
            config.keep_messages = n;
        }
        match self.tool_result_token_limit {
            Some(0) => return Err(("tool_result_token_limit", "must be at least 1".to_owned())),
            Some(n) => config.tool_result_token_limit = n,
            None => {}
        }
        Ok(Some(config))
    }
}

/// `[limits]`: output and eviction limits of the file tools (defaults in the comments).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitsSettings {
    /// Most characters `read_file`, `ls`, `glob` and `grep` return (default 80000; at least 2000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_chars: Option<usize>,
    /// Largest file `read_file` and `edit_file` load, in bytes (default 10 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_file_bytes: Option<u64>,
    /// Tool results longer than this many characters are saved to a file (default 80000; 0 turns
    /// eviction off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evict_over_chars: Option<usize>,
}

impl LimitsSettings {
    /// The file tools' limits, or `None` when nothing is set.
    pub fn limits(&self) -> Option<Limits> {
        if *self == Self::default() {
            return None;
        }
        let mut limits = Limits::default();
        if let Some(n) = self.output_chars {
            limits.output_chars = n;
        }
        if let Some(n) = self.max_file_bytes {
            limits.max_file_bytes = n;
        }
        if let Some(n) = self.evict_over_chars {
            limits.evict_over_chars = (n > 0).then_some(n);
        }
        Some(limits)
    }
}

/// `[[subagents]]`: a subagent the `task` tool can start, besides the general-purpose one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SubagentConfig {
    /// The `subagent_type` the model passes to `task` (letters, digits, `-`, `_`).
    pub name: String,
    /// What it is for, shown to the main agent.
    pub description: String,
    /// Its system prompt.
    pub prompt: String,
    /// Its model string (default: the main agent's model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The main agent's tools it may use, by name (default: all the file tools and `execute`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// Skills sources of its own (paths relative to the agent file, or object-store URLs),
    /// mounted beside the main agent's; only this subagent's catalog lists them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skills: Vec<String>,
}
