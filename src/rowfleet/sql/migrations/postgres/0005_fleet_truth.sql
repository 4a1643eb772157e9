-- rowfleet schema version 5 on PostgreSQL: each worker's own cadence, a running job's
-- cancel request, spaced-out outbox retries, and the orchestrators' own heartbeats.

-- A worker is judged silent by its own figures, never by the sweeper's: the seconds
-- between its heartbeats and its lease, as it was started with.
ALTER TABLE workers ADD COLUMN heartbeat double precision NOT NULL DEFAULT 10.0;
ALTER TABLE workers ADD COLUMN lease double precision NOT NULL DEFAULT 600.0;

-- An operator asked a running job's worker to stop it; the job ends cancelled.
ALTER TABLE jobs ADD COLUMN cancel_requested_at double precision;
ALTER TABLE jobs ADD COLUMN cancel_reason text;

-- A drain that failed is not tried again before this moment (a growing backoff).
ALTER TABLE dispatch_events ADD COLUMN next_attempt_at double precision;

-- A priority is any 64-bit integer, as SQLite's INTEGER holds it (names.INT64_MIN..MAX).
ALTER TABLE jobs ALTER COLUMN priority TYPE bigint;

-- One row per orchestrator process: which project it serves and when it last swept, so
-- status can say whether a project has a live orchestrator.
CREATE TABLE orchestrators (
    orchestrator_id text             NOT NULL PRIMARY KEY,   -- "host:pid:started"
    project         text             NOT NULL,
    host            text             NOT NULL,
    pid             integer          NOT NULL,
    sweep_interval  double precision NOT NULL,               -- seconds between its sweeps
    started_at      double precision NOT NULL,
    last_seen       double precision NOT NULL,
    stopped_at      double precision
);
CREATE INDEX orchestrators_project ON orchestrators (project, last_seen);
