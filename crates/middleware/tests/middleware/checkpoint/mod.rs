//! Threads and checkpoints: the checkpointer contract on every store (`checkpointers`),
//! `BackendCheckpointer`'s step log with the old formats it still reads (`log`, `fixtures/`), and its
//! snapshot steps (`snapshots`), what a power loss leaves of a thread on local disk (`power_loss`),
//! and new threads' one-file layout on local disk (`one_file`).

mod checkpointers;
mod log;
mod one_file;
mod power_loss;
mod snapshots;
