//! What a run used and cost: model calls, tool calls, tokens by kind, the prompt-cache hit ratio and
//! the cost when the models' prices are known — subagents included. `trellis run` ends with it as
//! a line ([`Summary::line`]); `trellis serve` keeps it in every run record.
//!
//! Prices are list prices in US dollars per million tokens, as of [`PRICES_AS_OF`], matched by the
//! longest model-id prefix; `--prices FILE` overrides or adds entries (a JSON object of model
//! prefix → `{"input", "output", "cache_read", "cache_write"}`). A call whose model has no price
//! makes the cost unknown rather than wrong.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use trellis_middleware::runtime::events::RunEvent;
use trellis_middleware::runtime::model::Usage;

/// When the built-in prices were last checked against the providers' price pages.
pub const PRICES_AS_OF: &str = "2025-11-01";

/// US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Price {
    /// Input billed at the full rate.
    pub input: f64,
    /// Output.
    pub output: f64,
    /// Input read from the prompt cache.
    #[serde(default)]
    pub cache_read: f64,
    /// Input written to the prompt cache.
    #[serde(default)]
    pub cache_write: f64,
}

const fn p(input: f64, output: f64, cache_read: f64, cache_write: f64) -> Price {
    Price {
        input,
        output,
        cache_read,
        cache_write,
    }
}

/// List prices (5-minute cache writes for Anthropic; OpenAI caches without a write charge).
const LIST_PRICES: &[(&str, Price)] = &[
    ("claude-opus-4", p(15.0, 75.0, 1.5, 18.75)),
    ("claude-sonnet-4", p(3.0, 15.0, 0.3, 3.75)),
    ("claude-haiku-4", p(1.0, 5.0, 0.1, 1.25)),
    ("claude-3-5-haiku", p(0.8, 4.0, 0.08, 1.0)),
    ("gpt-5-mini", p(0.25, 2.0, 0.025, 0.0)),
    ("gpt-5-nano", p(0.05, 0.4, 0.005, 0.0)),
    ("gpt-5", p(1.25, 10.0, 0.125, 0.0)),
    ("gpt-4.1-nano", p(0.1, 0.4, 0.025, 0.0)),
    ("gpt-4.1-mini", p(0.4, 1.6, 0.1, 0.0)),
    ("gpt-4.1", p(2.0, 8.0, 0.5, 0.0)),
    ("gpt-4o-mini", p(0.15, 0.6, 0.075, 0.0)),
    ("gpt-4o", p(2.5, 10.0, 1.25, 0.0)),
];

/// Prices by model-id prefix.
#[derive(Debug, Clone)]
pub struct Prices(BTreeMap<String, Price>);

impl Default for Prices {
    fn default() -> Self {
        Self(LIST_PRICES.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect())
    }
}

impl Prices {
    /// The built-in table with `overrides` on top.
    pub fn with(mut self, overrides: BTreeMap<String, Price>) -> Self {
        self.0.extend(overrides);
        self
    }

    /// Read overrides from a JSON file.
    pub fn read_overrides(path: &std::path::Path) -> anyhow::Result<BTreeMap<String, Price>> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
        serde_json::from_str(&text).map_err(|e| {
            anyhow::anyhow!(
                "{} is not a price table ({{\"MODEL\": {{\"input\": …, \"output\": …}}}}): {e}",
                path.display()
            )
        })
    }

    /// The price of `model` (a provider prefix such as `anthropic:` is ignored): the entry with
    /// the longest prefix of it.
    pub fn of(&self, model: &str) -> Option<Price> {
        let model = model.rsplit(':').next().unwrap_or(model);
        self.0
            .iter()
            .filter(|(prefix, _)| model.starts_with(prefix.as_str()))
            .max_by_key(|(prefix, _)| prefix.len())
            .map(|(_, price)| *price)
    }
}

/// What the run's events add up to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    /// Model calls (subagents' included).
    pub model_calls: u64,
    /// Tool calls (subagents' included).
    pub tool_calls: u64,
    /// Tokens.
    pub usage: Usage,
    /// Dollars, while every model had a price.
    pub cost: Option<f64>,
    /// A model without a price, if one was seen.
    pub unpriced: Option<String>,
}

impl Summary {
    /// Count `event` (unwrapping subagent events).
    pub fn add(&mut self, event: &RunEvent, prices: &Prices) {
        match event.innermost().0 {
            RunEvent::ModelFinished { model, usage, .. } => {
                self.model_calls += 1;
                self.usage += *usage;
                if self.unpriced.is_some() {
                    return;
                }
                match prices.of(model) {
                    Some(price) => {
                        let dollars = (usage.input_tokens as f64 * price.input
                            + usage.output_tokens as f64 * price.output
                            + usage.cache_read_tokens as f64 * price.cache_read
                            + usage.cache_write_tokens as f64 * price.cache_write)
                            / 1_000_000.0;
                        self.cost = Some(self.cost.unwrap_or(0.0) + dollars);
                    }
                    None => {
                        self.cost = None;
                        self.unpriced = Some(model.clone());
                    }
                }
            }
            RunEvent::ToolFinished { .. } => self.tool_calls += 1,
            _ => {}
        }
    }

    /// Cached input over all input, when there was input.
    pub fn cache_hit_ratio(&self) -> Option<f64> {
        let total = self.usage.total_input();
        (total > 0).then(|| self.usage.cache_read_tokens as f64 / total as f64)
    }

    /// The one-line summary.
    pub fn line(&self, wall: Duration) -> String {
        let u = &self.usage;
        let hit = match self.cache_hit_ratio() {
            Some(r) => format!("{:.0}%", r * 100.0),
            None => "n/a".to_owned(),
        };
        let cost = match (&self.cost, &self.unpriced) {
            (Some(c), _) => format!("${c:.4} at list prices of {PRICES_AS_OF}"),
            (None, Some(model)) => format!("cost unknown (no price for {model}; see --prices)"),
            (None, None) => "$0".to_owned(),
        };
        format!(
            "done: {} model calls, {} tool calls; tokens: {} input ({} full rate, {} cache read, {} cache write), {} output; cache hit {hit}; {cost}; {:.1}s",
            self.model_calls,
            self.tool_calls,
            u.total_input(),
            u.input_tokens,
            u.cache_read_tokens,
            u.cache_write_tokens,
            u.output_tokens,
            wall.as_secs_f64()
        )
    }

    /// The summary as a JSON event (for `--json`).
    pub fn json(&self, wall: Duration) -> serde_json::Value {
        serde_json::json!({
            "event": "summary",
            "model_calls": self.model_calls,
            "tool_calls": self.tool_calls,
            "usage": self.usage,
            "cache_hit_ratio": self.cache_hit_ratio(),
            "cost_usd": self.cost,
            "prices_as_of": PRICES_AS_OF,
            "wall_seconds": wall.as_secs_f64(),
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use trellis_middleware::tools::SideEffects;

    use super::*;

    fn finished(model: &str, usage: Usage) -> RunEvent {
        RunEvent::ModelFinished {
            step: 0,
            model: model.into(),
            usage,
            stop_reason: Default::default(),
            tool_calls: 0,
            elapsed: Duration::ZERO,
        }
    }

    #[test]
    fn prices_match_the_longest_prefix_and_overrides_win() {
        let prices = Prices::default();
        assert_eq!(prices.of("claude-sonnet-4-5-20250929").unwrap().input, 3.0);
        assert_eq!(prices.of("anthropic:claude-haiku-4-5").unwrap().output, 5.0);
        assert_eq!(prices.of("gpt-4.1-mini").unwrap().input, 0.4, "not gpt-4.1's");
        assert!(prices.of("llama3.2").is_none());
        let custom = prices.with(BTreeMap::from([("llama".to_owned(), p(0.0, 0.0, 0.0, 0.0))]));
        assert_eq!(custom.of("llama3.2").unwrap().input, 0.0);
    }

    #[test]
    fn subagent_calls_count_and_an_unpriced_model_makes_the_cost_unknown() {
        let prices = Prices::default();
        let mut s = Summary::default();
        let usage = Usage {
            input_tokens: 1_000_000,
            output_tokens: 100_000,
            cache_read_tokens: 1_000_000,
            cache_write_tokens: 0,
        };
        s.add(&finished("claude-sonnet-4-5", usage), &prices);
        s.add(
            &RunEvent::Subagent {
                call_id: "t1".into(),
                task_id: "task-1".into(),
                subagent_type: "general-purpose".into(),
                inner: Box::new(RunEvent::ToolFinished {
                    step: 0,
                    call_id: "c".into(),
                    name: "ls".into(),
                    is_error: false,
                    side_effects: SideEffects::ReadOnly,
                    elapsed: Duration::ZERO,
                }),
            },
            &prices,
        );
        assert_eq!((s.model_calls, s.tool_calls), (1, 1));
        // 1M × $3 + 0.1M × $15 + 1M × $0.30
        assert!((s.cost.unwrap() - 4.8).abs() < 1e-9);
        assert_eq!(s.cache_hit_ratio(), Some(0.5));
        let line = s.line(Duration::from_millis(1500));
        assert!(
            line.contains("cache hit 50%") && line.contains("$4.8000") && line.ends_with("1.5s"),
            "{line}"
        );
        s.add(&finished("mystery-model", Usage::default()), &prices);
        assert_eq!(s.cost, None);
        assert!(s.line(Duration::ZERO).contains("no price for mystery-model"));
    }
}
