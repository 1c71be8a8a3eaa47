//! The `tracing` spans and events a run produces, named and attributed after the OpenTelemetry
//! GenAI semantic conventions, so any `tracing` subscriber — or the OTLP export of
//! `trellis-agent` — sees them:
//!
//! | span (`otel.name`) | when | attributes |
//! |---|---|---|
//! | `invoke_agent {agent}` | one per run, a subagent's nested under its parent's `task` call | `gen_ai.operation.name`, `gen_ai.agent.name`, `gen_ai.conversation.id` (thread), `trellis.run_id`, `trellis.model_calls`, `trellis.outcome` (`finished`, `interrupted`, `failed`), `error.type` |
//! | `chat {model}` | one per attempt of a model call (a retried call has several) | `gen_ai.request.model`, `gen_ai.provider.name` (when the model names its provider), `gen_ai.response.model`, `gen_ai.usage.input_tokens` (all input, cached or not), `gen_ai.usage.output_tokens`, `gen_ai.usage.cache_read.input_tokens`, `gen_ai.usage.cache_creation.input_tokens`, `gen_ai.response.finish_reasons`, `trellis.provider.request_id` (set by the provider: its `request-id` / `x-request-id` header), `error.type`; with content capture, `gen_ai.input.messages` and `gen_ai.output.messages` |
//! | `execute_tool {tool}` | one per tool call | `gen_ai.tool.name`, `gen_ai.tool.call.id`, `gen_ai.tool.type`, `trellis.tool.outcome` (`ok`, `error`), `error.type`; with content capture, `gen_ai.tool.call.arguments` and `gen_ai.tool.call.result` |
//!
//! Every middleware event (skill activation, memory edits, summarization, rubric verdicts,
//! subagent tasks) and every approval (`interrupted`, `decided`) is also a `tracing` event at
//! INFO, target [`EVENT_TARGET`], whose message is `trellis.{middleware}.{kind}` (the span event's
//! name in OpenTelemetry) and whose `data` is the event's data as JSON: a span event on the
//! span it happened in.
//!
//! Prompt and completion text is recorded only when content capture is on
//! ([`set_capture_content`], or `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true` in the
//! environment, the variable the OpenTelemetry GenAI instrumentations read).
//!
//! All spans are INFO and their fields are computed only when a subscriber wants them, so with no
//! subscriber (or one filtered above INFO) a run pays one interest check per span.

use std::sync::atomic::{AtomicU8, Ordering};

use tracing::Span;
use tracing::field::Empty;

use crate::runtime::message::{Message, ToolCall};
use crate::runtime::model::{ModelRequest, ModelResponse};
use crate::tools::ToolOutput;

/// The target of the run's events (`tracing` events carrying `event.name`).
pub const EVENT_TARGET: &str = "trellis::event";

/// 0: not read yet, 1: off, 2: on.
static CAPTURE: AtomicU8 = AtomicU8::new(0);

/// Whether prompt and completion text goes into spans (off unless set or the environment asks).
pub fn capture_content() -> bool {
    match CAPTURE.load(Ordering::Relaxed) {
        0 => {
            let on = std::env::var("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
                .is_ok_and(|v| v.trim().eq_ignore_ascii_case("true"));
            CAPTURE.store(if on { 2 } else { 1 }, Ordering::Relaxed);
            on
        }
        v => v == 2,
    }
}

/// Turn content capture on or off for this process.
pub fn set_capture_content(on: bool) {
    CAPTURE.store(if on { 2 } else { 1 }, Ordering::Relaxed);
}

/// The span of one run.
pub(crate) fn agent_span(agent: Option<&str>, thread_id: &str, run_id: &str) -> Span {
    let name = agent.unwrap_or("agent");
    tracing::info_span!(
        "invoke_agent",
        otel.name = format!("invoke_agent {name}").as_str(),
        gen_ai.operation.name = "invoke_agent",
        gen_ai.agent.name = name,
        gen_ai.conversation.id = thread_id,
        trellis.run_id = run_id,
        trellis.model_calls = Empty,
        trellis.outcome = Empty,
        otel.status_code = Empty,
        error.type = Empty,
    )
}

/// The span of one model call attempt, with the request's text when capture is on.
pub(crate) fn chat_span(model: &str, provider: Option<&str>, request: &ModelRequest) -> Span {
    let span = tracing::info_span!(
        "chat",
        otel.name = format!("chat {model}").as_str(),
        otel.kind = "client",
        gen_ai.operation.name = "chat",
        gen_ai.request.model = model,
        gen_ai.provider.name = provider,
        gen_ai.response.model = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        gen_ai.usage.cache_read.input_tokens = Empty,
        gen_ai.usage.cache_creation.input_tokens = Empty,
        gen_ai.response.finish_reasons = Empty,
        trellis.provider.request_id = Empty,
        gen_ai.input.messages = Empty,
        gen_ai.output.messages = Empty,
        otel.status_code = Empty,
        error.type = Empty,
    );
    if !span.is_disabled() && capture_content() {
        let messages: Vec<&Message> = request.messages.iter().collect();
        span.record(
            "gen_ai.input.messages",
            serde_json::to_string(&messages).unwrap_or_default().as_str(),
        );
    }
    span
}

/// Record what a model call returned (or why it failed) on its span.
pub(crate) fn record_chat<E: std::fmt::Display>(span: &Span, result: &Result<ModelResponse, E>) {
    if span.is_disabled() {
        return;
    }
    match result {
        Ok(response) => {
            let usage = response.usage;
            span.record("gen_ai.usage.input_tokens", int(usage.total_input()));
            span.record("gen_ai.usage.output_tokens", int(usage.output_tokens));
            span.record(
                "gen_ai.usage.cache_read.input_tokens",
                int(usage.cache_read_tokens),
            );
            span.record(
                "gen_ai.usage.cache_creation.input_tokens",
                int(usage.cache_write_tokens),
            );
            let reason = serde_json::to_value(&response.stop_reason)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_else(|| "other".to_owned());
            span.record(
                "gen_ai.response.finish_reasons",
                format!("[\"{reason}\"]").as_str(),
            );
            if let Some(model) = &response.model {
                span.record("gen_ai.response.model", model.as_str());
            }
            if capture_content() {
                span.record(
                    "gen_ai.output.messages",
                    serde_json::to_string(&[&response.message])
                        .unwrap_or_default()
                        .as_str(),
                );
            }
        }
        Err(error) => {
            span.record("otel.status_code", "ERROR");
            span.record("error.type", error.to_string().as_str());
        }
    }
}

/// Counts as signed integers: OpenTelemetry attributes are i64, and an unsigned `tracing` value
/// would reach the exporter as a string.
fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The span of one tool call.
pub(crate) fn tool_span(call: &ToolCall) -> Span {
    let span = tracing::info_span!(
        "execute_tool",
        otel.name = format!("execute_tool {}", call.name).as_str(),
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = call.name.as_str(),
        gen_ai.tool.call.id = call.id.as_str(),
        gen_ai.tool.type = "function",
        gen_ai.tool.call.arguments = Empty,
        gen_ai.tool.call.result = Empty,
        trellis.tool.outcome = Empty,
        otel.status_code = Empty,
        error.type = Empty,
    );
    if !span.is_disabled() && capture_content() {
        span.record("gen_ai.tool.call.arguments", call.args.to_string().as_str());
    }
    span
}

/// Record a tool call's outcome on its span.
pub(crate) fn record_tool(span: &Span, output: &ToolOutput) {
    if span.is_disabled() {
        return;
    }
    if output.is_error {
        span.record("trellis.tool.outcome", "error");
        span.record("otel.status_code", "ERROR");
        span.record("error.type", "tool_error");
    } else {
        span.record("trellis.tool.outcome", "ok");
    }
    if capture_content() {
        let text: String = output
            .content
            .iter()
            .filter_map(|c| match c {
                crate::tools::ToolContent::Text { text } => Some(text.as_str()),
                crate::tools::ToolContent::Image { .. } => None,
            })
            .collect();
        span.record("gen_ai.tool.call.result", text.as_str());
    }
}

/// Record how a run ended on its span.
pub(crate) fn record_run<T, E: std::fmt::Display>(
    span: &Span,
    result: &Result<T, E>,
    model_calls: Option<u32>,
    interrupted: bool,
) {
    if span.is_disabled() {
        return;
    }
    if let Some(n) = model_calls {
        span.record("trellis.model_calls", i64::from(n));
    }
    match result {
        Ok(_) if interrupted => span.record("trellis.outcome", "interrupted"),
        Ok(_) => span.record("trellis.outcome", "finished"),
        Err(error) => {
            span.record("trellis.outcome", "failed");
            span.record("otel.status_code", "ERROR");
            span.record("error.type", error.to_string().as_str())
        }
    };
}

/// A middleware or approval event as a `tracing` event (see the module docs). `data` is called
/// only when a subscriber wants the event.
pub(crate) fn event(source: &str, kind: &str, data: impl FnOnce() -> serde_json::Value) {
    if tracing::enabled!(target: EVENT_TARGET, tracing::Level::INFO) {
        let name = format!("trellis.{source}.{kind}");
        let data = data().to_string();
        tracing::info!(
            target: EVENT_TARGET,
            data = data.as_str(),
            "{name}"
        );
    }
}
