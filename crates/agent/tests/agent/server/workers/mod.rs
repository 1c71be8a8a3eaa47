//! Many `trellis serve` workers sharing runs (`--database`): real `trellis serve` processes
//! sharing one PostgreSQL database (a fresh one per test on the cluster `TRELLIS_DATABASE_URL`
//! names; `cargo xtask test` starts it, and without it these tests skip — or fail under
//! `TRELLIS_EMULATORS=required`) and one state dir, against a mock model, over plain HTTP.
//!
//! [`streams`]: a run followed from other workers; [`control`]: cancel, multitask strategies and
//! access across workers; [`kill_points`]: a worker killed at each named point of a run, three
//! workers on S3; [`outage`]: PostgreSQL restarted (a cluster of the test's own, [`cluster`])
//! and a worker's connection cut mid-run; [`fence`]: the thread-file fence (a worker that lost its run inside a tool call writes no thread
//! file; [`fleet`]: three workers on S3 for these fault tests); [`takeover`]: a worker killed, frozen or drained mid-run. [`support`]
//! starts the workers.

mod cluster;
mod control;
mod fence;
mod fleet;
mod kill_points;
mod outage;
mod streams;
mod support;
mod takeover;
