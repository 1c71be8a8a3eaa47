//! What telemetry export costs a run: the same tool-calling run (a scripted model, one `echo`
//! call per step) with no subscriber, and with the OTLP export layers sending to a loopback
//! collector that answers every request with an empty 200, in one process; reported as time per
//! model call and the difference (target: at most 5 µs added per call). Prints JSON. Under
//! `cargo test --all-targets` (no `--bench`) it does a quick smoke run.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tracing_subscriber::prelude::*;
use trellis_agent::telemetry::{OtlpConfig, Telemetry};
use trellis_middleware::runtime::scripted_model::ScriptedModel;
use trellis_middleware::{Agent, FnTool, RunInput, ToolCall, ToolOutput};

fn smoke() -> bool {
    !std::env::args().any(|a| a == "--bench")
}

/// A collector that reads each request and answers 200 with an empty body.
async fn collector() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = vec![0u8; 1 << 16];
                let mut seen = Vec::new();
                loop {
                    let Ok(n) = socket.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    seen.extend_from_slice(&buf[..n]);
                    // One request per read burst is enough for this client (keep-alive, small bodies).
                    if let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&seen[..end]).to_ascii_lowercase();
                        let length = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        if seen.len() >= end + 4 + length {
                            seen.drain(..end + 4 + length);
                            let reply = b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
                            if socket.write_all(reply).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    format!("http://{addr}")
}

fn agent(steps: usize) -> Agent {
    let mut model = ScriptedModel::new().without_recording();
    for i in 0..steps {
        model = model.then_tool_calls([ToolCall::new(format!("c{i}"), "echo", json!({"text": "x"}))]);
    }
    let model = model.then_text("done");
    let echo = FnTool::new(
        "echo",
        "Repeat.",
        json!({"type": "object", "properties": {"text": {"type": "string"}}}),
        |args| async move { Ok(ToolOutput::text(args["text"].as_str().unwrap_or_default())) },
    );
    Agent::builder(Arc::new(model))
        .tool(echo)
        .without_checkpointer()
        .build()
        .unwrap()
}

/// Median time per model call over `runs` runs of `steps` steps.
async fn per_call(runs: usize, steps: usize) -> Duration {
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let agent = agent(steps);
        let t = Instant::now();
        agent.run(RunInput::human("go")).await.unwrap();
        times.push(t.elapsed() / (steps as u32 + 1));
    }
    times.sort();
    times[times.len() / 2]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let (runs, steps) = if smoke() { (3, 5) } else { (41, 50) };
    per_call(2, steps).await; // warm up
    let off = per_call(runs, steps).await;

    let mut config = OtlpConfig::new(&collector().await);
    config.metrics_interval = Duration::from_secs(1);
    let (telemetry, layer) = Telemetry::install(&config).unwrap();
    let subscriber = tracing_subscriber::registry().with(layer);
    let on = {
        let _default = tracing::subscriber::set_default(subscriber);
        per_call(2, steps).await;
        per_call(runs, steps).await
    };
    let report = tokio::task::spawn_blocking(move || telemetry.shutdown(Duration::from_secs(5)))
        .await
        .unwrap();

    // The same with spans only (no metrics layer), to tell the two costs apart.
    let mut spans_only = OtlpConfig::new(&collector().await);
    spans_only.metrics_endpoint = None;
    let (telemetry, layer) = Telemetry::install(&spans_only).unwrap();
    let subscriber = tracing_subscriber::registry().with(layer);
    let spans = {
        let _default = tracing::subscriber::set_default(subscriber);
        per_call(2, steps).await;
        per_call(runs, steps).await
    };
    tokio::task::spawn_blocking(move || telemetry.shutdown(Duration::from_secs(5)))
        .await
        .unwrap();
    println!(
        "{}",
        json!({
            "case": "per model call, export on vs off",
            "runs": runs,
            "steps": steps,
            "off_us": us(off),
            "on_us": us(on),
            "added_us": us(on) - us(off),
            "spans_only_us": us(spans),
            "ratio": on.as_secs_f64() / off.as_secs_f64(),
            "dropped_spans": report.dropped_spans,
        })
    );
}
