//! What a served run used and cost, kept in its run record (a Trellis extension of the Agent
//! Server's `Run`, in the spirit of Yuxi's `agent_runs`): when it started and ended, its model and
//! tool calls, tokens by kind, the prompt-cache hit ratio and the cost at list prices (see
//! [`crate::usage`]) — subagents included — and one entry per subagent run it started (`task`
//! calls) with the same numbers for that subagent alone.
//!
//! Built from the run's events as they come ([`RunUsage::add`]), so a run in progress shows what
//! it used so far. It belongs to the run (and so to its thread and user); it lives as long as the
//! run's record, in memory (a restart forgets it, as it forgets the record).

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use trellis_middleware::runtime::events::RunEvent;

use crate::usage::{PRICES_AS_OF, Prices, Summary};

/// Subagent runs kept per run; more are counted in the run's totals but not listed.
pub const MAX_SUBAGENT_RUNS: usize = 256;

/// Tool calls whose timing a run keeps (its own and its subagents'); more are counted in the
/// run's totals but not listed.
pub const MAX_TOOL_RUNS: usize = 1024;

/// One finished tool call: its id, the `task` call it ran under (a subagent's call), its tool,
/// whether it failed and how long it took (`wrap_tool_call` chain included).
#[derive(Debug, Clone)]
struct ToolRun {
    call_id: String,
    parent_call_id: Option<String>,
    name: String,
    is_error: bool,
    elapsed: std::time::Duration,
}

/// One subagent run (a `task` call of the run's own agent).
#[derive(Debug, Clone)]
struct SubagentRun {
    call_id: String,
    task_id: Option<String>,
    subagent_type: Option<String>,
    started_at: DateTime<Utc>,
    ended_at: Option<DateTime<Utc>>,
    /// `running`, `success` or `error`.
    status: &'static str,
    summary: Summary,
}

/// What a run used so far.
#[derive(Debug, Default)]
pub struct RunUsage {
    started_at: Option<DateTime<Utc>>,
    ended_at: Option<DateTime<Utc>>,
    total: Summary,
    subagents: Vec<SubagentRun>,
    tools: Vec<ToolRun>,
}

fn time(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// The numbers of `summary`, as the record shows them.
fn numbers(summary: &Summary) -> Value {
    let u = &summary.usage;
    json!({
        "model_calls": summary.model_calls,
        "tool_calls": summary.tool_calls,
        "input_tokens": u.total_input(),
        "uncached_input_tokens": u.input_tokens,
        "cache_read_tokens": u.cache_read_tokens,
        "cache_write_tokens": u.cache_write_tokens,
        "output_tokens": u.output_tokens,
        "cache_hit_ratio": summary.cache_hit_ratio(),
        "cost_usd": summary.cost,
        "unpriced_model": summary.unpriced,
    })
}

impl RunUsage {
    /// The run started working.
    pub fn started(&mut self) {
        self.started_at.get_or_insert_with(Utc::now);
    }

    /// The run ended.
    pub fn ended(&mut self) {
        self.ended_at.get_or_insert_with(Utc::now);
    }

    /// Count `event` of the run (a subagent's events arrive wrapped in `RunEvent::Subagent`).
    pub fn add(&mut self, event: &RunEvent, prices: &Prices) {
        self.total.add(event, prices);
        match event {
            RunEvent::ToolStarted { call_id, name, .. }
                if name == "task" && self.subagents.len() < MAX_SUBAGENT_RUNS =>
            {
                self.subagents.push(SubagentRun {
                    call_id: call_id.clone(),
                    task_id: None,
                    subagent_type: None,
                    started_at: Utc::now(),
                    ended_at: None,
                    status: "running",
                    summary: Summary::default(),
                });
            }
            RunEvent::ToolFinished {
                call_id,
                is_error,
                name,
                elapsed,
                ..
            } => {
                self.tool_ran(call_id, None, name, *is_error, *elapsed);
                if let Some(sub) = self.subagent(call_id) {
                    sub.ended_at = Some(Utc::now());
                    sub.status = if *is_error { "error" } else { "success" };
                }
            }
            RunEvent::Subagent {
                call_id,
                task_id,
                subagent_type,
                inner,
            } => {
                if let RunEvent::ToolFinished {
                    call_id: inner_call,
                    name,
                    is_error,
                    elapsed,
                    ..
                } = &**inner
                {
                    self.tool_ran(inner_call, Some(call_id), name, *is_error, *elapsed);
                }
                if let Some(sub) = self.subagent(call_id) {
                    sub.task_id.get_or_insert_with(|| task_id.clone());
                    sub.subagent_type.get_or_insert_with(|| subagent_type.clone());
                    sub.summary.add(inner, prices);
                }
            }
            _ => {}
        }
    }

    fn tool_ran(
        &mut self,
        call_id: &str,
        parent: Option<&str>,
        name: &str,
        is_error: bool,
        elapsed: std::time::Duration,
    ) {
        if self.tools.len() < MAX_TOOL_RUNS {
            self.tools.push(ToolRun {
                call_id: call_id.to_owned(),
                parent_call_id: parent.map(str::to_owned),
                name: name.to_owned(),
                is_error,
                elapsed,
            });
        }
    }

    fn subagent(&mut self, call_id: &str) -> Option<&mut SubagentRun> {
        self.subagents.iter_mut().rev().find(|s| s.call_id == call_id)
    }

    /// The fields this adds to the `Run` JSON: `started_at`, `ended_at`, `usage`,
    /// `subagent_runs` and `tool_runs` (each finished tool call's `call_id`, `parent_call_id`
    /// (the `task` call of the subagent that made it, else null), `name`, `status` (`success` or
    /// `error`) and `duration_ms`).
    pub fn fields(&self) -> [(&'static str, Value); 5] {
        let mut usage = numbers(&self.total);
        usage["prices_as_of"] = json!(PRICES_AS_OF);
        let subagents: Vec<Value> = self
            .subagents
            .iter()
            .map(|s| {
                json!({
                    "call_id": s.call_id,
                    "task_id": s.task_id,
                    "subagent_type": s.subagent_type,
                    "status": s.status,
                    "started_at": time(&s.started_at),
                    "ended_at": s.ended_at.as_ref().map(time),
                    "usage": numbers(&s.summary),
                })
            })
            .collect();
        let tools: Vec<Value> = self
            .tools
            .iter()
            .map(|t| {
                json!({
                    "call_id": t.call_id,
                    "parent_call_id": t.parent_call_id,
                    "name": t.name,
                    "status": if t.is_error { "error" } else { "success" },
                    "duration_ms": u64::try_from(t.elapsed.as_millis()).unwrap_or(u64::MAX),
                })
            })
            .collect();
        [
            ("started_at", json!(self.started_at.as_ref().map(time))),
            ("ended_at", json!(self.ended_at.as_ref().map(time))),
            ("usage", usage),
            ("subagent_runs", json!(subagents)),
            ("tool_runs", json!(tools)),
        ]
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::time::Duration;

    use trellis_middleware::runtime::model::{StopReason, Usage};
    use trellis_middleware::tools::SideEffects;

    use super::*;

    fn model_call(model: &str, input: u64, output: u64) -> RunEvent {
        RunEvent::ModelFinished {
            step: 0,
            model: model.into(),
            usage: Usage {
                input_tokens: input,
                output_tokens: output,
                ..Usage::default()
            },
            stop_reason: StopReason::EndTurn,
            tool_calls: 0,
            elapsed: Duration::ZERO,
        }
    }

    fn in_subagent(call_id: &str, inner: RunEvent) -> RunEvent {
        RunEvent::Subagent {
            call_id: call_id.into(),
            task_id: "task-1".into(),
            subagent_type: "general-purpose".into(),
            inner: Box::new(inner),
        }
    }

    #[test]
    fn a_subagent_run_is_counted_in_the_total_and_on_its_own() {
        let prices = Prices::default();
        let mut usage = RunUsage::default();
        usage.started();
        usage.add(&model_call("claude-sonnet-4-5", 1_000_000, 0), &prices);
        usage.add(
            &RunEvent::ToolStarted {
                step: 0,
                call_id: "c1".into(),
                name: "task".into(),
            },
            &prices,
        );
        usage.add(
            &in_subagent("c1", model_call("claude-sonnet-4-5", 0, 1_000_000)),
            &prices,
        );
        let sub_call = RunEvent::ToolFinished {
            step: 0,
            call_id: "s1".into(),
            name: "ls".into(),
            is_error: true,
            side_effects: SideEffects::ReadOnly,
            elapsed: Duration::from_millis(7),
        };
        usage.add(&in_subagent("c1", sub_call), &prices);
        usage.add(
            &RunEvent::ToolFinished {
                step: 0,
                call_id: "c1".into(),
                name: "task".into(),
                is_error: false,
                side_effects: SideEffects::External,
                elapsed: Duration::from_millis(1250),
            },
            &prices,
        );
        usage.ended();
        let fields: serde_json::Map<String, Value> = usage
            .fields()
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        let total = &fields["usage"];
        assert_eq!(total["model_calls"], 2);
        assert_eq!(total["tool_calls"], 2, "the task call and the subagent's ls");
        assert_eq!(
            (total["input_tokens"].as_u64(), total["output_tokens"].as_u64()),
            (Some(1_000_000), Some(1_000_000))
        );
        // $3 per million input, $15 per million output.
        assert!(
            (total["cost_usd"].as_f64().unwrap() - 18.0).abs() < 1e-9,
            "{total}"
        );
        let sub = &fields["subagent_runs"][0];
        assert_eq!(sub["call_id"], "c1");
        assert_eq!(sub["task_id"], "task-1");
        assert_eq!(sub["subagent_type"], "general-purpose");
        assert_eq!(sub["status"], "success");
        assert!(sub["ended_at"].is_string());
        assert_eq!(sub["usage"]["model_calls"], 1);
        assert!((sub["usage"]["cost_usd"].as_f64().unwrap() - 15.0).abs() < 1e-9);
        assert!(fields["started_at"].is_string() && fields["ended_at"].is_string());
        // Each finished call's timing, the subagent's own call under its task call.
        assert_eq!(
            fields["tool_runs"],
            serde_json::json!([
                {"call_id": "s1", "parent_call_id": "c1", "name": "ls", "status": "error", "duration_ms": 7},
                {"call_id": "c1", "parent_call_id": null, "name": "task", "status": "success", "duration_ms": 1250},
            ])
        );
    }

    #[test]
    fn an_unpriced_model_makes_the_cost_unknown_not_zero() {
        let prices = Prices::default();
        let mut usage = RunUsage::default();
        usage.add(&model_call("scripted", 10, 5), &prices);
        let [_, _, (_, total), _, _] = usage.fields();
        assert_eq!(total["cost_usd"], Value::Null);
        assert_eq!(total["unpriced_model"], "scripted");
        assert_eq!(total["input_tokens"], 10);
    }

    #[test]
    fn subagent_runs_are_listed_up_to_the_cap() {
        let prices = Prices::default();
        let mut usage = RunUsage::default();
        for i in 0..MAX_SUBAGENT_RUNS + 10 {
            usage.add(
                &RunEvent::ToolStarted {
                    step: 0,
                    call_id: format!("c{i}"),
                    name: "task".into(),
                },
                &prices,
            );
        }
        let [.., (_, subagents), _] = usage.fields();
        assert_eq!(subagents.as_array().unwrap().len(), MAX_SUBAGENT_RUNS);
    }
}
