-- The run queue (crates/agent/src/server/queue/postgres.rs). Released: never edit, add 0002.
CREATE TABLE trellis_runs (
    run_id       uuid PRIMARY KEY,
    -- Enqueue order: runs of a thread start in this order, and claims take the oldest first.
    seq          bigint GENERATED ALWAYS AS IDENTITY,
    thread_id    uuid NOT NULL,
    status       text NOT NULL DEFAULT 'pending'
                 CHECK (status IN ('pending', 'running', 'success', 'error', 'interrupted')),
    payload      jsonb NOT NULL,
    multitask    text NOT NULL,
    -- Bumped by every claim: with run_id, the fencing token of the claim's lease.
    attempt      integer NOT NULL DEFAULT 0,
    max_attempts integer NOT NULL CHECK (max_attempts >= 1),
    worker_id    text,
    lease_until  timestamptz,
    cancel       text CHECK (cancel IN ('interrupt', 'rollback')),
    run_after    timestamptz NOT NULL DEFAULT now(),
    error        jsonb,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- At most one running run per thread, whatever races between claimers.
CREATE UNIQUE INDEX trellis_runs_one_running_per_thread ON trellis_runs (thread_id)
    WHERE status = 'running';
-- Claims scan pending runs in order.
CREATE INDEX trellis_runs_pending ON trellis_runs (seq) WHERE status = 'pending';
-- The reaper scans leases.
CREATE INDEX trellis_runs_leases ON trellis_runs (lease_until) WHERE status = 'running';
-- A thread's runs, newest first.
CREATE INDEX trellis_runs_by_thread ON trellis_runs (thread_id, seq DESC);
