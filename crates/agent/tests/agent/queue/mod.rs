//! The run queue's conformance suite ([`conformance`], and its bounds: [`limits`]), run on each implementation:
//! [`MemoryQueue`](trellis_agent::server::queue::MemoryQueue) in this process, and
//! [`PostgresQueue`](trellis_agent::server::queue::PostgresQueue) on the throwaway PostgreSQL that
//! `cargo xtask test` starts (`TRELLIS_DATABASE_URL`), one fresh database per test.

mod conformance;
mod limits;
mod memory;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
