//! [`Metrics`]: OpenTelemetry metrics from the run's `chat` and `execute_tool` spans (see
//! `trellis_middleware::runtime::telemetry`), so the runtime needs no metrics code of its own. The
//! [`super::SpanLayer`] hands it each finished span ([`super::SpanLayer::with_metrics`]), so the
//! attributes are read once for both.
//!
//! | instrument | kind | attributes |
//! |---|---|---|
//! | `trellis.tokens` | counter (observed at each export) | `gen_ai.token.type`: `input` (billed at the full rate), `output`, `cache_read`, `cache_write`; `gen_ai.request.model` |
//! | `gen_ai.client.token.usage` | histogram (per call) | `gen_ai.token.type`: `input` (all input), `output`; `gen_ai.request.model` |
//! | `gen_ai.client.operation.duration` | histogram, seconds | `gen_ai.operation.name` (`chat`), `gen_ai.request.model` |
//! | `trellis.tool.duration` | histogram, seconds | `gen_ai.tool.name`, `trellis.tool.outcome` |
//! | `trellis.cache.hit_ratio` | gauge | input tokens read from the prompt cache over all input tokens, since the process started |

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use opentelemetry::metrics::{Histogram, Meter};
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::trace::SpanData;

/// Records the instruments above from finished spans.
///
/// A model call costs one lock of a small per-model table and three histogram records: the token
/// counter is summed here and observed only when the metrics are exported, and each model's
/// attribute sets are built once and shared. Recording the counter per call (four more SDK
/// measurements, each hashing its attribute set), building the attributes per call, and reading
/// the spans in a layer of its own cost about 3 µs per model call in the
/// `trellis-agent/telemetry` bench.
#[derive(Debug, Clone)]
pub struct Metrics {
    token_usage: Histogram<u64>,
    chat_duration: Histogram<f64>,
    tool_duration: Histogram<f64>,
    totals: Arc<Totals>,
}

/// Token kinds of the `trellis.tokens` counter, in [`ModelTotals::tokens`] order.
const TOKEN_KINDS: [&str; 4] = ["input", "output", "cache_read", "cache_write"];

/// What the layer has seen since the process started.
#[derive(Debug, Default)]
struct Totals {
    /// By request model.
    models: Mutex<HashMap<String, ModelTotals>>,
    /// All input tokens, for the hit-ratio gauge.
    input: AtomicU64,
    /// Input tokens read from the cache.
    cache_read: AtomicU64,
}

impl Totals {
    fn models(&self) -> MutexGuard<'_, HashMap<String, ModelTotals>> {
        self.models
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// One model's token sums and its attribute sets, built once.
#[derive(Debug)]
struct ModelTotals {
    tokens: [u64; 4],
    attributes: Arc<ModelAttributes>,
}

#[derive(Debug)]
struct ModelAttributes {
    /// `gen_ai.token.type` = each of [`TOKEN_KINDS`], with the model.
    kinds: [[KeyValue; 2]; 4],
    /// The operation (`chat`) with the model.
    operation: [KeyValue; 2],
}

impl ModelAttributes {
    fn new(model: &str) -> Self {
        let model = KeyValue::new("gen_ai.request.model", Arc::<str>::from(model));
        Self {
            kinds: TOKEN_KINDS.map(|kind| [KeyValue::new("gen_ai.token.type", kind), model.clone()]),
            operation: [KeyValue::new("gen_ai.operation.name", "chat"), model],
        }
    }
}

impl Metrics {
    /// The instruments, on `meter`.
    pub fn new(meter: &Meter) -> Self {
        let totals = Arc::new(Totals::default());
        let observed = Arc::clone(&totals);
        meter
            .u64_observable_counter("trellis.tokens")
            .with_description("Tokens by kind")
            .with_unit("{token}")
            .with_callback(move |counter| {
                for entry in observed.models().values() {
                    for (sum, attributes) in entry.tokens.iter().zip(&entry.attributes.kinds) {
                        counter.observe(*sum, attributes);
                    }
                }
            })
            .build();
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

impl Metrics {
    /// Record the instruments for one finished span: `chat` and `execute_tool` spans count, the
    /// rest are ignored. `duration` is the span's wall time.
    pub fn record(&self, span: &SpanData, operation: &str, duration: Duration) {
        let seconds = duration.as_secs_f64();
        let attr = |key: &str| {
            span.attributes
                .iter()
                .find(|kv| kv.key.as_str() == key)
                .map(|kv| &kv.value)
        };
        let count = |key: &str| match attr(key) {
            Some(Value::I64(n)) => u64::try_from(*n).unwrap_or(0),
            _ => 0,
        };
        let text = |key: &str| attr(key).map(Value::as_str).unwrap_or_default();
        match operation {
            "chat" => {
                let (input, output) = (
                    count("gen_ai.usage.input_tokens"),
                    count("gen_ai.usage.output_tokens"),
                );
                let cache_read = count("gen_ai.usage.cache_read.input_tokens");
                let cache_write = count("gen_ai.usage.cache_creation.input_tokens");
                // The span's input count is all input; the counter's `input` is the full-rate part.
                let full_rate = input.saturating_sub(cache_read + cache_write);
                let model = text("gen_ai.request.model");
                let attributes = {
                    let mut models = self.totals.models();
                    if !models.contains_key(model.as_ref()) {
                        let entry = ModelTotals {
                            tokens: [0; 4],
                            attributes: Arc::new(ModelAttributes::new(&model)),
                        };
                        models.insert(model.clone().into_owned(), entry);
                    }
                    let Some(entry) = models.get_mut(model.as_ref()) else {
                        return;
                    };
                    for (sum, n) in entry
                        .tokens
                        .iter_mut()
                        .zip([full_rate, output, cache_read, cache_write])
                    {
                        *sum = sum.saturating_add(n);
                    }
                    Arc::clone(&entry.attributes)
                };
                self.token_usage.record(input, &attributes.kinds[0]);
                self.token_usage.record(output, &attributes.kinds[1]);
                self.chat_duration.record(seconds, &attributes.operation);
                self.totals.input.fetch_add(input, Ordering::Relaxed);
                self.totals.cache_read.fetch_add(cache_read, Ordering::Relaxed);
            }
            "execute_tool" => self.tool_duration.record(
                seconds,
                &[
                    KeyValue::new("gen_ai.tool.name", text("gen_ai.tool.name").into_owned()),
                    KeyValue::new("trellis.tool.outcome", text("trellis.tool.outcome").into_owned()),
                ],
            ),
            _ => {}
        }
    }
}
