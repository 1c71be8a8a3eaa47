//! OpenTelemetry export (the `otel` feature): the run's spans (named after the GenAI semantic
//! conventions by `trellis_middleware::runtime::telemetry`) and metrics ([`metrics`]) over OTLP/HTTP with
//! protobuf bodies, to any collector (Jaeger, Grafana Tempo, an OpenTelemetry Collector).
//!
//! [`OtlpConfig::from_env`] reads the standard variables — `OTEL_EXPORTER_OTLP_ENDPOINT` (the
//! base URL; `/v1/traces` and `/v1/metrics` are appended), `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
//! and `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` (used as given), `OTEL_EXPORTER_OTLP_HEADERS` and
//! the signal-specific `…_HEADERS`, `OTEL_EXPORTER_OTLP_TIMEOUT` (milliseconds),
//! `OTEL_SERVICE_NAME` — and `trellis run --otlp URL` sets the base URL. [`Telemetry::install`]
//! returns the `tracing` layers to add to a subscriber, so a library user can add them to their
//! own, or leave them out and consume the spans with any other `tracing` subscriber.
//!
//! Export never slows or fails a run: spans go through a bounded [`ExportQueue`] (dropped and
//! counted when full), every request is bounded by the timeout, and [`Telemetry::shutdown`] waits
//! at most a given time. gRPC is not offered: it would bring tonic and a second HTTP/2 stack.

pub mod export_queue;
pub mod http_client;
pub mod metrics;
pub mod span_layer;

use std::collections::HashMap;
use std::time::Duration;

use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use tracing::Subscriber;
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

pub use export_queue::{DEFAULT_QUEUE_CAPACITY, ExportQueue, QueueError};
pub use http_client::OtlpHttpClient;
pub use metrics::Metrics;
pub use span_layer::SpanLayer;

/// Where and how to export.
#[derive(Debug, Clone, PartialEq)]
pub struct OtlpConfig {
    /// The traces endpoint (`…/v1/traces`).
    pub traces_endpoint: String,
    /// The metrics endpoint (`…/v1/metrics`), or none to export no metrics.
    pub metrics_endpoint: Option<String>,
    /// Extra request headers (e.g. an API key of the collector).
    pub headers: HashMap<String, String>,
    /// Each request's timeout.
    pub timeout: Duration,
    /// `service.name` of the resource.
    pub service_name: String,
    /// Spans queued before new ones are dropped.
    pub queue_capacity: usize,
    /// How often metrics are sent.
    pub metrics_interval: Duration,
}

impl OtlpConfig {
    /// Export to the collector at `base` (e.g. `http://localhost:4318`): traces to
    /// `base/v1/traces`, metrics to `base/v1/metrics`.
    pub fn new(base: &str) -> Self {
        let base = base.trim_end_matches('/');
        Self {
            traces_endpoint: format!("{base}/v1/traces"),
            metrics_endpoint: Some(format!("{base}/v1/metrics")),
            headers: HashMap::new(),
            timeout: Duration::from_secs(10),
            service_name: "trellis".to_owned(),
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
            metrics_interval: Duration::from_secs(30),
        }
    }

    /// The configuration the `OTEL_*` variables give, with `base` (e.g. `--otlp`) overriding
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`; `None` when nothing names an endpoint.
    pub fn from_env(base: Option<&str>) -> Option<Self> {
        Self::from_vars(base, |name| {
            std::env::var(name).ok().filter(|v| !v.trim().is_empty())
        })
    }

    fn from_vars(base: Option<&str>, var: impl Fn(&str) -> Option<String>) -> Option<Self> {
        let base = base
            .map(str::to_owned)
            .or_else(|| var("OTEL_EXPORTER_OTLP_ENDPOINT"));
        let traces = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
        let mut config = match (&base, &traces) {
            (Some(base), _) => Self::new(base),
            (None, Some(traces)) => {
                let mut c = Self::new("");
                c.traces_endpoint = traces.clone();
                c.metrics_endpoint = None;
                c
            }
            (None, None) => return None,
        };
        if let Some(traces) = traces {
            config.traces_endpoint = traces;
        }
        if let Some(metrics) = var("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") {
            config.metrics_endpoint = Some(metrics);
        }
        for name in ["OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"] {
            if let Some(list) = var(name) {
                config.headers.extend(parse_headers(&list));
            }
        }
        if let Some(ms) = var("OTEL_EXPORTER_OTLP_TIMEOUT").and_then(|v| v.trim().parse::<u64>().ok()) {
            config.timeout = Duration::from_millis(ms.max(1));
        }
        if let Some(name) = var("OTEL_SERVICE_NAME") {
            config.service_name = name;
        }
        Some(config)
    }
}

/// `k1=v1,k2=v2` (values percent-decoded, as the OTLP exporter spec says).
fn parse_headers(list: &str) -> Vec<(String, String)> {
    list.split(',')
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            let value = url::form_urlencoded::parse(format!("v={}", v.trim()).as_bytes())
                .next()
                .map(|(_, v)| v.into_owned())
                .unwrap_or_default();
            Some((k.trim().to_owned(), value))
        })
        .filter(|(k, _)| !k.is_empty())
        .collect()
}

/// Why telemetry could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot start telemetry export: {0}")]
pub struct TelemetryError(String);

/// The installed exporters; shut them down before the process ends.
#[derive(Debug)]
pub struct Telemetry {
    meter_provider: Option<SdkMeterProvider>,
    queue: ExportQueue,
}

/// What shutting down found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Spans dropped because the collector did not keep up.
    pub dropped_spans: u64,
    /// True when everything queued was sent (or failed) within the time given.
    pub flushed: bool,
}

impl Telemetry {
    /// Start the exporters for `config` on the current tokio runtime and return them with the
    /// `tracing` layers that feed them (spans of Trellis at INFO and above; the metrics layer).
    pub fn install<S>(config: &OtlpConfig) -> Result<(Self, Box<dyn Layer<S> + Send + Sync>), TelemetryError>
    where
        S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
    {
        let client = OtlpHttpClient::new(config.timeout).map_err(TelemetryError)?;
        let resource = Resource::builder()
            .with_service_name(config.service_name.clone())
            .build();
        let spans = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client.clone())
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(config.traces_endpoint.clone())
            .with_timeout(config.timeout)
            .with_headers(config.headers.clone())
            .build()
            .map_err(|e| TelemetryError(e.to_string()))?;
        let mut spans = spans;
        opentelemetry_sdk::trace::SpanExporter::set_resource(&mut spans, &resource);
        let queue = ExportQueue::new(spans, config.queue_capacity);
        let (meter_provider, metrics_layer) = match &config.metrics_endpoint {
            Some(endpoint) => {
                let exporter = opentelemetry_otlp::MetricExporter::builder()
                    .with_http()
                    .with_http_client(client)
                    .with_protocol(Protocol::HttpBinary)
                    .with_endpoint(endpoint.clone())
                    .with_timeout(config.timeout)
                    .with_headers(config.headers.clone())
                    .build()
                    .map_err(|e| TelemetryError(e.to_string()))?;
                let reader = PeriodicReader::builder(exporter)
                    .with_interval(config.metrics_interval)
                    .build();
                let provider = SdkMeterProvider::builder()
                    .with_reader(reader)
                    .with_resource(resource)
                    .build();
                let layer = Metrics::new(&opentelemetry::metrics::MeterProvider::meter(
                    &provider, "trellis",
                ));
                (Some(provider), Some(layer))
            }
            None => (None, None),
        };
        let mut spans_layer = SpanLayer::new(queue.clone());
        if let Some(metrics) = metrics_layer {
            spans_layer = spans_layer.with_metrics(metrics);
        }
        let layer: Box<dyn Layer<S> + Send + Sync> = Box::new(spans_layer.with_filter(
            tracing_subscriber::filter::filter_fn(|meta| {
                meta.target().starts_with("trellis") && *meta.level() <= tracing::Level::INFO
            }),
        ));
        Ok((
            Self {
                meter_provider,
                queue,
            },
            layer,
        ))
    }

    /// Spans dropped so far because the collector did not keep up.
    pub fn dropped_spans(&self) -> u64 {
        self.queue.dropped()
    }

    /// Send what is queued and stop, waiting at most `timeout`. Blocks the calling thread: call it
    /// outside async code, or on a multi-threaded runtime's blocking pool.
    pub fn shutdown(self, timeout: Duration) -> ShutdownReport {
        let flushed = self.queue.shutdown(timeout).is_ok();
        if let Some(meters) = self.meter_provider {
            let _ = meters.shutdown_with_timeout(timeout);
        }
        ShutdownReport {
            dropped_spans: self.queue.dropped(),
            flushed,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn vars<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn endpoints_come_from_the_flag_then_the_standard_variables() {
        assert_eq!(OtlpConfig::from_vars(None, vars(&[])), None);
        let c = OtlpConfig::from_vars(Some("http://collector:4318/"), vars(&[])).unwrap();
        assert_eq!(c.traces_endpoint, "http://collector:4318/v1/traces");
        assert_eq!(
            c.metrics_endpoint.as_deref(),
            Some("http://collector:4318/v1/metrics")
        );
        let env = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://tempo:4318/custom"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=a%20b, tenant=t1"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
            ("OTEL_SERVICE_NAME", "my-agent"),
        ];
        let c = OtlpConfig::from_vars(None, vars(&env)).unwrap();
        assert_eq!(c.traces_endpoint, "http://tempo:4318/custom");
        assert_eq!(c.metrics_endpoint.as_deref(), Some("http://env:4318/v1/metrics"));
        assert_eq!(c.headers.get("x-api-key").map(String::as_str), Some("a b"));
        assert_eq!(c.headers.get("tenant").map(String::as_str), Some("t1"));
        assert_eq!(c.timeout, Duration::from_millis(2500));
        assert_eq!(c.service_name, "my-agent");
        let c = OtlpConfig::from_vars(Some("http://flag:1"), vars(&env)).unwrap();
        assert_eq!(c.metrics_endpoint.as_deref(), Some("http://flag:1/v1/metrics"));
        let only_traces = [("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t/v1/traces")];
        let c = OtlpConfig::from_vars(None, vars(&only_traces)).unwrap();
        assert_eq!(c.metrics_endpoint, None);
    }
}
