//! [`ExportQueue`]: the span processor between a run and the collector. A finished span goes
//! into a bounded queue (never waiting); a task on the tokio runtime takes spans in batches and
//! exports them, each export bounded by the exporter's timeout. When the queue is full — a slow
//! or unreachable collector — spans are dropped and counted, and the count is reported once, by
//! [`ExportQueue::dropped`] and when the queue shuts down.
//!
//! The SDK's `BatchSpanProcessor` does the same on a thread of its own, but it reports drops only
//! through OpenTelemetry's internal log, and it runs the exporter outside any tokio runtime; this
//! one runs on the runtime the HTTP client needs and lets the caller read and print the count.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry::Context;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use tokio::sync::{mpsc, oneshot};

/// Spans the queue holds before it drops new ones.
pub const DEFAULT_QUEUE_CAPACITY: usize = 2048;
/// Spans sent in one export request (fewer when the queue is smaller).
pub const MAX_BATCH: usize = 512;
/// How long a span may wait for its batch to fill.
pub const BATCH_DELAY: Duration = Duration::from_secs(1);

enum Command {
    Span(Box<SpanData>),
    Flush(oneshot::Sender<()>),
}

/// A bounded, non-blocking batch span processor (see the module docs). Clones share one queue,
/// so the tracer provider can own one while the caller keeps another to read the drop count.
#[derive(Debug, Clone)]
pub struct ExportQueue {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    /// `None` once shut down.
    sender: Mutex<Option<mpsc::Sender<Command>>>,
    dropped: AtomicU64,
    done: Mutex<Option<std::sync::mpsc::Receiver<()>>>,
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Span(_) => "Span",
            Self::Flush(_) => "Flush",
        })
    }
}

impl ExportQueue {
    /// A queue of `capacity` spans exporting to `exporter`, on the current tokio runtime.
    pub fn new<E: SpanExporter + 'static>(exporter: E, capacity: usize) -> Self {
        let (sender, receiver) = mpsc::channel(capacity.max(1));
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        tokio::spawn(async move {
            export_loop(exporter, receiver, capacity.clamp(1, MAX_BATCH)).await;
            let _ = done_tx.send(());
        });
        Self {
            shared: Arc::new(Shared {
                sender: Mutex::new(Some(sender)),
                dropped: AtomicU64::new(0),
                done: Mutex::new(Some(done_rx)),
            }),
        }
    }

    /// Spans dropped so far because the queue was full (or closed).
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Queue `command` without waiting; false when the queue is full or shut down.
    fn try_send(&self, command: Command) -> bool {
        match self.shared.sender.lock() {
            Ok(sender) => sender.as_ref().is_some_and(|s| s.try_send(command).is_ok()),
            Err(_) => false,
        }
    }
}

/// Export batches of at most `max_batch` spans until the channel closes. At most `max_batch` spans
/// wait in the batch besides those in the channel, so memory stays bounded.
async fn export_loop<E: SpanExporter>(exporter: E, mut receiver: mpsc::Receiver<Command>, max_batch: usize) {
    let mut batch = Vec::with_capacity(max_batch);
    loop {
        // Wait for the first span (or a flush, or the end), then fill the batch for a while.
        let first = match receiver.recv().await {
            Some(command) => command,
            None => break,
        };
        let mut flushes = Vec::new();
        take(first, &mut batch, &mut flushes);
        let deadline = tokio::time::Instant::now() + BATCH_DELAY;
        while batch.len() < max_batch && flushes.is_empty() {
            match tokio::time::timeout_at(deadline, receiver.recv()).await {
                Ok(Some(command)) => take(command, &mut batch, &mut flushes),
                Ok(None) | Err(_) => break,
            }
        }
        if !batch.is_empty() {
            // A failed export loses its batch: the collector is told nothing twice, and the run
            // never waits for it.
            if let Err(error) = exporter.export(std::mem::take(&mut batch)).await {
                tracing::debug!(%error, "span export failed");
            }
        }
        for reply in flushes {
            let _ = reply.send(());
        }
    }
    if !batch.is_empty() {
        let _ = exporter.export(batch).await;
    }
    let _ = exporter.shutdown();
}

fn take(command: Command, batch: &mut Vec<SpanData>, flushes: &mut Vec<oneshot::Sender<()>>) {
    match command {
        Command::Span(span) => batch.push(*span),
        Command::Flush(reply) => flushes.push(reply),
    }
}

impl SpanProcessor for ExportQueue {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if !self.try_send(Command::Span(Box::new(span))) {
            self.shared.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        let (tx, rx) = oneshot::channel();
        if !self.try_send(Command::Flush(tx)) {
            return Err(OTelSdkError::InternalFailure(
                "the export queue is full or shut down".into(),
            ));
        }
        // Waits on this thread: call it where blocking is allowed (not on a current-thread runtime).
        futures::executor::block_on(rx).map_err(|_| OTelSdkError::AlreadyShutdown)
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        // Closing the channel ends the loop once it has exported what is queued.
        if let Ok(mut sender) = self.shared.sender.lock() {
            sender.take();
        }
        let done = self.shared.done.lock().ok().and_then(|mut d| d.take());
        match done {
            Some(done) => done
                .recv_timeout(timeout)
                .map_err(|_| OTelSdkError::Timeout(timeout)),
            None => Err(OTelSdkError::AlreadyShutdown),
        }
    }
}
