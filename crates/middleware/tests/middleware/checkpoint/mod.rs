//! Threads and checkpoints: the checkpointer contract on every store (`checkpointers`),
//! `BackendCheckpointer`'s step log with the old formats it still reads (`log`, `fixtures/`), and its
//! snapshot steps (`snapshots`).

mod checkpointers;
mod log;
mod snapshots;
