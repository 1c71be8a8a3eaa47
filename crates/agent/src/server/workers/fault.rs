//! Test-only fault points: with the `fault-points` feature (on in this crate's test builds only,
//! through its dev-dependency on itself), a worker started with `TRELLIS_FAULT_PAUSE=POINT` parks
//! the first attempt of every run it claims at `POINT`, logging `fault point POINT: run ID parked`;
//! the fault tests then kill or freeze the worker exactly there rather than sleeping and hoping. Without the feature [`point`] does nothing and the
//! variable is never read.
//!
//! The points, in a run's order:
//! * [`CLAIMED`]: the run is claimed and held, nothing of it ran (no checkpoint, no event); its
//!   lease is renewed meanwhile;
//! * [`FINISHED`]: the run ended on this worker (its last checkpoint saved, its events stored)
//!   and its end is not yet stored in the queue; its heartbeats have stopped, so its lease runs
//!   out as after a kill.

use crate::server::queue::Lease;

/// After the claim, before anything of the run.
pub(crate) const CLAIMED: &str = "claimed";
/// After the run's end, before its end is stored.
pub(crate) const FINISHED: &str = "finished";

/// Park `lease`'s run here forever if this worker was asked to and it is the run's first attempt.
#[cfg(feature = "fault-points")]
pub(crate) async fn point(name: &str, lease: &Lease) {
    if lease.attempt == 1 && std::env::var("TRELLIS_FAULT_PAUSE").is_ok_and(|v| v == name) {
        tracing::warn!("fault point {name}: run {} parked", lease.run_id);
        std::future::pending::<()>().await;
    }
}

/// Nothing, without the `fault-points` feature.
#[cfg(not(feature = "fault-points"))]
pub(crate) async fn point(_name: &str, _lease: &Lease) {}
