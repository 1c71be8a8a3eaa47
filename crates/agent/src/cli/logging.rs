//! Logging and telemetry set-up of the `trellis` command line: the stderr log filtered by `-v` /
//! `-q` / `RUST_LOG`, and the OTLP export layers when `--otlp` or the `OTEL_EXPORTER_OTLP_*`
//! variables ask for them.

use std::io::IsTerminal;

#[cfg(feature = "otel")]
use crate::telemetry::{OtlpConfig, Telemetry};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::LevelFilter;

/// Without the `otel` feature there is nothing to shut down.
#[cfg(not(feature = "otel"))]
#[derive(Debug)]
pub struct Telemetry;

#[cfg(not(feature = "otel"))]
impl Telemetry {
    pub fn shutdown(self, _timeout: std::time::Duration) -> Shutdown {
        Shutdown {
            dropped_spans: 0,
            flushed: true,
        }
    }
}

#[cfg(not(feature = "otel"))]
#[derive(Debug)]
pub struct Shutdown {
    dropped_spans: u64,
    flushed: bool,
}

/// How long the process waits for the collector when it ends.
const TELEMETRY_SHUTDOWN: std::time::Duration = std::time::Duration::from_secs(5);

/// `--otlp` and `--otlp-content`.
#[derive(clap::Args, Debug, Clone)]
pub struct Otlp {
    /// Send traces and metrics to this OpenTelemetry collector (OTLP over HTTP, e.g.
    /// http://localhost:4318); the OTEL_EXPORTER_OTLP_* variables work too.
    #[arg(long = "otlp", value_name = "URL")]
    pub url: Option<String>,
    /// Put prompts, completions and tool arguments and results into the exported spans (off:
    /// only names, ids, token counts and timings are sent).
    #[arg(long = "otlp-content")]
    pub content: bool,
}

/// Log to stderr at the level `-v`/`-q` ask for, unless `RUST_LOG` says otherwise.
pub fn init_logging(verbose: u8, quiet: bool, otlp: Option<&Otlp>) -> Option<Telemetry> {
    use tracing_subscriber::prelude::*;
    let default = default_level(verbose, quiet);
    let rust_log = std::env::var("RUST_LOG").unwrap_or_default();
    let builder = EnvFilter::builder().with_default_directive(default.into());
    let filter = builder.parse(rust_log.trim()).unwrap_or_else(|e| {
        eprintln!("trellis: ignoring RUST_LOG ({e}); logging at {default}");
        builder.parse_lossy("")
    });
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(use_color(
            std::io::stderr().is_terminal(),
            std::env::var_os("NO_COLOR").as_deref(),
        ))
        .with_target(false)
        .with_filter(filter);
    let registry = tracing_subscriber::registry().with(fmt);
    #[cfg(feature = "otel")]
    if let Some(config) = otlp.and_then(|o| OtlpConfig::from_env(o.url.as_deref())) {
        if otlp.is_some_and(|o| o.content) {
            trellis_middleware::runtime::telemetry::set_capture_content(true);
        }
        match Telemetry::install(&config) {
            Ok((telemetry, layer)) => {
                registry.with(layer).init();
                return Some(telemetry);
            }
            Err(e) => eprintln!("trellis: {e}; running without it"),
        }
    }
    #[cfg(not(feature = "otel"))]
    if otlp.is_some_and(|o| o.url.is_some()) {
        eprintln!("trellis: this build has no telemetry export (the otel feature is off)");
    }
    registry.init();
    None
}

/// The level when `RUST_LOG` is unset or empty: WARN, raised by each `-v`, or ERROR with `-q`.
fn default_level(verbose: u8, quiet: bool) -> LevelFilter {
    match (quiet, verbose) {
        (true, _) => LevelFilter::ERROR,
        (false, 0) => LevelFilter::WARN,
        (false, 1) => LevelFilter::INFO,
        (false, 2) => LevelFilter::DEBUG,
        (false, _) => LevelFilter::TRACE,
    }
}

/// Colours only on a terminal, and never when `NO_COLOR` is set to something (<https://no-color.org>).
fn use_color(stderr_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// Send the last spans (waiting at most `TELEMETRY_SHUTDOWN`, 5 s) and say once what was lost.
pub fn finish_telemetry(telemetry: Option<Telemetry>) {
    if let Some(telemetry) = telemetry {
        // The runtime's workers keep exporting while this thread waits.
        let report = telemetry.shutdown(TELEMETRY_SHUTDOWN);
        if report.dropped_spans > 0 {
            eprintln!(
                "trellis: telemetry: {} spans were dropped because the collector did not keep up",
                report.dropped_spans
            );
        }
        if !report.flushed {
            eprintln!(
                "trellis: telemetry: the collector did not take the last spans within {}s",
                TELEMETRY_SHUTDOWN.as_secs()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_follow_the_flags() {
        assert_eq!(default_level(0, false), LevelFilter::WARN);
        assert_eq!(default_level(1, false), LevelFilter::INFO);
        assert_eq!(default_level(2, false), LevelFilter::DEBUG);
        assert_eq!(default_level(3, false), LevelFilter::TRACE);
        assert_eq!(default_level(9, false), LevelFilter::TRACE);
        assert_eq!(default_level(0, true), LevelFilter::ERROR);
    }

    #[test]
    fn colour_needs_a_terminal_and_no_no_color() {
        use std::ffi::OsStr;
        assert!(use_color(true, None));
        assert!(
            use_color(true, Some(OsStr::new(""))),
            "an empty NO_COLOR does not count"
        );
        assert!(!use_color(true, Some(OsStr::new("1"))));
        assert!(!use_color(false, None));
        assert!(!use_color(false, Some(OsStr::new(""))));
    }
}
