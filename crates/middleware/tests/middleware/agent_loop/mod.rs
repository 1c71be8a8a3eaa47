//! The agent loop: hooks in order, runs (limits, cancellation, threads), tools (concurrency,
//! errors, panics) and truncated calls.

mod crash_steps;
mod hooks;
mod runs;
mod tools;
mod truncation;
