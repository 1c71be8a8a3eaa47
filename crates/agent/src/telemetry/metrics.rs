//! [`MetricsLayer`]: OpenTelemetry metrics from the run's `chat` and `execute_tool` spans (see
//! `trellis_middleware::telemetry`), so the runtime needs no metrics code of its own.
//!
//! | instrument | kind | attributes |
//! |---|---|---|
//! | `trellis.tokens` | counter | `gen_ai.token.type`: `input` (billed at the full rate), `output`, `cache_read`, `cache_write`; `gen_ai.request.model` |
//! | `gen_ai.client.token.usage` | histogram (per call) | `gen_ai.token.type`: `input` (all input), `output`; `gen_ai.request.model` |
//! | `gen_ai.client.operation.duration` | histogram, seconds | `gen_ai.operation.name` (`chat`), `gen_ai.request.model` |
//! | `trellis.tool.duration` | histogram, seconds | `gen_ai.tool.name`, `trellis.tool.outcome` |
//! | `trellis.cache.hit_ratio` | gauge | input tokens read from the prompt cache over all input tokens, since the process started |

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram, Meter};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Subscriber, span};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

/// Records the instruments above as the spans close.
#[derive(Debug, Clone)]
pub struct MetricsLayer {
    tokens: Counter<u64>,
    token_usage: Histogram<u64>,
    chat_duration: Histogram<f64>,
    tool_duration: Histogram<f64>,
    totals: Arc<CacheTotals>,
}

/// Input tokens seen, for the hit-ratio gauge.
#[derive(Debug, Default)]
struct CacheTotals {
    input: AtomicU64,
    cache_read: AtomicU64,
}

impl MetricsLayer {
    /// The instruments, on `meter`.
    pub fn new(meter: &Meter) -> Self {
        let totals = Arc::new(CacheTotals::default());
        let observed = Arc::clone(&totals);
        meter
            .f64_observable_gauge("trellis.cache.hit_ratio")
            .with_description("Input tokens read from the prompt cache over all input tokens")
            .with_callback(move |gauge| {
                let input = observed.input.load(Ordering::Relaxed);
                if input > 0 {
                    let read = observed.cache_read.load(Ordering::Relaxed);
                    gauge.observe(read as f64 / input as f64, &[]);
                }
            })
            .build();
        Self {
            tokens: meter
                .u64_counter("trellis.tokens")
                .with_description("Tokens by kind")
                .with_unit("{token}")
                .build(),
            token_usage: meter
                .u64_histogram("gen_ai.client.token.usage")
                .with_description("Tokens used per model call")
                .with_unit("{token}")
                .build(),
            chat_duration: meter
                .f64_histogram("gen_ai.client.operation.duration")
                .with_description("Duration of a model call")
                .with_unit("s")
                .build(),
            tool_duration: meter
                .f64_histogram("trellis.tool.duration")
                .with_description("Duration of a tool call")
                .with_unit("s")
                .build(),
            totals,
        }
    }
}

/// What a span of interest carries until it closes.
#[derive(Debug, Default)]
struct Timing {
    chat: bool,
    started: Option<Instant>,
    model: String,
    tool: String,
    outcome: String,
    input: u64,
    output: u64,
    cache_read: u64,
    cache_write: u64,
}

impl Visit for Timing {
    fn record_u64(&mut self, field: &Field, value: u64) {
        match field.name() {
            "gen_ai.usage.input_tokens" => self.input = value,
            "gen_ai.usage.output_tokens" => self.output = value,
            "gen_ai.usage.cache_read.input_tokens" => self.cache_read = value,
            "gen_ai.usage.cache_creation.input_tokens" => self.cache_write = value,
            _ => {}
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.record_u64(field, u64::try_from(value).unwrap_or(0));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "gen_ai.request.model" => self.model = value.to_owned(),
            "gen_ai.tool.name" => self.tool = value.to_owned(),
            "trellis.tool.outcome" => self.outcome = value.to_owned(),
            _ => {}
        }
    }

    fn record_debug(&mut self, _field: &Field, _value: &dyn std::fmt::Debug) {}
}

impl<S> Layer<S> for MetricsLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let name = attrs.metadata().name();
        let chat = name == "chat";
        if !chat && name != "execute_tool" {
            return;
        }
        let mut timing = Timing {
            chat,
            started: Some(Instant::now()),
            ..Timing::default()
        };
        attrs.record(&mut timing);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(timing);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id)
            && let Some(timing) = span.extensions_mut().get_mut::<Timing>()
        {
            values.record(timing);
        }
    }

    fn on_close(&self, id: span::Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let Some(t) = span.extensions_mut().remove::<Timing>() else {
            return;
        };
        let seconds = t.started.map(|s| s.elapsed().as_secs_f64()).unwrap_or_default();
        if t.chat {
            let model = KeyValue::new("gen_ai.request.model", t.model.clone());
            let kind = |k: &'static str| [KeyValue::new("gen_ai.token.type", k), model.clone()];
            // The span's input count is all input; the counter's `input` is the full-rate part.
            let full_rate = t.input.saturating_sub(t.cache_read + t.cache_write);
            self.tokens.add(full_rate, &kind("input"));
            self.tokens.add(t.output, &kind("output"));
            self.tokens.add(t.cache_read, &kind("cache_read"));
            self.tokens.add(t.cache_write, &kind("cache_write"));
            self.token_usage.record(t.input, &kind("input"));
            self.token_usage.record(t.output, &kind("output"));
            self.chat_duration.record(
                seconds,
                &[KeyValue::new("gen_ai.operation.name", "chat"), model.clone()],
            );
            self.totals.input.fetch_add(t.input, Ordering::Relaxed);
            self.totals.cache_read.fetch_add(t.cache_read, Ordering::Relaxed);
        } else {
            self.tool_duration.record(
                seconds,
                &[
                    KeyValue::new("gen_ai.tool.name", t.tool),
                    KeyValue::new("trellis.tool.outcome", t.outcome),
                ],
            );
        }
    }
}
