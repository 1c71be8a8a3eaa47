//! [`ExportQueue`]: the span processor between a run and the collector. A finished span goes
//! into a bounded buffer under a mutex (never waiting on the collector); a task on the tokio
//! runtime wakes when a batch is full, when a flush is asked for, or after [`BATCH_DELAY`], takes
//! the whole buffer and exports it, each export bounded by the exporter's timeout. When the
//! buffer is full — a slow or unreachable collector — spans are dropped and counted, and the
//! count is reported once, by [`ExportQueue::dropped`] and when the queue shuts down.
//!
//! A finished span costs the run one uncontended lock and a push: the export task is woken once
//! per batch, not once per span. Waking it per span through a channel cost the run a futex wake
//! and a context switch on every span — about 6 µs of the 17.8 µs per model call the
//! `trellis-agent/telemetry` bench measured with export on (2026-12-02, 2 cores).
//!
//! The SDK's `BatchSpanProcessor` does the same on a thread of its own, but it sits behind the
//! SDK's tracer (which [`super::SpanLayer`] does without), reports drops only through
//! OpenTelemetry's internal log, and runs the exporter outside any tokio runtime; this one runs on
//! the runtime the HTTP client needs and lets the caller read and print the count.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use tokio::sync::Notify;

/// Spans the queue holds before it drops new ones.
pub const DEFAULT_QUEUE_CAPACITY: usize = 2048;
/// Spans that wake the export task early (a full batch).
pub const MAX_BATCH: usize = 512;
/// How long a span may wait for its batch to fill.
pub const BATCH_DELAY: Duration = Duration::from_secs(1);

/// A bounded, non-blocking batch of spans on their way to the collector (see the module docs).
/// Clones share one queue, so the span layer can own one while the caller keeps another to read
/// the drop count and shut it down.
#[derive(Debug, Clone)]
pub struct ExportQueue {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    buffer: Mutex<Buffer>,
    /// Wakes the export task: a full batch, a flush, or shutdown.
    wake: Notify,
    capacity: usize,
    dropped: AtomicU64,
    done: Mutex<Option<std::sync::mpsc::Receiver<()>>>,
}

#[derive(Debug, Default)]
struct Buffer {
    spans: Vec<SpanData>,
    /// Flushes waiting for everything queued before them to be exported.
    flushes: Vec<std::sync::mpsc::Sender<()>>,
    /// Set by shutdown: nothing more is accepted, and the task ends once the buffer is exported.
    closed: bool,
}

impl ExportQueue {
    /// A queue of `capacity` spans exporting to `exporter`, on the current tokio runtime.
    pub fn new<E: SpanExporter + 'static>(exporter: E, capacity: usize) -> Self {
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let shared = Arc::new(Shared {
            buffer: Mutex::new(Buffer::default()),
            wake: Notify::new(),
            capacity: capacity.max(1),
            dropped: AtomicU64::new(0),
            done: Mutex::new(Some(done_rx)),
        });
        let task = Arc::clone(&shared);
        tokio::spawn(async move {
            export_loop(exporter, &task).await;
            let _ = done_tx.send(());
        });
        Self { shared }
    }

    /// Spans dropped so far because the queue was full (or closed).
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }
}

impl Shared {
    /// The buffer, even if a panic elsewhere poisoned its lock (it holds plain data).
    fn buffer(&self) -> MutexGuard<'_, Buffer> {
        self.buffer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The batch size that wakes the export task early.
    fn batch(&self) -> usize {
        self.capacity.min(MAX_BATCH)
    }
}

/// Export what the buffer holds whenever the task is woken or [`BATCH_DELAY`] passes, until the
/// queue is closed and empty. The buffer is taken whole, so at most `capacity` spans wait and at
/// most `capacity` are in flight.
async fn export_loop<E: SpanExporter>(exporter: E, shared: &Shared) {
    loop {
        let (spans, flushes, closed) = {
            let mut buffer = shared.buffer();
            (
                std::mem::take(&mut buffer.spans),
                std::mem::take(&mut buffer.flushes),
                buffer.closed,
            )
        };
        if !spans.is_empty() {
            // A failed export loses its batch: the collector is told nothing twice, and the run
            // never waits for it.
            if let Err(error) = exporter.export(spans).await {
                tracing::debug!(%error, "span export failed");
            }
        }
        for reply in flushes {
            let _ = reply.send(());
        }
        if closed {
            break;
        }
        let _ = tokio::time::timeout(BATCH_DELAY, shared.wake.notified()).await;
    }
    let _ = exporter.shutdown();
}

impl ExportQueue {
    /// Queue a finished span without waiting; when the queue is full or shut down the span is
    /// dropped and counted.
    pub fn push(&self, span: SpanData) {
        let shared = &self.shared;
        let full_batch = {
            let mut buffer = shared.buffer();
            if buffer.closed || buffer.spans.len() >= shared.capacity {
                drop(buffer);
                shared.dropped.fetch_add(1, Ordering::Relaxed);
                return;
            }
            buffer.spans.push(span);
            buffer.spans.len() == shared.batch()
        };
        if full_batch {
            shared.wake.notify_one();
        }
    }

    /// Export what is queued now and wait until it has been sent (or failed), at most `timeout`.
    /// Blocks the calling thread: call it outside async code, or on a multi-threaded runtime's
    /// blocking pool.
    pub fn flush(&self, timeout: Duration) -> Result<(), QueueError> {
        let (tx, rx) = std::sync::mpsc::channel();
        {
            let mut buffer = self.shared.buffer();
            if buffer.closed {
                return Err(QueueError::ShutDown);
            }
            buffer.flushes.push(tx);
        }
        self.shared.wake.notify_one();
        rx.recv_timeout(timeout).map_err(|_| QueueError::Timeout(timeout))
    }

    /// Stop accepting spans, export what is queued and shut the exporter down, waiting at most
    /// `timeout`. Blocks the calling thread, like [`ExportQueue::flush`].
    pub fn shutdown(&self, timeout: Duration) -> Result<(), QueueError> {
        // The task exports what is buffered, sees `closed` and ends.
        self.shared.buffer().closed = true;
        self.shared.wake.notify_one();
        let done = self.shared.done.lock().ok().and_then(|mut d| d.take());
        match done {
            Some(done) => done
                .recv_timeout(timeout)
                .map_err(|_| QueueError::Timeout(timeout)),
            None => Err(QueueError::ShutDown),
        }
    }
}

/// Why a flush or shutdown did not complete.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueueError {
    /// The queue was shut down already.
    #[error("the export queue is shut down")]
    ShutDown,
    /// The collector did not take the spans in time.
    #[error("the export did not finish within {0:?}")]
    Timeout(Duration),
}
