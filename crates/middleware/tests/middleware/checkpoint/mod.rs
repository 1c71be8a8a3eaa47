//! Threads and checkpoints: the checkpointer contract on every store (`checkpointers`),
//! `BackendCheckpointer`'s step log with the old formats it still reads (`log`, `fixtures/`), and its
//! snapshot steps (`snapshots`), and what a power loss leaves of a thread on local disk (`power_loss`).

mod checkpointers;
mod log;
mod power_loss;
mod snapshots;
