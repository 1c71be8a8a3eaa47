//! What `trellis run` prints while a run goes on.
//!
//! | mode | stdout | stderr |
//! |---|---|---|
//! | [`OutputMode::Terminal`] (stdout is a terminal) | the model's text as it is written | progress: steps, token counts, tools |
//! | [`OutputMode::Plain`] (stdout is a pipe or a file) | the final answer, once | the same progress |
//! | [`OutputMode::Json`] (`--json`) | one JSON [`RunEvent`] per line, as they happen, then a `summary` event | nothing but errors |
//!
//! In the other modes the run ends with a summary line on stderr ([`crate::usage`]).
//!
//! On a terminal, a retried model call starts again: the text of the failed attempt stays on the
//! screen, followed by a `[retrying]` line, so what was shown is never mistaken for the answer.

use std::io::Write;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use std::time::Duration;

use trellis_middleware::RunOutput;
use trellis_middleware::runtime::events::{EventSink, RunEvent};
use trellis_middleware::runtime::stream::ModelDelta;

use crate::usage::{Prices, Summary};

/// Where `trellis run` writes what.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputMode {
    /// stdout is a terminal: stream the text.
    Terminal,
    /// stdout is a pipe or a file: the final answer only.
    Plain,
    /// `--json`: every event as a JSON line.
    Json,
}

/// What was printed so far, and what the events add up to.
#[derive(Debug, Default)]
pub struct Printed {
    summary: Mutex<Summary>,
    prices: Prices,
    /// Text was streamed to stdout (so the final answer is already there).
    streamed: AtomicBool,
    /// Text was streamed in the current model attempt.
    in_attempt: AtomicBool,
    /// Model calls started so far, across the resumes of one command (each resumed run counts
    /// its own steps from 0, so the event's `step` alone would start again at 1).
    model_calls: AtomicU32,
    lock: Mutex<()>,
}

/// The event sink for `mode`, and the record of what it printed; costs use `prices`.
pub fn sink(mode: OutputMode, prices: Prices) -> (EventSink, Arc<Printed>) {
    let printed = Arc::new(Printed {
        prices,
        ..Printed::default()
    });
    let seen = Arc::clone(&printed);
    let sink = EventSink::from_fn(move |event| {
        if let Ok(mut summary) = seen.summary.lock() {
            summary.add(&event, &seen.prices);
        }
        show(&event, mode, &seen)
    });
    (sink, printed)
}

fn show(event: &RunEvent, mode: OutputMode, seen: &Printed) {
    match mode {
        OutputMode::Json => {
            if let Ok(line) = serde_json::to_string(&event) {
                let _guard = seen.lock.lock();
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{line}");
                let _ = out.flush();
            }
        }
        OutputMode::Terminal | OutputMode::Plain => progress(event, mode, seen),
    }
}

/// Print the summary of everything the sink saw: a line on stderr, or a JSON event with `--json`.
pub fn summary(printed: &Printed, mode: OutputMode, wall: Duration) {
    let Ok(summary) = printed.summary.lock() else {
        return;
    };
    match mode {
        OutputMode::Json => {
            let _guard = printed.lock.lock();
            println!("{}", summary.json(wall));
        }
        OutputMode::Terminal | OutputMode::Plain => eprintln!("{}", summary.line(wall)),
    }
}

fn progress(event: &RunEvent, mode: OutputMode, printed: &Printed) {
    match event {
        RunEvent::ModelStarted { .. } => {
            let step = printed.model_calls.fetch_add(1, Ordering::Relaxed) + 1;
            eprintln!("· step {step}: thinking…")
        }
        RunEvent::ModelStreamStarted { .. } if printed.in_attempt.swap(false, Ordering::Relaxed) => {
            println!("\n[retrying]");
        }
        RunEvent::ModelDelta {
            delta: ModelDelta::Text { text, .. },
            ..
        } if mode == OutputMode::Terminal => {
            printed.streamed.store(true, Ordering::Relaxed);
            printed.in_attempt.store(true, Ordering::Relaxed);
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(text.as_bytes());
            let _ = out.flush();
        }
        RunEvent::ModelFinished {
            usage,
            tool_calls,
            elapsed,
            ..
        } => {
            if printed.in_attempt.swap(false, Ordering::Relaxed) {
                println!();
            }
            eprintln!(
                "  model: {} in / {} out tokens ({} cached), {tool_calls} tool call(s), {:.1}s",
                usage.input_tokens,
                usage.output_tokens,
                usage.cache_read_tokens,
                elapsed.as_secs_f64()
            )
        }
        RunEvent::ToolFinished {
            name,
            is_error,
            elapsed,
            ..
        } => eprintln!(
            "  {} {name} ({:.1}s)",
            if *is_error { "✗" } else { "✓" },
            elapsed.as_secs_f64()
        ),
        RunEvent::Middleware {
            middleware,
            kind,
            data,
        } => eprintln!("  [{middleware}] {kind} {data}"),
        _ => {}
    }
}

/// Print the end of a run: the final answer, unless it was already streamed or printed as events.
pub fn finish(out: &RunOutput, mode: OutputMode, printed: &Printed) {
    match mode {
        OutputMode::Json => {}
        OutputMode::Terminal if printed.streamed.load(Ordering::Relaxed) => {}
        OutputMode::Terminal | OutputMode::Plain => println!("{}", out.final_text().unwrap_or_default()),
    }
}
