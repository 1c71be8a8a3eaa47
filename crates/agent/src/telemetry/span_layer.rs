//! [`SpanLayer`]: a `tracing` layer that turns the run's spans into OpenTelemetry span data and
//! hands each finished one to the [`ExportQueue`].
//!
//! # Why not `tracing-opentelemetry`
//! That crate is the usual bridge, and Trellis used it first. It builds a full SDK span per
//! `tracing` span — a span builder, a sampler decision, an OpenTelemetry `Context` activated on
//! every enter and exit of an instrumented future, and the SDK's span processor pipeline — for
//! features Trellis does not use (samplers, remote parents, span links). Measured by the
//! `trellis-agent/telemetry` bench (2026-12-02, 2 cores, per model call, one `chat` and one
//! `execute_tool` span each, machine load about 9): 2.9 µs with no subscriber; export through
//! `tracing-opentelemetry` 11.6–16.8 µs, and 8.8–9.4 µs with this layer in its place (before
//! the metrics moved into it). It keeps only what the export needs: ids, the parent from the
//! `tracing` registry, start and end times, attributes, events and status, so a span costs one
//! record in the span's extensions plus its attributes. What it gives up: a parent context from
//! outside the process (a remote parent) and sampling; every span of a run is exported.
//!
//! # What it maps
//! - Span name: the `otel.name` field if present, else the `tracing` span's name.
//! - `otel.kind` (`client`, `server`, `producer`, `consumer`, `internal`) → the span kind.
//! - `otel.status_code` (`ERROR`, `OK`) and `otel.status_message` → the status.
//! - Every other field → an attribute (strings, booleans, `i64`, `f64`; `u64` as `i64` when it
//!   fits, else as a string; anything else by its `Debug` text). A field recorded twice keeps the
//!   last value.
//! - A `tracing` event inside a span → a span event named by its message, with its other fields
//!   as attributes. Events outside every span are not exported.
//! - The parent is the `tracing` parent (explicit, or the current span when it was created), so
//!   a subagent's run nests under the `task` call that started it. A span without a parent starts
//!   a new trace.
//!
//! At most [`MAX_ATTRIBUTES`] attributes and [`MAX_EVENTS`] events are kept per span (the
//! OpenTelemetry SDK's default limits); the rest are counted as dropped.

use std::borrow::Cow;
use std::time::{Instant, SystemTime};

use opentelemetry::trace::{Event, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState};
use opentelemetry::{InstrumentationScope, KeyValue, Value};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SpanData, SpanEvents, SpanLinks};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event as TracingEvent, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

use super::{ExportQueue, Metrics};

/// Attributes kept per span or event.
pub const MAX_ATTRIBUTES: usize = 128;
/// Events kept per span.
pub const MAX_EVENTS: usize = 128;

/// Exports the spans it sees through an [`ExportQueue`] (see the module docs).
#[derive(Debug, Clone)]
pub struct SpanLayer {
    queue: ExportQueue,
    metrics: Option<Metrics>,
    ids: RandomIdGenerator,
    scope: InstrumentationScope,
}

impl SpanLayer {
    /// A layer sending finished spans to `queue`, under the instrumentation scope `trellis`.
    pub fn new(queue: ExportQueue) -> Self {
        Self {
            queue,
            metrics: None,
            ids: RandomIdGenerator::default(),
            scope: InstrumentationScope::builder("trellis").build(),
        }
    }

    /// Also record the metrics of each finished span.
    pub fn with_metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = Some(metrics);
        self
    }
}

/// A span being recorded; lives in the `tracing` span's extensions until it closes.
#[derive(Debug)]
struct Building {
    /// The `tracing` span's name (`chat`, `execute_tool`, …), for the metrics.
    operation: &'static str,
    started: Instant,
    trace_id: TraceId,
    span_id: SpanId,
    parent_span_id: SpanId,
    name: Cow<'static, str>,
    kind: SpanKind,
    start_time: SystemTime,
    attributes: Vec<KeyValue>,
    dropped_attributes: u32,
    events: Vec<Event>,
    dropped_events: u32,
    status: Status,
}

impl Building {
    fn set(&mut self, key: &'static str, value: Value) {
        match key {
            "otel.name" => self.name = Cow::Owned(value.as_str().into_owned()),
            "otel.kind" => self.kind = kind(&value.as_str()),
            "otel.status_code" => match value.as_str().to_ascii_uppercase().as_str() {
                // An error keeps the message `otel.status_message` may have given it.
                "ERROR" if !matches!(self.status, Status::Error { .. }) => {
                    self.status = Status::error("");
                }
                "OK" => self.status = Status::Ok,
                _ => {}
            },
            "otel.status_message" => self.status = Status::error(value.as_str().into_owned()),
            _ => put(&mut self.attributes, &mut self.dropped_attributes, key, value),
        }
    }
}

/// Set `key` in `attributes` (replacing an earlier value), within [`MAX_ATTRIBUTES`].
fn put(attributes: &mut Vec<KeyValue>, dropped: &mut u32, key: &'static str, value: Value) {
    if let Some(existing) = attributes.iter_mut().find(|kv| kv.key.as_str() == key) {
        existing.value = value;
    } else if attributes.len() < MAX_ATTRIBUTES {
        attributes.push(KeyValue::new(key, value));
    } else {
        *dropped = dropped.saturating_add(1);
    }
}

fn kind(name: &str) -> SpanKind {
    match name.to_ascii_lowercase().as_str() {
        "client" => SpanKind::Client,
        "server" => SpanKind::Server,
        "producer" => SpanKind::Producer,
        "consumer" => SpanKind::Consumer,
        _ => SpanKind::Internal,
    }
}

/// Field values as OpenTelemetry values, handed to `sink` with the field's name.
struct Fields<F: FnMut(&'static str, Value)>(F);

impl<F: FnMut(&'static str, Value)> Visit for Fields<F> {
    fn record_str(&mut self, field: &Field, value: &str) {
        (self.0)(field.name(), Value::String(value.to_owned().into()));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        (self.0)(field.name(), Value::Bool(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        (self.0)(field.name(), Value::I64(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        let value = match i64::try_from(value) {
            Ok(v) => Value::I64(v),
            Err(_) => Value::String(value.to_string().into()),
        };
        (self.0)(field.name(), value);
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        (self.0)(field.name(), Value::F64(value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        (self.0)(field.name(), Value::String(format!("{value:?}").into()));
    }
}

impl<S> Layer<S> for SpanLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let parent = span.parent().and_then(|parent| {
            parent
                .extensions()
                .get::<Building>()
                .map(|b| (b.trace_id, b.span_id))
        });
        let (trace_id, parent_span_id) = match parent {
            Some((trace, span)) => (trace, span),
            None => (self.ids.new_trace_id(), SpanId::INVALID),
        };
        let mut building = Building {
            operation: attrs.metadata().name(),
            started: Instant::now(),
            trace_id,
            span_id: self.ids.new_span_id(),
            parent_span_id,
            name: Cow::Borrowed(attrs.metadata().name()),
            kind: SpanKind::Internal,
            start_time: SystemTime::now(),
            attributes: Vec::with_capacity(attrs.fields().len()),
            dropped_attributes: 0,
            events: Vec::new(),
            dropped_events: 0,
            status: Status::Unset,
        };
        attrs.record(&mut Fields(|key, value| building.set(key, value)));
        span.extensions_mut().insert(building);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        if let Some(building) = span.extensions_mut().get_mut::<Building>() {
            values.record(&mut Fields(|key, value| building.set(key, value)));
        }
    }

    fn on_event(&self, event: &TracingEvent<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.event_span(event) else { return };
        let mut extensions = span.extensions_mut();
        let Some(building) = extensions.get_mut::<Building>() else {
            return;
        };
        if building.events.len() >= MAX_EVENTS {
            building.dropped_events = building.dropped_events.saturating_add(1);
            return;
        }
        let mut name = Cow::Borrowed(event.metadata().name());
        let mut attributes = Vec::new();
        let mut dropped = 0;
        event.record(&mut Fields(|key, value| {
            if key == "message" {
                name = Cow::Owned(value.as_str().into_owned());
            } else {
                put(&mut attributes, &mut dropped, key, value);
            }
        }));
        building
            .events
            .push(Event::new(name, SystemTime::now(), attributes, dropped));
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let Some(b) = span.extensions_mut().remove::<Building>() else {
            return;
        };
        // Non-exhaustive in the SDK: built by field.
        let mut events = SpanEvents::default();
        events.events = b.events;
        events.dropped_count = b.dropped_events;
        let span = SpanData {
            span_context: SpanContext::new(
                b.trace_id,
                b.span_id,
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_id: b.parent_span_id,
            parent_span_is_remote: false,
            span_kind: b.kind,
            name: b.name,
            start_time: b.start_time,
            end_time: SystemTime::now(),
            attributes: b.attributes,
            dropped_attributes_count: b.dropped_attributes,
            events,
            links: SpanLinks::default(),
            status: b.status,
            instrumentation_scope: self.scope.clone(),
        };
        if let Some(metrics) = &self.metrics {
            metrics.record(&span, b.operation, b.started.elapsed());
        }
        self.queue.push(span);
    }
}
