-- Run results and stream events (crates/agent/src/server/queue/postgres.rs). Released: never
-- edit, add 0003.
ALTER TABLE trellis_runs ADD COLUMN result jsonb;

-- A run's stream events, numbered 1, 2, … across its attempts; appended only by the worker whose
-- lease holds the run, read by any worker a client joins the stream on.
CREATE TABLE trellis_run_events (
    run_id     uuid NOT NULL REFERENCES trellis_runs (run_id) ON DELETE CASCADE,
    seq        bigint NOT NULL,
    attempt    integer NOT NULL,
    event      text NOT NULL,
    data       text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, seq)
);
